package polarnet_test

import (
	"fmt"
	"io"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/polarnet/polarnet/link"
	"github.com/polarnet/polarnet/link/pipe"
	"github.com/polarnet/polarnet/polarnet"
)

// Fewer adaptive pollers spin than there are Ps: with GOMAXPROCS 2 only
// one may, so of two stacks that would each spin for an hour, one sleeps
// whenever its queue is empty (the poller spinning hands the slot on at
// most when it has work); with GOMAXPROCS 1 none may, so that the Go
// netpoller, and the kernel sockets waiting in it, get the P whenever the
// pollers have nothing to do: both sleep between round trips.
func TestAdaptivePollersNeverHoldEveryP(t *testing.T) {
	const rounds = 200
	for _, tc := range []struct {
		procs   int
		minEach uint64 // wake-ups of the poller that slept least
		why     string
	}{
		{procs: 2, minEach: 0, why: "one poller may spin"},
		{procs: 1, minEach: rounds / 2, why: "no poller spins with one P: each sleeps between round trips"},
	} {
		t.Run(fmt.Sprintf("GOMAXPROCS=%d", tc.procs), func(t *testing.T) {
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(tc.procs))
			a, z := newPair(t, pipe.Config{MTU: 65535}, func(c *polarnet.Config) { c.SpinBudget = time.Hour })
			aWoke, zWoke := wakeupsOverRoundTrips(t, a, z, rounds)
			assert.GreaterOrEqual(t, aWoke+zWoke, uint64(rounds/4), "a poller without a spin slot sleeps")
			assert.GreaterOrEqual(t, min(aWoke, zWoke), tc.minEach, tc.why)
		})
	}
}

// With one P, a poller whose peer polls (link.PolledPeer) spins, handing
// the CPU over between its looks, and catches each reply without sleeping;
// a poller whose link says nothing of its peer sleeps between round trips
// beside it, as in TestAdaptivePollersNeverHoldEveryP.
func TestPolledPeerSpinsWithOneP(t *testing.T) {
	const rounds = 200
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	la, lz := pipe.New(pipe.Config{MTU: 65535})
	spin := func(c *polarnet.Config) { c.SpinBudget = time.Hour }
	a := newStack(t, polledPeerLink{la}, addrA, addrA6, spin)
	z := newStack(t, lz, addrB, addrB6, spin)
	aWoke, zWoke := wakeupsOverRoundTrips(t, a, z, rounds)
	assert.Less(t, aWoke, uint64(rounds/4), "the poller whose peer polls spins with one P")
	assert.GreaterOrEqual(t, zWoke, uint64(rounds/2), "the other sleeps")
}

// wakeupsOverRoundTrips makes rounds 4 KiB round trips from a client on a
// to an echo on z and returns how often each stack's pollers woke meanwhile.
func wakeupsOverRoundTrips(t *testing.T, a, z *polarnet.Stack, rounds int) (aWoke, zWoke uint64) {
	t.Helper()
	client, server := connPair(t, a, z, addrB.Addr())
	go echo4K(server)
	aBefore, zBefore := a.Stats().Total.PollWakeups, z.Stats().Total.PollWakeups
	req, resp := make([]byte, 4096), make([]byte, 64)
	for range rounds {
		_, err := client.Write(req)
		require.NoError(t, err)
		_, err = io.ReadFull(client, resp)
		require.NoError(t, err)
	}
	return a.Stats().Total.PollWakeups - aBefore, z.Stats().Total.PollWakeups - zBefore
}

// polledPeerLink is a link whose queues say their peer polls.
type polledPeerLink struct{ link.Link }

func (l polledPeerLink) Queues() []link.Queue {
	var qs []link.Queue
	for _, q := range l.Link.Queues() {
		qs = append(qs, polledPeerQueue{q})
	}
	return qs
}

type polledPeerQueue struct{ link.Queue }

func (polledPeerQueue) PeerPolls() bool { return true }
