package polarnet

import (
	"encoding/binary"
	"sync"
	"sync/atomic"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/seqnum"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
)

// finSACK gives SACK blocks back to a receiver that has sent its FIN.
// gVisor's TCP attaches SACK blocks to its ACKs in ESTABLISHED only
// (Endpoint.sendRaw), though it keeps queueing out-of-order data after a
// half-close: a lossy transfer to a receiver in FIN_WAIT_1 or FIN_WAIT_2 is
// acknowledged by bare duplicate ACKs, and the sender repairs by go-back-N.
//
// The engine sees every segment. On a connection whose SYNs both offered
// SACK, from the FIN it sends in FIN_WAIT_1 until the peer's FIN is
// acknowledged, it keeps the data received above the cumulative ACK last
// sent and adds it as a SACK option (RFC 2018) to the flow's pure ACKs; a
// reset, or a flow silent for finSACKIdle, ends this too. A frame lost after
// it was counted here (a full handoff ring, gVisor's out-of-order limit)
// shows as a block the peer must treat as reneged (RFC 2018 section 8),
// which costs a retransmission, never data. Other flows cost RX one atomic
// load per frame while no flow is watched, and TX one per pure ACK while no
// flow is past its FIN.
type finSACK struct {
	// watching counts the flows whose received segments matter: those
	// waiting for a SYN-ACK and those past their FIN.
	watching atomic.Int32
	// closing counts the flows past their FIN, whose pure ACKs get blocks.
	closing atomic.Int32

	// The flows, keyed as on the segments we send: open, those that
	// negotiated SACK and have not sent their FIN; watched, the others.
	mu        sync.Mutex
	open      map[flowKey]struct{}
	watched   map[flowKey]*sackFlow
	nextSweep int64 // when silent flows are next looked for
}

// sackFlow is what finSACK knows of a watched flow.
type sackFlow struct {
	closing bool         // past our FIN; else our SYN awaits a SYN-ACK
	seen    int64        // its last segment (shard clock)
	ack     seqnum.Value // the cumulative ACK last sent (closing)
	// next ends the data received in order from ack on (closing): gVisor
	// may not have acknowledged it yet, but it is no hole, and a block
	// above it only is one.
	next seqnum.Value
	// finAck, once peerFIN, is the ACK number that acknowledges the
	// peer's FIN.
	finAck  seqnum.Value
	peerFIN bool
	// blocks are the data received above ack, most recent first (closing).
	blocks []sackRange
}

// sackRange is a block of data received above the cumulative ACK.
type sackRange struct {
	header.SACKBlock
	// reported: sent in an ACK since the block last grew. A burst of
	// frames reaches the stack before any of its ACKs leaves, so the ACKs
	// it triggers all see the same blocks: those not yet reported go
	// first, or more blocks than an ACK holds would never be reported.
	reported bool
}

// maxFlowBlocks is how many blocks a flow keeps: as many holes as an RX
// burst can open, all recorded before gVisor acknowledges any of them.
const maxFlowBlocks = rxBurstSize

const (
	// finSACKIdle is how long a watched flow may stay silent before it is
	// forgotten: gVisor's FIN_WAIT_2 timeout, and well past any SYN-ACK.
	finSACKIdle = time.Minute
	// maxSACKFlows bounds the open flows, and the watched ones; past it,
	// the open flows are forgotten (and keep gVisor's behaviour), or a flow
	// is not watched.
	maxSACKFlows = 1 << 16
)

func newFinSACK() *finSACK {
	return &finSACK{open: make(map[flowKey]struct{}), watched: make(map[flowKey]*sackFlow)}
}

// concerns reports whether an outgoing segment must go through sent: a SYN,
// FIN or reset, or a pure ACK while a flow is past its FIN.
func (f *finSACK) concerns(s *segment) bool {
	return s.tcp && (s.flags&(header.TCPFlagSyn|header.TCPFlagFin|header.TCPFlagRst) != 0 || s.pureACK() && f.closing.Load() != 0)
}

// sent follows an outgoing segment s of network protocol proto and, for a
// pure ACK of a closing flow with blocks to report, returns them (appended
// to out). finWait1 tells whether a FIN's connection is in FIN_WAIT_1 (not
// LAST_ACK, where the peer has nothing more to send).
func (f *finSACK) sent(s *segment, proto tcpip.NetworkProtocolNumber, now int64, finWait1 func(tcpip.NetworkProtocolNumber, flowKey) bool, out []header.SACKBlock) []header.SACKBlock {
	f.mu.Lock()
	defer f.mu.Unlock()
	fl := f.watched[s.flow]
	switch {
	case s.flags&header.TCPFlagRst != 0:
		delete(f.open, s.flow)
		f.forget(s.flow, fl)
	case s.flags&header.TCPFlagSyn != 0:
		opts := header.TCP(s.transport)
		if !header.ParseSynOptions(opts[header.TCPMinimumSize:opts.DataOffset()], s.flags&header.TCPFlagAck != 0).SACKPermitted {
			break
		}
		if s.flags&header.TCPFlagAck != 0 {
			// gVisor offers SACK in a SYN-ACK only to a SYN that did.
			f.opened(s.flow)
		} else if fl == nil {
			f.watch(s.flow, &sackFlow{seen: now}, now)
		}
	case fl == nil:
		if _, ok := f.open[s.flow]; ok && s.flags&header.TCPFlagFin != 0 && finWait1(proto, s.flow) {
			delete(f.open, s.flow)
			f.watch(s.flow, &sackFlow{closing: true, seen: now, ack: s.ack, next: s.ack, blocks: make([]sackRange, 0, maxFlowBlocks)}, now)
		}
	case fl.closing && s.flags&header.TCPFlagAck != 0:
		fl.seen = now
		if fl.peerFIN && !s.ack.LessThan(fl.finAck) {
			f.forget(s.flow, fl)
			break
		}
		fl.acked(s.ack)
		if s.pureACK() {
			th := header.TCP(s.transport)
			// Two NOPs align the blocks, as gVisor and Linux do.
			out = fl.report(out, (header.TCPHeaderMaximumSize-int(th.DataOffset())-4)/8)
		}
	}
	return out
}

// received follows a received packet, whose headers are h, of a watched
// flow, if it is one; f.watching must have been seen non-zero.
func (f *finSACK) received(h *rxHeaders, now int64) {
	th := h.tcp()
	if th == nil {
		return
	}
	payload := h.end - h.netLen - int(th.DataOffset())
	if h.end > len(h.pkt) || payload < 0 || th.DataOffset() < header.TCPMinimumSize {
		return
	}
	key := h.flow(th)

	f.mu.Lock()
	defer f.mu.Unlock()
	if now >= f.nextSweep {
		f.sweep(now)
	}
	fl := f.watched[key]
	switch {
	case fl == nil:
	case th.Flags()&header.TCPFlagRst != 0:
		f.forget(key, fl)
	case !fl.closing:
		if th.Flags()&(header.TCPFlagSyn|header.TCPFlagAck) != header.TCPFlagSyn|header.TCPFlagAck {
			break
		}
		f.forget(key, fl)
		if header.ParseSynOptions(th[header.TCPMinimumSize:th.DataOffset()], true).SACKPermitted {
			f.opened(key)
		}
	default:
		fl.seen = now
		seq := seqnum.Value(th.SequenceNumber())
		if th.Flags()&header.TCPFlagFin != 0 {
			fl.peerFIN, fl.finAck = true, seq.Add(seqnum.Size(payload)+1)
		}
		if payload > 0 {
			fl.arrived(header.SACKBlock{Start: seq, End: seq.Add(seqnum.Size(payload))})
		}
	}
}

// arrived follows received data b: in order, it moves next on; above a
// hole, it is recorded.
func (fl *sackFlow) arrived(b header.SACKBlock) {
	if fl.next.LessThan(b.Start) {
		fl.received(b)
		return
	}
	if fl.next.LessThan(b.End) {
		fl.next = b.End
	}
	fl.filled()
}

// filled moves next over the blocks it reaches, and drops them.
func (fl *sackFlow) filled() {
	for moved := true; moved; {
		moved = false
		kept := fl.blocks[:0]
		for _, b := range fl.blocks {
			if fl.next.LessThan(b.Start) {
				kept = append(kept, b)
				continue
			}
			if fl.next.LessThan(b.End) {
				fl.next, moved = b.End, true
			}
		}
		fl.blocks = kept
	}
}

// received records a block of data above a hole, as the most recent: it
// merges with the blocks it overlaps or touches, and the oldest block goes
// when there are too many.
func (fl *sackFlow) received(b header.SACKBlock) {
	kept := fl.blocks[:0]
	for _, o := range fl.blocks {
		if o.Start.LessThanEq(b.End) && b.Start.LessThanEq(o.End) {
			if o.Start.LessThan(b.Start) {
				b.Start = o.Start
			}
			if b.End.LessThan(o.End) {
				b.End = o.End
			}
			continue
		}
		kept = append(kept, o)
	}
	if len(kept) == cap(kept) {
		kept = kept[:len(kept)-1]
	}
	kept = append(kept, sackRange{})
	copy(kept[1:], kept)
	kept[0] = sackRange{SACKBlock: b}
	fl.blocks = kept
}

// acked notes a cumulative ACK sent: the blocks it reaches are dropped.
func (fl *sackFlow) acked(ack seqnum.Value) {
	if fl.ack.LessThan(ack) {
		fl.ack = ack
	}
	if fl.next.LessThan(fl.ack) {
		fl.next = fl.ack
	}
	fl.filled()
}

// report appends up to room blocks to out for an ACK (RFC 2018 section 4):
// the most recent, and those not yet reported before the others; in the
// order they were received, the most recent first.
func (fl *sackFlow) report(out []header.SACKBlock, room int) []header.SACKBlock {
	if len(fl.blocks) == 0 || room <= 0 {
		return out
	}
	var picked [maxFlowBlocks]bool
	picked[0] = true
	n := 1
	for _, reported := range [...]bool{false, true} {
		for i := 1; i < len(fl.blocks) && n < room; i++ {
			if !picked[i] && fl.blocks[i].reported == reported {
				picked[i] = true
				n++
			}
		}
	}
	for i := range fl.blocks {
		if picked[i] {
			out = append(out, fl.blocks[i].SACKBlock)
			fl.blocks[i].reported = true
		}
	}
	return out
}

// opened records a flow that negotiated SACK; f.mu is held.
func (f *finSACK) opened(key flowKey) {
	if len(f.open) >= maxSACKFlows {
		clear(f.open)
	}
	f.open[key] = struct{}{}
}

// watch starts watching a flow; f.mu is held.
func (f *finSACK) watch(key flowKey, fl *sackFlow, now int64) {
	if len(f.watched) >= maxSACKFlows {
		f.sweep(now)
		if len(f.watched) >= maxSACKFlows {
			return
		}
	}
	f.watched[key] = fl
	f.watching.Add(1)
	if fl.closing {
		f.closing.Add(1)
	}
}

// forget stops watching a flow (fl may be nil); f.mu is held.
func (f *finSACK) forget(key flowKey, fl *sackFlow) {
	if fl == nil {
		return
	}
	delete(f.watched, key)
	f.watching.Add(-1)
	if fl.closing {
		f.closing.Add(-1)
	}
}

// sweep forgets the watched flows silent for finSACKIdle; f.mu is held.
func (f *finSACK) sweep(now int64) {
	f.nextSweep = now + int64(finSACKIdle)
	for k, fl := range f.watched {
		if time.Duration(now-fl.seen) >= finSACKIdle {
			f.forget(k, fl)
		}
	}
}

// finWait1 reports whether the connection of an outgoing segment is in
// FIN_WAIT_1 in st.
func finWait1(st *stack.Stack, proto tcpip.NetworkProtocolNumber, flow flowKey) bool {
	ep := st.FindTransportEndpoint(proto, tcp.ProtocolNumber, stack.TransportEndpointID{
		LocalPort: flow.srcPort, LocalAddress: flow.src, RemotePort: flow.dstPort, RemoteAddress: flow.dst,
	}, nicID)
	e, ok := ep.(*tcp.Endpoint)
	return ok && tcp.EndpointState(e.State()) == tcp.StateFinWait1
}

// withSACK rebuilds the headers of pure ACK s (Ethernet header eth) with a
// SACK option of as many of blocks as fit, and points s at them; it returns
// the frame, or nil when no block fits. The transport checksum is left for
// the link to complete (partial) or completed here (full).
func withSACK(eth []byte, s *segment, blocks []header.SACKBlock, proto tcpip.NetworkProtocolNumber, full bool) []byte {
	nl := len(s.network)
	f := sackFrame(eth, s.network, header.TCP(s.transport), nil, blocks, proto, full)
	if f == nil {
		return nil
	}
	s.network = f[len(eth) : len(eth)+nl]
	s.transport = f[len(eth)+nl:]
	s.sack = true
	return f
}

// sackFrame builds a frame of Ethernet header eth, IP headers network (of
// protocol proto), TCP header th (its data offset within it) with a SACK
// option of as many of blocks as fit after its options, and payload. It
// returns nil when no block fits. The TCP checksum is zero (partial: the
// link completes it) or complete (full).
func sackFrame(eth, network []byte, th header.TCP, payload []byte, blocks []header.SACKBlock, proto tcpip.NetworkProtocolNumber, full bool) []byte {
	hl := int(th.DataOffset())
	k := min(len(blocks), (header.TCPHeaderMaximumSize-hl-4)/8)
	if k <= 0 {
		return nil
	}
	grow := 4 + 8*k
	nl := len(network)
	f := make([]byte, 0, len(eth)+nl+hl+grow+len(payload))
	f = append(append(append(f, eth...), network...), th[:hl]...)
	f = append(f, header.TCPOptionNOP, header.TCPOptionNOP, header.TCPOptionSACK, byte(2+8*k))
	for _, b := range blocks[:k] {
		f = binary.BigEndian.AppendUint32(f, uint32(b.Start))
		f = binary.BigEndian.AppendUint32(f, uint32(b.End))
	}
	f = append(f, payload...)
	nth := header.TCP(f[len(eth)+nl:])
	nth.SetDataOffset(uint8(hl + grow))
	nth.SetChecksum(0)
	var src, dst tcpip.Address
	switch proto {
	case header.IPv4ProtocolNumber:
		ip := header.IPv4(f[len(eth) : len(eth)+nl])
		ip.SetTotalLength(ip.TotalLength() + uint16(grow))
		ip.SetChecksum(0)
		ip.SetChecksum(^ip.CalculateChecksum())
		src, dst = ip.SourceAddress(), ip.DestinationAddress()
	case header.IPv6ProtocolNumber:
		ip := header.IPv6(f[len(eth) : len(eth)+nl])
		ip.SetPayloadLength(ip.PayloadLength() + uint16(grow))
		src, dst = ip.SourceAddress(), ip.DestinationAddress()
	}
	if full {
		sum := header.PseudoHeaderChecksum(header.TCPProtocolNumber, src, dst, uint16(len(nth)))
		nth.SetChecksum(^checksum.Checksum(nth, sum))
	}
	return f
}
