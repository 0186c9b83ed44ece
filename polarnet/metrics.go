package polarnet

import (
	"errors"
	"sync/atomic"

	"github.com/polarnet/polarnet/link"
)

// ShardMetrics are a shard's counters beyond the link-level ones of
// ShardStats (which embeds it): drops in gVisor's layers and the
// application's, TCP loss recovery, TX batching, and the poller's busy time
// and iteration latency.
type ShardMetrics struct {
	// Stack-layer drops, read from the shard's gVisor stack (tcpip.Stats).

	// StackChecksum counts TCP segments and UDP datagrams gVisor dropped for
	// a bad checksum: frames that reached it unverified (the engine checks
	// frames the link did not, so this stays 0 unless a link marks a frame
	// ChecksumValid wrongly).
	StackChecksum uint64
	// StackInvalid counts packets gVisor could not parse: malformed IP
	// headers, transport headers that do not parse, invalid TCP segments.
	StackInvalid uint64
	// StackDropped is gVisor's transport-layer drop counter (DroppedPackets):
	// segments a connection's receive queue had no room for (its receive
	// buffer is full), segments listeners refuse (among them the accept
	// backlog overflows also counted in AppAcceptOverflow), stray segments.
	// gVisor keeps no stack-wide counter of the receive-buffer case alone.
	StackDropped uint64

	// Application-layer drops: the program does not keep up.

	// AppAcceptOverflow counts SYNs and handshake ACKs dropped because a
	// listener's accept backlog was full (Accept is not called fast enough).
	AppAcceptOverflow uint64
	// AppUDPReceiveBufferFull counts datagrams dropped because a UDP
	// socket's receive buffer was full (it is not read fast enough).
	AppUDPReceiveBufferFull uint64

	// TCP loss recovery (tcpip.Stats.TCP).

	// Retransmits counts TCP segments retransmitted on the wire: gVisor's
	// count (its TCP.Retransmits) less the probes withheld, plus the
	// engine's own resends (docs/design.md, Loss recovery).
	Retransmits uint64
	// ProbesWithheld counts tail-loss probes gVisor sent that the engine
	// held back and an ACK then showed needless: they never left.
	ProbesWithheld uint64
	// RTOTimeouts counts retransmission timer expiries.
	RTOTimeouts uint64
	// FastRecovery, SACKRecovery and TLPRecovery count loss-recovery
	// episodes by kind; SpuriousRecovery the ones later found needless.
	FastRecovery, SACKRecovery, TLPRecovery, SpuriousRecovery uint64

	// TxBatch is the distribution of frames per WriteBurst call.
	TxBatch Histogram
	// TxQueued is how many packets waited in the TX queue (ACKs the ACK
	// filter holds included) when the snapshot was taken: a gauge.
	TxQueued uint64
	// HandoffQueued is how many frames waited in this shard's hand-off rings
	// from other shards when the snapshot was taken: a gauge.
	HandoffQueued uint64

	// PollLatency is the distribution of working poll iterations, in
	// nanoseconds: iterations whose RX burst returned frames or that took
	// frames from other shards, from the end of the previous iteration if
	// that one worked too and else from the return of the RX burst, to the
	// end of the TX flush. Idle iterations are not timed (no clock read).
	// PollLatency.Sum is the poller's busy time.
	PollLatency Histogram
	// PollNanos is how long the poller has run.
	PollNanos uint64

	// LogsSuppressed counts log records the per-event rate limits dropped.
	LogsSuppressed uint64
}

// BusyRatio is the fraction of the poller's time spent in working
// iterations (0..1); for a Total, the mean over shards.
func (m *ShardMetrics) BusyRatio() float64 {
	if m.PollNanos == 0 {
		return 0
	}
	return min(float64(m.PollLatency.Sum)/float64(m.PollNanos), 1)
}

func (m *ShardMetrics) add(o *ShardMetrics) {
	m.StackChecksum += o.StackChecksum
	m.StackInvalid += o.StackInvalid
	m.StackDropped += o.StackDropped
	m.AppAcceptOverflow += o.AppAcceptOverflow
	m.AppUDPReceiveBufferFull += o.AppUDPReceiveBufferFull
	m.Retransmits += o.Retransmits
	m.ProbesWithheld += o.ProbesWithheld
	m.RTOTimeouts += o.RTOTimeouts
	m.FastRecovery += o.FastRecovery
	m.SACKRecovery += o.SACKRecovery
	m.TLPRecovery += o.TLPRecovery
	m.SpuriousRecovery += o.SpuriousRecovery
	m.TxBatch.add(&o.TxBatch)
	m.TxQueued += o.TxQueued
	m.HandoffQueued += o.HandoffQueued
	m.PollLatency.add(&o.PollLatency)
	m.PollNanos += o.PollNanos
	m.LogsSuppressed += o.LogsSuppressed
}

// shardMetrics is the engine side of ShardMetrics, a field of shardCounters.
type shardMetrics struct {
	txBatch histogram
	poll    histogram
	started atomic.Int64 // monotonic ns (clock) when the poller started; 0: not yet
	logs    shardLogs

	// The poller's own, never touched by other goroutines.
	prevEnd       int64 // end of the previous iteration if it worked, else 0
	lastDropCheck int64
	lastDrops     dropCounts
}

// pollerStarted is the poller's first hook: it anchors PollNanos.
func (s *shard) pollerStarted() { s.stats.m.started.Store(clock()) }

// burstStart is called after each RX burst with the frames it returned and
// the iteration's clock reading. It returns the iteration's start, 0 for an
// iteration without work (no frames, none waiting from other shards).
func (s *shard) burstStart(n int, now int64) int64 {
	if n == 0 && len(s.in) < 2 {
		// Idle, and no other shard to hand frames over: inlined.
		s.stats.m.prevEnd = 0
		return 0
	}
	return s.burstStartSlow(n, now)
}

func (s *shard) burstStartSlow(n int, now int64) int64 {
	m := &s.stats.m
	if n == 0 && !s.handoffsPending() {
		m.prevEnd = 0
		return 0
	}
	if m.prevEnd != 0 {
		return m.prevEnd
	}
	return now
}

// burstDone is called at the end of each iteration, after the TX flush,
// with burstStart's result, the frames the iteration handled and the RX
// burst's error. Idle iterations return at once.
func (s *shard) burstDone(start int64, n int, err error) {
	if err == nil && (n == 0 || start == 0) {
		return // idle: inlined, nothing written
	}
	s.burstDoneSlow(start, n, err)
}

func (s *shard) burstDoneSlow(start int64, n int, err error) {
	if err != nil && !errors.Is(err, link.ErrClosed) {
		s.logPollError(err)
	}
	if n == 0 || start == 0 {
		return
	}
	m := &s.stats.m
	now := clock()
	m.poll.observe(uint64(now - start))
	m.prevEnd = now
	if m.lastDropCheck == 0 || now-m.lastDropCheck >= int64(dropLogInterval) {
		s.checkDrops(now)
	}
}

// addMetrics completes st, whose link-level counters are taken: each
// shard's ShardMetrics, read after every shard's counters so that those
// are read as close together as they were, their total, and the link's.
func (s *Stack) addMetrics(st *Stats) {
	for i, sh := range s.shards {
		m := &st.Shards[i].ShardMetrics
		sh.metrics(m)
		st.Total.ShardMetrics.add(m)
	}
	st.LinkName, st.Link = s.cfg.Link.Info().Name, s.linkStats()
}

// metrics fills the ShardMetrics of shard s.
func (s *shard) metrics(out *ShardMetrics) {
	m := &s.stats.m
	st := s.stack.Stats()
	out.StackChecksum = st.TCP.ChecksumErrors.Value() + st.UDP.ChecksumErrors.Value()
	out.StackInvalid = st.IP.MalformedPacketsReceived.Value() + st.NICs.MalformedL4RcvdPackets.Value() +
		st.TCP.InvalidSegmentsReceived.Value() + st.UDP.MalformedPacketsReceived.Value()
	out.StackDropped = st.DroppedPackets.Value()
	out.AppAcceptOverflow = st.TCP.ListenOverflowSynDrop.Value() + st.TCP.ListenOverflowAckDrop.Value()
	out.AppUDPReceiveBufferFull = st.UDP.ReceiveBufferErrors.Value()
	// gVisor counts a probe before the TX queue holds it: held is read
	// first so that the difference never goes below zero.
	held := s.stats.probesHeld.Load()
	out.Retransmits = st.TCP.Retransmits.Value() - held + s.stats.probesReleased.Load() + s.stats.resent.Load()
	out.ProbesWithheld = s.stats.probesNeedless.Load()
	out.RTOTimeouts = st.TCP.Timeouts.Value()
	out.FastRecovery = st.TCP.FastRecovery.Value()
	out.SACKRecovery = st.TCP.SACKRecovery.Value()
	out.TLPRecovery = st.TCP.TLPRecovery.Value()
	out.SpuriousRecovery = st.TCP.SpuriousRecovery.Value()
	out.TxBatch = m.txBatch.snapshot()
	out.TxQueued = uint64(s.tx.queued())
	for _, r := range s.in {
		if r != nil {
			out.HandoffQueued += r.tail.Load() - r.head.Load()
		}
	}
	out.PollLatency = m.poll.snapshot()
	if started := m.started.Load(); started != 0 {
		out.PollNanos = uint64(max(clock()-started, 0))
	}
	out.LogsSuppressed = m.logs.suppressed.Load()
}

// linkStats returns what the link counts, nil if it keeps no counters.
func (s *Stack) linkStats() []link.QueueStats {
	ls, ok := s.cfg.Link.(link.Statser)
	if !ok {
		return nil
	}
	return ls.LinkStats()
}
