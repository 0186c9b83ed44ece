//go:build rdma && linux

package conformance

import (
	"net"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/polarnet/polarnet/internal/netns"
	"github.com/polarnet/polarnet/internal/taptopo"
	"github.com/polarnet/polarnet/internal/testenv"
	"github.com/polarnet/polarnet/link"
	"github.com/polarnet/polarnet/link/rdma"
)

// TestRDMAKind: the rdma kind is registered, and where it cannot attach
// (no hardware here) Attach says what to set or what is wrong, before it
// changes anything, and frees the attachment. It needs neither root nor
// hardware; the kind's hardware run is `-link=rdma` (link/rdma/README.md).
func TestRDMAKind(t *testing.T) {
	k, err := Lookup("rdma")
	require.NoError(t, err)
	assert.Equal(t, "rdma", k.Name())

	// Attach fails before it touches the namespace: this one does not
	// exist.
	ns := &netns.NS{Name: "pn-rdma-unused"}
	opt := AttachOptions{MTU: 1500, Addrs: taptopo.KernelPrefixes(1500)}
	attach := func(t *testing.T, dev, peer string) error {
		t.Helper()
		t.Setenv(EnvRDMANetdev, dev)
		t.Setenv(EnvRDMAPeerNetdev, peer)
		l, name, err := k.Attach(ns, opt)
		assert.Nil(t, l)
		assert.Empty(t, name)
		require.Error(t, err)
		t.Log(err)
		rdmaSlot.Lock()
		assert.False(t, rdmaSlot.busy, "a failed Attach frees the attachment")
		rdmaSlot.Unlock()
		return err
	}

	t.Run("no environment", func(t *testing.T) {
		err := attach(t, "", "")
		assert.ErrorContains(t, err, "needs POLARNET_RDMA_NETDEV and POLARNET_RDMA_PEER_NETDEV")
		assert.ErrorContains(t, err, "link/rdma/README.md")
	})
	t.Run("no peer", func(t *testing.T) {
		err := attach(t, "enp5s0f0np0", "")
		assert.ErrorContains(t, err, "needs POLARNET_RDMA_PEER_NETDEV:")
		assert.ErrorContains(t, err, "link/rdma/README.md")
	})
	t.Run("no netdev", func(t *testing.T) {
		err := attach(t, "", "enp5s0f1np1")
		assert.ErrorContains(t, err, "needs POLARNET_RDMA_NETDEV:")
	})
	t.Run("same interface", func(t *testing.T) {
		err := attach(t, "enp5s0f0np0", "enp5s0f0np0")
		assert.ErrorContains(t, err, "both name enp5s0f0np0")
	})
	t.Run("no such interfaces", func(t *testing.T) {
		err := attach(t, "pn-no-such-if", "pn-no-such-pr")
		var nd *rdma.NoDeviceError
		require.ErrorAs(t, err, &nd)
		assert.Equal(t, rdma.ReasonNoNetdev, nd.Reason)
		assert.ErrorIs(t, err, link.ErrNotSupported)
		assert.ErrorContains(t, err, "POLARNET_RDMA_NETDEV=pn-no-such-if")
		// Both problems at once.
		assert.ErrorContains(t, err, "POLARNET_RDMA_PEER_NETDEV=pn-no-such-pr: no such interface in this namespace")
	})
	t.Run("virtual netdev", func(t *testing.T) {
		err := attach(t, "lo", "pn-no-such-pr")
		var nd *rdma.NoDeviceError
		require.ErrorAs(t, err, &nd)
		assert.Equal(t, rdma.ReasonVirtual, nd.Reason)
		assert.ErrorContains(t, err, "virtual interface")
	})
	t.Run("loopback peer", func(t *testing.T) {
		err := attach(t, "pn-no-such-if", "lo")
		assert.ErrorContains(t, err, "POLARNET_RDMA_PEER_NETDEV=lo is a loopback interface")
	})
	t.Run("one attachment", func(t *testing.T) {
		require.NoError(t, rdmaAcquire("pn-peer"))
		defer rdmaRelease()
		t.Setenv(EnvRDMANetdev, "pn-no-such-if")
		t.Setenv(EnvRDMAPeerNetdev, "pn-peer")
		_, _, err := k.Attach(ns, opt)
		assert.ErrorContains(t, err, "already attached")
		assert.ErrorContains(t, err, "one link at a time")
		t.Log(err)
		rdmaSlot.Lock()
		assert.True(t, rdmaSlot.busy, "a refused Attach leaves the holder's attachment alone")
		rdmaSlot.Unlock()
	})
}

// TestRDMAKindStackAddrs: the link answers for the topology's addresses
// that its kernel peer does not have.
func TestRDMAKindStackAddrs(t *testing.T) {
	assert.Equal(t, []netip.Addr{taptopo.Stack4, taptopo.Stack6}, rdmaStackAddrs(taptopo.KernelPrefixes(1500)))
	assert.Equal(t, []netip.Addr{taptopo.Kernel4, taptopo.Kernel6}, rdmaStackAddrs(taptopo.StackPrefixes(1500)))
	// A bridge port has no addresses: both sides' are the links'.
	assert.Len(t, rdmaStackAddrs(nil), 4)
}

// TestRDMAKindLendPeer: lending the peer interface to a scenario's
// namespace and returning it, on a veth end standing in for the
// physical peer (as root; the hardware-only steps, opening the link and
// waiting for carrier, are not run here). The peer comes back under its
// own name, MTU and state, ready for the next scenario, and nothing with
// the name it had in the namespace is left here.
func TestRDMAKindLendPeer(t *testing.T) {
	testenv.RequirePriv(t)
	testenv.RequireCommand(t, "ip")
	// A veth pair: peer is lent, other stays here and gives it carrier.
	peer, other := netns.UniqueName("pnrd"), netns.UniqueName("pnrd")
	require.NoError(t, runIP("link", "add", "dev", peer, "mtu", "1400", "type", "veth", "peer", "name", other))
	t.Cleanup(func() {
		if err := deleteVeth(other); err != nil {
			t.Error(err)
		}
	})
	require.NoError(t, runIP("link", "set", "dev", other, "up"))
	require.NoError(t, runIP("link", "set", "dev", peer, "up"))

	// An interface with addresses is not lent: they would be lost.
	require.NoError(t, runIP("addr", "add", "192.0.2.1/24", "dev", peer))
	_, err := rdmaCheckPeer(peer)
	assert.ErrorContains(t, err, "has addresses (192.0.2.1/24)")
	require.NoError(t, runIP("addr", "flush", "dev", peer))

	for round := range 2 {
		ifi, err := rdmaCheckPeer(peer)
		require.NoError(t, err, "round %d", round)
		ns := testenv.NewNS(t)
		require.NoError(t, rdmaAcquire(peer))
		a := &rdmaAttachment{dev: "pn-unused", peer: peer, ns: ns}
		require.NoError(t, a.lendPeer(ifi, 9000, taptopo.KernelPrefixes(9000)))
		assert.NotEqual(t, peer, a.moved)
		_, err = net.InterfaceByName(peer)
		assert.Error(t, err, "the peer is in the namespace")
		out, err := ns.Exec("ip", "-o", "link", "show", "dev", a.moved)
		require.NoError(t, err)
		assert.Contains(t, out, " mtu 9000 ")
		assert.Contains(t, out, "<BROADCAST,MULTICAST,UP,LOWER_UP>")
		out, err = ns.Exec("ip", "-o", "addr", "show", "dev", a.moved)
		require.NoError(t, err)
		for _, p := range taptopo.KernelPrefixes(9000) {
			assert.Contains(t, out, p.String())
		}
		// A second Attach, as the k2k reference or p2p would.
		t.Setenv(EnvRDMANetdev, "pn-no-such-if")
		t.Setenv(EnvRDMAPeerNetdev, peer)
		_, _, err = rdmaKind{}.Attach(ns, AttachOptions{MTU: 1500})
		assert.ErrorContains(t, err, "already attached (as "+a.moved+" in namespace "+ns.Name+")")

		require.NoError(t, a.release())
		rdmaSlot.Lock()
		assert.False(t, rdmaSlot.busy)
		rdmaSlot.Unlock()
		back, err := net.InterfaceByName(peer)
		require.NoError(t, err, "the peer is back")
		assert.Equal(t, 1400, back.MTU)
		assert.NotZero(t, back.Flags&net.FlagUp)
		_, err = net.InterfaceByName(a.moved)
		assert.Error(t, err, "nothing here under the namespace's name")
		out, err = ns.Exec("ip", "-o", "link", "show")
		require.NoError(t, err)
		assert.NotContains(t, out, a.moved)
	}
}

// TestRDMAKindReference: one link at a time, so the k2k reference runs over
// TAP (and p2p is skipped by the runner); other kinds keep their own.
func TestRDMAKindReference(t *testing.T) {
	k, err := Lookup("rdma")
	require.NoError(t, err)
	assert.Implements(t, (*SingleLink)(nil), k)
	assert.Equal(t, "tap", referenceKind(k).Name())
	assert.Equal(t, "tap", referenceKind(tapKind{}).Name())
	assert.Equal(t, "afxdp", referenceKind(afxdpKind{}).Name())
}
