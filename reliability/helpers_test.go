package reliability

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"net"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/polarnet/polarnet/internal/frame"
	"github.com/polarnet/polarnet/internal/kpeer"
	"github.com/polarnet/polarnet/internal/leakcheck"
	"github.com/polarnet/polarnet/internal/taptopo"
	"github.com/polarnet/polarnet/internal/xfer"
	"github.com/polarnet/polarnet/link"
	"github.com/polarnet/polarnet/link/capture"
	"github.com/polarnet/polarnet/link/linktest"
	"github.com/polarnet/polarnet/polarnet"
)

// The addresses of this package's topologies (see the package doc).
var (
	kernel4 = netip.MustParseAddr("198.18.100.1")
	stack4  = netip.MustParseAddr("198.18.100.2")
	kernel6 = netip.MustParseAddr("fd00:198:18:100::1")
	stack6  = netip.MustParseAddr("fd00:198:18:100::2")
	// spoofed holds the sources of forged traffic: off the stack's subnet,
	// so the stack sends its answers to the gateway (the kernel side, which
	// drops them: a fresh namespace does not forward).
	spoofed = netip.MustParsePrefix("198.18.100.128/25")
)

// forgerMAC is the link address forged frames come from, so that a
// flowWatch tells them from the kernel's.
var forgerMAC = net.HardwareAddr{0x02, 0x00, 0x5e, 0x00, 0x00, 0x66}

// ioBound bounds every transfer and wait of these tests: a stack that
// stalls fails the test instead of hanging it.
const ioBound = 2 * time.Minute

// env is a topology of this package: a stack on a TAP device whose kernel
// side is in a namespace of its own.
type env struct {
	*taptopo.Topology
	// stackMAC is the stack's link address, kernelMAC the kernel side's.
	stackMAC, kernelMAC net.HardwareAddr
}

// newEnv builds an env (opt's addresses are this package's), or skips or
// fails t without root. The stack's IPv4 gateway is the kernel side.
func newEnv(t *testing.T, opt taptopo.Options) *env {
	t.Helper()
	opt.KernelAddrs = []netip.Prefix{netip.PrefixFrom(kernel4, 25), netip.PrefixFrom(kernel6, 64)}
	opt.StackAddrs = []netip.Prefix{netip.PrefixFrom(stack4, 25), netip.PrefixFrom(stack6, 64)}
	adjust := opt.Config
	opt.Config = func(c *polarnet.Config) {
		c.Gateway4 = kernel4
		if adjust != nil {
			adjust(c)
		}
	}
	tp := taptopo.New(t, opt)
	var kernelMAC net.HardwareAddr
	require.NoError(t, tp.NS.Do(func() error {
		ifi, err := net.InterfaceByName(tp.Device)
		if err == nil {
			kernelMAC = ifi.HardwareAddr
		}
		return err
	}))
	return &env{Topology: tp, stackMAC: tp.TAP.Info().MAC, kernelMAC: kernelMAC}
}

// setLink sets attributes of the kernel side of the TAP device (ip link
// set: "up", "down", "txqueuelen 4096").
func (e *env) setLink(t *testing.T, args ...string) {
	t.Helper()
	out, err := e.NS.Exec(append([]string{"ip", "link", "set", "dev", e.Device}, args...)...)
	require.NoError(t, err, out)
}

// raw opens an AF_PACKET socket on the kernel side of the TAP device: what
// it writes reaches the stack as if the kernel had sent it, and it reads
// every frame the stack sends. It is closed at cleanup (before the
// namespace goes).
func (e *env) raw(t *testing.T) *linktest.PacketSocketLink {
	t.Helper()
	var l *linktest.PacketSocketLink
	require.NoError(t, e.NS.Do(func() (err error) {
		l, err = linktest.OpenPacketSocket(e.Device)
		return err
	}))
	t.Cleanup(func() { l.Close() })
	return l
}

// stallReport logs, unless the returned stop is called within after, where
// the env's frames stopped while a stall lasts: the stack's and its link's
// counters twice a second apart, the kernel side's device counters and
// sockets, and the goroutines. stop waits for a report under way.
func (e *env) stallReport(t *testing.T, after time.Duration) (stop func()) {
	done := make(chan struct{})
	timer := time.AfterFunc(after, func() {
		defer close(done)
		t.Logf("still running after %v; the stack's counters: %+v", after, e.Stack.Stats())
		time.Sleep(time.Second)
		t.Logf("a second later: %+v", e.Stack.Stats())
		for _, args := range [][]string{{"ip", "-s", "link", "show", "dev", e.Device}, {"ss", "-tinm"}} {
			out, err := e.NS.Exec(args...)
			t.Logf("%v (%v):\n%s", args, err, out)
		}
		t.Logf("goroutines:\n%s", leakcheck.Stacks())
	})
	return func() {
		if !timer.Stop() {
			<-done
		}
	}
}

// forge builds a TCP frame from the forger on the kernel side's link to
// the stack.
func (e *env) forge(s frame.TCPSpec) []byte {
	s.SrcMAC, s.DstMAC = forgerMAC, e.stackMAC
	return frame.TCPFrame(s)
}

// accept dials ln from the kernel and returns both ends, closed at
// cleanup. The kernel side speaks first (one byte, which the stack's end
// reads): when the handshake went through a SYN cookie and its last ACK was
// lost, the stack knows of the connection only from the data that follows.
func (e *env) accept(t *testing.T, ln *polarnet.TCPListener) (*net.TCPConn, *polarnet.TCPConn) {
	t.Helper()
	k := kpeer.Dial(t, e.NS, ln.Addr().String())
	deadline(ioBound, k)
	_, err := k.Write([]byte{'>'})
	require.NoError(t, err)
	require.NoError(t, ln.SetDeadline(time.Now().Add(ioBound)))
	s, err := ln.AcceptTCP()
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	// Another connection first in the accept queue (a guessed SYN cookie's)
	// would never send the byte: say so rather than wait out the deadline.
	require.Equal(t, k.LocalAddr().String(), s.RemoteAddr().String(), "the connection accepted is the one dialed")
	deadline(ioBound, s)
	_, err = io.ReadFull(s, make([]byte, 1))
	require.NoError(t, err)
	return k, s
}

// dial dials a kernel listener from the stack and returns both ends,
// closed at cleanup.
func (e *env) dial(t *testing.T, ln net.Listener) (*polarnet.TCPConn, *net.TCPConn) {
	t.Helper()
	p := e.dialMany(t, ln, 1)[0]
	return p.c, p.k
}

// connPair is a connection between the stack (c) and the kernel (k).
type connPair struct {
	c *polarnet.TCPConn
	k *net.TCPConn
}

// dialWorkers bounds the dials dialMany has in progress: enough to hide
// the round trips, few enough that a lost SYN delays one dial of many.
const dialWorkers = 16

// dialMany dials a kernel listener from the stack n times, dialWorkers at
// a time, and returns the pairs of ends, closed at cleanup; their reads
// and writes are bounded by ioBound from now.
func (e *env) dialMany(t *testing.T, ln net.Listener, n int) []connPair {
	t.Helper()
	tl := ln.(*net.TCPListener)
	require.NoError(t, tl.SetDeadline(time.Now().Add(ioBound)))
	defer tl.SetDeadline(time.Time{})
	accepted := make(chan *net.TCPConn, n)
	go func() {
		defer close(accepted)
		for range n {
			c, err := tl.AcceptTCP()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	pairs := make([]connPair, n)
	errs := make([]error, n)
	sem := make(chan struct{}, dialWorkers)
	var wg sync.WaitGroup
	for i := range pairs {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			pairs[i].c, errs[i] = e.Stack.DialTCP(t.Context(), "tcp", netip.AddrPort{}, tl.Addr().(*net.TCPAddr).AddrPort())
		})
	}
	wg.Wait()
	dialed := 0
	for i, err := range errs {
		if err == nil {
			dialed++
			c := pairs[i].c
			t.Cleanup(func() { c.Close() })
		}
	}
	// Each accepted end is the kernel's of the dial whose local address it
	// has as its remote one.
	byAddr := map[netip.AddrPort]*net.TCPConn{}
	for len(byAddr) < dialed {
		k, ok := <-accepted
		if !ok {
			break
		}
		t.Cleanup(func() { k.Close() })
		byAddr[k.RemoteAddr().(*net.TCPAddr).AddrPort()] = k
	}
	for i := range pairs {
		require.NoError(t, errs[i], "dial %d of %d", i+1, n)
		pairs[i].k = byAddr[pairs[i].c.LocalAddr().(*net.TCPAddr).AddrPort()]
		require.NotNil(t, pairs[i].k, "the kernel accepted dial %d of %d", i+1, n)
		deadline(ioBound, pairs[i].c, pairs[i].k)
	}
	return pairs
}

// deadline bounds every later read and write of conns by d from now.
func deadline(d time.Duration, conns ...net.Conn) {
	for _, c := range conns {
		c.SetDeadline(time.Now().Add(d))
	}
}

// flooder sends forged frames from the kernel side as fast as the socket
// takes them, from its own goroutine, until stopped or max frames are out.
type flooder struct {
	cancel  context.CancelFunc
	done    chan struct{}
	sent    atomic.Int64
	err     error
	elapsed time.Duration
}

// floodBurst is how many frames the flooder hands the socket at a time.
const floodBurst = 32

// startFlood starts a flooder writing frames made by next on q, at most
// rate frames a second (0: as fast as q takes them). next runs on the
// flooder's goroutine only.
func startFlood(q link.Queue, max, rate int, next func() []byte) *flooder {
	ctx, cancel := context.WithTimeout(context.Background(), ioBound)
	f := &flooder{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(f.done)
		start := time.Now()
		defer func() { f.elapsed = time.Since(start) }()
		burst := make([]link.TxFrame, floodBurst)
		for f.sent.Load() < int64(max) && ctx.Err() == nil {
			if rate > 0 {
				due := start.Add(time.Duration(f.sent.Load()) * time.Second / time.Duration(rate))
				time.Sleep(time.Until(due))
			}
			n := min(floodBurst, max-int(f.sent.Load()))
			for i := range n {
				burst[i] = link.TxFrame{Segs: [][]byte{next()}}
			}
			for off := 0; off < n && ctx.Err() == nil; {
				k, err := q.WriteBurst(burst[off:n])
				if err != nil {
					f.err = err
					return
				}
				if k == 0 {
					runtime.Gosched() // the socket is full: let the stack catch up
				}
				off += k
				f.sent.Add(int64(k))
			}
		}
	}()
	return f
}

// stop stops the flood and returns the frames sent, their rate and the
// flooder's error.
func (f *flooder) stop() (sent int64, rate float64, err error) {
	f.cancel()
	<-f.done
	sent = f.sent.Load()
	return sent, float64(sent) / f.elapsed.Seconds(), f.err
}

// tapDropped returns the frames the TAP device dropped on their way to the
// stack (its queue was full: the poller fell behind), since it was made.
func tapDropped(e *env) uint64 {
	var n uint64
	for _, q := range e.TAP.LinkStats() {
		n += q.RxRingFull
	}
	return n
}

// tapShed returns how many connection requests the TAP device shed for
// the stack (link.SYNShedder).
func tapShed(e *env) uint64 {
	var n uint64
	for _, q := range e.TAP.LinkStats() {
		n += q.RxShed
	}
	return n
}

// protocolCounter returns a reader of the stack's protocol counter at path
// (one that require.Eventually may poll), failing the test at once if path
// names no counter.
func protocolCounter(t *testing.T, st *polarnet.Stack, path string) func() uint64 {
	t.Helper()
	_, ok := st.ProtocolCounter(path)
	require.True(t, ok, "no protocol counter %s", path)
	return func() uint64 {
		n, _ := st.ProtocolCounter(path)
		return n
	}
}

// liveHeap returns the bytes of live heap objects, after a collection.
func liveHeap() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// mib formats a byte count in MiB.
func mib(n uint64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

// flowWatch follows one TCP connection of the stack by watching its link
// (it is a capture.Recorder): the sequence numbers, acknowledgments,
// timestamps and window a blind attacker would have to guess, so that the
// floods can aim just inside or far outside the windows on purpose. It
// ignores the forger's frames.
type flowWatch struct {
	mu   sync.Mutex
	port uint16 // the stack's port of the watched connection; 0: none
	cur  flowState
}

// flowState is what a flowWatch knows of its connection.
type flowState struct {
	// seen: a segment of the peer's has been seen since watch.
	seen bool
	// peerNxt is the peer's next sequence number (the stack's RCV.NXT
	// while the peer sends no data), peerAck its latest acknowledgment (at
	// most the stack's SND.UNA), peerWnd its latest raw window field.
	peerNxt, peerAck uint32
	peerWnd          uint16
	// sndNxt is the end of the highest data the stack has sent.
	sndNxt uint32
	// peerTS and stackTS are the sides' latest timestamp values.
	peerTS, stackTS uint32
}

var _ capture.Snapper = (*flowWatch)(nil)

// Snaplen implements capture.Snapper: headers with options are enough.
func (w *flowWatch) Snaplen() int { return 128 }

// watch starts following the connection on the stack's port.
func (w *flowWatch) watch(port uint16) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.port, w.cur = port, flowState{}
}

// state returns what w knows now.
func (w *flowWatch) state() flowState {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.cur
}

// Record implements capture.Recorder.
func (w *flowWatch) Record(p *capture.Packet) {
	pkt, ok := frame.ParseTruncated(p.Data)
	if !ok {
		return
	}
	tcp, ok := frame.ParseTCP(p.Data, pkt)
	if !ok {
		return
	}
	end := tcp.Seq + uint32(tcp.PayloadLen)
	if tcp.Flags&(frame.FlagSYN|frame.FlagFIN) != 0 {
		end++
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case w.port == 0:
	case p.Dir == capture.In && tcp.DstPort == w.port && !bytes.Equal(p.Data[6:12], forgerMAC):
		w.cur.seen = true
		w.cur.peerNxt, w.cur.peerAck, w.cur.peerWnd = end, tcp.Ack, tcp.Window
		w.cur.peerTS = tcp.Options.TSVal
	case p.Dir == capture.Out && tcp.SrcPort == w.port:
		if int32(end-w.cur.sndNxt) > 0 || w.cur.sndNxt == 0 {
			w.cur.sndNxt = end
		}
		w.cur.stackTS = tcp.Options.TSVal
	}
}

// waitSeen waits until w has seen a segment of the peer's.
func (w *flowWatch) waitSeen(t *testing.T) flowState {
	t.Helper()
	var st flowState
	require.Eventually(t, func() bool { st = w.state(); return st.seen }, ioBound, time.Millisecond, "no segment of the peer's seen")
	return st
}

// stream sends pattern bytes one way over a connection until finish: a
// writer that counts what it sends, a reader that checks every byte that
// arrives against the pattern and counts it, so that progress can be read
// at any time and the lengths compared at the end.
type stream struct {
	stop     chan struct{}
	received atomic.Int64
	wrote    chan moved
	read     chan moved
}

// moved is what one end of a stream moved: its length and how it ended.
type moved struct {
	n   int64
	err error
}

// pace shapes a stream's writer: chunks of chunk bytes, a pause of every
// after each, and one of first before the first (so that many paced
// streams do not all write at the same instants). The zero pace writes
// 32 KiB chunks back to back, as fast as the connection takes them.
type pace struct {
	chunk        int
	every, first time.Duration
}

// startStream starts a stream from one end of a connection to the other.
func startStream(from xfer.HalfCloser, to io.Reader, seed uint64, p pace) *stream {
	if p.chunk == 0 {
		p.chunk = 32 << 10
	}
	s := &stream{stop: make(chan struct{}), wrote: make(chan moved, 1), read: make(chan moved, 1)}
	go func() {
		src := xfer.Pattern(math.MaxInt64, seed)
		buf := make([]byte, p.chunk)
		var out moved
		pause(s.stop, p.first)
		for out.err == nil {
			select {
			case <-s.stop:
				out.err = from.CloseWrite()
				s.wrote <- out
				return
			default:
			}
			src.Read(buf)
			var n int
			n, out.err = from.Write(buf)
			out.n += int64(n)
			pause(s.stop, p.every)
		}
		s.wrote <- out
	}()
	go func() {
		var out moved
		out.n, out.err = xfer.Verify(counter{to, &s.received}, seed)
		s.read <- out
	}()
	return s
}

// pause waits for d, or until stop is closed.
func pause(stop <-chan struct{}, d time.Duration) {
	if d <= 0 {
		return
	}
	select {
	case <-stop:
	case <-time.After(d):
	}
}

// rates returns the bytes a second each stream delivers during d.
func rates(d time.Duration, streams ...*stream) []float64 {
	before := make([]int64, len(streams))
	for i, s := range streams {
		before[i] = s.received.Load()
	}
	start := time.Now()
	time.Sleep(d)
	out := make([]float64, len(streams))
	for i, s := range streams {
		out[i] = float64(s.received.Load()-before[i]) / time.Since(start).Seconds()
	}
	return out
}

// moving waits, bounded by ioBound, until every stream has received more
// than it had when called, and returns how long that took.
func moving(t *testing.T, streams ...*stream) time.Duration {
	t.Helper()
	start := time.Now()
	moved := make([]int64, len(streams))
	for i, s := range streams {
		moved[i] = s.received.Load()
	}
	require.Eventually(t, func() bool {
		for i, s := range streams {
			if s.received.Load() <= moved[i] {
				return false
			}
		}
		return true
	}, ioBound, 10*time.Millisecond, "the streams move")
	return time.Since(start)
}

// finish stops the writer, half-closes, and checks that the reader got
// every byte written, in order, before EOF.
func (s *stream) finish() error {
	close(s.stop)
	w, r := <-s.wrote, <-s.read
	switch {
	case w.err != nil && r.err != nil:
		return fmt.Errorf("stream: sending: %w; receiving: %w", w.err, r.err)
	case w.err != nil:
		return fmt.Errorf("stream: sending: %w", w.err)
	case r.err != nil:
		return fmt.Errorf("stream: receiving: %w", r.err)
	case w.n != r.n:
		return fmt.Errorf("stream: sent %d bytes, received %d", w.n, r.n)
	}
	return nil
}

// counter counts what a reader reads.
type counter struct {
	r io.Reader
	n *atomic.Int64
}

func (c counter) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	c.n.Add(int64(n))
	return n, err
}

// heapSampler records the highest heap in use (live objects and garbage
// not yet collected) while it runs.
type heapSampler struct {
	peak atomic.Uint64
	stop chan struct{}
	done chan struct{}
}

// sampleHeap starts sampling, ten times a second.
func sampleHeap() *heapSampler {
	h := &heapSampler{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(h.done)
		var ms runtime.MemStats
		for {
			runtime.ReadMemStats(&ms)
			h.peak.Store(max(h.peak.Load(), ms.HeapInuse))
			select {
			case <-h.stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	return h
}

// finish stops sampling and returns the peak.
func (h *heapSampler) finish() uint64 {
	close(h.stop)
	<-h.done
	return h.peak.Load()
}
