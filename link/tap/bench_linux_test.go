package tap

import (
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/polarnet/polarnet/internal/netns"
	"github.com/polarnet/polarnet/link"
	"github.com/polarnet/polarnet/link/linktest"
)

// benchSizes are the frame lengths the benchmarks use.
var benchSizes = []int{64, 1500}

// BenchmarkReadBurst measures how many frames per second ReadBurst takes
// from the kernel (one op is one frame), in bursts of 64:
//   - Drain: a packet socket on the device's kernel side fills the queue's
//     ring while the timer is stopped, and ReadBurst empties it: what
//     ReadBurst alone can take.
//   - Flood: the packet socket sends without pause from another goroutine
//     while ReadBurst reads, as a busy peer would; sent/s is what it offered
//     (the kernel drops what the ring cannot hold).
func BenchmarkReadBurst(b *testing.B) {
	for _, size := range benchSizes {
		for _, offloads := range []bool{true, false} {
			name := fmt.Sprintf("%dB/offloads=%t", size, offloads)
			b.Run("Drain/"+name, func(b *testing.B) {
				l, gen := benchRxSetup(b, Config{Queues: 1, DisableOffloads: !offloads}, size)
				q, frames := l.Queues()[0], rxFrames(l, 64)
				b.SetBytes(int64(size))
				b.ResetTimer()
				for got := 0; got < b.N; {
					b.StopTimer()
					want, err := gen.send(min(b.N-got, benchRing))
					if err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
					for want > 0 {
						n, err := q.ReadBurst(frames[:min(len(frames), want)])
						if err != nil {
							b.Fatal(err)
						}
						if n == 0 {
							b.Fatalf("ring empty with %d frames to go: the kernel dropped some", want)
						}
						want -= n
						got += n
					}
				}
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "frames/s")
			})
			b.Run("Flood/"+name, func(b *testing.B) {
				l, gen := benchRxSetup(b, Config{Queues: 1, DisableOffloads: !offloads}, size)
				q, frames := l.Queues()[0], rxFrames(l, 64)
				var (
					stopped atomic.Bool
					wg      sync.WaitGroup
					genErr  error
				)
				wg.Go(func() {
					for !stopped.Load() && genErr == nil {
						_, genErr = gen.send(64)
					}
				})
				b.SetBytes(int64(size))
				b.ResetTimer()
				for got := 0; got < b.N; {
					n, err := q.ReadBurst(frames)
					if err != nil {
						b.Fatal(err)
					}
					got += n
					if n == 0 {
						if err := q.WaitRead(); err != nil {
							b.Fatal(err)
						}
					}
				}
				b.StopTimer()
				stopped.Store(true)
				wg.Wait()
				require.NoError(b, genErr)
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "frames/s")
				b.ReportMetric(float64(gen.sent)/b.Elapsed().Seconds(), "sent/s")
			})
		}
	}
}

// benchRing is the length the benchmarks give the TAP's ring (txqueuelen),
// which the Drain benchmark fills each round.
const benchRing = 8192

// benchRxSetup opens a link with a ring of benchRing frames, moves its
// kernel side into a namespace and returns a generator of frames of size
// bytes there.
func benchRxSetup(b *testing.B, cfg Config, size int) (*Link, *generator) {
	ns := newNS(b)
	l := openTAP(b, cfg)
	name := l.Info().Name
	require.NoError(b, ns.MoveLink(name))
	_, err := ns.Exec("ip", "link", "set", "dev", name, "txqueuelen", fmt.Sprint(benchRing))
	require.NoError(b, err)
	return l, newGenerator(b, ns, name, size)
}

func rxFrames(l *Link, n int) []link.RxFrame {
	frames := make([]link.RxFrame, n)
	for i := range frames {
		frames[i].Buf = make([]byte, l.Info().RxFrameSize)
	}
	return frames
}

// BenchmarkWriteBurst measures how many frames per second WriteBurst hands to
// the kernel, in bursts of 64 (one op is one frame). The kernel drops them
// right after: they are addressed to no one.
func BenchmarkWriteBurst(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(fmt.Sprintf("%dB", size), func(b *testing.B) {
			ns := newNS(b)
			l := openTAP(b, Config{Queues: 1})
			require.NoError(b, ns.MoveLink(l.Info().Name))
			frame := make([]byte, size)
			copy(frame[6:], l.Info().MAC)
			frame[12], frame[13] = 0x88, 0xb5
			linktest.BenchWriteBurst(b, l.Queues()[0], frame)
		})
	}
}

// generator sends frames to a device from a packet socket on its kernel
// side, 64 per sendmmsg, bypassing the qdisc: each frame is in the TAP's
// ring, or dropped, when sendmmsg returns.
type generator struct {
	fd   int
	msgs []unix.Mmsghdr
	iov  unix.Iovec
	sent int64 // frames sent, by the goroutine calling send
}

// newGenerator opens a generator of frames of size bytes on the device
// ifname in ns; the test's cleanup closes it.
func newGenerator(b *testing.B, ns *netns.NS, ifname string, size int) *generator {
	b.Helper()
	g := &generator{msgs: make([]unix.Mmsghdr, 64)}
	require.NoError(b, ns.Do(func() error {
		ifi, err := netInterface(ifname)
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
		// Protocol 0: the socket sends only, it never receives.
		return unix.Bind(g.fd, &unix.SockaddrLinklayer{Ifindex: ifi})
	}))
	b.Cleanup(func() { unix.Close(g.fd) })

	frame := make([]byte, size)
	for i := range 6 {
		frame[i] = 0xff
	}
	frame[12], frame[13] = 0x88, 0xb5 // IEEE local experimental EtherType
	g.iov = iovec(frame)
	for i := range g.msgs {
		g.msgs[i].Hdr.Iov = &g.iov
		g.msgs[i].Hdr.Iovlen = 1
	}
	return g
}

// send sends up to n frames and returns how many it sent: fewer when the
// ring is full (this kernel's TAP then stops its queue, and sendmmsg
// bypassing the qdisc fails with ENOBUFS).
func (g *generator) send(n int) (int, error) {
	sent := 0
	for sent < n {
		m, _, errno := unix.Syscall6(unix.SYS_SENDMMSG, uintptr(g.fd),
			uintptr(unsafe.Pointer(&g.msgs[0])), uintptr(min(n-sent, len(g.msgs))), 0, 0, 0)
		if errno == unix.ENOBUFS {
			break
		}
		if errno != 0 {
			return sent, os.NewSyscallError("sendmmsg", errno)
		}
		sent += int(m)
	}
	g.sent += int64(sent)
	return sent, nil
}

// netInterface returns the index of the interface name in the calling
// thread's namespace.
func netInterface(name string) (int, error) {
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		return 0, err
	}
	if err := ifreqIoctl(unix.SIOCGIFINDEX, ifr); err != nil {
		return 0, fmt.Errorf("index of %s: %w", name, err)
	}
	return int(ifr.Uint32()), nil
}
