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

// The clock tells RACK's reordering timer apart from gVisor's other
// timers: a lossy exchange creates some, a lossless one none (the timer
// needs a SACK to be armed).
func TestReorderingTimersToldApart(t *testing.T) {
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
	a, b := exchange(t, 0)
	assert.Zero(t, polarnet.ReorderingTimers(a)+polarnet.ReorderingTimers(b), "lossless")
	a, b = exchange(t, 0.05)
	assert.Positive(t, polarnet.ReorderingTimers(a)+polarnet.ReorderingTimers(b), "5% loss")
}
