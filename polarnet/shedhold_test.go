package polarnet

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/polarnet/polarnet/link"
)

// shedSwitch is a link's shedding switch that records what it is told
// and fails with err, and its count of frames dropped.
type shedSwitch struct {
	calls   []bool
	err     error
	dropped uint64
}

func (s *shedSwitch) turn(on bool) error {
	s.calls = append(s.calls, on)
	return s.err
}

func (s *shedSwitch) count() uint64 { return s.dropped }

// TestShedHold follows link shedding on the shard's clock: a flood turns it
// on; at the end of each hold it stays on while the link dropped a flood's
// worth in the hold, and goes off once it dropped less. A link that cannot
// shed is not asked again.
func TestShedHold(t *testing.T) {
	sw := &shedSwitch{}
	sh := linkShedding{turn: sw.turn, shed: sw.count, clock: newShardClock(func() {})}
	now := sh.clock.read()
	at := func(d time.Duration) {
		sh.clock.freeze(now + int64(d))
		sh.clock.run(now + int64(d))
	}

	at(0)
	sh.start()
	sh.start() // already on: nothing
	var elapsed time.Duration
	for range 3 {
		sw.dropped += floodPerHold
		elapsed += shedHold + time.Millisecond
		at(elapsed)
		assert.True(t, sh.on, "the flood goes on at %v", elapsed)
	}
	sw.dropped += floodPerHold - 1
	elapsed += shedHold + time.Millisecond
	at(elapsed)
	assert.False(t, sh.on, "the flood has ended")
	assert.Equal(t, []bool{true, false}, sw.calls)

	sh.start() // a new flood
	assert.True(t, sh.on)
	elapsed += shedHold + time.Millisecond
	at(elapsed)
	assert.False(t, sh.on, "nothing dropped in its hold")
	assert.Equal(t, []bool{true, false, true, false}, sw.calls)

	refused := &shedSwitch{err: link.ErrNotSupported}
	sh = linkShedding{turn: refused.turn, shed: refused.count, clock: newShardClock(func() {})}
	sh.start()
	sh.start()
	assert.Equal(t, []bool{true}, refused.calls)
	assert.False(t, sh.on)
}
