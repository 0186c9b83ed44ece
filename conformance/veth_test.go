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

	"github.com/polarnet/polarnet/internal/taptopo"
	"github.com/polarnet/polarnet/internal/testenv"
	"github.com/polarnet/polarnet/link"
)

// vethKindCase says what to expect of a kind on newHostVeth's wire.
type vethKindCase struct {
	name string
	// caps are the capabilities its links report for AttachOptions.Offloads.
	caps func(offloads bool) link.Capabilities
	// fail makes the link's constructor fail after the wire exists, with an
	// error matching failErr (errors.Is) if set, containing failMsg if set.
	fail    AttachOptions
	failErr error
	failMsg string
}

// testVethKindAttach checks that a kind on newHostVeth's wire honours
// AttachOptions (MTUs, offloads, addresses, queues) and that Close, or a
// failed Attach, leaves nothing behind.
func testVethKindAttach(t *testing.T, c vethKindCase) {
	testenv.RequirePriv(t)
	testenv.RequireCommand(t, "ip")
	k, err := Lookup(c.name)
	require.NoError(t, err)
	for _, o := range []struct {
		name string
		opt  AttachOptions
	}{
		{"mtu=1500,peer=9000,offloads=off", AttachOptions{MTU: 1500, PeerMTU: 9000, Addrs: taptopo.KernelPrefixes(9000)}},
		{"mtu=9000,offloads=on,queues=2", AttachOptions{MTU: 9000, Offloads: true, Queues: 2, Addrs: taptopo.KernelPrefixes(9000)}},
		{"mtu=576,bridge-port", AttachOptions{MTU: 576}},
	} {
		t.Run(o.name, func(t *testing.T) {
			ns := testenv.NewNS(t)
			l, dev, err := k.Attach(ns, o.opt)
			require.NoError(t, err)
			closed := false
			t.Cleanup(func() {
				if !closed {
					l.Close()
				}
			})
			info := l.Info()
			assert.Equal(t, o.opt.MTU, info.MTU)
			assert.Equal(t, c.caps(o.opt.Offloads), info.Caps)
			assert.Len(t, l.Queues(), max(1, o.opt.Queues))

			out, err := ns.Exec("ip", "-o", "link", "show", "dev", dev)
			require.NoError(t, err)
			assert.Contains(t, out, fmt.Sprintf(" mtu %d ", cmp.Or(o.opt.PeerMTU, o.opt.MTU)))
			assert.Contains(t, out, "state UP")
			out, err = ns.Exec("ip", "-o", "addr", "show", "dev", dev)
			require.NoError(t, err)
			for _, a := range o.opt.Addrs {
				assert.Contains(t, out, a.String())
			}
			// The link's end, in this namespace, has no address at all.
			host := l.(*vethLink).host
			local, err := exec.Command("ip", "-o", "addr", "show", "dev", host).CombinedOutput()
			require.NoError(t, err, "%s", local)
			assert.NotContains(t, string(local), "inet", "addresses on the link's end")

			closed = true
			require.NoError(t, l.Close())
			_, err = net.InterfaceByName(host)
			assert.Error(t, err, "the link's end after Close")
			out, err = ns.Exec("ip", "-o", "link", "show")
			require.NoError(t, err)
			assert.NotContains(t, out, dev, "the kernel's end after Close")
		})
	}
	t.Run("failure leaves nothing", func(t *testing.T) {
		ns := testenv.NewNS(t)
		_, _, err := k.Attach(ns, c.fail)
		require.Error(t, err)
		if c.failErr != nil {
			assert.ErrorIs(t, err, c.failErr)
		}
		assert.ErrorContains(t, err, c.failMsg)
		out, err := ns.Exec("ip", "-o", "link", "show")
		require.NoError(t, err)
		assert.Equal(t, 1, strings.Count(strings.TrimSpace(out), "\n")+1, "only lo is left: %s", out)
	})
}
