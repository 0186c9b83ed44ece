package tap_test

import (
	"fmt"
	"io"
	"net"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/net/nettest"

	"github.com/polarnet/polarnet/dialer"
	"github.com/polarnet/polarnet/internal/kpeer"
	"github.com/polarnet/polarnet/internal/leakcheck"
	"github.com/polarnet/polarnet/internal/netns"
	"github.com/polarnet/polarnet/internal/taptopo"
	"github.com/polarnet/polarnet/internal/testenv"
	"github.com/polarnet/polarnet/internal/xfer"
	"github.com/polarnet/polarnet/polarnet"
)

// The engine over a TAP device against the kernel's TCP in a namespace.

// pairs returns connected conns both ways (kpeer.Pairs) over IPv4 or IPv6.
func pairs(t *testing.T, topo *taptopo.Topology, v6 bool) map[string][2]xfer.HalfCloser {
	if v6 {
		return kpeer.Pairs(t, topo.Stack, topo.NS, taptopo.Kernel6, taptopo.Stack6)
	}
	return kpeer.Pairs(t, topo.Stack, topo.NS, taptopo.Kernel4, taptopo.Stack4)
}

// TestTransfersOverTAP moves 1 B, 64 KiB and 64 MiB (IPv6: the first two)
// each way over connections in both directions, polarnet client to kernel
// server and kernel client to polarnet server: each side sends, half-closes
// with CloseWrite and compares the SHA-256 of what it received (xfer.Exchange).
func TestTransfersOverTAP(t *testing.T) {
	for _, offloads := range []bool{true, false} {
		topo := taptopo.New(t, taptopo.Options{DisableOffloads: !offloads})
		for _, v6 := range []bool{false, true} {
			sizes := []int64{1, 64 << 10, 64 << 20}
			if v6 {
				sizes = sizes[:2]
			}
			for _, size := range sizes {
				t.Run(fmt.Sprintf("offloads=%v,ipv6=%v,%d_bytes", offloads, v6, size), func(t *testing.T) {
					ps := pairs(t, topo, v6)
					for _, dir := range []string{kpeer.PolarnetClient, kpeer.KernelClient} {
						t.Run(dir, func(t *testing.T) {
							assert.NoError(t, xfer.Exchange(ps[dir][0], ps[dir][1], size))
						})
					}
				})
			}
		}
		st := topo.Stack.Stats().Total
		assert.Zero(t, st.RxChecksum, "no checksum failures from a kernel peer")
	}
}

func TestNetTestConnOverTAP(t *testing.T) {
	topo := taptopo.New(t, taptopo.Options{})
	for _, dir := range []string{kpeer.PolarnetClient, kpeer.KernelClient} {
		t.Run(dir, func(t *testing.T) {
			nettest.TestConn(t, func() (c1, c2 net.Conn, stop func(), err error) {
				p := pairs(t, topo, false)[dir]
				return p[0], p[1], func() { p[0].Close(); p[1].Close() }, nil
			})
		})
	}
}

func TestHTTPOverTAP(t *testing.T) {
	topo := taptopo.New(t, taptopo.Options{})
	kpeer.HTTP(t, topo.Stack, topo.NS, taptopo.Kernel4, taptopo.Stack4)
}

// TestEnvironmentSwitch is the drop-in promise: the POLARNET_* variables alone
// move dialer.Dial from the kernel onto a polarnet stack on a TAP device, and a
// link that cannot open falls back to the kernel or fails, as configured.
func TestEnvironmentSwitch(t *testing.T) {
	ns := testenv.NewNS(t)
	dev := netns.UniqueName("pne")
	env := map[string]string{
		"POLARNET_LINK":   "tap",
		"POLARNET_DEVICE": dev,
		"POLARNET_ADDR":   taptopo.Stack4.String() + "/24",
	}
	getenv := func(k string) string { return env[k] }
	st, err := polarnet.NewFromEnv(getenv)
	require.NoError(t, err)
	require.NotNil(t, st)
	t.Cleanup(func() { st.Close() })
	assert.Len(t, st.Stats().Shards, runtime.GOMAXPROCS(0), "without POLARNET_QUEUES: a shard per CPU")
	require.NoError(t, taptopo.PlugKernelSide(ns, dev, st.MTU()))

	polarnet.SetDefault(st)
	t.Cleanup(func() { polarnet.SetDefault(nil) })
	kpeer.ExchangeVia(t, dialer.Dial, ns, taptopo.Kernel4, 1<<20)

	env["POLARNET_DEVICE"] = "this-name-is-far-too-long"
	st2, err := polarnet.NewFromEnv(getenv)
	assert.NoError(t, err, "fallback to the kernel is the default policy")
	assert.Nil(t, st2)
	env["POLARNET_FALLBACK"] = "fail"
	_, err = polarnet.NewFromEnv(getenv)
	assert.ErrorContains(t, err, "Linux allows at most 15")
}

// TestShardsOverTAP runs a two-queue TAP with two shards. With the steering
// program every frame of every connection arrives on its owner's queue (no
// software hand-off); without it the kernel's own spread needs hand-offs,
// and every connection still works.
func TestShardsOverTAP(t *testing.T) {
	const conns = 1000
	for _, steering := range []bool{true, false} {
		t.Run(fmt.Sprintf("steering=%v", steering), func(t *testing.T) {
			topo := taptopo.New(t, taptopo.Options{Queues: 2, DisableSteering: !steering})
			require.Len(t, topo.Stack.Stats().Shards, 2)

			// polarnet clients, kernel server: each conn sends its index and
			// reads it back.
			kln := kpeer.Listen(t, topo.NS, taptopo.Kernel4)
			go func() {
				for {
					c, err := kln.Accept()
					if err != nil {
						return
					}
					go func() { defer c.Close(); io.Copy(c, c) }()
				}
			}()
			for i := range conns {
				c, err := topo.Stack.DialTCP(t.Context(), "tcp", netip.AddrPort{}, kln.Addr().(*net.TCPAddr).AddrPort())
				require.NoError(t, err)
				echoCheck(t, c, i)
			}

			// kernel clients, polarnet server. Linux dials from ports of
			// one parity: their flows must still reach both shards.
			dialed := topo.Stack.Stats()
			pln, err := topo.Stack.ListenTCP("tcp", netip.AddrPortFrom(taptopo.Stack4, 0), 0, net.KeepAliveConfig{})
			require.NoError(t, err)
			defer pln.Close()
			go func() {
				for {
					c, err := pln.Accept()
					if err != nil {
						return
					}
					go func() { defer c.Close(); io.Copy(c, c) }()
				}
			}()
			require.NoError(t, topo.NS.Do(func() error {
				for i := range conns {
					c, err := net.DialTimeout("tcp", pln.Addr().String(), 10*time.Second)
					if err != nil {
						return err
					}
					if err := echoRoundTrip(c, i); err != nil {
						return err
					}
				}
				return nil
			}))

			stats := topo.Stack.Stats()
			for i, sh := range stats.Shards {
				assert.Greater(t, dialed.Shards[i].RxFrames, uint64(conns/4), "shard %d got a fair share of the dials' frames", i)
				assert.Greater(t, sh.RxFrames-dialed.Shards[i].RxFrames, uint64(conns/4), "shard %d got a fair share of the kernel clients' frames", i)
			}
			if steering {
				assert.Zero(t, stats.Total.HandoffOut, "with the steering program no flow needs a hand-off")
			} else {
				assert.NotZero(t, stats.Total.HandoffOut, "without it the kernel's spread needs hand-offs")
			}
			assert.Zero(t, stats.Total.HandoffDrop)
		})
	}
}

func echoCheck(t *testing.T, c net.Conn, i int) {
	t.Helper()
	require.NoError(t, echoRoundTrip(c, i))
}

// echoRoundTrip sends a line naming i to an echo server, checks the echo and
// closes the conn.
func echoRoundTrip(c net.Conn, i int) error {
	defer c.Close()
	msg := fmt.Sprintf("connection %d\n", i)
	if err := c.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		return err
	}
	if _, err := io.WriteString(c, msg); err != nil {
		return err
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil {
		return err
	}
	if string(got) != msg {
		return fmt.Errorf("echo of %q was %q", msg, got)
	}
	return nil
}

// TestStackOverTAPCloseLeavesNothingBehind: after traffic on two shards,
// closing the stack and its TAP leaves no goroutine and no descriptor.
func TestStackOverTAPCloseLeavesNothingBehind(t *testing.T) {
	snap := leakcheck.Take()
	t.Run("traffic", func(t *testing.T) {
		topo := taptopo.New(t, taptopo.Options{Queues: 2})
		for v6, p := range map[bool]map[string][2]xfer.HalfCloser{false: pairs(t, topo, false), true: pairs(t, topo, true)} {
			for dir, c := range p {
				require.NoError(t, xfer.Exchange(c[0], c[1], 1<<20), "ipv6=%v %s", v6, dir)
			}
		}
	})
	snap.Check(t)
}
