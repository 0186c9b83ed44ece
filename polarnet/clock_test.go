package polarnet

import (
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gvisor.dev/gvisor/pkg/tcpip"
)

func TestShardClockRunsTimersInOrderOnTheLoop(t *testing.T) {
	var woken atomic.Int32
	c := newShardClock(func() { woken.Add(1) })
	var order []int
	c.AfterFunc(20*time.Millisecond, func() { order = append(order, 2) })
	c.AfterFunc(10*time.Millisecond, func() { order = append(order, 1) })
	stopped := c.AfterFunc(15*time.Millisecond, func() { order = append(order, 99) })
	assert.True(t, stopped.Stop())
	assert.False(t, stopped.Stop(), "a stopped timer stops once")

	c.run(c.read())
	assert.Empty(t, order, "nothing is due yet")
	require.Eventually(t, func() bool { return woken.Load() > 0 }, 5*time.Second, time.Millisecond, "the alarm wakes a sleeping poller")
	deadline := time.Now().Add(5 * time.Second)
	for len(order) < 2 && time.Now().Before(deadline) {
		c.run(c.read())
		time.Sleep(time.Millisecond)
	}
	assert.Equal(t, []int{1, 2}, order)

	again := c.AfterFunc(time.Hour, func() { order = append(order, 3) })
	again.Reset(0)
	c.run(c.read())
	assert.Equal(t, []int{1, 2, 3}, order, "Reset moves a pending timer")
}

func TestShardClockDetachedFiresOnItsOwn(t *testing.T) {
	c := newShardClock(func() {})
	fired := make(chan struct{}, 2)
	c.AfterFunc(5*time.Millisecond, func() { fired <- struct{}{} })
	c.detach()
	c.AfterFunc(time.Millisecond, func() { fired <- struct{}{} })
	for range 2 {
		select {
		case <-fired:
		case <-time.After(5 * time.Second):
			t.Fatal("a timer of a detached clock did not fire")
		}
	}
}

func TestMonotonicFromNanos(t *testing.T) {
	require.Equal(t, unsafe.Sizeof(int64(0)), unsafe.Sizeof(tcpip.MonotonicTime{}))
	for _, ns := range []int64{0, 1, 1e9 + 7, -5, 1 << 62} {
		assert.Equal(t, tcpip.MonotonicTime{}.Add(time.Duration(ns)), monotonicFromNanos(ns), "%d ns", ns)
	}
}

// TestShardClockHoldsThePollersReading: while the poller is awake the clock
// reads what the poller last read; once it sleeps, the live clock.
func TestShardClockHoldsThePollersReading(t *testing.T) {
	c := newShardClock(func() {})
	before := c.NowMonotonic()
	c.freeze(c.read())
	frozen := c.NowMonotonic()
	time.Sleep(2 * time.Millisecond)
	assert.Equal(t, frozen.Add(1), c.NowMonotonic(), "one reading until the next iteration, a nanosecond apart")
	assert.False(t, frozen.Before(before), "never behind an earlier reading")
	c.freeze(c.read())
	next := c.NowMonotonic()
	assert.GreaterOrEqual(t, next.Sub(frozen), 2*time.Millisecond, "the next iteration's reading")
	c.thaw()
	assert.False(t, c.NowMonotonic().Before(next), "live once the poller sleeps")
}

// The clock marks the time a probe timer's callback runs, and no other's.
func TestShardClockMarksProbing(t *testing.T) {
	c := newShardClock(func() {})
	var during []bool
	record := func() { during = append(during, c.probing.Load() != nil) }
	c.AfterFunc(0, record)
	probe := c.AfterFunc(time.Hour, record).(*shardTimer)
	probe.kind = probeTimer
	probe.Reset(0)
	c.run(c.read())
	assert.Equal(t, []bool{false, true}, during)
	assert.Nil(t, c.probing.Load(), "after the callback")
}

// A probe timer takes lossyFloor only while a flow of the shard saw loss
// lately, MinRecoveryTimer's floor otherwise; other timers keep theirs.
func TestShardClockProbeFloorFollowsLoss(t *testing.T) {
	c := newShardClock(func() {})
	c.protocolFloor = 50 * time.Millisecond
	now := int64(time.Hour)
	c.freeze(now)
	probe := c.AfterFunc(time.Hour, func() {}).(*shardTimer)
	probe.kind, probe.floor = probeTimer, lossyFloor
	other := c.AfterFunc(time.Hour, func() {}).(*shardTimer)
	delay := func(t *shardTimer) time.Duration {
		t.Reset(time.Microsecond)
		return time.Duration(t.when - c.now())
	}
	assert.InDelta(t, 50*time.Millisecond, delay(probe), float64(time.Microsecond), "no loss seen")
	c.lossyAt.Store(now - lossyMemory + int64(time.Millisecond))
	assert.InDelta(t, lossyFloor, delay(probe), float64(time.Microsecond), "loss seen lately")
	assert.InDelta(t, 50*time.Millisecond, delay(other), float64(time.Microsecond), "not a probe timer")
	c.freeze(now + int64(time.Millisecond))
	assert.InDelta(t, 50*time.Millisecond, delay(probe), float64(time.Microsecond), "a second on")
}

// A probe timer learns its flow from a probe its callback sends, not from
// one sent elsewhere meanwhile; once it knows it, the clock puts it back
// while the flow's probe may not go yet, and runs it once it may.
func TestShardClockDefersAProbeForItsFlow(t *testing.T) {
	c := newShardClock(func() {})
	var flow, other flowTail
	may := int64(0) // when flow's probe may go
	c.probeDue = func(f *flowTail, now int64) int64 {
		require.Same(t, &flow, f)
		return may
	}
	runs := 0
	probe := c.AfterFunc(time.Hour, func() {
		runs++
		c.noteProbeFlow(&flow)
	}).(*shardTimer)
	probe.kind = probeTimer

	c.probing.Store(probe)
	c.noteProbeFlow(&other) // as another goroutine's retransmission would
	c.probing.Store(nil)
	assert.Nil(t, probe.flow.Load(), "only from its own callback")

	probe.Reset(0)
	c.run(c.read())
	require.Equal(t, 1, runs, "a timer of no known flow runs")
	assert.Same(t, &flow, probe.flow.Load())

	probe.Reset(0)
	may = c.read() + int64(time.Second)
	c.run(c.read())
	assert.Equal(t, 1, runs, "put back")
	assert.Equal(t, may, probe.when)
	c.run(may - 1)
	assert.Equal(t, 1, runs)
	c.run(may)
	assert.Equal(t, 2, runs, "run once the probe may go")
}

func TestShardClockSettlesBeforeGVisorTimers(t *testing.T) {
	c := newShardClock(func() {})
	var order []string
	c.settle = func() { order = append(order, "settle") }
	c.afterFuncExact(0, func() { order = append(order, "own") })
	c.run(c.read())
	assert.Equal(t, []string{"own"}, order, "polarnet's own timers need no settling")

	order = nil
	c.afterFuncExact(0, func() { order = append(order, "own") })
	c.AfterFunc(0, func() { order = append(order, "gvisor") })
	c.AfterFunc(0, func() { order = append(order, "gvisor") })
	c.run(c.read())
	assert.Len(t, order, 4)
	assert.Equal(t, "settle", order[0], "once, before any timer runs")
	assert.ElementsMatch(t, []string{"own", "gvisor", "gvisor"}, order[1:])
}
