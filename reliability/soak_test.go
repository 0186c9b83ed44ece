package reliability

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/polarnet/polarnet/internal/kpeer"
	"github.com/polarnet/polarnet/internal/taptopo"
	"github.com/polarnet/polarnet/internal/xfer"
	"github.com/polarnet/polarnet/link"
	"github.com/polarnet/polarnet/link/impair"
	"github.com/polarnet/polarnet/polarnet"
)

var soakFlag = flag.Duration("soak", 0, "how long TestSoak runs (default: $POLARNET_SOAK, else 60s, 20s with -short)")

// soakEnv names the environment variable that sizes the soak when the
// flag does not.
const soakEnv = "POLARNET_SOAK"

// soakDuration returns how long the soak runs.
func soakDuration(t *testing.T) time.Duration {
	if *soakFlag > 0 {
		return *soakFlag
	}
	if v := os.Getenv(soakEnv); v != "" {
		d, err := time.ParseDuration(v)
		require.NoError(t, err, "%s", soakEnv)
		return d
	}
	if testing.Short() {
		return 20 * time.Second
	}
	return time.Minute
}

// soakPace returns how each connection of the soak is paced: each
// direction of a stream writes chunk bytes every interval, each
// request/response connection makes a round trip of up to two chunks as
// often. 4 KiB every 250ms: a thousand connections then offer ~30 MB/s,
// which the stack sustains. The race detector slows the stack over ten
// times: under it, 1 KiB every 2s (~1 MB/s; see docs/benchmarks.md). The
// soak looks for leaks and stalls under loss and reordering, not for the
// stack's limits (the floods do that); beyond them, the stack's queue
// overflows, TCP backs off for seconds and a stall cannot be told from
// congestion.
func soakPace() pace {
	if raceEnabled {
		return pace{chunk: 1 << 10, every: 2 * time.Second}
	}
	return pace{chunk: 4 << 10, every: 250 * time.Millisecond}
}

// soakPhases is how many parts the soak is cut into: the heap and
// goroutines at the end of the first (warm) and of the last must match,
// and the connection directions without progress in each are logged.
const soakPhases = 4

// TestSoak runs 1,000 connections between the stack and the kernel for a
// while (see soakDuration) over a link that loses and reorders frames
// (link/impair: the kernel here has no netem): half of them
// request/response with random sizes against a kernel echo, half
// streaming both ways at once, each way independently: every byte arrives
// exact (each response compared, each stream's SHA-256) and every
// connection ends cleanly once stopped, each way, within its deadline (no
// stall), and the heap and goroutine count at the end are those after the
// first quarter (no leak). How many connection directions went a quarter
// without progress is logged, not asserted: on a loaded machine the TAP
// queue overflows and a connection may back off for a quarter, which is
// not a stall.
func TestSoak(t *testing.T) {
	const (
		conns = 1000
		// The heap may grow by heapGrowth over its warm size, plus heapSlack
		// for a GC cycle's garbage; a leak of one object per request or
		// segment would exceed it within seconds.
		heapGrowth = 1.5
		heapSlack  = 32 << 20
		goSlack    = 64
	)
	d := soakDuration(t)
	imp := impair.Symmetric(impair.Impairment{Loss: 0.002, Reorder: 0.01}, 42)
	var impaired *impair.Link
	small := polarnet.BufferRange{Min: 4 << 10, Default: 32 << 10, Max: 128 << 10}
	e := newEnv(t, taptopo.Options{
		// Every frame a wire packet, so that loss and reordering hit
		// packets, not 64 KiB GSO frames.
		DisableOffloads: true,
		Wrap: func(l link.Link) link.Link {
			impaired = impair.New(l, imp)
			return impaired
		},
		Config: func(c *polarnet.Config) { c.TCP.SendBuffer, c.TCP.ReceiveBuffer = small, small },
	})

	// The TAP device's ring (txqueuelen) holds 1000 frames by default: at
	// the soak's ~20,000 frames a second towards the stack, a delay of
	// 50ms in running its poller (a busy machine) overflows it, a loss
	// that is not the impairment's (the floods show those).
	e.setLink(t, "txqueuelen", "4096")

	// Connect them all first, then start the traffic. Every connection
	// starts at its own point of the interval, so that their writes are
	// spread over it rather than all due at once: a thousand bursts at the
	// same instant overflow the TAP device's queue, which is not what the
	// soak is about.
	setup := time.Now()
	pairs := e.dialMany(t, kpeer.Listen(t, e.NS, kernel4), conns)
	t.Logf("%d connections made in %v", conns, time.Since(setup).Round(time.Millisecond))
	rng := rand.New(rand.NewPCG(42, 43))
	paced := func() pace {
		p := soakPace()
		p.first = time.Duration(rng.Int64N(int64(p.every)))
		return p
	}
	// trips counts each request/response connection's round trips; with
	// the streams' received bytes, they are the progress every connection
	// must make in every part of the run.
	var trips []*atomic.Int64
	var streams []*stream
	stop := make(chan struct{})
	results := make(chan error, conns)
	for i, p := range pairs {
		c, k := p.c, p.k
		deadline(d+ioBound, c, k)
		if i%2 == 1 {
			streams = append(streams, startStream(c, k, uint64(2*i), paced()), startStream(k, c, uint64(2*i+1), paced()))
			continue
		}
		go func() {
			if _, err := io.Copy(k, k); err == nil {
				k.CloseWrite()
			}
		}()
		n := new(atomic.Int64)
		trips = append(trips, n)
		rr := paced()
		go func() { results <- requestResponse(c, uint64(2*i), rr, stop, n) }()
	}
	progress := slices.Clone(trips)
	for _, s := range streams {
		progress = append(progress, &s.received)
	}

	var warmHeap uint64
	var warmGoroutines int
	idle := make([]int, soakPhases)
	last := snapshot(progress)
	for p := range soakPhases {
		time.Sleep(d / soakPhases)
		now := snapshot(progress)
		for i := range now {
			if now[i] == last[i] {
				idle[p]++
			}
		}
		last = now
		if p == 0 {
			warmHeap, warmGoroutines = liveHeap(), runtime.NumGoroutine()
		}
	}
	endHeap, endGoroutines := liveHeap(), runtime.NumGoroutine()

	close(stop)
	var failed []error
	for _, s := range streams {
		if err := s.finish(); err != nil {
			failed = append(failed, err)
		}
	}
	for range trips {
		if err := <-results; err != nil {
			failed = append(failed, err)
		}
	}
	assert.Empty(t, failed, "connections that did not deliver every byte")
	assert.LessOrEqual(t, endHeap, uint64(float64(warmHeap)*heapGrowth)+heapSlack, "heap at the end against after the first part")
	assert.LessOrEqual(t, endGoroutines, warmGoroutines+goSlack, "goroutines at the end against after the first part")

	var roundTrips, streamed int64
	for _, n := range trips {
		roundTrips += n.Load()
	}
	for _, s := range streams {
		streamed += s.received.Load()
	}
	st, is := e.Stack.Stats().Total, impaired.Stats()
	t.Logf("%v, %d connections: %d round trips, %s streamed; the link lost %d frames and reordered %d, the TAP queue dropped %d; %d retransmits, %d RTO expiries",
		d, conns, roundTrips, mib(uint64(streamed)), is.Egress.Lost+is.Ingress.Lost, is.Egress.Reordered+is.Ingress.Reordered, tapDropped(e), st.Retransmits, st.RTOTimeouts)
	t.Logf("heap %s after the first part, %s at the end; goroutines %d and %d; the poller was busy %.0f%% of the time",
		mib(warmHeap), mib(endHeap), warmGoroutines, endGoroutines, 100*st.BusyRatio())
	t.Logf("connection directions without progress in each part, of %d: %v", len(progress), idle)
}

// snapshot reads every connection's progress counter.
func snapshot(progress []*atomic.Int64) []int64 {
	out := make([]int64, len(progress))
	for i, p := range progress {
		out[i] = p.Load()
	}
	return out
}

// requestResponse sends requests of 1 byte to two chunks of p on c, one
// every p.every, and checks that each comes back whole and exact, counting
// round trips in trips, until stop; then it half-closes and expects the
// server's EOF.
func requestResponse(c *polarnet.TCPConn, seed uint64, p pace, stop <-chan struct{}, trips *atomic.Int64) error {
	maxRequest := 2 * p.chunk
	rng := rand.New(rand.NewPCG(seed, 1))
	src := xfer.Pattern(math.MaxInt64, seed)
	req, resp := make([]byte, maxRequest), make([]byte, maxRequest)
	pause(stop, p.first)
	for {
		select {
		case <-stop:
			if err := c.CloseWrite(); err != nil {
				return err
			}
			if n, err := c.Read(resp); err != io.EOF {
				return fmt.Errorf("after the last response: %d bytes, %v (want EOF)", n, err)
			}
			return nil
		default:
		}
		n := 1 + rng.IntN(maxRequest)
		src.Read(req[:n])
		if _, err := c.Write(req[:n]); err != nil {
			return err
		}
		if _, err := io.ReadFull(c, resp[:n]); err != nil {
			return err
		}
		if !bytes.Equal(req[:n], resp[:n]) {
			return fmt.Errorf("round trip %d: the response differs from the request", trips.Load()+1)
		}
		trips.Add(1)
		pause(stop, p.every)
	}
}
