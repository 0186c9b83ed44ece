package polarnet

import (
	"sync"
	"sync/atomic"
	"time"
)

// deadline is one direction's deadline of a conn: a channel that is closed
// when the deadline passes, so blocked operations can select on it.
type deadline struct {
	mu    sync.Mutex
	timer *time.Timer
	// sets counts the calls of set: a timer that fires expires the deadline
	// only if it is the last set's, since Stop cannot stop one that has
	// fired and waits for mu.
	sets uint64
	// expired is written under mu and read without it: every Read and
	// Write asks for it, and a lock there is one more cache line that a
	// conn's goroutine pulls to whichever vCPU it runs on.
	expired atomic.Pointer[chan struct{}]
	// wake, if set, is called after expired is closed: a conn's blocked
	// operation waits on one channel, not on a select over three.
	wake func()
}

func newDeadline(wake func()) *deadline {
	d := &deadline{wake: wake}
	d.renew()
	return d
}

// renew gives the deadline a fresh channel; callers hold mu (or own d).
func (d *deadline) renew() {
	ch := make(chan struct{})
	d.expired.Store(&ch)
}

// set moves the deadline; the zero time removes it. An operation blocked on
// the old channel wakes only if the new deadline has already passed.
func (d *deadline) set(t time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.setLocked(t)
}

func (d *deadline) setLocked(t time.Time) {
	d.sets++
	if d.timer != nil {
		d.timer.Stop()
		d.timer = nil
	}
	if isClosed(d.done()) {
		d.renew()
	}
	if t.IsZero() {
		return
	}
	wait := time.Until(t)
	if wait <= 0 {
		d.expireLocked()
		return
	}
	sets := d.sets
	d.timer = time.AfterFunc(wait, func() {
		d.mu.Lock()
		defer d.mu.Unlock()
		if d.sets == sets && !isClosed(d.done()) {
			d.expireLocked()
		}
	})
}

func (d *deadline) expireLocked() {
	close(*d.expired.Load())
	if d.wake != nil {
		d.wake()
	}
}

// done returns the channel that is closed when the current deadline passes.
func (d *deadline) done() <-chan struct{} { return *d.expired.Load() }

// stop releases the timer.
func (d *deadline) stop() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.timer != nil {
		d.timer.Stop()
		d.timer = nil
	}
}

// signal wakes the one operation that waits on ready, or the next one to:
// ready holds one token.
func signal(ready chan struct{}) {
	select {
	case ready <- struct{}{}:
	default:
	}
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
