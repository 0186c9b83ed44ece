package afxdp

import (
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/net/nettest"

	"github.com/polarnet/polarnet/internal/xfer"
	"github.com/polarnet/polarnet/polarnet"
)

// The engine over AF_XDP on a veth pair, against the kernel's TCP in a
// namespace whose end of the pair keeps its offloads (checksum, TSO) on.

// topoOptions shape a topology.
type topoOptions struct {
	mtu         int // 0: 1500
	mode        Mode
	filter      Filter
	hooks       testHooks
	poll        polarnet.PollMode
	offloadsOff bool
}

// topology is a polarnet stack on an AF_XDP link on the local end of a veth
// pair, the kernel on the peer end.
type topology struct {
	v     *veth
	link  *Link
	stack *polarnet.Stack
}

func newTopology(t testing.TB, opt topoOptions) *topology {
	t.Helper()
	v := newVeth(t, vethOptions{mtu: opt.mtu})
	v.addKernelAddrs(t)
	addrs := []netip.Prefix{netip.PrefixFrom(stack4, 24), netip.PrefixFrom(stack6, 64)}
	l, err := newLink(Config{Interface: v.local, Addresses: addrs, Mode: opt.mode, Filter: opt.filter, DisableOffloads: opt.offloadsOff}, opt.hooks)
	require.NoError(t, err)
	st, err := polarnet.New(polarnet.Config{Link: l, Addrs: addrs, Poll: opt.poll})
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	return &topology{v: v, link: l, stack: st}
}

// kernelListen opens a kernel listener in the peer's namespace.
func (tp *topology) kernelListen(t testing.TB, addr netip.Addr) net.Listener {
	var ln net.Listener
	require.NoError(t, tp.v.ns.Do(func() (err error) {
		ln, err = net.Listen("tcp", netip.AddrPortFrom(addr, 0).String())
		return err
	}))
	t.Cleanup(func() { ln.Close() })
	return ln
}

// kernelDial dials from the peer's namespace.
func (tp *topology) kernelDial(t testing.TB, addr string) *net.TCPConn {
	var c net.Conn
	require.NoError(t, tp.v.ns.Do(func() (err error) {
		c, err = net.DialTimeout("tcp", addr, 10*time.Second)
		return err
	}))
	t.Cleanup(func() { c.Close() })
	return c.(*net.TCPConn)
}

// pairs returns connected conns both ways: a polarnet client with a kernel
// server, and a kernel client with a polarnet server.
func (tp *topology) pairs(t testing.TB, v6 bool) map[string][2]xfer.HalfCloser {
	kAddr, sAddr := kernel4, stack4
	if v6 {
		kAddr, sAddr = kernel6, stack6
	}
	out := map[string][2]xfer.HalfCloser{}
	kln := tp.kernelListen(t, kAddr)
	accepted := make(chan net.Conn, 1)
	go func() { c, _ := kln.Accept(); accepted <- c }()
	pc, err := tp.stack.DialTCP(t.Context(), "tcp", netip.AddrPort{}, kln.Addr().(*net.TCPAddr).AddrPort())
	require.NoError(t, err)
	kc := <-accepted
	require.NotNil(t, kc)
	t.Cleanup(func() { pc.Close(); kc.Close() })
	out["polarnet client, kernel server"] = [2]xfer.HalfCloser{pc, kc.(*net.TCPConn)}

	pln, err := tp.stack.ListenTCP("tcp", netip.AddrPortFrom(sAddr, 0), 0, net.KeepAliveConfig{})
	require.NoError(t, err)
	t.Cleanup(func() { pln.Close() })
	paccepted := make(chan *polarnet.TCPConn, 1)
	go func() { c, _ := pln.AcceptTCP(); paccepted <- c }()
	kc2 := tp.kernelDial(t, pln.Addr().String())
	ps := <-paccepted
	require.NotNil(t, ps)
	t.Cleanup(func() { ps.Close() })
	out["kernel client, polarnet server"] = [2]xfer.HalfCloser{kc2, ps}
	return out
}

// TestTransfers moves 1 B, 64 KiB and 64 MiB (8 MiB at MTU 9000 and under
// -race) each way, byte-exact, in each way of completing TX checksums, at
// MTU 1500 and 9000 (multi-buffer), with the kernel peer's offloads on.
func TestTransfers(t *testing.T) {
	for _, c := range []struct {
		name        string
		mode        Mode
		mtu         int
		hooks       testHooks
		offloadsOff bool
		sizes       []int64
	}{
		{"native", ModeNative, 0, testHooks{}, false, nil},
		{"native,software-tx-checksum", ModeNative, 0, testHooks{noTxMetadata: true}, false, nil},
		{"native,offloads-off", ModeNative, 0, testHooks{}, true, nil},
		{"generic", ModeGeneric, 0, testHooks{}, false, []int64{1, 1000}},
		// Frames of three UMEM frames each (multi-buffer).
		{"native,mtu=9000", ModeNative, 9000, testHooks{}, false, nil},
		{"native,mtu=9000,software-tx-checksum", ModeNative, 9000, testHooks{noTxMetadata: true}, false, nil},
		{"native,mtu=9000,offloads-off", ModeNative, 9000, testHooks{}, true, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			tp := newTopology(t, topoOptions{mtu: c.mtu, mode: c.mode, hooks: c.hooks, offloadsOff: c.offloadsOff})
			t.Logf("link: %v; peer: %s", tp.link, tp.v.offloads(t))
			bulk := int64(64 << 20)
			if c.mtu > 0 || raceEnabled {
				bulk = 8 << 20
			}
			for _, v6 := range []bool{false, true} {
				sizes := c.sizes
				if sizes == nil {
					sizes = []int64{1, 64 << 10, bulk}
					if v6 {
						sizes = sizes[:2]
					}
				}
				for _, size := range sizes {
					for dir, p := range tp.pairs(t, v6) {
						name := fmt.Sprintf("ipv6=%v %s %d bytes", v6, dir, size)
						start := time.Now()
						assert.NoError(t, xfer.Exchange(p[0], p[1], size), name)
						if size == bulk {
							t.Logf("%s: %.2f Gbit/s", name, float64(2*size*8)/time.Since(start).Seconds()/1e9)
						}
					}
				}
			}
			st := tp.stack.Stats().Total
			assert.Zero(t, st.RxChecksum, "checksum failures in the engine")
			var partial uint64
			for i, qs := range tp.link.Stats() {
				t.Logf("queue %d: %+v", i, qs)
				assert.Zero(t, qs.RxChecksumBad, "bad checksums")
				partial += qs.RxChecksumPartial
			}
			t.Logf("frames with partial checksums: %d of %d", partial, st.RxFrames)
			linkStats := tp.stack.Stats().Link
			require.Len(t, linkStats, len(tp.link.Stats()), "the stack reports the link's counters")
			assert.Positive(t, linkStats[0].RxFrames)
			assert.Positive(t, linkStats[0].TxFrames)
			assert.Zero(t, linkStats[0].RxBadFrame, "frames dropped as bad")
			assert.NotZero(t, partial, "the peer's checksum offload is on: its TCP frames arrive checksum-partial")
		})
	}
}

func TestNetTestConn(t *testing.T) {
	tp := newTopology(t, topoOptions{})
	for _, dir := range []string{"polarnet client, kernel server", "kernel client, polarnet server"} {
		t.Run(dir, func(t *testing.T) {
			nettest.TestConn(t, func() (c1, c2 net.Conn, stop func(), err error) {
				p := tp.pairs(t, false)[dir]
				return p[0], p[1], func() { p[0].Close(); p[1].Close() }, nil
			})
		})
	}
}
