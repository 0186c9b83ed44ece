package impair

import (
	"errors"
	"sync"
	"time"

	"github.com/polarnet/polarnet/link"
)

// stagingLen is how many frames a ReadBurst takes from the wrapped link at
// once while an ingress impairment is active.
const stagingLen = 32

// queue is one queue pair of the decorator.
type queue struct {
	link   *Link
	inner  link.Queue
	tx, rx direction

	// txMu serialises the wrapped queue's WriteBurst between the engine's
	// writer and the pump, and guards the tx scratch slices.
	txMu   sync.Mutex
	txDue  []*pending
	txOut  []link.TxFrame
	txSegs [][]byte
	kick   chan struct{}

	// The poller's: ReadBurst and WaitRead.
	staging []link.RxFrame
	rxDue   []*pending
	rxSeg   [1][]byte
	rxTimer *time.Timer
}

// WriteBurst implements link.Queue. It accepts every frame: the ones the
// impairment drops are counted in Stats, as are those the wrapped link
// refuses later.
func (q *queue) WriteBurst(frames []link.TxFrame) (int, error) {
	if q.link.closed.Load() {
		return 0, link.ErrClosed
	}
	imp := &q.link.cfg.Load().Egress
	q.txMu.Lock()
	defer q.txMu.Unlock()
	d := &q.tx
	d.mu.Lock()
	if *imp == (Impairment{}) && d.idle() {
		d.mu.Unlock()
		n, err := q.inner.WriteBurst(frames)
		d.mu.Lock()
		d.stats.Frames += uint64(len(frames))
		d.stats.Delivered += uint64(n)
		d.stats.Refused += uint64(len(frames) - n)
		d.mu.Unlock()
		return n, err
	}
	now := time.Now()
	for i := range frames {
		f := &frames[i]
		d.admit(imp, now, f.Segs, f.Len(), false, f.Offload, true)
	}
	d.mu.Unlock()
	if err := q.flushTx(); errors.Is(err, link.ErrClosed) {
		return 0, err
	}
	q.kickPump()
	return len(frames), nil
}

// flushTx sends the frames that are due. Callers hold txMu.
func (q *queue) flushTx() error {
	if q.txDue == nil {
		q.txDue = make([]*pending, 0, maxBurst)
		q.txOut = make([]link.TxFrame, maxBurst)
		q.txSegs = make([][]byte, maxBurst)
	}
	d := &q.tx
	for {
		d.mu.Lock()
		due := d.popDue(time.Now(), q.txDue[:0])
		d.mu.Unlock()
		if len(due) == 0 {
			return nil
		}
		out := q.txOut[:len(due)]
		for i, p := range due {
			q.txSegs[i] = p.data()
			out[i] = link.TxFrame{Segs: q.txSegs[i : i+1 : i+1], Offload: p.offload}
		}
		n, err := q.inner.WriteBurst(out)
		d.mu.Lock()
		d.stats.Delivered += uint64(n)
		if err != nil {
			d.stats.Refused += uint64(len(due) - n)
		} else if n < len(due) {
			// No room: the rest waits at the head of the queue.
			d.unpop(time.Now(), due[n:])
		}
		d.mu.Unlock()
		for i, p := range due {
			if i < n || err != nil {
				putBuf(p.buf)
			}
			due[i], q.txSegs[i], out[i] = nil, nil, link.TxFrame{}
		}
		if err != nil || n < maxBurst {
			return err
		}
	}
}

func (q *queue) kickPump() {
	select {
	case q.kick <- struct{}{}:
	default:
	}
}

// pump sends delayed frames when they are due, until the link closes.
func (q *queue) pump() {
	defer q.link.wg.Done()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		q.txMu.Lock()
		q.flushTx()
		q.tx.mu.Lock()
		next, ok := q.tx.next()
		q.tx.mu.Unlock()
		q.txMu.Unlock()
		if ok {
			timer.Reset(time.Until(next))
		}
		select {
		case <-q.link.done:
			timer.Stop()
			return
		case <-q.kick:
		case <-timer.C:
		}
		timer.Stop()
	}
}

// ReadBurst implements link.Queue. With an ingress impairment it takes
// frames from the wrapped link into its own buffers and returns those that
// are due, copied into the engine's.
func (q *queue) ReadBurst(frames []link.RxFrame) (int, error) {
	if q.link.closed.Load() {
		return 0, link.ErrClosed
	}
	imp := &q.link.cfg.Load().Ingress
	d := &q.rx
	d.mu.Lock()
	defer d.mu.Unlock()
	if *imp == (Impairment{}) && d.idle() {
		n, err := q.inner.ReadBurst(frames)
		d.stats.Frames += uint64(n)
		d.stats.Delivered += uint64(n)
		return n, err
	}
	if q.staging == nil {
		size := q.link.inner.Info().RxFrameSize
		q.staging = make([]link.RxFrame, stagingLen)
		for i := range q.staging {
			q.staging[i].Buf = make([]byte, size)
		}
		q.rxDue = make([]*pending, 0, maxBurst)
	}
	n, err := q.inner.ReadBurst(q.staging)
	now := time.Now()
	for i := range q.staging[:n] {
		f := &q.staging[i]
		q.rxSeg[0] = f.Buf[:f.Len]
		d.admit(imp, now, q.rxSeg[:], f.Len, f.ChecksumValid, link.TxOffload{}, false)
	}
	q.rxSeg[0] = nil
	due := d.popDue(now, q.rxDue[:0:min(len(frames), maxBurst)])
	k := 0
	for i, p := range due {
		f := &frames[k]
		if p.n <= cap(f.Buf) {
			f.Len = copy(f.Buf[:cap(f.Buf)], p.data())
			f.ChecksumValid = p.csumValid
			k++
		} else {
			d.stats.Refused++
		}
		putBuf(p.buf)
		due[i] = nil
	}
	d.stats.Delivered += uint64(k)
	return k, err
}

// WaitRead implements link.Queue: it returns at once while a received
// frame is due, and otherwise waits on the wrapped queue with a timer that
// interrupts it when the first waiting frame falls due.
func (q *queue) WaitRead() error {
	if q.link.closed.Load() {
		return link.ErrClosed
	}
	d := &q.rx
	d.mu.Lock()
	now := time.Now()
	next, ok := d.next()
	d.mu.Unlock()
	if ok && !next.After(now) {
		return nil
	}
	if ok {
		q.rxTimer.Reset(next.Sub(now))
		defer q.rxTimer.Stop()
	}
	return q.inner.WaitRead()
}

// Interrupt implements link.Queue.
func (q *queue) Interrupt() { q.inner.Interrupt() }
