package conformance

import (
	"cmp"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/polarnet/polarnet/internal/netns"
	"github.com/polarnet/polarnet/internal/taptopo"
	"github.com/polarnet/polarnet/internal/testenv"
	"github.com/polarnet/polarnet/polarnet"
)

// TestAFXDPAttach: the afxdp kind honours AttachOptions (MTUs, offloads,
// addresses, queues) and Close leaves nothing behind.
func TestAFXDPAttach(t *testing.T) {
	testenv.RequirePriv(t)
	testenv.RequireCommand(t, "ip")
	k, err := Lookup("afxdp")
	require.NoError(t, err)
	for _, c := range []struct {
		name string
		opt  AttachOptions
	}{
		{"mtu=1500,peer=9000,offloads=off", AttachOptions{MTU: 1500, PeerMTU: 9000, Addrs: taptopo.KernelPrefixes(9000)}},
		{"mtu=9000,offloads=on,queues=2", AttachOptions{MTU: 9000, Offloads: true, Queues: 2, Addrs: taptopo.KernelPrefixes(9000)}},
		{"mtu=576,bridge-port", AttachOptions{MTU: 576}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ns := netns.New(t)
			l, dev, err := k.Attach(ns, c.opt)
			require.NoError(t, err)
			closed := false
			t.Cleanup(func() {
				if !closed {
					l.Close()
				}
			})
			info := l.Info()
			assert.Equal(t, c.opt.MTU, info.MTU)
			var caps polarnet.Capabilities
			if c.opt.Offloads {
				caps = polarnet.CapRXChecksum | polarnet.CapTXChecksum
			}
			assert.Equal(t, caps, info.Caps)
			assert.Len(t, l.Queues(), max(1, c.opt.Queues))

			out, err := ns.Exec("ip", "-o", "link", "show", "dev", dev)
			require.NoError(t, err)
			assert.Contains(t, out, fmt.Sprintf(" mtu %d ", cmp.Or(c.opt.PeerMTU, c.opt.MTU)))
			assert.Contains(t, out, "state UP")
			out, err = ns.Exec("ip", "-o", "addr", "show", "dev", dev)
			require.NoError(t, err)
			for _, a := range c.opt.Addrs {
				assert.Contains(t, out, a.String())
			}
			// The link's end, in this namespace, has no address at all.
			local, err := exec.Command("ip", "-o", "addr", "show", "dev", info.Name).CombinedOutput()
			require.NoError(t, err, "%s", local)
			assert.NotContains(t, string(local), "inet", "addresses on the link's end")

			closed = true
			require.NoError(t, l.Close())
			_, err = net.InterfaceByName(info.Name)
			assert.Error(t, err, "the link's end after Close")
			out, err = ns.Exec("ip", "-o", "link", "show")
			require.NoError(t, err)
			assert.NotContains(t, out, dev, "the kernel's end after Close")
		})
	}
	t.Run("failure leaves nothing", func(t *testing.T) {
		ns := netns.New(t)
		// Frames of 65014 bytes would span 17 UMEM frames: New refuses,
		// after the kernel's end went into ns.
		_, _, err := k.Attach(ns, AttachOptions{MTU: 65000})
		require.ErrorIs(t, err, polarnet.ErrNotSupported)
		out, err := ns.Exec("ip", "-o", "link", "show")
		require.NoError(t, err)
		assert.Equal(t, 1, strings.Count(strings.TrimSpace(out), "\n")+1, "only lo is left: %s", out)
	})
}
