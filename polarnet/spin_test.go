package polarnet

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestNextSpin(t *testing.T) {
	const base = 50 * time.Microsecond
	budget := base
	for _, want := range []time.Duration{100, 200, 400, 400} {
		budget = nextSpin(budget, base, 30*time.Microsecond)
		assert.Equal(t, want*time.Microsecond, budget, "short sleeps double the budget up to 8x")
	}
	assert.Equal(t, 400*time.Microsecond, nextSpin(budget, base, 399*time.Microsecond))
	assert.Equal(t, base, nextSpin(budget, base, 400*time.Microsecond), "a long sleep resets it")
	assert.Equal(t, base, nextSpin(base, base, time.Second))
}

func TestSpinSlotsBoundSpinners(t *testing.T) {
	var slots spinSlots
	var first, second, third bool
	slots.claim(2, &first)
	slots.claim(2, &second)
	slots.claim(2, &third)
	assert.True(t, first)
	assert.True(t, second)
	assert.False(t, third, "a third poller may not spin under a limit of two")

	slots.leave(&third)
	assert.Equal(t, int32(2), slots.used.Load(), "leaving without a slot gives nothing back")
	slots.leave(&first)
	assert.False(t, first)
	slots.claim(2, &third)
	assert.True(t, third, "a freed slot can be taken")
	slots.leave(&second)
	slots.leave(&third)
	assert.Zero(t, slots.used.Load())
}

func TestSpinSlotsNeverExceedLimitConcurrently(t *testing.T) {
	const limit, pollers, rounds = 3, 8, 2000
	var slots spinSlots
	var inside, most atomic.Int32
	var wg sync.WaitGroup
	for range pollers {
		wg.Go(func() {
			for range rounds {
				var held bool
				slots.claim(limit, &held)
				if !held {
					continue
				}
				n := inside.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				inside.Add(-1)
				slots.leave(&held)
			}
		})
	}
	wg.Wait()
	require.Zero(t, slots.used.Load())
	assert.LessOrEqual(t, most.Load(), int32(limit))
	assert.Positive(t, most.Load())
}
