package polarnet_test

import (
	"io"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/polarnet/polarnet/link/linktest"
	"github.com/polarnet/polarnet/polarnet"
)

// With GOMAXPROCS 2 only one adaptive poller of the process may spin, so of
// two stacks that would each spin for an hour, one sleeps whenever its
// queue is empty: between round trips, the poller spinning hands the slot
// on at most when it has work.
func TestAdaptivePollersNeverHoldEveryP(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	a, z := newPair(t, linktest.PipeConfig{MTU: 65535}, func(c *polarnet.Config) { c.SpinBudget = time.Hour })
	client, server := connPair(t, a, z, addrB.Addr())
	go echo4K(server)
	wakeups := func() uint64 { return a.Stats().Total.PollWakeups + z.Stats().Total.PollWakeups }

	const rounds = 200
	before := wakeups()
	req, resp := make([]byte, 4096), make([]byte, 64)
	for range rounds {
		_, err := client.Write(req)
		require.NoError(t, err)
		_, err = io.ReadFull(client, resp)
		require.NoError(t, err)
	}
	assert.GreaterOrEqual(t, wakeups()-before, uint64(rounds/4), "a poller without a spin slot sleeps")
}
