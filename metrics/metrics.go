// Package metrics turns a polarnet Stack's counters into named metrics: the
// catalogue every exporter shares (Prometheus in metrics/prom, expvar here),
// with Prometheus naming conventions.
//
// It depends on nothing beyond polarnet and the standard library, so a
// program that only wants expvar does not link the Prometheus client.
//
// Engine metrics carry the labels shard and queue (shard i serves the link's
// queue pair i, so both are the same number; the queue label lets them be
// joined with link metrics). Link metrics carry queue, "device" for
// counters a link keeps for all its queues together, and shard, empty then.
package metrics

import (
	"strconv"
	"strings"
	"sync"
	"unicode"

	"github.com/polarnet/polarnet/polarnet"
)

// Type is a metric's type, as Prometheus has them.
type Type uint8

const (
	Counter Type = iota
	Gauge
	Histogram
)

func (t Type) String() string {
	switch t {
	case Counter:
		return "counter"
	case Gauge:
		return "gauge"
	case Histogram:
		return "histogram"
	}
	return "untyped"
}

// Desc describes a metric family.
type Desc struct {
	Name   string
	Type   Type
	Help   string
	Labels []string
}

// Sample is one series' value at collection time.
type Sample struct {
	Desc *Desc
	// LabelValues are in Desc.Labels order.
	LabelValues []string
	// Value of a counter or gauge.
	Value float64
	// Hist is set for histograms.
	Hist *HistogramValue
}

// HistogramValue is a histogram in Prometheus form.
type HistogramValue struct {
	Count uint64
	Sum   float64
	// Buckets are cumulative counts by upper bound, ascending, without the
	// +Inf bucket (which is Count).
	Buckets []Bucket
}

// Bucket is a cumulative histogram bucket.
type Bucket struct {
	UpperBound float64
	Count      uint64
}

var (
	shardLabels = []string{"shard", "queue"}
	linkLabels  = []string{"queue"}
)

func counter(name, help string, labels ...string) *Desc {
	return &Desc{Name: name, Type: Counter, Help: help, Labels: append(append([]string(nil), shardLabels...), labels...)}
}

func gauge(name, help string, labels ...string) *Desc {
	return &Desc{Name: name, Type: Gauge, Help: help, Labels: append(append([]string(nil), shardLabels...), labels...)}
}

// The engine's metric families.
var (
	RxFrames = counter("polarnet_rx_frames_total", "Frames the shard's poller received from its link queue, dropped ones included.")
	RxBytes  = counter("polarnet_rx_bytes_total", "Bytes of the frames in polarnet_rx_frames_total, Ethernet headers included.")
	TxFrames = counter("polarnet_tx_frames_total", "Frames the link accepted from the shard's TX queue.")
	TxBytes  = counter("polarnet_tx_bytes_total", "Bytes of the frames in polarnet_tx_frames_total.")
	TxBursts = counter("polarnet_tx_bursts_total", "WriteBurst calls of the shard's TX queue.")
	Drops    = counter("polarnet_drops_total", "Frames and packets dropped, by layer (link, engine, stack, app) and reason.", "layer", "reason")
	Handoffs = counter("polarnet_handoff_frames_total", "Software steering: frames passed to the owning shard (direction out), copies of neighbour information given to every shard (shared), frames taken from other shards (in).", "direction")
	ACKFilt  = counter("polarnet_ack_filtered_total", "Pure ACKs the ACK filter dropped because a later segment of the flow carried them.")
	ACKHeld  = counter("polarnet_ack_held_total", "Pure ACKs the ACK filter held back for a segment to carry them.")
	ACKSuper = counter("polarnet_rx_acks_superseded_total", "Received pure ACKs dropped because a later segment of the flow in the same burst carried them.")
	Wakeups  = counter("polarnet_poll_wakeups_total", "Times the poller slept and woke.")
	PollErrs = counter("polarnet_poll_errors_total", "Failed RX bursts and waits.")
	Retrans  = counter("polarnet_tcp_retransmits_total", "TCP segments retransmitted on the wire.")
	Withheld = counter("polarnet_tcp_probes_withheld_total", "Tail-loss probes the engine held back that an ACK then showed needless: never sent, not in polarnet_tcp_retransmits_total.")
	RTOs     = counter("polarnet_tcp_rto_timeouts_total", "TCP retransmission timer expiries.")
	Recovers = counter("polarnet_tcp_recoveries_total", "TCP loss-recovery episodes by kind: fast, sack, tlp; spurious counts those found needless.", "kind")
	TxBatch  = &Desc{Name: "polarnet_tx_batch_frames", Type: Histogram, Help: "Frames per WriteBurst call of the TX queue.", Labels: shardLabels}
	TxQueued = gauge("polarnet_tx_queue_packets", "Packets waiting in the TX queue (held ACKs included).")
	HoQueued = gauge("polarnet_handoff_queue_frames", "Frames waiting in the shard's hand-off rings from other shards.")
	PollIter = &Desc{Name: "polarnet_poll_iteration_seconds", Type: Histogram, Help: "Duration of poll iterations that did work: RX delivery through gVisor, hand-offs, timers and the TX flush. Idle iterations are not timed.", Labels: shardLabels}
	PollBusy = counter("polarnet_poll_busy_seconds_total", "Time the poller spent in iterations that did work; divided by polarnet_poll_seconds_total, the busy ratio.")
	PollTime = counter("polarnet_poll_seconds_total", "Time the poller has been running.")
	LogsSupp = counter("polarnet_log_suppressed_total", "Log records the per-event rate limits suppressed.")
)

// The link's metric families, from links that implement link.Statser.
var (
	LinkRxFrames = &Desc{Name: "polarnet_link_rx_frames_total", Type: Counter, Help: "Frames the link (or the device under it) received, as it counts them.", Labels: linkLabels}
	LinkRxBytes  = &Desc{Name: "polarnet_link_rx_bytes_total", Type: Counter, Help: "Bytes the link received, as it counts them.", Labels: linkLabels}
	LinkTxFrames = &Desc{Name: "polarnet_link_tx_frames_total", Type: Counter, Help: "Frames the link sent, as it counts them.", Labels: linkLabels}
	LinkTxBytes  = &Desc{Name: "polarnet_link_tx_bytes_total", Type: Counter, Help: "Bytes the link sent, as it counts them.", Labels: linkLabels}
	PoolSize     = &Desc{Name: "polarnet_link_pool_buffers", Type: Gauge, Help: "Buffers in the queue's buffer pool (links with pools only).", Labels: linkLabels}
	PoolFree     = &Desc{Name: "polarnet_link_pool_free_buffers", Type: Gauge, Help: "Free buffers in the queue's pool now.", Labels: linkLabels}
	PoolFreeMin  = &Desc{Name: "polarnet_link_pool_free_min_buffers", Type: Gauge, Help: "Lowest number of free buffers the queue's pool has had (its watermark).", Labels: linkLabels}
	LinkInfo     = &Desc{Name: "polarnet_link_info", Type: Gauge, Help: "The stack's link, by name; the value is the number of shards.", Labels: []string{"link"}}
)

// The stack's TCP conns by path: on the stack, or given to Go's net by the
// kernel interop policy (polarnet.Stats.Conns, KernelDials, KernelAccepts).
// Stack-wide, so without shard and queue labels.
var (
	TCPConns    = &Desc{Name: "polarnet_tcp_conns", Type: Gauge, Help: "TCP conns open on the stack."}
	KernelConns = &Desc{Name: "polarnet_kernel_conns_total", Type: Counter, Help: "TCP conns the kernel interop policy gave to Go's net instead of the stack, by kind: dial, or accept (the kernel's part of a wildcard listen).", Labels: []string{"kind"}}
)

// Engine returns the engine's and the link's metric families, in the order
// Collect reports them.
func Engine() []*Desc {
	return []*Desc{
		LinkInfo, TCPConns, KernelConns, RxFrames, RxBytes, TxFrames, TxBytes, TxBursts, Drops, Handoffs, ACKFilt, ACKHeld, ACKSuper,
		Wakeups, PollErrs, Retrans, Withheld, RTOs, Recovers, TxBatch, TxQueued, HoQueued, PollIter, PollBusy,
		PollTime, LogsSupp, LinkRxFrames, LinkRxBytes, LinkTxFrames, LinkTxBytes, PoolSize, PoolFree,
		PoolFreeMin,
	}
}

// Drop reasons by layer, as the reason label of polarnet_drops_total has them.
const (
	LayerLink   = "link"
	LayerEngine = "engine"
	LayerStack  = "stack"
	LayerApp    = "app"
)

// txBatchBuckets and pollBuckets are the buckets exported of the
// polarnet.Histogram's log2 buckets: 1..256 frames, 256 ns..2.15 s. The
// histogram's last bucket has no bound (polarnet.BucketBound): what it
// holds is only in +Inf.
const (
	txBatchMaxBucket  = 8
	pollMinBucket     = 8
	pollMaxBucket     = polarnet.HistogramBuckets - 2
	nanosecondsPerSec = 1e9
)

// Collect reports every metric of st to fn: the engine's and the link's,
// then gVisor's protocol counters summed over the shards.
func Collect(st *polarnet.Stack, fn func(Sample)) {
	stats := st.Stats()
	CollectStats(stats, fn)
	CollectProtocol(st.ProtocolCounters(), fn)
}

// CollectStats reports the engine's and the link's metrics in stats.
func CollectStats(stats polarnet.Stats, fn func(Sample)) {
	emit := func(d *Desc, v float64, labels ...string) {
		fn(Sample{Desc: d, LabelValues: labels, Value: v})
	}
	emit(LinkInfo, float64(len(stats.Shards)), stats.LinkName)
	emit(TCPConns, float64(stats.Conns))
	emit(KernelConns, float64(stats.KernelDials), "dial")
	emit(KernelConns, float64(stats.KernelAccepts), "accept")
	for i := range stats.Shards {
		s := &stats.Shards[i]
		id := strconv.Itoa(i)
		l := []string{id, id}
		with := func(extra ...string) []string { return append(append([]string(nil), l...), extra...) }
		emit(RxFrames, float64(s.RxFrames), l...)
		emit(RxBytes, float64(s.RxBytes), l...)
		emit(TxFrames, float64(s.TxFrames), l...)
		emit(TxBytes, float64(s.TxBytes), l...)
		emit(TxBursts, float64(s.TxBursts), l...)
		for _, d := range shardDrops(s) {
			emit(Drops, float64(d.value), with(d.layer, d.reason)...)
		}
		emit(Handoffs, float64(s.HandoffOut), with("out")...)
		emit(Handoffs, float64(s.SharedOut), with("shared")...)
		emit(Handoffs, float64(s.HandoffIn), with("in")...)
		emit(ACKFilt, float64(s.ACKFiltered), l...)
		emit(ACKHeld, float64(s.ACKHeld), l...)
		emit(ACKSuper, float64(s.RxSuperseded), l...)
		emit(Wakeups, float64(s.PollWakeups), l...)
		emit(PollErrs, float64(s.PollErrors), l...)
		emit(Retrans, float64(s.Retransmits), l...)
		emit(Withheld, float64(s.ProbesWithheld), l...)
		emit(RTOs, float64(s.RTOTimeouts), l...)
		emit(Recovers, float64(s.FastRecovery), with("fast")...)
		emit(Recovers, float64(s.SACKRecovery), with("sack")...)
		emit(Recovers, float64(s.TLPRecovery), with("tlp")...)
		emit(Recovers, float64(s.SpuriousRecovery), with("spurious")...)
		fn(Sample{Desc: TxBatch, LabelValues: l, Hist: histogram(s.TxBatch, 0, txBatchMaxBucket, 1)})
		emit(TxQueued, float64(s.TxQueued), l...)
		emit(HoQueued, float64(s.HandoffQueued), l...)
		fn(Sample{Desc: PollIter, LabelValues: l, Hist: histogram(s.PollLatency, pollMinBucket, pollMaxBucket, nanosecondsPerSec)})
		emit(PollBusy, float64(s.PollLatency.Sum)/nanosecondsPerSec, l...)
		emit(PollTime, float64(s.PollNanos)/nanosecondsPerSec, l...)
		emit(LogsSupp, float64(s.LogsSuppressed), l...)
	}
	for _, q := range stats.Link {
		queue, shard := "device", ""
		if q.Queue >= 0 {
			queue = strconv.Itoa(q.Queue)
			shard = queue
		}
		lq := []string{queue}
		emit(LinkRxFrames, float64(q.RxFrames), lq...)
		emit(LinkRxBytes, float64(q.RxBytes), lq...)
		emit(LinkTxFrames, float64(q.TxFrames), lq...)
		emit(LinkTxBytes, float64(q.TxBytes), lq...)
		for _, d := range []struct {
			reason string
			v      uint64
		}{{"rx_ring_full", q.RxRingFull}, {"rx_shed", q.RxShed}, {"rx_no_buffers", q.RxNoBuffers}, {"rx_bad_frame", q.RxBadFrame}, {"tx_dropped", q.TxDropped}} {
			emit(Drops, float64(d.v), shard, queue, LayerLink, d.reason)
		}
		if q.PoolSize > 0 {
			emit(PoolSize, float64(q.PoolSize), lq...)
			emit(PoolFree, float64(q.PoolFree), lq...)
			emit(PoolFreeMin, float64(q.PoolFreeMin), lq...)
		}
	}
}

type drop struct {
	layer, reason string
	value         uint64
}

// shardDrops lists a shard's drop counters with their layer and reason.
func shardDrops(s *polarnet.ShardStats) []drop {
	return []drop{
		{LayerLink, "tx_ring_full", s.TxRingFull},
		{LayerLink, "tx_error", s.TxErrors},
		{LayerEngine, "bad_frame", s.RxBadFrame},
		{LayerEngine, "oversize", s.RxOversize},
		{LayerEngine, "checksum", s.RxChecksum},
		{LayerEngine, "no_dispatcher", s.RxNoDispatcher},
		{LayerEngine, "martian", s.RxMartian},
		{LayerEngine, "shed", s.RxShed},
		{LayerEngine, "handoff_ring_full", s.HandoffDrop},
		{LayerStack, "checksum", s.StackChecksum},
		{LayerStack, "invalid", s.StackInvalid},
		{LayerStack, "transport", s.StackDropped},
		{LayerApp, "accept_backlog_full", s.AppAcceptOverflow},
		{LayerApp, "udp_receive_buffer_full", s.AppUDPReceiveBufferFull},
	}
}

// DropReasons lists the layer and reason label pairs of polarnet_drops_total.
func DropReasons() [][2]string {
	var out [][2]string
	for _, d := range shardDrops(&polarnet.ShardStats{}) {
		out = append(out, [2]string{d.layer, d.reason})
	}
	for _, r := range []string{"rx_ring_full", "rx_no_buffers", "rx_bad_frame", "tx_dropped"} {
		out = append(out, [2]string{LayerLink, r})
	}
	return out
}

// histogram converts buckets lo..hi of h (a log2 histogram) to Prometheus
// form, dividing bounds and the sum by scale. Lower buckets are folded into
// lo's (the counts are cumulative), higher ones only into +Inf.
func histogram(h polarnet.Histogram, lo, hi int, scale float64) *HistogramValue {
	out := &HistogramValue{Count: h.Count(), Sum: float64(h.Sum) / scale}
	var cum uint64
	for i := 0; i <= hi; i++ {
		cum += h.Counts[i]
		if i >= lo {
			out.Buckets = append(out.Buckets, Bucket{UpperBound: float64(polarnet.BucketBound(i)) / scale, Count: cum})
		}
	}
	return out
}

// Protocol metrics: gVisor's protocol counters (polarnet.ProtocolCounter),
// summed over shards, one family per counter, named polarnet_tcpip_ + the
// counter's path in snake case: TCP.Retransmits is
// polarnet_tcpip_tcp_retransmits_total. Gauges have no _total.

var protoDescs = sync.OnceValue(func() []*Desc {
	var out []*Desc
	for _, c := range polarnet.ProtocolCatalogue() {
		name := "polarnet_tcpip_" + snake(strings.Split(c.Path, "."))
		d := &Desc{Name: name + "_total", Type: Counter, Help: "gVisor tcpip.Stats." + c.Path + ", summed over shards."}
		if c.Gauge {
			d.Name, d.Type = name, Gauge
		}
		out = append(out, d)
	}
	return out
})

// Protocol returns the metric families of gVisor's protocol counters.
func Protocol() []*Desc { return protoDescs() }

// CollectProtocol reports counters as Stack.ProtocolCounters returns them.
func CollectProtocol(counters []polarnet.ProtocolCounter, fn func(Sample)) {
	descs := protoDescs()
	for i, c := range counters {
		val := float64(c.Value)
		if c.Gauge {
			// Decremented counters: a transient negative wraps around.
			val = float64(int64(c.Value))
		}
		fn(Sample{Desc: descs[i], Value: val})
	}
}

// ProtocolValues returns counters by dotted path ("TCP.Retransmits"), for
// expvar and logs.
func ProtocolValues(counters []polarnet.ProtocolCounter) map[string]uint64 {
	out := make(map[string]uint64, len(counters))
	for _, c := range counters {
		out[c.Path] = c.Value
	}
	return out
}

// snake joins Go identifiers as one snake_case name: "NICs", "Tx",
// "MalformedL4RcvdPackets" -> "nics_tx_malformed_l4_rcvd_packets".
func snake(parts []string) string {
	var words []string
	for _, p := range parts {
		words = append(words, splitCamel(p)...)
	}
	return strings.ToLower(strings.Join(words, "_"))
}

// splitCamel splits an identifier into words: a new word starts at an
// upper-case letter after a lower-case one or a digit, and at the last
// capital of an acronym followed by a lower-case letter ("SACKRecovery" ->
// SACK Recovery). A trailing lower-case s after an acronym stays with it
// ("NICs").
func splitCamel(s string) []string {
	r := []rune(s)
	var words []string
	start := 0
	for i := 1; i < len(r); i++ {
		prev, cur := r[i-1], r[i]
		split := false
		switch {
		case unicode.IsUpper(cur) && (unicode.IsLower(prev) || unicode.IsDigit(prev)):
			split = true
		case unicode.IsUpper(cur) && unicode.IsUpper(prev) && i+1 < len(r) && unicode.IsLower(r[i+1]) &&
			!(r[i+1] == 's' && (i+2 == len(r) || unicode.IsUpper(r[i+2]))):
			split = true
		}
		if split {
			words = append(words, string(r[start:i]))
			start = i
		}
	}
	return append(words, string(r[start:]))
}
