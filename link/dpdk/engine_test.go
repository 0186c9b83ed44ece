//go:build dpdk && linux && cgo

package dpdk

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/net/nettest"

	"github.com/polarnet/polarnet/internal/kpeer"
	"github.com/polarnet/polarnet/internal/xfer"
	"github.com/polarnet/polarnet/link"
	"github.com/polarnet/polarnet/polarnet"
)

// The engine over net_af_packet on a veth, against the kernel's TCP in a
// namespace: the DPDK counterpart of link/tap's engine tests.

// engineTopo is a polarnet stack on a DPDK link and its kernel peer.
type engineTopo struct {
	*vethTopo
	Link  Link
	Stack *polarnet.Stack
}

// newEngineTopo builds a stack over net_af_packet (with afArgs, or a
// large RX ring) on a veth whose other end, in a namespace, is the kernel
// peer.
func newEngineTopo(t testing.TB, cfg Config, afArgs string) *engineTopo {
	t.Helper()
	v := newVeth(t, 1500)
	if afArgs == "" {
		afArgs = "framecnt=4096"
	}
	cfg.Device = afPacketDevice(v.A, afArgs)
	requireEAL(t)
	l, err := New(cfg)
	require.NoError(t, err)
	pc := polarnet.Config{
		Link:  l,
		Addrs: []netip.Prefix{netip.PrefixFrom(stack4, 24), netip.PrefixFrom(stack6, 64)},
	}
	st, err := polarnet.New(pc)
	require.NoError(t, err)
	// Registered after the namespace's cleanup, so it runs first.
	t.Cleanup(func() { st.Close() })
	return &engineTopo{vethTopo: v, Link: l, Stack: st}
}

// pairs returns connected conns both ways (kpeer.Pairs) over IPv4 or IPv6.
func (e *engineTopo) pairs(t *testing.T, v6 bool) map[string][2]xfer.HalfCloser {
	if v6 {
		return kpeer.Pairs(t, e.Stack, e.NS, kernel6, stack6)
	}
	return kpeer.Pairs(t, e.Stack, e.NS, kernel4, stack4)
}

// TestTransfersOverAFPacket moves byte-exact streams both ways, IPv4 and
// IPv6, between the engine on DPDK and kernel TCP, with the kernel peer's
// checksum offload on (its frames arrive checksum-partial).
func TestTransfersOverAFPacket(t *testing.T) {
	for _, wait := range []WaitMode{WaitSleep} {
		e := newEngineTopo(t, Config{Wait: wait}, "")
		for _, v6 := range []bool{false, true} {
			sizes := []int64{1, 64 << 10, 64 << 20}
			if v6 {
				sizes = sizes[:2]
			}
			for _, size := range sizes {
				for dir, p := range e.pairs(t, v6) {
					name := fmt.Sprintf("wait=%v ipv6=%v %s %d bytes", wait, v6, dir, size)
					assert.NoError(t, xfer.Exchange(p[0], p[1], size), name)
				}
			}
		}
		st := e.Stack.Stats().Total
		assert.Zero(t, st.RxChecksum, "no checksum failures from a kernel peer")
		ls := e.Link.Stats()
		assert.NotZero(t, ls.Queues[0].RxPartialChecksum, "the kernel peer's frames are checksum-partial")
		assert.Zero(t, ls.Queues[0].RxDropped)
		t.Logf("stack %+v", st)
		t.Logf("link %+v", ls)
	}
}

func TestNetTestConnOverAFPacket(t *testing.T) {
	e := newEngineTopo(t, Config{}, "")
	for _, dir := range []string{kpeer.PolarnetClient, kpeer.KernelClient} {
		t.Run(dir, func(t *testing.T) {
			nettest.TestConn(t, func() (c1, c2 net.Conn, stop func(), err error) {
				p := e.pairs(t, false)[dir]
				return p[0], p[1], func() { p[0].Close(); p[1].Close() }, nil
			})
		})
	}
}

func TestHTTPOverAFPacket(t *testing.T) {
	e := newEngineTopo(t, Config{}, "")
	kpeer.HTTP(t, e.Stack, e.NS, kernel4, stack4)
}

// TestEnvironmentSwitch: with this package imported, POLARNET_LINK=dpdk
// alone makes the default stack one over DPDK (dialer and listener, which
// import this package, dial and listen through it).
func TestEnvironmentSwitch(t *testing.T) {
	requireEAL(t)
	v := newVeth(t, 1500)
	env := map[string]string{
		"POLARNET_LINK":         "dpdk",
		"POLARNET_DEVICE":       afPacketDevice(v.A, "framecnt=1024"),
		"POLARNET_ADDR":         stack4.String() + "/24",
		"POLARNET_LINK_OPTIONS": "wait=sleep,pool=2047",
		"POLARNET_FALLBACK":     "fail",
	}
	getenv := func(k string) string { return env[k] }
	st, err := polarnet.NewFromEnv(getenv)
	require.NoError(t, err)
	require.NotNil(t, st)
	t.Cleanup(func() { st.Close() })
	polarnet.SetDefault(st)
	t.Cleanup(func() { polarnet.SetDefault(nil) })

	dial := func(network, addr string) (net.Conn, error) {
		def, err := polarnet.Default()
		if err != nil {
			return nil, err
		}
		return def.DialTCP(context.Background(), network, netip.AddrPort{}, netip.MustParseAddrPort(addr))
	}
	kpeer.ExchangeVia(t, dial, v.NS, kernel4, 1<<20)

	env["POLARNET_DEVICE"] = "0000:99:00.0"
	_, err = polarnet.NewFromEnv(getenv)
	assert.ErrorIs(t, err, ErrPortNotFound)
	delete(env, "POLARNET_FALLBACK")
	st2, err := polarnet.NewFromEnv(getenv)
	assert.NoError(t, err, "fallback to the kernel is the default policy")
	assert.Nil(t, st2)
}

// newTapEngineTopo builds a stack over net_tap whose kernel side, in a
// namespace, has the kernel peer's addresses.
func newTapEngineTopo(t testing.TB, cfg Config) *engineTopo {
	t.Helper()
	tt := newTapTopo(t, cfg, true)
	require.NoError(t, tt.NS.Configure(tt.Iface, tt.Link.Info().MTU, netip.PrefixFrom(kernel4, 24), netip.PrefixFrom(kernel6, 64)))
	st, err := polarnet.New(polarnet.Config{
		Link:  tt.Link,
		Addrs: []netip.Prefix{netip.PrefixFrom(stack4, 24), netip.PrefixFrom(stack6, 64)},
	})
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	return &engineTopo{vethTopo: &vethTopo{NS: tt.NS, B: tt.Iface}, Link: tt.Link, Stack: st}
}

// TestTransfersOverTap: the same over net_tap, whose PMD offers checksum
// offload and TSO (both done in software by the PMD) and receive
// interrupts.
func TestTransfersOverTap(t *testing.T) {
	for _, cfg := range []Config{{}, {DisableOffloads: true, Wait: WaitSleep}} {
		e := newTapEngineTopo(t, cfg)
		setup := e.Link.Setup()
		t.Logf("setup %+v caps %v", setup, e.Link.Info().Caps)
		for _, v6 := range []bool{false, true} {
			sizes := []int64{1, 64 << 10, 16 << 20}
			for _, size := range sizes {
				for dir, p := range e.pairs(t, v6) {
					name := fmt.Sprintf("offloads=%v ipv6=%v %s %d bytes", !cfg.DisableOffloads, v6, dir, size)
					assert.NoError(t, xfer.Exchange(p[0], p[1], size), name)
				}
			}
		}
		assert.Zero(t, e.Stack.Stats().Total.RxChecksum)
		t.Logf("link %+v", e.Link.Stats())
	}
}

// TestTransfersOverAFPacketTwoQueues: two queue pairs (the kernel's fanout
// spreads received flows over them, which the link cannot predict, so the
// engine steers in software), byte-exact both ways.
func TestTransfersOverAFPacketTwoQueues(t *testing.T) {
	e := newEngineTopo(t, Config{Queues: 2}, "qpairs=2,framecnt=4096")
	require.Len(t, e.Link.Queues(), 2)
	_, steers := e.Link.(link.Steerer)
	require.False(t, steers)
	for i := range 4 {
		for dir, p := range e.pairs(t, i%2 == 1) {
			assert.NoError(t, xfer.Exchange(p[0], p[1], 4<<20), "%s %d", dir, i)
		}
	}
	st := e.Stack.Stats()
	assert.Len(t, st.Shards, 2)
	assert.Zero(t, st.Total.RxChecksum)
}

// TestTransfersOverAFPacketJumbo: at MTU 9000 (beyond the 1518-byte frames
// ethdev lets net_af_packet's mtu_set take) the link chooses ring slots
// that hold a jumbo frame and mbufs as large, sets the interface's MTU
// itself, and streams move byte-exact both ways in 9000-byte frames.
func TestTransfersOverAFPacketJumbo(t *testing.T) {
	v := newVeth(t, 9000)
	out, err := exec.Command("ip", "link", "set", "dev", v.A, "mtu", "1500").CombinedOutput()
	require.NoError(t, err, string(out))
	requireEAL(t)
	l, err := New(Config{Device: afPacketDevice(v.A, "framecnt=1024"), MTU: 9000, RxDescriptors: 512, TxDescriptors: 512})
	require.NoError(t, err)
	assert.Equal(t, 9000, l.Info().MTU)
	assert.GreaterOrEqual(t, l.Setup().MbufDataRoom, 9018)
	mtu, err := os.ReadFile("/sys/class/net/" + v.A + "/mtu")
	require.NoError(t, err)
	assert.Equal(t, "9000", strings.TrimSpace(string(mtu)), "the link set the interface's MTU")
	st, err := polarnet.New(polarnet.Config{Link: l, Addrs: []netip.Prefix{netip.PrefixFrom(stack4, 24), netip.PrefixFrom(stack6, 64)}})
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	e := &engineTopo{vethTopo: v, Link: l, Stack: st}
	for _, v6 := range []bool{false, true} {
		for dir, p := range e.pairs(t, v6) {
			assert.NoError(t, xfer.Exchange(p[0], p[1], 16<<20), "ipv6=%v %s", v6, dir)
		}
	}
	assert.Zero(t, st.Stats().Total.RxChecksum)
	ls := l.Stats()
	assert.Zero(t, ls.Queues[0].RxDropped, "no frame larger than the engine's buffers")
	assert.Zero(t, ls.Queues[0].TxRingFull)
	t.Logf("setup %+v", l.Setup())
	t.Logf("link %+v", ls)
}
