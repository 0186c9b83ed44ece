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
	for len(opts) > 0 {
		switch kind := opts[0]; kind {
		case header.TCPOptionEOL:
			return false
		case header.TCPOptionNOP:
			opts = opts[1:]
			continue
		case header.TCPOptionSACK:
			return true
		}
		if len(opts) < 2 || opts[1] < 2 || int(opts[1]) > len(opts) {
			return false
		}
		opts = opts[opts[1]:]
	}
	return false
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
func filterACKs(segs []segment, drop []bool, heldAt []int64, history map[flowKey]flowHistory) int {
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
				if at := heldAt[i]; at != 0 && (heldAt[j] == 0 || at < heldAt[j]) {
					heldAt[j] = at
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
// it at TCPConfig.MinRecoveryTimer) and Linux's own delayed ACK (40ms).
const ackDelayDefault = time.Millisecond

// ackBriefDelay is how long an ACK for two full-sized segments or more may
// wait: enough for an application answering from memory.
const ackBriefDelay = 20 * time.Microsecond
