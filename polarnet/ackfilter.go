package polarnet

import (
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/seqnum"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
)

// gVisor acknowledges every data segment at once with a pure ACK; when the
// application answers soon, the answer carries the same acknowledgement and
// the pure ACK was a wasted segment at both ends. The ACK filter drops such
// ACKs in the TX batch (in the spirit of CAKE's ACK filter) and, with a
// delay budget, holds a pure ACK (ackhold.go) so that an answer can carry
// it: a delayed ACK at the link layer.

// ackFilter is the TX queue's ACK filter: it owns what it remembers of each
// flow, the ACKs it holds and the timer that sends them once their delay is
// up. The TX queue calls it under its lock, at every flush: reclaim, to put
// the held ACKs of the batch's flows back into it; mark, before the write;
// written, after it. When the timer fires, the queue takes its lock and
// calls expired. The queue has none when ACKConfig.DisableFilter is set.
type ackFilter struct {
	stats *shardCounters
	clock *shardClock
	delay time.Duration // 0: pure ACKs are never held
	// holdBytes: a pure ACK is held up to delay while it acknowledges less
	// than this much beyond the flow's last ACK sent (two full-sized
	// segments), and only briefly past that.
	holdBytes uint32
	history   map[flowKey]flowHistory
	held      ackHolds
	// drop and hold are, per packet of the batch being flushed, whether
	// mark dropped or held it; brief, of the held, whether in the brief tier.
	drop, hold, brief []bool
	// reclaimed is scratch space for held ACKs going back into a batch.
	reclaimed []heldACK
	// timer calls fire, the TX queue's, when the first held ACK is due.
	timer    tcpip.Timer
	fire     func()
	armed    bool
	armedFor int64 // when the armed timer fires (shard clock)
}

// newACKFilter returns the ACK filter ack configures for a link of the given
// MTU, nil when it is disabled. fire is called from the shard clock's timer
// when held ACKs are due; it must take the TX queue's lock and call expired.
func newACKFilter(ack ACKConfig, mtu int, stats *shardCounters, clock *shardClock, fire func()) *ackFilter {
	if ack.DisableFilter {
		return nil
	}
	f := &ackFilter{
		stats:     stats,
		clock:     clock,
		delay:     max(ack.Delay, 0),
		holdBytes: 2 * uint32(max(mtu-header.IPv4MinimumSize-header.TCPMinimumSize, 1)),
		history:   make(map[flowKey]flowHistory),
		fire:      fire,
	}
	f.scratch(txBatchSize)
	f.held = newACKHolds(f.delay, min(f.delay, ackBriefDelay))
	return f
}

// scratch makes the per-batch scratch space hold n packets.
func (f *ackFilter) scratch(n int) {
	if n <= len(f.drop) {
		return
	}
	f.drop, f.hold, f.brief = make([]bool, n), make([]bool, n), make([]bool, n)
}

// mark decides on the pure ACKs of segs, a batch about to be written: it
// drops those a later segment makes redundant and, with a delay, holds
// those that may wait for a segment to carry them (see withheld).
func (f *ackFilter) mark(segs []segment) {
	n := len(segs)
	f.scratch(n)
	drop, hold := f.drop[:n], f.hold[:n]
	clear(drop)
	clear(hold)
	f.stats.ackFiltered.Add(uint64(filterACKs(segs, drop, f.history)))
	if f.delay > 0 {
		f.holdACKs(segs, drop, hold, f.brief[:n])
	}
}

// withheld reports whether mark dropped or held packet i of the batch: it
// is not written.
func (f *ackFilter) withheld(i int) bool { return f.drop[i] || f.hold[i] }

// written follows the write of the batch mark saw: it remembers the ACKs
// that left (the unsent, which a full ring refused, did not), holds what
// mark chose to hold and arms the timer. The held packets leave pending,
// where their entries are set to nil: their references are the filter's.
func (f *ackFilter) written(pending []*stack.PacketBuffer, segs []segment, unsent []bool) {
	drop, hold := f.drop[:len(segs)], f.hold[:len(segs)]
	for i := range hold {
		drop[i] = drop[i] || hold[i] || unsent[i]
	}
	remember(segs, drop, f.history)
	f.keep(pending, segs)
	f.arm()
}

// flowKey names a TCP flow as seen on the segments we send.
type flowKey struct {
	src, dst         tcpip.Address
	srcPort, dstPort uint16
}

// same reports whether g is f; ports first, as they tell most flows apart.
func (f *flowKey) same(g *flowKey) bool {
	return f.srcPort == g.srcPort && f.dstPort == g.dstPort && *f == *g
}

// segment is what the ACK filter needs to know of an outgoing packet, and
// the packet's headers, read once per flush: every read walks the packet's
// views (gVisor's PacketHeader.Slice).
type segment struct {
	network, transport []byte // the packet's headers, whatever its protocol

	tcp     bool // a TCP segment the filter understood; others pass untouched
	flow    flowKey
	flags   header.TCPFlags
	ack     seqnum.Value
	window  uint16
	payload int
	sack    bool // carries SACK blocks
	// frame, when set, is the whole frame with headers rebuilt to carry
	// SACK blocks (finsack.go), sent instead of the packet's views;
	// network and transport are then its headers.
	frame []byte
	// heldAt is the ACK filter's, which the TX queue carries along with
	// the packet: when the flow's ACK was first held (shard clock); 0: not
	// held.
	heldAt int64
}

// pureACK reports whether s carries nothing but an acknowledgement.
func (s *segment) pureACK() bool {
	return s.tcp && s.payload == 0 && !s.sack && s.flags&^header.TCPFlagPsh == header.TCPFlagAck
}

// parseSegment reads the headers of an outgoing packet.
func parseSegment(pkt *stack.PacketBuffer) segment {
	s := segment{network: pkt.NetworkHeader().Slice(), transport: pkt.TransportHeader().Slice()}
	th := header.TCP(s.transport)
	if pkt.TransportProtocolNumber != header.TCPProtocolNumber || len(th) < header.TCPMinimumSize || int(th.DataOffset()) > len(th) {
		return s
	}
	switch pkt.NetworkProtocolNumber {
	case header.IPv4ProtocolNumber:
		s.flow.src, s.flow.dst = header.IPv4(s.network).SourceAddress(), header.IPv4(s.network).DestinationAddress()
	case header.IPv6ProtocolNumber:
		s.flow.src, s.flow.dst = header.IPv6(s.network).SourceAddress(), header.IPv6(s.network).DestinationAddress()
	default:
		return s
	}
	s.flow.srcPort, s.flow.dstPort = th.SourcePort(), th.DestinationPort()
	s.tcp = true
	s.flags = th.Flags()
	s.ack = seqnum.Value(th.AckNumber())
	s.window = th.WindowSize()
	s.payload = pkt.Data().Size()
	s.sack = hasSACKBlocks(th[header.TCPMinimumSize:th.DataOffset()])
	return s
}

// hasSACKBlocks walks TCP options looking for a SACK block option.
func hasSACKBlocks(opts []byte) bool {
	return tcpOption(opts, header.TCPOptionSACK) >= 0
}

// tcpOption returns where in opts, TCP options, the first option of kind
// starts, or -1 when there is none or the options end malformed before it.
// The option's bytes are not checked against its length field.
func tcpOption(opts []byte, kind byte) int {
	for i := 0; i < len(opts); {
		switch k := opts[i]; k {
		case header.TCPOptionEOL:
			return -1
		case kind:
			return i
		case header.TCPOptionNOP:
			i++
			continue
		}
		if i+1 >= len(opts) || opts[i+1] < 2 {
			return -1
		}
		i += int(opts[i+1])
	}
	return -1
}

// flowHistory is what the filter remembers of each flow's last sent ACK:
// enough to recognise duplicate ACKs and zero-window openings, which are
// never dropped or held. Flows it does not know are treated as if every
// ACK might matter.
type flowHistory struct {
	ack    seqnum.Value
	window uint16
	// answers: the flow has sent data since its last long ACK hold ran
	// out, so an ACK held long is likely to ride on an answer. A flow that
	// only receives (a bulk download) would just see its ACKs late.
	answers bool
}

// maxFlowHistory bounds the memory of the filter; past it, history starts
// afresh (and the first ACK of each flow passes untouched).
const maxFlowHistory = 1 << 14

// mayElide reports whether pure ACK a may be dropped or held: it must be
// neither a duplicate ACK (a loss signal) nor the one that opens a zero
// window, judged against last, the last ACK sent on the flow, if known.
func mayElide(a *segment, last flowHistory, known bool) bool {
	if !known {
		return false
	}
	if a.ack == last.ack {
		return false // a duplicate ACK
	}
	return !(last.window == 0 && a.window != 0)
}

// supersedes reports whether later segment b conveys everything pure ACK a
// does: the same flow, an acknowledgement at least as far, a window at
// least as large, and no reset.
func supersedes(b, a *segment) bool {
	return b.tcp && b.flow.same(&a.flow) && b.flags&header.TCPFlagAck != 0 && b.flags&header.TCPFlagRst == 0 &&
		!b.ack.LessThan(a.ack) && b.window >= a.window
}

// filterACKs marks the pure ACKs in segs that a later segment of the batch
// makes redundant, and returns how many it marked. The later segment takes
// over the dropped ACK's hold time (heldAt), so that a flow's ACKs are
// never held longer than the delay however often they supersede each other.
func filterACKs(segs []segment, drop []bool, history map[flowKey]flowHistory) int {
	n := 0
	for i := range segs {
		a := &segs[i]
		if drop[i] || !a.pureACK() {
			continue
		}
		if last, known := history[a.flow]; !mayElide(a, last, known) {
			continue
		}
		for j := i + 1; j < len(segs); j++ {
			if supersedes(&segs[j], a) {
				drop[i] = true
				n++
				if at, b := a.heldAt, &segs[j]; at != 0 && (b.heldAt == 0 || at < b.heldAt) {
					b.heldAt = at
				}
				break
			}
		}
	}
	return n
}

// remember records the ACKs a flushed batch sent.
func remember(segs []segment, drop []bool, history map[flowKey]flowHistory) {
	if len(history) > maxFlowHistory {
		clear(history)
	}
	for i := range segs {
		if s := &segs[i]; s.tcp && !drop[i] && s.flags&header.TCPFlagAck != 0 {
			h := history[s.flow]
			h.ack, h.window = s.ack, s.window
			h.answers = h.answers || s.payload > 0
			history[s.flow] = h
		}
	}
}

// ackDelayDefault is how long a pure ACK may wait for a segment to carry it:
// long enough for a loaded server to answer, below any peer's tail-loss
// probe (Linux waits 2 SRTT plus two jiffies, at least 2ms; polarnet floors
// it at TCPConfig.MinRecoveryTimer, 5ms on a flow that saw loss lately) and
// Linux's own delayed ACK (40ms).
const ackDelayDefault = time.Millisecond

// ackBriefDelay is how long an ACK for two full-sized segments or more may
// wait: enough for an application answering from memory.
const ackBriefDelay = 20 * time.Microsecond
