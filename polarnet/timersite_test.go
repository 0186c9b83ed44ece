package polarnet_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/polarnet/polarnet/internal/xfer"
	"github.com/polarnet/polarnet/link/impair"
	"github.com/polarnet/polarnet/link/pipe"
	"github.com/polarnet/polarnet/polarnet"
)

// The clock tells RACK's reordering timer and the tail-loss probe's apart
// from gVisor's other timers: a lossy exchange creates reordering timers, a
// lossless one none but, rarely, one end's (RACK arms it when an ACK comes
// late enough to look like a loss; told apart wrongly, every end's other
// timers would count); both create probe timers (every connection end that
// sends data arms one).
func TestTimersToldApart(t *testing.T) {
	exchange := func(t *testing.T, loss float64) (a, b *polarnet.Stack) {
		la, lb := pipe.New(pipe.Config{})
		a = newStack(t, impair.New(la, impair.Symmetric(impair.Impairment{Loss: loss}, 1)), addrA, addrA6)
		b = newStack(t, lb, addrB, addrB6)
		client, srv := connPair(t, a, b, addrB.Addr())
		deadline := time.Now().Add(2 * time.Minute)
		require.NoError(t, client.SetDeadline(deadline))
		require.NoError(t, srv.SetDeadline(deadline))
		require.NoError(t, xfer.Exchange(client, srv, 256<<10))
		return a, b
	}
	told := func(a, b *polarnet.Stack) (reordering, probe uint64) {
		ra, pa := polarnet.TimersToldApart(a)
		rb, pb := polarnet.TimersToldApart(b)
		return ra + rb, pa + pb
	}
	reordering, probe := told(exchange(t, 0))
	assert.LessOrEqual(t, reordering, uint64(1), "lossless")
	assert.Equal(t, uint64(2), probe, "lossless: one per connection end")
	reordering, probe = told(exchange(t, 0.05))
	assert.Positive(t, reordering, "5% loss")
	assert.Equal(t, uint64(2), probe, "5% loss: one per connection end")
}
