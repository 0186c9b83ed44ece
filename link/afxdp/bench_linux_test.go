package afxdp

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/polarnet/polarnet/internal/rrbench"
	"github.com/polarnet/polarnet/link"
	"github.com/polarnet/polarnet/link/linktest"
	"github.com/polarnet/polarnet/polarnet"
)

// BenchmarkReadBurst measures the raw receive rate of the link on its own
// (one op is one frame): a packet socket on the veth peer sends frames of
// the link suite's EtherType without pause, 64 per sendmmsg and bypassing
// its qdisc, and ReadBurst takes them in bursts of 64, parking in WaitRead
// when the ring is empty. sent/s is what the peer offered; the kernel drops
// what the ring cannot hold.
func BenchmarkReadBurst(b *testing.B) {
	for _, mode := range []Mode{ModeNative, ModeGeneric} {
		for _, size := range []int{64, 1500} {
			b.Run(fmt.Sprintf("Drain/%v/%dB", mode, size), func(b *testing.B) {
				benchDrain(b, mode, size)
			})
			b.Run(fmt.Sprintf("Flood/%v/%dB", mode, size), func(b *testing.B) {
				v := newVeth(b, vethOptions{noIPv6: true})
				l := openLink(b, Config{Interface: v.local, Filter: FilterAll, Mode: mode, Queues: 1}, testHooks{})
				gen := newGenerator(b, v, l.Info().MAC, size)
				q := l.Queues()[0]
				frames := make([]link.RxFrame, 64)
				for i := range frames {
					frames[i].Buf = make([]byte, l.Info().RxFrameSize)
				}
				var (
					stopped atomic.Bool
					wg      sync.WaitGroup
					genErr  error
					genDone = make(chan struct{})
				)
				wg.Go(func() {
					defer close(genDone)
					for !stopped.Load() && genErr == nil {
						_, genErr = gen.send()
					}
				})
				// A flood that stalls fails the benchmark instead of
				// hanging it: the watchdog wakes WaitRead now and then.
				watchdog := time.NewTicker(floodWatchdog)
				defer watchdog.Stop()
				wg.Go(func() {
					for {
						select {
						case <-watchdog.C:
							q.Interrupt()
						case <-genDone:
							q.Interrupt()
							return
						}
					}
				})
				b.SetBytes(int64(size))
				b.ResetTimer()
				for got, last := 0, time.Now(); got < b.N; {
					n, err := q.ReadBurst(frames)
					if err != nil {
						b.Fatal(err)
					}
					got += n
					if n > 0 {
						last = time.Now()
						continue
					}
					select {
					case <-genDone:
						b.Fatalf("the peer stopped sending after %d frames: %v", gen.sent.Load(), genErr)
					default:
					}
					if time.Since(last) > floodStall {
						b.Fatalf("no frame for %v: %d of %d received, %d sent; link %+v", floodStall, got, b.N, gen.sent.Load(), l.Stats()[0])
					}
					if err := q.WaitRead(); err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				stopped.Store(true)
				wg.Wait()
				require.NoError(b, genErr)
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "frames/s")
				b.ReportMetric(float64(gen.sent.Load())/b.Elapsed().Seconds(), "sent/s")
			})
		}
	}
}

// The Flood benchmark's bounds: how often its watchdog wakes WaitRead, and
// how long it may go without a frame before it fails.
const (
	floodWatchdog = 100 * time.Millisecond
	floodStall    = 10 * time.Second
)

// benchDrain is BenchmarkReadBurst's Drain: the peer fills the RX ring,
// then ReadBurst empties it: what ReadBurst alone costs per frame (copy,
// checksum check, recycling), reported as drain-ns/frame and frames/s.
// The benchmark's own ns/op covers the whole cycle, the peer's sending
// included, which keeps its wall time to the usual second: timing the
// draining alone would make the framework ask for tens of millions of
// frames, minutes of sending.
func benchDrain(b *testing.B, mode Mode, size int) {
	const ringSize = 2048
	v := newVeth(b, vethOptions{noIPv6: true})
	l := openLink(b, Config{Interface: v.local, Filter: FilterAll, Mode: mode, Queues: 1, RingSize: ringSize}, testHooks{})
	gen := newGenerator(b, v, l.Info().MAC, size)
	q := l.Queues()[0].(*queue)
	frames := make([]link.RxFrame, 64)
	for i := range frames {
		frames[i].Buf = make([]byte, l.Info().RxFrameSize)
	}
	pending := func() uint32 { return atomic.LoadUint32(q.sock.rx.producer) - *q.sock.rx.consumer }
	var draining time.Duration
	drained := 0
	b.SetBytes(int64(size))
	b.ResetTimer()
	for drained < b.N {
		want := min(b.N-drained, ringSize/2)
		for sent, tries := 0, 0; sent < want; tries++ {
			n, err := gen.sendN(want - sent)
			require.NoError(b, err)
			require.Less(b, tries, 100000, "the peer sends nothing")
			if sent += n; n == 0 {
				time.Sleep(10 * time.Microsecond) // let the peer's NAPI run
			}
		}
		// Until all are in, or no more come (the kernel drops some).
		for last, deadline := uint32(0), time.Now().Add(time.Second); pending() < uint32(want) && time.Now().Before(deadline); {
			time.Sleep(200 * time.Microsecond)
			p := pending()
			if p == last {
				break
			}
			last = p
		}
		require.NotZero(b, pending(), "no frame arrived")
		start := time.Now()
		for pending() > 0 {
			n, err := q.ReadBurst(frames)
			if err != nil {
				b.Fatal(err)
			}
			drained += n
		}
		draining += time.Since(start)
	}
	b.ReportMetric(float64(draining.Nanoseconds())/float64(drained), "drain-ns/frame")
	b.ReportMetric(float64(drained)/draining.Seconds(), "frames/s")
}

// BenchmarkWriteBurst measures the raw send rate, in bursts of 64 frames
// the peer's kernel drops (nothing listens for their EtherType).
func BenchmarkWriteBurst(b *testing.B) {
	for _, size := range []int{64, 1500} {
		b.Run(fmt.Sprintf("%dB", size), func(b *testing.B) {
			v := newVeth(b, vethOptions{noIPv6: true})
			l := openLink(b, Config{Interface: v.local, Filter: FilterAll, Queues: 1}, testHooks{})
			frame := make([]byte, size)
			copy(frame, v.peerMAC)
			copy(frame[6:], l.Info().MAC)
			frame[12], frame[13] = 0x88, 0xb5
			linktest.BenchWriteBurst(b, l.Queues()[0], frame)
		})
	}
}

// generator sends frames to the link from a packet socket on the peer.
type generator struct {
	fd   int
	msgs []unix.Mmsghdr
	iov  unix.Iovec
	sent atomic.Int64
}

func newGenerator(b *testing.B, v *veth, dst net.HardwareAddr, size int) *generator {
	g := &generator{msgs: make([]unix.Mmsghdr, 64)}
	require.NoError(b, v.ns.Do(func() error {
		ifi, err := net.InterfaceByName(v.peer)
		if err != nil {
			return err
		}
		g.fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return os.NewSyscallError("socket", err)
		}
		if err := unix.SetsockoptInt(g.fd, unix.SOL_PACKET, unix.PACKET_QDISC_BYPASS, 1); err != nil {
			return os.NewSyscallError("setsockopt", err)
		}
		return unix.Bind(g.fd, &unix.SockaddrLinklayer{Ifindex: ifi.Index})
	}))
	b.Cleanup(func() { unix.Close(g.fd) })
	frame := make([]byte, size)
	copy(frame, dst)
	frame[12], frame[13] = 0x88, 0xb5
	g.iov = unix.Iovec{Base: &frame[0]}
	g.iov.SetLen(size)
	for i := range g.msgs {
		g.msgs[i].Hdr.Iov = &g.iov
		g.msgs[i].Hdr.Iovlen = 1
	}
	return g
}

// send sends up to 64 frames; a full ring (ENOBUFS) sends fewer.
func (g *generator) send() (int, error) { return g.sendN(len(g.msgs)) }

func (g *generator) sendN(n int) (int, error) {
	m, _, errno := unix.Syscall6(unix.SYS_SENDMMSG, uintptr(g.fd), uintptr(unsafe.Pointer(&g.msgs[0])), uintptr(min(n, len(g.msgs))), 0, 0, 0)
	if errno == unix.ENOBUFS || errno == unix.EAGAIN {
		return 0, nil
	}
	if errno != 0 {
		return 0, os.NewSyscallError("sendmmsg", errno)
	}
	g.sent.Add(int64(m))
	return int(m), nil
}

// BenchmarkRequestResponse4K: 4 KiB requests with 64-byte responses,
// polarnet over AF_XDP against a kernel server on the veth peer (p2k), next
// to kernel to kernel over a veth between two namespaces (k2k), on 1 and 64
// connections. Both ends run in this process, so CPU per op covers both.
func BenchmarkRequestResponse4K(b *testing.B) {
	for _, conns := range []int{1, 64} {
		for _, mode := range []polarnet.PollMode{polarnet.PollAdaptive, polarnet.PollBlocking} {
			b.Run(fmt.Sprintf("p2k-afxdp-%v/conns=%d", mode, conns), func(b *testing.B) {
				tp := newTopology(b, topoOptions{poll: mode})
				addr := rrbench.StartKernelServer(b, tp.v.ns, kernel4, rrbench.RR4K)
				cs := make([]net.Conn, conns)
				for i := range cs {
					c, err := tp.stack.DialTCP(b.Context(), "tcp", netip.AddrPort{}, addr)
					require.NoError(b, err)
					b.Cleanup(func() { c.Close() })
					cs[i] = c
				}
				rrbench.Run(b, cs, rrbench.RR4K)
			})
		}
		b.Run(fmt.Sprintf("k2k-veth/conns=%d", conns), func(b *testing.B) {
			rrbench.Run(b, rrbench.KernelToKernel(b, rrbench.RR4K, conns), rrbench.RR4K)
		})
	}
}
