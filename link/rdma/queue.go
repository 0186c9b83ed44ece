package rdma

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/polarnet/polarnet/internal/frame"
	"github.com/polarnet/polarnet/link"
)

// Tuning of the bookkeeping.
const (
	// pollBatch is how many completions one poll reaps at most.
	pollBatch = 64
	// signalEvery makes every signalEvery-th send work request of a burst
	// signaled, besides the last: a completion frees the buffers of every
	// request before it (a send queue completes in order), so few
	// completions free many buffers, and none waits long for one.
	signalEvery = 16
	// refillRetry is how long WaitRead sleeps when no receive buffer is
	// posted (the device refused them all): no completion can wake it.
	refillRetry = time.Millisecond
	// drainPolls bounds the polls that collect the completions of flushed
	// work requests when a queue stops; drainTime bounds their duration.
	drainPolls = 4096
	drainTime  = 100 * time.Millisecond
)

// bufState is where a buffer is.
type bufState uint8

const (
	bufFree     bufState = iota // the link's, unused
	bufPosted                   // posted for receive: the device's
	bufInflight                 // posted for send: the device's
	bufReaped                   // received, completion held by WaitRead
)

// queue is one queue pair of a Link: the bookkeeping of its receive and
// send buffers over a queuePair of the device.
//
// One mutex serialises the poller's ReadBurst and WaitRead, the WriteBurst
// of whichever goroutine sends, and Close: a burst holds it for
// microseconds, both directions of a shard mostly run on the shard's poller
// anyway, and recovering from a completion error or closing needs both
// directions still.
type queue struct {
	link      *Link
	index     int
	qp        queuePair
	region    []byte
	frameSize int
	base      uint32 // index of the queue's first buffer (receive, then send)
	rxDepth   int

	// waitMu is held by WaitRead for its whole call, so that Close can wait
	// for a parked WaitRead to leave before destroying what it waits on.
	waitMu sync.Mutex

	mu     sync.Mutex
	closed bool
	state  []bufState // by buffer index - base
	rxFree []uint32   // receive buffers not posted
	posted int        // receive buffers posted
	// pending is a receive completion WaitRead reaped to learn that a frame
	// is there; ReadBurst delivers it first.
	pending    completion
	hasPending bool
	txFree     []uint32
	inflight   fifo // send buffers posted, in order
	// broken is set when a completion error (or an unexpected flush) put
	// the queue in the error state; the next ReadBurst restarts it.
	broken error
	wcs    [pollBatch]completion
	bufs   [pollBatch]uint32
	wrs    []sendWR

	interrupted atomic.Bool
	wake        chan struct{} // wakes the sleep of a WaitRead without posted buffers

	stats queueCounters
}

var _ link.Queue = (*queue)(nil)

func newQueue(l *Link, index int, qp queuePair, region []byte, p *setupPlan) *queue {
	q := &queue{
		link:      l,
		index:     index,
		qp:        qp,
		region:    region,
		frameSize: p.frameSize,
		base:      p.rxBuf(index, 0),
		rxDepth:   p.rxDepth,
		state:     make([]bufState, p.rxDepth+p.txDepth),
		rxFree:    make([]uint32, 0, p.rxDepth),
		txFree:    make([]uint32, 0, p.txDepth),
		inflight:  newFIFO(p.txDepth),
		wrs:       make([]sendWR, 0, p.txDepth),
		wake:      make(chan struct{}, 1),
	}
	for i := range p.rxDepth {
		q.rxFree = append(q.rxFree, p.rxBuf(index, i))
	}
	for i := p.txDepth - 1; i >= 0; i-- {
		q.txFree = append(q.txFree, p.txBuf(index, i))
	}
	return q
}

// buf returns buffer b of the region.
func (q *queue) buf(b uint32) []byte {
	off := int(b) * q.frameSize
	return q.region[off : off+q.frameSize : off+q.frameSize]
}

// owns reports whether b is one of the queue's receive (rx) or send buffers.
func (q *queue) owns(b uint64, rx bool) bool {
	i := int64(b) - int64(q.base)
	if rx {
		return i >= 0 && i < int64(q.rxDepth)
	}
	return i >= int64(q.rxDepth) && i < int64(len(q.state))
}

// ReadBurst delivers received frames, copying each out of its buffer and
// posting the buffer again, in one post for the burst.
func (q *queue) ReadBurst(frames []link.RxFrame) (int, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return 0, link.ErrClosed
	}
	for i := range frames {
		if cap(frames[i].Buf) < q.frameSize {
			return 0, fmt.Errorf("rdma: %s queue %d: receive buffer of %d bytes, the link needs %d",
				q.link.info.Name, q.index, cap(frames[i].Buf), q.frameSize)
		}
	}
	if q.broken != nil {
		if err := q.restartLocked(); err != nil {
			return 0, err
		}
	}
	n := 0
	if q.hasPending && len(frames) > 0 {
		q.hasPending = false
		n = q.deliver(q.pending, frames, n)
	}
	// Bounded by the buffers posted: a completion the loop does not
	// deliver still takes one.
	for i := 0; n < len(frames) && q.broken == nil && i <= len(q.state)/pollBatch+len(frames)/pollBatch+1; i++ {
		want := min(len(frames)-n, len(q.wcs))
		got, perr := q.qp.pollRecv(q.wcs[:want])
		if perr != nil {
			q.fail(fmt.Errorf("polling receive completions: %w", perr))
			break
		}
		for _, wc := range q.wcs[:got] {
			if q.reap(wc) {
				n = q.deliver(wc, frames, n)
			}
		}
		if got < want {
			break
		}
	}
	if n > 0 {
		q.stats.rxBursts.Add(1)
		q.stats.rxFrames.Add(uint64(n))
	}
	if q.broken != nil {
		// Recover at once: frames arriving meanwhile are lost.
		return n, q.restartLocked()
	}
	q.refillLocked()
	return n, nil
}

// reap takes note of a receive completion: its buffer is the link's again.
// It reports false for a completion that carries no frame (an error, or a
// bookkeeping mismatch, which breaks the queue).
func (q *queue) reap(wc completion) bool {
	if !q.owns(wc.id, true) || q.state[wc.id-uint64(q.base)] != bufPosted {
		q.fail(fmt.Errorf("the device completed receive buffer %d, which is not posted on this queue", wc.id))
		return false
	}
	q.state[wc.id-uint64(q.base)] = bufReaped
	q.posted--
	if wc.status == wcOK {
		return true
	}
	q.recycle(uint32(wc.id))
	q.stats.rxErrors.Add(1)
	q.fail(completionError("receive", wc))
	return false
}

// deliver copies the frame of a reaped completion into frames[n] (whose
// capacity ReadBurst checked) and recycles its buffer; it returns the new
// count of frames filled.
func (q *queue) deliver(wc completion, frames []link.RxFrame, n int) int {
	defer q.recycle(uint32(wc.id))
	if int(wc.length) > q.frameSize || wc.length == 0 {
		q.stats.rxErrors.Add(1)
		return n // the device reported nonsense: drop it
	}
	f := &frames[n]
	f.Len = copy(f.Buf[:cap(f.Buf)], q.buf(uint32(wc.id))[:wc.length])
	f.ChecksumValid = wc.csumOK
	return n + 1
}

// recycle returns a reaped receive buffer to the free list.
func (q *queue) recycle(b uint32) {
	q.state[b-q.base] = bufFree
	q.rxFree = append(q.rxFree, b)
}

// refillLocked posts the free receive buffers, in batches; those the device
// refuses stay free for the next try.
func (q *queue) refillLocked() {
	for range len(q.state)/pollBatch + 1 {
		if len(q.rxFree) == 0 || q.broken != nil {
			return
		}
		k := min(len(q.rxFree), len(q.bufs))
		batch := q.bufs[:k]
		copy(batch, q.rxFree[len(q.rxFree)-k:])
		n, err := q.qp.postRecv(batch)
		n = max(0, min(n, k))
		for _, b := range batch[:n] {
			q.state[b-q.base] = bufPosted
		}
		q.posted += n
		// The posted ones are the first n of batch: keep the others.
		q.rxFree = append(q.rxFree[:len(q.rxFree)-k], batch[n:]...)
		if n < k {
			q.stats.refillShort.Add(1)
			if err != nil {
				q.stats.lastError.Store(errorBox{err})
			}
			return
		}
	}
}

// WriteBurst copies frames into send buffers, completing checksums on the
// way, and posts them in one post. Without a free buffer it accepts fewer
// frames, as a full ring does.
func (q *queue) WriteBurst(frames []link.TxFrame) (int, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return 0, link.ErrClosed
	}
	if q.broken == nil {
		q.reapSend()
	}
	if q.broken != nil {
		// The poller restarts the queue; until then the ring is full.
		q.Interrupt()
		q.stats.txFull.Add(uint64(len(frames)))
		return 0, nil
	}
	wrs := q.wrs[:0]
	var ferr error
	for i := range frames {
		if len(q.txFree) == 0 {
			break
		}
		b := q.txFree[len(q.txFree)-1]
		length, err := q.fill(q.buf(b), &frames[i])
		if err != nil {
			ferr = err
			break
		}
		q.txFree = q.txFree[:len(q.txFree)-1]
		wrs = append(wrs, sendWR{buf: b, length: uint32(length), signaled: (len(wrs)+1)%signalEvery == 0})
	}
	if len(wrs) == 0 {
		q.stats.txFull.Add(uint64(len(frames)))
		return 0, ferr
	}
	wrs[len(wrs)-1].signaled = true
	n, err := q.qp.postSend(wrs)
	n = max(0, min(n, len(wrs)))
	for _, wr := range wrs[:n] {
		q.state[wr.buf-q.base] = bufInflight
		q.inflight.push(wr.buf)
	}
	for i := len(wrs) - 1; i >= n; i-- {
		q.txFree = append(q.txFree, wrs[i].buf)
	}
	q.stats.txBursts.Add(1)
	q.stats.txFrames.Add(uint64(n))
	if n < len(frames) {
		q.stats.txFull.Add(uint64(len(frames) - n))
	}
	if n < len(wrs) {
		// A send queue refuses work requests when it is full; the frames
		// count as not accepted, like a full ring's.
		if err != nil {
			q.stats.lastError.Store(errorBox{err})
		}
		return n, nil
	}
	return n, ferr
}

// fill gathers frame f into buffer dst and completes its checksum.
func (q *queue) fill(dst []byte, f *link.TxFrame) (int, error) {
	length := f.Len()
	switch {
	case length < ethHdrLen || length > q.frameSize:
		return 0, fmt.Errorf("rdma: %s queue %d: frame of %d bytes; the link sends %d to %d",
			q.link.info.Name, q.index, length, ethHdrLen, q.frameSize)
	case f.Offload.GSO != link.GSONone:
		return 0, fmt.Errorf("rdma: %s queue %d: a frame asks for segmentation: %w", q.link.info.Name, q.index, link.ErrNotSupported)
	}
	off := 0
	for _, s := range f.Segs {
		off += copy(dst[off:], s)
	}
	if o := f.Offload; o.NeedsChecksum {
		if !frame.CompletePartial(dst[:length], int(o.ChecksumStart), int(o.ChecksumOffset), length) {
			return 0, fmt.Errorf("rdma: %s queue %d: checksum at %d+%d lies outside the %d-byte frame",
				q.link.info.Name, q.index, o.ChecksumStart, o.ChecksumOffset, length)
		}
	}
	return length, nil
}

// reapSend frees the send buffers the device has completed: a completion
// frees its own buffer and those posted before it.
func (q *queue) reapSend() {
	for range len(q.state)/pollBatch + 1 {
		got, err := q.qp.pollSend(q.wcs[:])
		if err != nil {
			q.fail(fmt.Errorf("polling send completions: %w", err))
			return
		}
		for _, wc := range q.wcs[:got] {
			q.completeSend(wc)
		}
		if got < len(q.wcs) {
			return
		}
	}
}

func (q *queue) completeSend(wc completion) {
	if !q.owns(wc.id, false) || q.state[wc.id-uint64(q.base)] != bufInflight {
		q.fail(fmt.Errorf("the device completed send buffer %d, which is not in flight on this queue", wc.id))
		return
	}
	for range q.inflight.len() {
		b := q.inflight.pop()
		q.state[b-q.base] = bufFree
		q.txFree = append(q.txFree, b)
		if uint64(b) == wc.id {
			break
		}
	}
	if wc.status != wcOK {
		q.stats.txErrors.Add(1)
		q.fail(completionError("send", wc))
	}
}

// fail marks the queue broken, unless it is closing (then flushes are
// expected) or broken already.
func (q *queue) fail(err error) {
	if q.closed || q.broken != nil {
		return
	}
	q.broken = err
	q.stats.lastError.Store(errorBox{err})
}

// restartLocked brings a broken queue back: stop it, collect what the
// device gives back, reset it (the device owns no buffer from then on),
// discard stale completions, take every buffer back and post the receive
// buffers again.
func (q *queue) restartLocked() error {
	cause := q.broken
	q.stats.restarts.Add(1)
	q.stopLocked()
	if err := q.qp.restart(); err != nil {
		err = fmt.Errorf("rdma: %s queue %d: restarting after %v: %w", q.link.info.Name, q.index, cause, err)
		q.stats.lastError.Store(errorBox{err})
		return err
	}
	q.discard()
	q.broken = nil
	q.refillLocked()
	return nil
}

// stopLocked moves the queue to the error state and collects the
// completions of the flushed work requests, within bounds; whatever the
// device did not give back is taken back after the reset that follows.
func (q *queue) stopLocked() {
	q.qp.stop()
	// Flushes are expected now: q.broken or q.closed is set, so they break
	// nothing.
	deadline := time.Now().Add(drainTime)
	for i := 0; i < drainPolls && (q.posted > 0 || q.inflight.len() > 0); i++ {
		if i%64 == 63 && time.Now().After(deadline) {
			break
		}
		got, err := q.qp.pollRecv(q.wcs[:])
		if err != nil {
			break
		}
		for _, wc := range q.wcs[:got] {
			if q.owns(wc.id, true) && q.state[wc.id-uint64(q.base)] == bufPosted {
				q.state[wc.id-uint64(q.base)] = bufFree
				q.rxFree = append(q.rxFree, uint32(wc.id))
				q.posted--
			}
		}
		got2, err := q.qp.pollSend(q.wcs[:])
		if err != nil {
			break
		}
		for _, wc := range q.wcs[:got2] {
			if q.owns(wc.id, false) && q.state[wc.id-uint64(q.base)] == bufInflight {
				q.completeSend(completion{id: wc.id})
			}
		}
	}
	q.stats.forced.Add(uint64(q.posted + q.inflight.len()))
	q.takeBack()
}

// discard drops completions left in the completion queues after a reset:
// they name buffers the link has taken back.
func (q *queue) discard() {
	for range drainPolls / pollBatch {
		r, err1 := q.qp.pollRecv(q.wcs[:])
		s, err2 := q.qp.pollSend(q.wcs[:])
		if r+s == 0 || err1 != nil || err2 != nil {
			return
		}
	}
}

// takeBack returns every buffer to the link: after a reset (or once the
// device is destroyed) the device owns none.
func (q *queue) takeBack() {
	q.hasPending = false
	q.rxFree, q.txFree = q.rxFree[:0], q.txFree[:0]
	for i := range q.state {
		q.state[i] = bufFree
		if i < q.rxDepth {
			q.rxFree = append(q.rxFree, q.base+uint32(i))
		} else {
			q.txFree = append(q.txFree, q.base+uint32(i))
		}
	}
	q.posted = 0
	q.inflight.reset()
}

// WaitRead parks the poller until a receive completion arrives, Interrupt
// is called or the link is closed. It returns at once when a completion is
// there already: it arms the completion queue's notification, then polls
// once, so a frame that arrived before the notification was armed is seen.
func (q *queue) WaitRead() error {
	q.waitMu.Lock()
	defer q.waitMu.Unlock()
	if q.link.closed.Load() {
		return link.ErrClosed
	}
	if q.interrupted.Swap(false) {
		return nil
	}
	ready, canWait, err := q.prepareWait()
	if ready || err != nil {
		return err
	}
	q.stats.sleeps.Add(1)
	if canWait {
		err = q.qp.waitRecv(q.interrupted.Load)
	} else {
		q.sleep()
	}
	q.interrupted.Store(false)
	if q.link.closed.Load() {
		return link.ErrClosed
	}
	if err != nil {
		return fmt.Errorf("rdma: %s queue %d: waiting for completions: %w", q.link.info.Name, q.index, err)
	}
	return nil
}

// prepareWait reports whether a frame (or work: a restart) is ready, and
// otherwise whether a completion can come to wake the wait.
func (q *queue) prepareWait() (ready, canWait bool, err error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return false, false, link.ErrClosed
	}
	if q.broken != nil || q.hasPending {
		return true, false, nil
	}
	q.refillLocked()
	if q.posted == 0 {
		return false, false, nil
	}
	if err := q.qp.armRecv(); err != nil {
		q.fail(fmt.Errorf("arming the receive completion queue: %w", err))
		return true, false, nil
	}
	got, err := q.qp.pollRecv(q.wcs[:1])
	if err != nil {
		q.fail(fmt.Errorf("polling receive completions: %w", err))
		return true, false, nil
	}
	if got == 1 {
		if q.reap(q.wcs[0]) {
			q.pending, q.hasPending = q.wcs[0], true
		}
		return true, false, nil
	}
	return false, true, nil
}

// sleep waits refillRetry, or less if interrupted or closed.
func (q *queue) sleep() {
	t := time.NewTimer(refillRetry)
	defer t.Stop()
	select {
	case <-t.C:
	case <-q.wake:
	case <-q.link.done:
	}
}

// Interrupt makes a WaitRead in progress, or the next one, return.
func (q *queue) Interrupt() {
	if q.interrupted.Swap(true) {
		return
	}
	select {
	case q.wake <- struct{}{}:
	default:
	}
	q.qp.wakeRecv()
}

// shutdownLocked stops the queue for good at Close: flush, collect, take
// every buffer back.
func (q *queue) shutdownLocked() {
	q.closed = true
	q.stopLocked()
}

// completionError describes a failed completion.
func completionError(dir string, wc completion) error {
	if wc.status == wcFlushed {
		return fmt.Errorf("%s work request flushed: the queue went to the error state", dir)
	}
	return fmt.Errorf("%s completion error: %s (status %d)", dir, wcStatusName(wc.code), wc.code)
}

// fifo is a ring of buffer indexes.
type fifo struct {
	buf        []uint32
	head, size int
}

func newFIFO(capacity int) fifo { return fifo{buf: make([]uint32, capacity)} }

func (f *fifo) len() int { return f.size }
func (f *fifo) reset()   { f.head, f.size = 0, 0 }

func (f *fifo) push(b uint32) {
	f.buf[(f.head+f.size)%len(f.buf)] = b
	f.size++
}

func (f *fifo) pop() uint32 {
	b := f.buf[f.head]
	f.head = (f.head + 1) % len(f.buf)
	f.size--
	return b
}
