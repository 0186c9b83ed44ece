package tap

import (
	"fmt"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/polarnet/polarnet/internal/netns"
	"github.com/polarnet/polarnet/link"
	"github.com/polarnet/polarnet/link/linktest"
)

// TestLinkSuite runs the link suite between a TAP link and a packet socket
// on the device's kernel side, in a namespace of its own.
//
// Two settings fit the device to the suite, which sends frames unpaced and
// expects every one to arrive:
//   - txqueuelen 4096: the kernel drops a frame for the TAP when the queue's
//     ring (txqueuelen frames, 1000 by default) is full, and while one
//     goroutine sends in a tight loop the Go scheduler here can take
//     milliseconds to run the reader it woke; the packet socket gets a 4 MiB
//     buffer for the same reason.
//   - Persist: closing the last descriptor of a non-persistent TAP deletes
//     the device, and the packet socket then fails its writes (ENXIO,
//     ENETDOWN) where the suite expects writes to a closed peer to go on.
//     The test deletes the device itself.
func TestLinkSuite(t *testing.T) {
	for _, cfg := range []Config{
		{},
		{DisableOffloads: true},
		{Queues: 2},
		{DisableOffloads: true, MTU: 9000},
	} {
		name := fmt.Sprintf("queues=%d,offloads=%t,mtu=%d", max(cfg.Queues, 1), !cfg.DisableOffloads, cfg.MTU)
		t.Run(name, func(t *testing.T) {
			linktest.TestLinkPair(t, func(t *testing.T) (link.Link, link.Link) {
				ns := newNS(t)
				cfg.Name, cfg.Persist = netns.UniqueName("pntap"), true
				l, err := New(cfg)
				require.NoError(t, err)
				t.Cleanup(func() {
					l.Close() // for a failure before the suite has the link
					// Persistent devices would survive the namespace, moved
					// back to this one.
					if _, err := ns.Exec("ip", "link", "del", "dev", cfg.Name); err != nil {
						exec.Command("ip", "link", "del", "dev", cfg.Name).Run()
					}
				})
				out, err := exec.Command("ip", "link", "set", "dev", cfg.Name, "txqueuelen", "4096").CombinedOutput()
				require.NoError(t, err, string(out))
				require.NoError(t, ns.MoveLink(cfg.Name))
				var p *linktest.PacketSocketLink
				require.NoError(t, ns.Do(func() (err error) {
					p, err = linktest.OpenPacketSocket(cfg.Name)
					return err
				}))
				return l, p
			})
		})
	}
}
