package polarnet

import (
	"container/heap"
	"reflect"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"gvisor.dev/gvisor/pkg/tcpip"
)

// epoch anchors clock: time.Since reads the monotonic clock only.
var epoch = time.Now()

// clock returns monotonic nanoseconds since the process loaded polarnet.
func clock() int64 { return int64(time.Since(epoch)) }

// shardClock is the tcpip.Clock of one shard: its timers (retransmission,
// keep-alive, TIME_WAIT, delayed work of every kind) fire on the shard's
// poller, between bursts, so a connection's timers run on the core that
// owns it. A sleeping poller is woken for the earliest timer. Once the
// poller has stopped, timers fire on their own goroutines like
// tcpip.NewStdClock's.
type shardClock struct {
	tcpip.Clock // Now

	// Times are clock()'s: nanoseconds on the monotonic clock. frozen is
	// the present while the poller is awake: its latest reading, taken
	// once per iteration (0 while it sleeps). gVisor reads the clock
	// several times per segment, on the poller and on the goroutines that
	// write or run TCP's processors, and live readings are a measurable
	// share of a round trip (docs/benchmarks.md). The reading lags by at
	// most the time since the poller's last iteration: RTT samples grow by it and
	// timers fire that much early, which is fine at TCP's timescales.
	// Readings stay monotonic: each iteration's follows the last one's,
	// and a goroutine reads the live clock only while the poller sleeps.
	// Each reading of the held one adds a nanosecond, so no two readings
	// are equal: gVisor's RACK (rack.go, detectLoss) takes a segment sent
	// at the same time as the last one delivered but with a higher
	// sequence number for one sent before it, and marked segments still in
	// flight lost (spurious recoveries: docs/benchmarks.md). A nanosecond
	// per reading never overtakes the live clock: no reading takes less.
	frozen atomic.Int64

	// earliest is the deadline of the first timer (MaxInt64 when there is
	// none), so the poller can skip the lock when nothing is due.
	earliest atomic.Int64
	wake     func() // interrupts the poller if it sleeps
	// protocolFloor is the shortest delay a gVisor timer gets (not ours):
	// see TCPConfig.MinRecoveryTimer.
	protocolFloor time.Duration
	// made counts the timers AfterFunc made, by kind (tests read it).
	made [probeTimer + 1]atomic.Uint64
	// probing is the tail-loss probe timer whose callback the poller runs
	// (nil: none): a retransmission sent then is gVisor's probe
	// (probehold.go).
	probing atomic.Pointer[shardTimer]
	// probeDue returns when a probe of flow f may go at the earliest, the
	// TX queue's hold (deferProbe); set by the shard.
	probeDue func(f *flowTail, now int64) int64
	// lossyAt is when a flow of the shard last saw SACK blocks above its
	// ACK number (0: never): until lossyMemory after it, probe timers take
	// lossyFloor, as such a flow's probes do on the way out (recoveryWait).
	lossyAt atomic.Int64
	// settle, when set, runs before the first of gVisor's due timers that
	// run (shard.settle).
	settle func()

	mu       sync.Mutex
	timers   timerHeap
	alarm    *time.Timer // wakes the sleeping poller for timers[0]
	alarmAt  int64
	detached bool // the poller is gone: timers run on their own
}

var _ tcpip.Clock = (*shardClock)(nil)

func newShardClock(wake func()) *shardClock {
	c := &shardClock{Clock: tcpip.NewStdClock(), wake: wake}
	c.earliest.Store(noTimer)
	return c
}

// now is the present: the poller's latest reading while it is awake, plus a
// nanosecond per reading since.
func (c *shardClock) now() int64 {
	for {
		ns := c.frozen.Load()
		if ns == 0 {
			return c.read()
		}
		if c.frozen.CompareAndSwap(ns, ns+1) {
			return ns + 1
		}
	}
}

// read reads the clock.
func (c *shardClock) read() int64 { return clock() }

// NowMonotonic implements tcpip.Clock.
func (c *shardClock) NowMonotonic() tcpip.MonotonicTime { return monotonicFromNanos(c.now()) }

// monotonicFromNanos is tcpip.MonotonicTime{}.Add(ns) without its detour
// through time.Time, which cost as much as reading the clock. MonotonicTime
// is one int64 of nanoseconds (TestMonotonicFromNanos holds us to it).
func monotonicFromNanos(ns int64) tcpip.MonotonicTime {
	return *(*tcpip.MonotonicTime)(unsafe.Pointer(&ns))
}

// freeze makes now return the poller's reading (from read) until the next
// freeze or a thaw; the poller freezes every iteration and thaws before it
// sleeps or stops.
func (c *shardClock) freeze(now int64) { c.frozen.Store(now) }

func (c *shardClock) thaw() { c.frozen.Store(0) }

const noTimer = int64(^uint64(0) >> 1)

// AfterFunc implements tcpip.Clock: gVisor's timers, whose non-zero delays
// are raised to protocolFloor, but RACK's reordering timer's to at most
// reorderingTimerFloor and, while a flow of the shard saw loss lately, the
// tail-loss probe's to at most lossyFloor, the TX queue holding back a
// probe that comes too soon for its flow (timersite.go, probehold.go).
func (c *shardClock) AfterFunc(d time.Duration, f func()) tcpip.Timer {
	t := &shardTimer{clock: c, f: f, index: -1, floor: c.protocolFloor, kind: creatingTimer(1), protocol: true}
	switch t.kind {
	case reorderingTimer:
		t.floor = min(t.floor, reorderingTimerFloor)
	case probeTimer:
		t.floor = min(t.floor, lossyFloor)
	}
	c.made[t.kind].Add(1)
	t.Reset(d)
	return t
}

// afterFuncExact is AfterFunc for polarnet's own timers: no floor.
func (c *shardClock) afterFuncExact(d time.Duration, f func()) tcpip.Timer {
	t := &shardTimer{clock: c, f: f, index: -1}
	t.Reset(d)
	return t
}

// run calls the timers due at now; the poller calls it every iteration.
func (c *shardClock) run(now int64) {
	if c.earliest.Load() > now {
		return
	}
	var due []*shardTimer
	settle := false
	c.mu.Lock()
	for len(c.timers) > 0 && c.timers[0].when <= now {
		t := heap.Pop(&c.timers).(*shardTimer)
		settle = settle || t.protocol
		due = append(due, t)
	}
	c.rearmLocked()
	c.mu.Unlock()
	if settle && c.settle != nil {
		c.settle()
	}
	for _, t := range due {
		switch {
		case t.kind != probeTimer:
			t.f()
		case c.deferProbe(t, now):
		default:
			c.probing.Store(t)
			t.f()
			c.probing.Store(nil)
		}
	}
}

// deferProbe puts back probe timer t, due at now, until its flow's probe
// may go, when that is later. gVisor re-arms a pending probe timer without
// telling the clock when the new deadline is later (probehold.go), so on
// a flow that keeps sending the clock's wake-up finds a later send's
// deadline passed, and gVisor sends a probe only for the TX queue to hold
// and drop with a D-SACK block for it in the ACK that covers it, which
// gVisor's RACK takes for reordering and widens its reordering window for
// (rack.go, updateRACKReorderWindow). Linux re-arms its probe on every
// send; deferred, the timer waits as long. Its flow is known once it has
// sent a probe (noteProbeFlow); a timer gVisor reset meanwhile is already
// back in the heap.
func (c *shardClock) deferProbe(t *shardTimer, now int64) bool {
	f := t.flow.Load()
	if f == nil || c.probeDue == nil {
		return false
	}
	until := c.probeDue(f, now)
	if until <= now {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if t.index < 0 {
		t.when = until
		heap.Push(&c.timers, t)
		c.rearmLocked()
	}
	return true
}

// runName is shardClock.run's name, as the runtime gives it.
var runName = runtime.FuncForPC(reflect.ValueOf((*shardClock).run).Pointer()).Name()

// noteProbeFlow tells the probe timer whose callback runs that it probes
// flow f. Another goroutine may send a retransmission meanwhile, so only
// a call from within run, on the poller, counts.
func (c *shardClock) noteProbeFlow(f *flowTail) {
	t := c.probing.Load()
	if t == nil || t.flow.Load() == f {
		return
	}
	var pcs [64]uintptr
	if callerNamed(pcs[:runtime.Callers(2, pcs[:])], func(name string) bool { return name == runName }) {
		t.flow.Store(f)
	}
}

// detach hands the timers to Go's runtime once the poller has stopped, so
// teardown that waits for a timer still completes.
func (c *shardClock) detach() {
	c.thaw()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.detached = true
	now := c.read()
	for _, t := range c.timers {
		t.index = -1
		t.startGoTimer(time.Duration(t.when - now))
	}
	c.timers = nil
	c.earliest.Store(noTimer)
	if c.alarm != nil {
		c.alarm.Stop()
	}
}

// rearmLocked publishes the earliest deadline and moves the alarm to it.
func (c *shardClock) rearmLocked() {
	if len(c.timers) == 0 {
		c.earliest.Store(noTimer)
		return
	}
	when := c.timers[0].when
	c.earliest.Store(when)
	if c.alarm != nil && c.alarmAt == when {
		return
	}
	c.alarmAt = when
	in := time.Duration(when - c.read())
	if c.alarm == nil {
		c.alarm = time.AfterFunc(in, c.wake)
	} else {
		c.alarm.Reset(in)
	}
}

// shardTimer is a timer of a shardClock.
type shardTimer struct {
	clock *shardClock
	f     func()
	when  int64         // on the clock's scale
	index int           // position in the heap, -1 when not scheduled there
	goT   *time.Timer   // set once the clock is detached
	floor time.Duration // the shortest non-zero delay
	kind  timerKind
	// protocol: gVisor's (AfterFunc), not polarnet's own (afterFuncExact).
	protocol bool
	// flow is a probe timer's flow, once it has sent a probe.
	flow atomic.Pointer[flowTail]
}

// Stop implements tcpip.Timer.
func (t *shardTimer) Stop() bool {
	c := t.clock
	c.mu.Lock()
	defer c.mu.Unlock()
	if t.goT != nil {
		return t.goT.Stop()
	}
	if t.index < 0 {
		return false
	}
	heap.Remove(&c.timers, t.index)
	c.rearmLocked()
	return true
}

// Reset implements tcpip.Timer.
func (t *shardTimer) Reset(d time.Duration) {
	c := t.clock
	now := c.now()
	if d > 0 {
		d = max(d, t.floorAt(now))
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.detached {
		t.startGoTimer(d)
		return
	}
	t.when = now + int64(d)
	if t.index >= 0 {
		heap.Fix(&c.timers, t.index)
	} else {
		heap.Push(&c.timers, t)
	}
	c.rearmLocked()
}

// floorAt is the shortest non-zero delay the timer takes at now. A probe
// timer's is lossyFloor only while a flow of the shard saw loss lately:
// elsewhere each flow's probes are held to protocolFloor on the way out
// anyway, and a timer that fires within it only sends a probe to hold and
// drop with a D-SACK block (deferProbe).
func (t *shardTimer) floorAt(now int64) time.Duration {
	c := t.clock
	if at := c.lossyAt.Load(); t.kind == probeTimer && (at == 0 || now-at >= lossyMemory) {
		return c.protocolFloor
	}
	return t.floor
}

func (t *shardTimer) startGoTimer(d time.Duration) {
	if t.goT == nil {
		t.goT = time.AfterFunc(d, t.f)
		return
	}
	t.goT.Reset(d)
}

// timerHeap orders timers by deadline (container/heap).
type timerHeap []*shardTimer

func (h timerHeap) Len() int           { return len(h) }
func (h timerHeap) Less(i, j int) bool { return h[i].when < h[j].when }
func (h timerHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *timerHeap) Push(x any) {
	t := x.(*shardTimer)
	t.index = len(*h)
	*h = append(*h, t)
}
func (h *timerHeap) Pop() any {
	old := *h
	t := old[len(old)-1]
	old[len(old)-1] = nil
	t.index = -1
	*h = old[:len(old)-1]
	return t
}
