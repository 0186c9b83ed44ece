package conformance

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/polarnet/polarnet/internal/xfer"
	"github.com/polarnet/polarnet/link/impair"
)

// transferScenarios move data of every size both ways and compare SHA-256.
func transferScenarios() []*Scenario {
	var out []*Scenario
	sizes := []struct {
		name string
		n    int64
		v6   bool
	}{
		{"0B", 0, false}, {"1B", 1, false}, {"1MSS", 1460, false}, {"64KiB", 64 << 10, false},
		{"16MiB", 16 << 20, false}, {"256MiB", 256 << 20, false},
		{"1B", 1, true}, {"1MSS", 1440, true}, {"64KiB", 64 << 10, true}, {"16MiB", 16 << 20, true},
	}
	for _, sz := range sizes {
		name := "transfer/" + sz.name
		if sz.v6 {
			name += "/v6"
		}
		n := sz.n
		if testing.Short() && n > 16<<20 {
			n = 16 << 20
			name += " (short: 16MiB)"
		}
		out = append(out, &Scenario{
			Name:   name,
			Budget: 4 * time.Minute,
			Run: func(t *T, tp *Topology, ctx context.Context) *Outcome {
				return exchange(t, tp, ctx, sz.v6, n, 3*time.Minute)
			},
		})
	}
	return out
}

// exchange sends n bytes each way (xfer.Exchange: client first, each side
// half-closing after sending) and records the outcome and time.
func exchange(t *T, tp *Topology, ctx context.Context, v6 bool, n int64, timeout time.Duration) *Outcome {
	o, d := measure(t, tp, ctx, v6, "exchange", timeout, func(c, s TCPConn) error { return xfer.Exchange(c, s, n) })
	if n >= 1<<20 {
		o.Note("%s each way in %v (%.0f Mbit/s each way)", size(n), d.Round(time.Millisecond), float64(n)*8/d.Seconds()/1e6)
	}
	return o
}

// measure connects and runs move, within the bound the reference allows
// for key (or timeout), and records its outcome and time under key.
func measure(t *T, tp *Topology, ctx context.Context, v6 bool, key string, timeout time.Duration, move func(c, s TCPConn) error) (*Outcome, time.Duration) {
	o := newOutcome()
	c, s := connect(t, tp, ctx, v6, DialOptions{}, ListenOptions{})
	bound := t.Bound(key, timeout)
	setDeadline(bound, c, s)
	start := time.Now()
	err := move(c, s)
	d := time.Since(start)
	if err != nil && d >= bound-time.Second {
		t.Errorf("the %s did not finish within %v (the bound from the reference): %v", key, bound.Round(time.Millisecond), err)
	} else {
		assert.NoError(t, err, "the %s must arrive complete and byte-exact", key)
	}
	o.Fact(key, classify(err))
	o.Elapsed(key, d)
	impairNotes(o, tp)
	return o, d
}

// impairNotes records what the impairment did and how each end recovered.
func impairNotes(o *Outcome, tp *Topology) {
	if tp.Impair == nil {
		return
	}
	st := tp.Impair.Stats()
	o.Note("impairment near→far: %s; far→near: %s", impairNote(st.Egress), impairNote(st.Ingress))
	for _, h := range []Host{tp.Client, tp.Server} {
		o.Note("%s", recoveryNote(h))
	}
}

// recoveryNote summarises how a host's TCP recovered from losses.
func recoveryNote(h Host) string {
	if st := h.Stack(); st != nil {
		n := func(path string) uint64 { v, _ := st.ProtocolCounter(path); return v }
		return fmt.Sprintf("polarnet %s: %d retransmits, %d RTO timeouts, %d fast retransmits, %d SACK recoveries, %d packets dropped", h.Addr(false),
			n("TCP.Retransmits"), n("TCP.Timeouts"), n("TCP.FastRetransmit"), n("TCP.SACKRecovery"), n("DroppedPackets"))
	}
	var vals []string
	for _, c := range []string{"TCPTimeouts", "TCPLossProbes", "TCPSackRecovery", "TCPFastRetrans"} {
		n, _ := netstat(h.NS(), "TcpExt", c)
		vals = append(vals, fmt.Sprintf("%s %d", c, n))
	}
	retx, _ := netstat(h.NS(), "Tcp", "RetransSegs")
	return fmt.Sprintf("kernel %s: %d retransmits, %s", h.Addr(false), retx, strings.Join(vals, ", "))
}

func impairNote(d impair.DirectionStats) string {
	return fmt.Sprintf("%d frames, %d lost, %d duplicated, %d reordered, %d corrupted", d.Frames, d.Lost, d.Duplicated, d.Reordered, d.Corrupted)
}

func size(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d B", n)
}
