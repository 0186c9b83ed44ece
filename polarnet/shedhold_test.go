package polarnet

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/polarnet/polarnet/link"
)

// shedSwitch is a link.SYNShedder that records what it is told and fails
// with err.
type shedSwitch struct {
	calls []bool
	err   error
}

func (s *shedSwitch) ShedSYNs(on bool) error {
	s.calls = append(s.calls, on)
	return s.err
}

// TestShedHold follows link shedding on the shard's clock: a flood turns it
// on for shedHoldMin; a flood found again within the last hold after it
// ended turns it on for twice that, up to shedHoldMax; one found later
// starts over. A link that cannot shed is not asked again.
func TestShedHold(t *testing.T) {
	sw := &shedSwitch{}
	sh := shedding{link: sw, clock: newShardClock(func() {})}
	now := sh.clock.read()
	at := func(d time.Duration) int64 {
		sh.clock.freeze(now + int64(d))
		sh.clock.runDue(now + int64(d))
		return now + int64(d)
	}

	var elapsed time.Duration
	var holds []time.Duration
	for range 8 { // the flood still there each time shedding ends
		sh.flood(at(elapsed))
		sh.flood(at(elapsed)) // already on: nothing
		holds = append(holds, sh.hold)
		elapsed += sh.hold + time.Millisecond
		at(elapsed)
		assert.False(t, sh.on, "after its hold")
	}
	want := []time.Duration{shedHoldMin, 2 * shedHoldMin, 4 * shedHoldMin, 8 * shedHoldMin, 16 * shedHoldMin, 32 * shedHoldMin, shedHoldMax, shedHoldMax}
	assert.Equal(t, want, holds)
	assert.Equal(t, []bool{true, false, true, false, true, false, true, false, true, false, true, false, true, false, true, false}, sw.calls)

	elapsed += shedHoldMax + time.Millisecond // a new flood, long after
	sh.flood(at(elapsed))
	assert.Equal(t, shedHoldMin, sh.hold)
	assert.True(t, sh.on)

	refused := &shedSwitch{err: link.ErrNotSupported}
	sh = shedding{link: refused, clock: newShardClock(func() {})}
	sh.flood(now)
	sh.flood(now)
	assert.Equal(t, []bool{true}, refused.calls)
	assert.False(t, sh.on)
}
