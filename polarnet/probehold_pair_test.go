package polarnet_test

import (
	"io"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/polarnet/polarnet/link"
	"github.com/polarnet/polarnet/link/pipe"
)

// gatedQueue holds back what a link queue receives while gated, then hands
// it to the poller in one burst after a pause, with frames the engine
// discards (too short for Ethernet) before it: so a due tail-loss probe
// timer and the ACK that answers its probe reach the poller in the same
// iteration, after a run of iterations that delivered frames.
type gatedQueue struct {
	link.Queue
	mu      sync.Mutex
	state   gateState
	stash   []link.RxFrame
	scratch []link.RxFrame
	until   time.Time // gateRelease: the pause's end
}

type gateState int

const (
	gateOpen    gateState = iota
	gateHold              // keep what arrives
	gateJunk              // keep what arrives, return a discarded frame
	gateRelease           // pause until until, then return what was kept
)

type gatedLink struct {
	link.Link
	q *gatedQueue
}

func (g gatedLink) Queues() []link.Queue { return []link.Queue{g.q} }

func newGatedLink(l link.Link) gatedLink {
	return gatedLink{Link: l, q: &gatedQueue{Queue: l.Queues()[0]}}
}

func (g *gatedQueue) set(s gateState, until time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.state, g.until = s, until
}

func (g *gatedQueue) kept() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.stash)
}

func (g *gatedQueue) ReadBurst(frames []link.RxFrame) (int, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch g.state {
	case gateHold, gateJunk:
		if len(g.scratch) == 0 {
			g.scratch = make([]link.RxFrame, len(frames))
			for i := range g.scratch {
				g.scratch[i].Buf = make([]byte, len(frames[0].Buf))
			}
		}
		n, err := g.Queue.ReadBurst(g.scratch)
		for _, f := range g.scratch[:n] {
			g.stash = append(g.stash, link.RxFrame{Buf: append([]byte(nil), f.Buf[:f.Len]...), Len: f.Len, ChecksumValid: f.ChecksumValid})
		}
		if g.state == gateHold || err != nil {
			return 0, err
		}
		frames[0].Len, frames[0].ChecksumValid = 1, true
		return 1, nil
	case gateRelease:
		time.Sleep(time.Until(g.until))
		n := min(len(frames), len(g.stash))
		for i, f := range g.stash[:n] {
			frames[i].Len = copy(frames[i].Buf, f.Buf[:f.Len])
			frames[i].ChecksumValid = f.ChecksumValid
		}
		g.stash, g.state = g.stash[n:], gateOpen
		return n, nil
	}
	return g.Queue.ReadBurst(frames)
}

// A tail-loss probe timer that comes due in the iteration that brings the
// ACK answering its probe costs no recovery, after a run of iterations
// that delivered frames: the timers run before the burst reaches gVisor,
// and the probe waits for the burst, whose ACK shows it needless and
// carries a D-SACK of it. Timers run after the delivery found the ACK
// queued, unprocessed, and gVisor took the probe for a repair (a
// recovery, then found spurious).
func TestProbeDueWithItsAnswer(t *testing.T) {
	la, lb := pipe.New(pipe.Config{})
	gated := newGatedLink(la)
	a := newStack(t, gated, addrA, addrA6)
	b := newStack(t, lb, addrB, addrB6)
	client, srv := connPair(t, a, b, addrB.Addr())
	go echo4K(srv)
	// Three segments out: a probe timer of one segment waits for a
	// delayed ACK too (200 ms more).
	req, resp := make([]byte, 4096), make([]byte, 64)
	roundTrip := func() {
		_, err := client.Write(req)
		require.NoError(t, err)
		_, err = io.ReadFull(client, resp)
		require.NoError(t, err)
	}
	for range 20 {
		roundTrip()
	}
	// The clock wakes a probe timer MinRecoveryTimer (50 ms) after gVisor
	// first armed it, which may be before this request: the answer is kept
	// longer than that, the poller held in its read meanwhile.
	// A probe that comes before the pause (or none at all) spoils an
	// attempt: try again.
	const attempts = 10
	type counts struct{ probes, recoveries, spurious, withheld, retransmits uint64 }
	read := func() counts {
		st := a.Stats().Total
		return counts{
			protocolCounter(t, a, "TCP.Retransmits"), protocolCounter(t, a, "TCP.SACKRecovery"),
			protocolCounter(t, a, "TCP.SpuriousRecovery"), st.ProbesWithheld, st.Retransmits,
		}
	}
	for range attempts {
		before := read()
		gated.q.set(gateHold, time.Time{})
		sent := time.Now()
		_, err := client.Write(req)
		require.NoError(t, err)
		for gated.q.kept() == 0 && time.Since(sent) < time.Second {
			time.Sleep(50 * time.Microsecond)
		}
		gated.q.set(gateJunk, time.Time{})
		time.Sleep(2 * time.Millisecond)
		early := read().probes != before.probes
		gated.q.set(gateRelease, sent.Add(60*time.Millisecond))
		_, err = io.ReadFull(client, resp)
		require.NoError(t, err)
		roundTrip() // the answer's ACK is processed
		after := read()
		if early || after.probes != before.probes+1 {
			continue // the probe came before the pause, or not at all
		}
		assert.Equal(t, before.recoveries, after.recoveries, "no recovery")
		assert.Equal(t, before.spurious, after.spurious)
		assert.Equal(t, before.withheld+1, after.withheld, "the probe never left")
		assert.Equal(t, before.retransmits, after.retransmits)
		return
	}
	t.Fatalf("no probe came due with its answer in %d attempts", attempts)
}
