package polarnet

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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

	c.runDue()
	assert.Empty(t, order, "nothing is due yet")
	require.Eventually(t, func() bool { return woken.Load() > 0 }, 5*time.Second, time.Millisecond, "the alarm wakes a sleeping poller")
	deadline := time.Now().Add(5 * time.Second)
	for len(order) < 2 && time.Now().Before(deadline) {
		c.runDue()
		time.Sleep(time.Millisecond)
	}
	assert.Equal(t, []int{1, 2}, order)

	again := c.AfterFunc(time.Hour, func() { order = append(order, 3) })
	again.Reset(0)
	c.runDue()
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
