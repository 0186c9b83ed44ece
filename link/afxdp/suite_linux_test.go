package afxdp

import (
	"fmt"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/polarnet/polarnet/link"
	"github.com/polarnet/polarnet/link/linktest"
)

// TestLinkSuite runs the link suite between an AF_XDP link on one end of a
// veth pair and a packet socket on the other end, in a namespace. The suite
// sends frames of its own EtherType, which only FilterAll redirects.
func TestLinkSuite(t *testing.T) {
	for _, c := range []struct {
		mode   Mode
		queues int
		mtu    int // 0: 1500; 9000: frames span three UMEM frames
		hooks  testHooks
	}{
		{ModeNative, 1, 0, testHooks{}},
		{ModeGeneric, 1, 0, testHooks{}},
		{ModeNative, 2, 0, testHooks{}},
		{ModeNative, 1, 0, testHooks{netlinkAttach: true}},
		{ModeNative, 1, 9000, testHooks{}},
		{ModeGeneric, 1, 9000, testHooks{}},
	} {
		name := fmt.Sprintf("mode=%v,queues=%d", c.mode, c.queues)
		if c.mtu != 0 {
			name += fmt.Sprintf(",mtu=%d", c.mtu)
		}
		if c.hooks.netlinkAttach {
			name += ",netlink"
		}
		t.Run(name, func(t *testing.T) {
			linktest.TestLinkPair(t, func(t *testing.T) (link.Link, link.Link) {
				v := newVeth(t, vethOptions{queues: c.queues, mtu: c.mtu, noIPv6: true})
				l := openLink(t, Config{Interface: v.local, Filter: FilterAll, Mode: c.mode, Queues: c.queues}, c.hooks)
				require.Equal(t, c.mode, l.Mode())
				t.Cleanup(func() {
					if t.Failed() {
						for i, qs := range l.Stats() {
							t.Logf("queue %d: %+v", i, qs)
						}
						out, _ := v.ns.Exec("ip", "-s", "link", "show", v.peer)
						t.Logf("peer: %s", out)
						lo, _ := exec.Command("ip", "-s", "-d", "link", "show", v.local).CombinedOutput()
						t.Logf("local: %s", lo)
					}
				})
				var p *linktest.PacketSocketLink
				require.NoError(t, v.ns.Do(func() (err error) {
					p, err = linktest.OpenPacketSocket(v.peer)
					return err
				}))
				return l, p
			})
		})
	}
}
