package polarnet

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/polarnet/polarnet/link"
)

// shedSwitch is a link's shedding switch that records what it is told
// and fails with err.
type shedSwitch struct {
	calls []bool
	err   error
}

func (s *shedSwitch) turn(on bool) error {
	s.calls = append(s.calls, on)
	return s.err
}

// TestShedHold follows link shedding on the shard's clock: a flood turns it
// on for shedHoldMin; a flood found again within the last hold after it
// ended turns it on for twice that, up to shedHoldMax; one found later
// starts over. A link that cannot shed is not asked again.
func TestShedHold(t *testing.T) {
	sw := &shedSwitch{}
	sh := linkShedding{turn: sw.turn, clock: newShardClock(func() {})}
	now := sh.clock.read()
	at := func(d time.Duration) int64 {
		sh.clock.freeze(now + int64(d))
		sh.clock.run(now + int64(d))
		return now + int64(d)
	}

	var elapsed time.Duration
	var holds []time.Duration
	for range 8 { // the flood still there each time shedding ends
		sh.start(at(elapsed))
		sh.start(at(elapsed)) // already on: nothing
		holds = append(holds, sh.hold)
		elapsed += sh.hold + time.Millisecond
		at(elapsed)
		assert.False(t, sh.on, "after its hold")
	}
	want := []time.Duration{shedHoldMin, 2 * shedHoldMin, 4 * shedHoldMin, 8 * shedHoldMin, 16 * shedHoldMin, 32 * shedHoldMin, shedHoldMax, shedHoldMax}
	assert.Equal(t, want, holds)
	assert.Equal(t, []bool{true, false, true, false, true, false, true, false, true, false, true, false, true, false, true, false}, sw.calls)

	elapsed += shedHoldMax + time.Millisecond // a new flood, long after
	sh.start(at(elapsed))
	assert.Equal(t, shedHoldMin, sh.hold)
	assert.True(t, sh.on)

	refused := &shedSwitch{err: link.ErrNotSupported}
	sh = linkShedding{turn: refused.turn, clock: newShardClock(func() {})}
	sh.start(now)
	sh.start(now)
	assert.Equal(t, []bool{true}, refused.calls)
	assert.False(t, sh.on)
}
