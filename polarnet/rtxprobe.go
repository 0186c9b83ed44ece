package polarnet

import (
	"encoding/binary"
	"sync/atomic"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/seqnum"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
)

// loneRetransmissions sends again a retransmission that was lost with
// nothing sent after it, which only the RTO would repair: gVisor's RACK
// retransmits from its reordering timer without sending new data (rack.go,
// DoRecovery) and arms no tail-loss probe during recovery, so no later
// segment's SACK can show the retransmission lost, and a lost tail-loss
// probe is in the same state. In captures of exchanges at 5% loss, every
// RTO of a polarnet sender followed such a retransmission, or, once those
// were sent again, the last burst of a recovery (the retransmission and
// new data the window allowed) whose one ACK was lost: with no probe in
// recovery and nothing left to send, the sender waits for the RTO. So
// when a flow's last data segment is a retransmission, or any data segment
// sent after an ACK with SACK blocks (in recovery), and no segment of the
// flow has come in or gone out for TCPConfig.MinRecoveryTimer (the
// tail-loss probe's floor), the TX queue sends it again (loneResends):
// lost, it is repaired; delivered, its duplicate draws the ACK that was
// lost. Not into a closed window, where the retransmission is a zero
// window probe.
//
// It is the TX queue's, used under its lock but for n and buckets.
type loneRetransmissions struct {
	// n counts the flows with a lone retransmission or withheld probe, and
	// those in recovery (each once for each), and buckets them by their
	// ports (loneBucket): the poller reads these without the lock to pass
	// over the segments of other flows.
	n       atomic.Int32
	buckets [loneBuckets]atomic.Int32
	// waiting holds the flows with a lone retransmission or withheld
	// probe, and some that no longer have one.
	waiting []*flowTail
}

const loneBuckets = 256

// loneBucket buckets a flow (keyed as we send) by its ports.
func loneBucket(f flowKey) int { return int(f.srcPort*31+f.dstPort) % loneBuckets }

// mayBeLone reports whether flow f may have a lone retransmission or
// withheld probe, or be in recovery.
func (l *loneRetransmissions) mayBeLone(f flowKey) bool {
	return l.n.Load() > 0 && l.buckets[loneBucket(f)].Load() > 0
}

// count counts flow t in or out (by one or minus one).
func (l *loneRetransmissions) count(t *flowTail, by int32) {
	l.n.Add(by)
	l.buckets[loneBucket(t.flow)].Add(by)
}

// loneMinDelay is the shortest wait before a lone retransmission goes
// again, when MinRecoveryTimer sets no floor.
const loneMinDelay = time.Millisecond

// follow records pkt, a retransmission of flow t sent at now, as the
// flow's last data segment, to go again after wait.
func (l *loneRetransmissions) follow(t *flowTail, pkt *stack.PacketBuffer, now int64, wait time.Duration) {
	if t.rtxPkt != nil {
		t.rtxPkt.DecRef()
	} else {
		l.count(t, 1)
		l.waiting = append(l.waiting, t)
	}
	t.rtxPkt, t.rtxAt, t.wait, t.held, t.resends = pkt.IncRef(), now, wait, false, 0
}

// loneResends is how many times a lone retransmission goes again, each
// after twice the wait of the one before, while nothing answers: once
// more repairs a lost retransmission or ACK, the others the rarer loss of
// both (a retransmission and its ACK), which would cost the RTO.
const loneResends = 3

// hold keeps pkt, a tail-loss probe of flow t covering seq, instead of
// sending it: it waits from the flow's last segment out (probehold.go).
func (l *loneRetransmissions) hold(t *flowTail, pkt *stack.PacketBuffer, seq header.SACKBlock, wait time.Duration) {
	l.follow(t, pkt, t.at, wait)
	t.held, t.heldSeq = true, seq
}

// settle forgets flow t's lone retransmission or withheld probe.
func (l *loneRetransmissions) settle(t *flowTail) {
	if t.rtxPkt != nil {
		t.rtxPkt.DecRef()
		t.rtxPkt, t.held = nil, false
		l.count(t, -1)
	}
}

// recovering follows whether flow t is in recovery: since an ACK with SACK
// blocks, until one without acknowledges what had been sent by the last
// such (as gVisor leaves recovery). While it is, the flow is counted, so
// that the poller brings the ACK that ends its recovery.
func (l *loneRetransmissions) recovering(t *flowTail, sacked bool) {
	switch {
	case sacked && !t.sacked:
		l.count(t, 1)
	case !sacked && t.sacked:
		l.count(t, -1)
	}
	t.sacked = sacked
}

// sent follows new data of flow t sent at now: a lone retransmission is no
// longer alone, a withheld probe waits anew.
func (l *loneRetransmissions) sent(t *flowTail, now int64) {
	if t.held {
		t.rtxAt = now
		return
	}
	l.settle(t)
}

// acked follows an ACK of flow t, acknowledging up to ack, received at now.
// A lone retransmission is settled. A withheld probe the ACK covers was
// needless: it is dropped and acked returns the D-SACK block that tells
// gVisor so; one it does not cover waits anew.
func (l *loneRetransmissions) acked(t *flowTail, ack seqnum.Value, now int64) (dsack header.SACKBlock, needless bool) {
	if !t.held {
		l.settle(t)
		return header.SACKBlock{}, false
	}
	if ack.LessThan(t.heldSeq.End) {
		t.rtxAt = now
		return header.SACKBlock{}, false
	}
	dsack = t.heldSeq
	l.settle(t)
	return dsack, true
}

// due takes out the retransmissions alone for their wait at now, and the
// withheld probes whose wait is over (released counts them), each with a
// reference of its own, and returns when the next is due, if any. A probe
// that goes is then followed as a lone retransmission. Those of flows
// whose peer's window is closed are forgotten: there a retransmission is a
// zero window probe, gVisor's to send.
func (l *loneRetransmissions) due(now int64, closed func(flowKey) bool, out []*stack.PacketBuffer) (_ []*stack.PacketBuffer, released int, next int64, any bool) {
	kept := l.waiting[:0]
	for _, t := range l.waiting {
		switch {
		case t.rtxPkt == nil:
			continue
		case now-t.rtxAt < int64(t.wait):
		case closed(t.flow):
			l.settle(t)
			continue
		case t.held:
			seg := parseSegment(t.rtxPkt)
			t.rtxTSVal, t.rtx = sentTSVal(&seg)
			out = append(out, t.rtxPkt.IncRef())
			t.held, t.rtxAt, t.at = false, now, now
			released++
		default:
			t.resends++
			out = t.copiesAhead(tailSeq(t.rtxPkt), now, out)
			t.at, t.rtxAt, t.wait = now, now, 2*t.wait
			if t.resends < loneResends {
				out = append(out, t.rtxPkt.IncRef())
				break
			}
			out = append(out, t.rtxPkt)
			t.rtxPkt = nil
			l.count(t, -1)
			continue
		}
		kept = append(kept, t)
		if at := t.rtxAt + int64(t.wait); !any || at < next {
			next, any = at, true
		}
	}
	clear(l.waiting[len(kept):])
	l.waiting = kept
	return out, released, next, any
}

// loneDelay is how long a retransmission waits alone before it goes again,
// on a flow that saw no loss lately (recoveryWait).
func (q *txQueue) loneDelay() time.Duration {
	return max(q.clock.protocolFloor, loneMinDelay)
}

// probeDue returns when a tail-loss probe of flow t may go at the
// earliest at now: its floor after the flow's last segment out
// (probehold.go).
func (q *txQueue) probeDue(t *flowTail, now int64) int64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	return t.at + int64(t.recoveryWait(now, q.loneDelay()))
}

// armLone arms the timer for the lone retransmissions to go off at at,
// unless it goes off before.
func (q *txQueue) armLone(at int64) {
	if q.loneArmed && q.loneAt <= at {
		return
	}
	q.loneArmed, q.loneAt = true, at
	wait := max(time.Duration(at-q.clock.now()), 1)
	if q.loneTimer == nil {
		q.loneTimer = q.clock.afterFuncExact(wait, q.resendLone)
	} else {
		q.loneTimer.Reset(wait)
	}
}

// resendLone is the timer's: it queues the lone retransmissions and
// withheld probes that are due and sends them.
func (q *txQueue) resendLone() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.loneArmed = false
	if q.closed {
		return
	}
	var buf [8]*stack.PacketBuffer
	due, released, next, more := q.tails.lone.due(q.clock.now(), q.tails.windowClosed, buf[:0])
	for _, pkt := range due {
		q.pending, q.segs = append(q.pending, pkt), append(q.segs, parseSegment(pkt))
	}
	// gVisor counted the released probes already.
	q.stats.resent.Add(uint64(len(due) - released))
	q.stats.probesReleased.Add(uint64(released))
	if more {
		q.armLone(next)
	}
	if len(q.pending) > 0 && !q.fragmenting {
		q.flushLocked()
	}
}

// received follows a received TCP segment, whose headers are h and TCP
// header th (its data offset within th): it settles the flow's lone
// retransmission or withheld probe and raises its echo (sackEcho), or
// that of the answer to a handshake sent again (synStamps), and notes a
// peer's SYN (peerStamps).
// fixChecksum tells whether the segment's checksum is complete, to be
// updated. When the segment shows a withheld probe needless, received
// returns the D-SACK block to add to it (probehold.go).
func (q *txQueue) received(h *rxHeaders, th header.TCP, fixChecksum bool) (dsack header.SACKBlock, needless bool) {
	if th.Flags()&header.TCPFlagSyn != 0 {
		q.mu.Lock()
		q.peers.note(h.flow(th), th)
		q.mu.Unlock()
	}
	if th.Flags()&header.TCPFlagAck == 0 {
		return dsack, false
	}
	if q.syns.resent.Load() > 0 {
		q.mu.Lock()
		q.syns.answered(h.flow(th), th, fixChecksum)
		q.mu.Unlock()
	}
	sack := mayCarrySACK(th)
	if !sack && q.tails.lone.n.Load() == 0 {
		return dsack, false
	}
	flow := h.flow(th)
	if !sack && !q.tails.lone.mayBeLone(flow) {
		return dsack, false
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	t := q.tails.flows[flow]
	if t == nil {
		return dsack, false
	}
	now := q.clock.now()
	dsack, needless = q.tails.lone.acked(t, seqnum.Value(th.AckNumber()), now)
	if needless {
		q.stats.probesNeedless.Add(1)
	}
	sacked := sack && sacksAbove(th)
	if sacked {
		t.sackAt, t.recoverTo = now, t.end
		q.clock.lossyAt.Store(now)
	}
	q.tails.lone.recovering(t, sacked || t.sacked && seqnum.Value(th.AckNumber()).LessThan(t.recoverTo))
	if sacked {
		q.tails.raiseEcho(t, th, fixChecksum)
	} else {
		t.sampleRTT(th, now)
	}
	return dsack, needless
}

// sacksAbove reports whether a received TCP segment, whose TCP header th
// has its data offset within it, carries a SACK block above its ACK
// number: a hole at the receiver. A D-SACK block (a duplicate received,
// below the ACK number) is not one: a peer's answer to a needless
// retransmission must not make the flow look lossy.
func sacksAbove(th header.TCP) bool {
	opts := th[header.TCPMinimumSize:th.DataOffset()]
	i := tcpOption(opts, header.TCPOptionSACK)
	if i < 0 || i+1 >= len(opts) {
		return false
	}
	ack := seqnum.Value(th.AckNumber())
	blocks := opts[i+2 : min(i+int(opts[i+1]), len(opts))]
	for ; len(blocks) >= 8; blocks = blocks[8:] {
		if ack.LessThan(seqnum.Value(binary.BigEndian.Uint32(blocks))) {
			return true
		}
	}
	return false
}
