//go:build rdma && linux && cgo

package rdma

import (
	"context"
	"crypto/rand"
	"net"
	"net/netip"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/polarnet/polarnet/internal/kpeer"
	"github.com/polarnet/polarnet/internal/testenv"
	"github.com/polarnet/polarnet/internal/xfer"
	"github.com/polarnet/polarnet/link"
	"github.com/polarnet/polarnet/link/linktest"
	"github.com/polarnet/polarnet/polarnet"
)

// Environment of the hardware test.
const (
	// EnvNetdev names the RDMA-capable interface (an mlx5 port, say) the
	// hardware test runs the link on.
	envNetdev = "POLARNET_RDMA_NETDEV"
	// EnvPeerNetdev names another interface on the same Ethernet segment
	// (the NIC's second port cabled to the first, or a port on the same
	// switch): the test moves it into a network namespace of its own,
	// where it plays the kernel peer.
	envPeerNetdev = "POLARNET_RDMA_PEER_NETDEV"
)

var (
	hwStack = netip.MustParsePrefix("198.18.0.2/24")
	hwPeer  = netip.MustParsePrefix("198.18.0.1/24")
)

// hostHasVerbs reports whether libibverbs lists devices here.
func hostHasVerbs() bool {
	_, err := deviceNames()
	return err == nil
}

// TestOpenExplainsWhy opens the link the ways a user would. On hosts
// without RDMA (this project's CI: the kernel has no InfiniBand, so
// ibv_get_device_list fails with ENOSYS) each attempt must fail with an
// error saying why; on hosts with RDMA, names that do not exist must.
func TestOpenExplainsWhy(t *testing.T) {
	addrs := []netip.Addr{hwStack.Addr()}
	l, err := New(Config{Netdev: "lo", Addrs: addrs})
	assert.Nil(t, l)
	requireReason(t, err, ReasonVirtual)
	assert.ErrorIs(t, err, link.ErrNotSupported)

	_, err = New(Config{Netdev: "pn-no-such-if", Addrs: addrs})
	requireReason(t, err, ReasonNoNetdev)

	_, err = New(Config{Device: "pn_no_such_dev", Addrs: addrs})
	require.Error(t, err)
	assert.ErrorIs(t, err, link.ErrNotSupported)
	t.Log(err)

	_, err = New(Config{Queues: -1})
	assert.ErrorContains(t, err, "queues")

	if hostHasVerbs() {
		t.Log("this host has RDMA devices: the no-device errors are checked on hosts without")
		return
	}
	_, err = deviceNames()
	assert.ErrorIs(t, err, syscall.ENOSYS, "ibv_get_device_list on a kernel without InfiniBand")
	assert.ErrorIs(t, err, link.ErrNotSupported)
	assert.ErrorContains(t, err, "ibv_get_device_list")

	_, err = New(Config{Device: "mlx5_0", Addrs: addrs})
	assert.ErrorIs(t, err, syscall.ENOSYS, "a device named: libibverbs says why")
	assert.ErrorContains(t, err, "no verbs interface")
	t.Log(err)

	_, err = New(Config{Addrs: addrs})
	assert.ErrorContains(t, err, "no RDMA port with raw packet support on this host")
	assert.ErrorIs(t, err, syscall.ENOSYS, "no device named: both sysfs and libibverbs say why")
	assert.ErrorIs(t, err, link.ErrNotSupported)
	t.Log(err)

	ents, err := os.ReadDir("/sys/class/net")
	require.NoError(t, err)
	for _, e := range ents {
		_, err := New(Config{Netdev: e.Name(), Addrs: addrs})
		assert.ErrorIs(t, err, link.ErrNotSupported, e.Name())
	}
}

// TestEnvFallback: POLARNET_LINK=rdma is registered in this build; when
// the link cannot open, the stack falls back to the kernel by default and
// fails under POLARNET_FALLBACK=fail.
func TestEnvFallback(t *testing.T) {
	env := map[string]string{
		polarnet.EnvLink:   "rdma",
		polarnet.EnvDevice: "pn-no-such-if",
		link.EnvAddr:       hwStack.String(),
	}
	getenv := func(k string) string { return env[k] }
	st, err := polarnet.NewFromEnv(getenv)
	assert.NoError(t, err, "falling back to the kernel is the default")
	assert.Nil(t, st)

	env[polarnet.EnvFallback] = "fail"
	st, err = polarnet.NewFromEnv(getenv)
	assert.Nil(t, st)
	requireReason(t, err, ReasonNoNetdev)
	assert.ErrorIs(t, err, link.ErrNotSupported)

	if !hostHasVerbs() {
		// The default device: whatever this host has, which here is none.
		delete(env, polarnet.EnvDevice)
		_, err = polarnet.NewFromEnv(getenv)
		assert.ErrorIs(t, err, syscall.ENOSYS)
		delete(env, polarnet.EnvFallback)
		st, err = polarnet.NewFromEnv(getenv)
		assert.NoError(t, err)
		assert.Nil(t, st)
	}

	env[polarnet.EnvLinkOptions] = "color=blue"
	env[polarnet.EnvFallback] = "fail"
	_, err = polarnet.NewFromEnv(getenv)
	assert.ErrorContains(t, err, "unknown option")
}

// TestHardware runs the link on real hardware: the link suite against a
// packet socket on a peer interface, then TCP between a polarnet stack on
// the link and the kernel on the peer (RSS prediction, then transfers and
// HTTP in both directions). It needs root, an RDMA port with raw
// packet support (POLARNET_RDMA_NETDEV) and an interface on the same
// Ethernet segment (POLARNET_RDMA_PEER_NETDEV); see README.md. It is the
// one test that skips: hosts without RDMA hardware cannot run it.
func TestHardware(t *testing.T) {
	dev := os.Getenv(envNetdev)
	if dev == "" {
		t.Skipf("set %s to an RDMA-capable interface (and %s to a peer interface on the same segment) to run the hardware test; see link/rdma/README.md", envNetdev, envPeerNetdev)
	}
	peerDev := os.Getenv(envPeerNetdev)
	require.NotEmpty(t, peerDev, "%s is set, so %s must name the interface that plays the kernel peer", envNetdev, envPeerNetdev)
	testenv.RequirePriv(t)
	port, err := LookupNetdev(dev)
	require.NoError(t, err)
	t.Logf("running on %v", port)
	require.True(t, port.RawPacket(), "%v: the driver is not known to offer raw packet QPs", port)

	ns := testenv.NewNS(t)
	require.NoError(t, ns.MoveLink(peerDev))
	require.NoError(t, ns.Configure(peerDev, port.MTU, hwPeer))

	t.Run("LinkSuite", func(t *testing.T) {
		linktest.TestLinkPair(t, func(t *testing.T) (link.Link, link.Link) {
			// A MAC of its own: the suite's frames are not IP, so only
			// a rule on the MAC steers them to the link.
			mac := make(net.HardwareAddr, 6)
			rand.Read(mac)
			mac[0] = mac[0]&^1 | 2
			l, err := New(Config{Netdev: dev, MAC: mac})
			require.NoError(t, err)
			t.Cleanup(func() { l.Close() })
			var p *linktest.PacketSocketLink
			require.NoError(t, ns.Do(func() (err error) {
				p, err = linktest.OpenPacketSocket(peerDev)
				return err
			}))
			return l, p
		})
	})

	t.Run("TCP", func(t *testing.T) {
		l, err := New(Config{Netdev: dev, Queues: 2, Addrs: []netip.Addr{hwStack.Addr()}})
		require.NoError(t, err)
		t.Logf("setup: %+v", l.Setup())
		st, err := polarnet.New(polarnet.Config{Link: l, Addrs: []netip.Prefix{hwStack}})
		require.NoError(t, err)
		defer st.Close()
		var ln net.Listener
		require.NoError(t, ns.Do(func() (err error) {
			ln, err = net.Listen("tcp", netip.AddrPortFrom(hwPeer.Addr(), 0).String())
			return err
		}))
		defer ln.Close()
		for range 4 {
			accepted := make(chan net.Conn, 1)
			go func() { c, _ := ln.Accept(); accepted <- c }()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			c, err := st.DialTCP(ctx, "tcp", netip.AddrPort{}, netip.MustParseAddrPort(ln.Addr().String()))
			cancel()
			require.NoError(t, err)
			kc := <-accepted
			require.NotNil(t, kc)
			require.NoError(t, xfer.Exchange(c, kc.(*net.TCPConn), 4<<20))
			c.Close()
			kc.Close()
		}
		stats := st.Stats()
		t.Logf("stack: %+v", stats.Total)
		t.Logf("link: %+v", l.Stats())
		if l.Setup().RSS {
			assert.Zero(t, stats.Total.HandoffOut, "RSS put a flow on another queue than RxQueue predicted: the device's Toeplitz input differs")
		}
	})

	// KernelPeer is the short interop check every link runs against a
	// kernel peer (as link/tap's TestTransfersOverTAP and TestHTTPOverTAP
	// do): both directions, polarnet client to kernel server and kernel
	// client to polarnet server, 1 B, 64 KiB and 64 MiB each way with
	// SHA-256 and CloseWrite on both sides, then net/http both ways.
	t.Run("KernelPeer", func(t *testing.T) {
		l, err := New(Config{Netdev: dev, Queues: 2, Addrs: []netip.Addr{hwStack.Addr()}})
		require.NoError(t, err)
		st, err := polarnet.New(polarnet.Config{Link: l, Addrs: []netip.Prefix{hwStack}})
		require.NoError(t, err)
		defer st.Close()
		for _, size := range []int64{1, 64 << 10, 64 << 20} {
			for dir, p := range kpeer.Pairs(t, st, ns, hwPeer.Addr(), hwStack.Addr()) {
				require.NoError(t, p[0].SetDeadline(time.Now().Add(time.Minute)))
				require.NoError(t, p[1].SetDeadline(time.Now().Add(time.Minute)))
				require.NoError(t, xfer.Exchange(p[0], p[1], size), "%s, %d bytes", dir, size)
			}
		}
		kpeer.HTTP(t, st, ns, hwPeer.Addr(), hwStack.Addr())
		t.Logf("stack: %+v", st.Stats().Total)
		t.Logf("link: %+v", l.Stats())
	})
}
