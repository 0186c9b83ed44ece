// Package pipe is an in-memory link between two stacks in one process: no
// device and no privileges. The quickstart, the examples and rpcbench run
// over it, and tests and benchmarks of the engine use it.
package pipe

import (
	"fmt"
	"math/bits"
	"net"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/cpu"

	"github.com/polarnet/polarnet/internal/frame"
	"github.com/polarnet/polarnet/link"
)

// maxPipeMTU is the largest MTU a pipe accepts: an IP packet's length field
// is 16 bits, so larger packets could not be expressed anyway.
const maxPipeMTU = 65535

// Config configures New. The zero value is a 1500-byte MTU pipe with one
// queue pair and 1024-frame rings.
type Config struct {
	// MTU is the largest IP packet carried (Ethernet header not included).
	// Zero means 1500; at most 65535, which lets a 64 KiB TCP segment
	// cross in one frame.
	MTU int
	// Queues is the number of queue pairs of each end; zero means 1. A frame
	// written on queue i of one end arrives on queue i of the other.
	Queues int
	// RingSize is how many frames each queue holds per direction; zero means
	// 1024. WriteBurst accepts fewer frames than it is given when the ring
	// is full.
	RingSize int
	// MACA and MACB are the ends' addresses; nil means distinct locally
	// administered addresses (02:70:6e:00:00:01 and :02).
	MACA, MACB net.HardwareAddr
}

// New returns the two ends of an in-memory link: every frame written to a
// queue of one end is received on the same queue of the other end, unchanged.
//
// Each frame is copied twice, both unavoidable for memory links under the
// link.Link contract: WriteBurst gathers it into a buffer of the pipe
// (the engine's segments are only lent for the call), ReadBurst copies that
// into the engine's buffer. The reader hands buffers back to the writer, so
// a pipe allocates a buffer (MTU+14 bytes) only when more frames are in
// flight than ever before: nothing per frame once warm, memory bounded by the
// busiest moment rather than by RingSize (a 64 KiB MTU ring of 1024 frames
// would otherwise hold 64 MiB), and a few buffers reused while cache-hot.
//
// Memory cannot corrupt frames, so both ends claim RX and TX checksum
// offload: frames arrive marked ChecksumValid and checksums asked for with
// TxOffload.NeedsChecksum are never filled in (the receiver trusts the mark,
// as with frames on a veth pair); observers of a pipe see partial checksums.
//
// New panics if cfg has a negative field, an MTU above 65535 or a MAC that
// is not 6 bytes long: configurations are written in code, not read from input.
func New(cfg Config) (a, b *Link) {
	cfg = cfg.withDefaults()
	id := pipeIDs.Add(1)
	a = newPipeLink(fmt.Sprintf("pipe%d-a", id), cfg.MACA, cfg)
	b = newPipeLink(fmt.Sprintf("pipe%d-b", id), cfg.MACB, cfg)
	frameSize := cfg.MTU + frame.EthLen
	for i := range cfg.Queues {
		toA, toB := newRing(cfg.RingSize, frameSize, a), newRing(cfg.RingSize, frameSize, b)
		a.queues[i] = &pipeQueue{link: a, rx: toA, tx: toB, intr: make(chan struct{}, 1)}
		b.queues[i] = &pipeQueue{link: b, rx: toB, tx: toA, intr: make(chan struct{}, 1)}
	}
	return a, b
}

// pipeIDs numbers pipes so that their link.Info names differ in logs.
var pipeIDs atomic.Uint64

func (cfg Config) withDefaults() Config {
	if cfg.MTU < 0 || cfg.MTU > maxPipeMTU || cfg.Queues < 0 || cfg.RingSize < 0 {
		panic(fmt.Sprintf("linktest: invalid Config %+v", cfg))
	}
	if cfg.MTU == 0 {
		cfg.MTU = 1500
	}
	if cfg.Queues == 0 {
		cfg.Queues = 1
	}
	if cfg.RingSize == 0 {
		cfg.RingSize = 1024
	}
	if cfg.MACA == nil {
		cfg.MACA = net.HardwareAddr{0x02, 0x70, 0x6e, 0, 0, 1}
	}
	if cfg.MACB == nil {
		cfg.MACB = net.HardwareAddr{0x02, 0x70, 0x6e, 0, 0, 2}
	}
	if len(cfg.MACA) != 6 || len(cfg.MACB) != 6 {
		panic(fmt.Sprintf("linktest: Config MACs must be 6 bytes: %v, %v", cfg.MACA, cfg.MACB))
	}
	return cfg
}

// Link is one end of a pipe made by New. It implements link.Link.
type Link struct {
	info   link.Info
	queues []link.Queue

	closeOnce sync.Once
	closed    atomic.Bool
	done      chan struct{} // closed by Close, wakes every WaitRead
}

var _ link.Link = (*Link)(nil)

func newPipeLink(name string, mac net.HardwareAddr, cfg Config) *Link {
	return &Link{
		info: link.Info{
			Name:        name,
			MAC:         append(net.HardwareAddr(nil), mac...),
			MTU:         cfg.MTU,
			RxFrameSize: cfg.MTU + frame.EthLen,
			Caps:        link.CapRXChecksum | link.CapTXChecksum,
		},
		queues: make([]link.Queue, cfg.Queues),
		done:   make(chan struct{}),
	}
}

// Info implements link.Link.
func (l *Link) Info() link.Info { return l.info }

// Queues implements link.Link.
func (l *Link) Queues() []link.Queue { return l.queues }

// Close implements link.Link. Frames the other end writes afterwards are
// dropped, as on a wire with nobody at the far end; that end stays usable.
// Closing again does nothing.
func (l *Link) Close() error {
	l.closeOnce.Do(func() {
		l.closed.Store(true)
		close(l.done)
	})
	return nil
}

// pipeQueue is queue pair i of one end: it reads its own ring and writes the
// other end's ring i.
type pipeQueue struct {
	link *Link
	rx   *ring
	tx   *ring
	intr chan struct{} // one pending Interrupt
}

// ReadBurst implements link.Queue.
func (q *pipeQueue) ReadBurst(frames []link.RxFrame) (int, error) {
	if q.link.closed.Load() {
		return 0, link.ErrClosed
	}
	return q.rx.read(frames), nil
}

// WriteBurst implements link.Queue.
func (q *pipeQueue) WriteBurst(frames []link.TxFrame) (int, error) {
	if q.link.closed.Load() {
		return 0, link.ErrClosed
	}
	if q.tx.reader.closed.Load() {
		return len(frames), nil
	}
	return q.tx.write(frames)
}

// WaitRead implements link.Queue.
func (q *pipeQueue) WaitRead() error {
	if q.link.closed.Load() {
		return link.ErrClosed
	}
	if !q.rx.empty() {
		return nil
	}
	select {
	case <-q.rx.readable:
	case <-q.intr:
	case <-q.link.done:
	}
	if q.link.closed.Load() {
		return link.ErrClosed
	}
	return nil
}

// Interrupt implements link.Queue.
func (q *pipeQueue) Interrupt() {
	select {
	case q.intr <- struct{}{}:
	default: // an interrupt is already pending
	}
}

// ring carries frames from one end to the other on one queue. Its two
// queues are single-producer single-consumer, as the Queue contract allows:
// each ring has one reader (the poller of the receiving queue) and one writer
// at a time (TX is serialised per queue).
type ring struct {
	frames    *spsc[[]byte] // frames in flight, in buffers of frameSize capacity
	free      *spsc[[]byte] // buffers the reader is done with, for the writer
	frameSize int
	// readable holds a token when the ring may have become non-empty while
	// the reader was idle; WaitRead parks on it. One token per transition to
	// non-empty, not one per frame, keeps channel operations off the
	// per-frame path.
	readable chan struct{}
	reader   *Link // the end that reads this ring
}

func newRing(size, frameSize int, reader *Link) *ring {
	return &ring{
		frames:    newSPSC[[]byte](size),
		free:      newSPSC[[]byte](size),
		frameSize: frameSize,
		readable:  make(chan struct{}, 1),
		reader:    reader,
	}
}

func (r *ring) empty() bool { return r.frames.len() == 0 }

// write copies frames into buffers, reused from the reader or else newly
// allocated, and queues them; it returns how many fit. A frame larger than
// the frame size stops the burst with an error.
func (r *ring) write(frames []link.TxFrame) (int, error) {
	n := min(r.frames.space(), len(frames))
	reuse := r.free.len()
	var err error
	for i := range n {
		f := &frames[i]
		if size := f.Len(); size > r.frameSize {
			n, err = i, fmt.Errorf("linktest: frame of %d bytes exceeds the pipe's frame size %d", size, r.frameSize)
			break
		}
		var buf []byte
		if i < reuse {
			buf = r.free.at(i)[:0]
		} else {
			buf = make([]byte, 0, r.frameSize)
		}
		for _, s := range f.Segs {
			buf = append(buf, s...)
		}
		r.frames.put(i, buf)
	}
	r.free.release(min(n, reuse))
	if n > 0 && r.frames.publish(n) {
		select {
		case r.readable <- struct{}{}:
		default:
		}
	}
	return n, err
}

// read copies up to len(frames) frames into the engine's buffers and hands
// their buffers back to the writer.
func (r *ring) read(frames []link.RxFrame) int {
	n := min(r.frames.len(), len(frames))
	for i := range n {
		buf := r.frames.at(i)
		f := &frames[i]
		// Buf has at least RxFrameSize capacity by contract; slicing
		// beyond it panics, which is the caller's bug to see.
		f.Len = copy(f.Buf[:len(buf)], buf)
		f.ChecksumValid = true
		r.free.put(i, buf)
	}
	// Buffers are freed before their slots: a writer that sees a slot
	// free also sees its buffer, so there are never more buffers than
	// slots and the free queue, as long as the ring, never overflows.
	r.free.publish(n)
	r.frames.release(n)
	return n
}

// spsc is a bounded lock-free queue with one producer and one consumer. The
// producer puts items past the tail and publishes them; the consumer reads
// them from the head and releases them. Each index is stored by one side
// only, and the atomics order the item accesses of the two sides.
type spsc[T any] struct {
	items []T    // a power of two long, so that a mask finds a slot
	mask  uint64 // len(items) - 1
	size  int    // the capacity, at most len(items)
	// Producer and consumer usually run on different cores: each index
	// gets a cache line of its own, so that storing one does not evict the
	// other, nor items, from the other core's cache.
	_    cpu.CacheLinePad
	head atomic.Uint64 // next item to read; stored by the consumer only
	_    cpu.CacheLinePad
	tail atomic.Uint64 // next item to write; stored by the producer only
	_    cpu.CacheLinePad
}

func newSPSC[T any](size int) *spsc[T] {
	n := 1 << bits.Len(uint(size-1))
	return &spsc[T]{items: make([]T, n), mask: uint64(n - 1), size: size}
}

// len returns how many items the consumer may read.
func (q *spsc[T]) len() int { return int(q.tail.Load() - q.head.Load()) }

// space returns how many items the producer may put.
func (q *spsc[T]) space() int { return q.size - q.len() }

func (q *spsc[T]) slot(index uint64) *T { return &q.items[index&q.mask] }

// at returns the consumer's i-th readable item.
func (q *spsc[T]) at(i int) T { return *q.slot(q.head.Load() + uint64(i)) }

// release frees the consumer's first n items.
func (q *spsc[T]) release(n int) { q.head.Store(q.head.Load() + uint64(n)) }

// put sets the producer's i-th free slot.
func (q *spsc[T]) put(i int, v T) { *q.slot(q.tail.Load() + uint64(i)) = v }

// publish makes the first n put items readable. It reports whether the
// consumer had read everything before: then it may be about to wait and
// needs waking. The consumer stores head before it checks len to wait, and
// publish stores tail before it loads head (the atomics are sequentially
// consistent), so at least one of them sees the other's store: no wakeup is
// lost.
func (q *spsc[T]) publish(n int) bool {
	tail := q.tail.Load()
	q.tail.Store(tail + uint64(n))
	return q.head.Load() == tail
}
