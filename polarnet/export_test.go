package polarnet

import (
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
)

// ReaderWokenLocally reports whether a socket's reader is marked as woken on
// its waker's P and not yet run.
func ReaderWokenLocally() bool { return readerWokenLocally.Load() != nil }

// TimersToldApart counts the RACK reordering timers and tail-loss probe
// timers st's clocks told apart.
func TimersToldApart(st *Stack) (reordering, probe uint64) {
	for _, sh := range st.shards {
		reordering += sh.clock.made[reorderingTimer].Load()
		probe += sh.clock.made[probeTimer].Load()
	}
	return reordering, probe
}

// RxBurstSize is how many frames one ReadBurst may return; BacklogBursts
// full bursts in a row show a backlog (shed.go).
const (
	RxBurstSize   = rxBurstSize
	BacklogBursts = backlogBursts
)

// Settled reports whether gVisor's TCP processors of st's first shard have
// handled every frame its poller delivered (shard.settle); only the poller
// may call it, from its link's ReadBurst.
func Settled(st *Stack) bool { return !st.shards[0].unsettled }

// CongestionControl is the algorithm c's endpoint uses.
func CongestionControl(c *TCPConn) string {
	var cc tcpip.CongestionControlOption
	if err := c.ep.GetSockOpt(&cc); err != nil {
		return err.String()
	}
	return string(cc)
}

// CubicRTT is the handshake round trip above which a connection gets CUBIC
// by default.
const CubicRTT = cubicRTT

// HandshakeRTT is c's smoothed round trip, before it has sent data the
// handshake's.
func HandshakeRTT(c *TCPConn) time.Duration {
	var info tcpip.TCPInfoOption
	if err := c.ep.GetSockOpt(&info); err != nil {
		return -1
	}
	return info.RTT
}

// Queued is how many connections l's shards hold for Accept, as its shared
// accept queue counts them; -1 for a listener of one shard, which has none.
func Queued(l *TCPListener) int {
	if l.queue == nil {
		return -1
	}
	l.queue.mu.Lock()
	defer l.queue.mu.Unlock()
	return l.queue.queued
}

// Spilled is how many connections wait in l's spill.
func Spilled(l *TCPListener) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.spill)
}
