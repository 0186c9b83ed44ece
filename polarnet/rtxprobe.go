package polarnet

import (
	"sync/atomic"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
)

// loneRetransmissions sends again a retransmission that was lost with
// nothing sent after it, which only the RTO would repair: gVisor's RACK
// retransmits from its reordering timer without sending new data (rack.go,
// DoRecovery) and arms no tail-loss probe during recovery, so no later
// segment's SACK can show the retransmission lost, and a lost tail-loss
// probe is in the same state. In captures of exchanges at 5% loss, every
// RTO of a polarnet sender followed such a retransmission. So when a
// flow's last data segment is a retransmission and no segment of the flow
// has come in or gone out for TCPConfig.MinRecoveryTimer (the tail-loss
// probe's floor), the TX queue sends it once more: lost, it is repaired;
// delivered, its duplicate draws the ACK that was lost. Not into a closed
// window, where the retransmission is a zero window probe.
//
// It is the TX queue's, used under its lock but for n and buckets.
type loneRetransmissions struct {
	// n counts the flows with a lone retransmission, and buckets them by
	// their ports (loneBucket): the poller reads these without the lock to
	// pass over the segments of other flows.
	n       atomic.Int32
	buckets [loneBuckets]atomic.Int32
	// waiting holds those flows, and some that no longer are.
	waiting []*flowTail
}

const loneBuckets = 256

// loneBucket buckets a flow (keyed as we send) by its ports.
func loneBucket(f flowKey) int { return int(f.srcPort*31+f.dstPort) % loneBuckets }

// mayBeLone reports whether flow f may have a lone retransmission.
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
// flow's last data segment.
func (l *loneRetransmissions) follow(t *flowTail, pkt *stack.PacketBuffer, now int64) {
	if t.rtxPkt != nil {
		t.rtxPkt.DecRef()
	} else {
		l.count(t, 1)
		l.waiting = append(l.waiting, t)
	}
	t.rtxPkt, t.rtxAt = pkt.IncRef(), now
}

// settle forgets flow t's lone retransmission: something came or went.
func (l *loneRetransmissions) settle(t *flowTail) {
	if t.rtxPkt != nil {
		t.rtxPkt.DecRef()
		t.rtxPkt = nil
		l.count(t, -1)
	}
}

// due takes out the retransmissions alone for delay at now (each with its
// reference) and returns when the next is due, if any.
func (l *loneRetransmissions) due(now int64, delay time.Duration, out []*stack.PacketBuffer) ([]*stack.PacketBuffer, int64, bool) {
	next, any := int64(0), false
	kept := l.waiting[:0]
	for _, t := range l.waiting {
		switch {
		case t.rtxPkt == nil:
		case now-t.rtxAt >= int64(delay):
			out = append(out, t.rtxPkt)
			t.rtxPkt = nil
			l.count(t, -1)
		default:
			kept = append(kept, t)
			if at := t.rtxAt + int64(delay); !any || at < next {
				next, any = at, true
			}
		}
	}
	clear(l.waiting[len(kept):])
	l.waiting = kept
	return out, next, any
}

// loneDelay is how long a retransmission waits alone before it goes again.
func (q *txQueue) loneDelay() time.Duration {
	return max(q.clock.protocolFloor, loneMinDelay)
}

// armLone arms the timer for the lone retransmissions, if it is not.
func (q *txQueue) armLone(at int64) {
	if q.loneArmed {
		return
	}
	q.loneArmed = true
	wait := max(time.Duration(at-q.clock.now()), 1)
	if q.loneTimer == nil {
		q.loneTimer = q.clock.afterFuncExact(wait, q.resendLone)
	} else {
		q.loneTimer.Reset(wait)
	}
}

// resendLone is the timer's: it queues the lone retransmissions that are
// due and sends them.
func (q *txQueue) resendLone() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.loneArmed = false
	if q.closed {
		return
	}
	var buf [8]*stack.PacketBuffer
	due, next, more := q.tails.lone.due(q.clock.now(), q.loneDelay(), buf[:0])
	for _, pkt := range due {
		seg := parseSegment(pkt)
		if _, closed := q.windows.closed(seg.flow); closed {
			pkt.DecRef()
			continue
		}
		q.pending, q.segs = append(q.pending, pkt), append(q.segs, seg)
	}
	if more {
		q.armLone(next)
	}
	if len(q.pending) > 0 && !q.fragmenting {
		q.flushLocked()
	}
}

// received follows a received TCP segment, whose headers are h and TCP
// header th (its data offset within th): it settles the flow's lone
// retransmission and raises its echo (sackEcho). fixChecksum tells whether
// the segment's checksum is complete, to be updated.
func (q *txQueue) received(h *rxHeaders, th header.TCP, fixChecksum bool) {
	if th.Flags()&header.TCPFlagAck == 0 {
		return
	}
	flow := h.flow(th)
	echo := int(th.DataOffset()) > tsOnlyHeader
	if !echo && !q.tails.lone.mayBeLone(flow) {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	t := q.tails.flows[flow]
	if t == nil {
		return
	}
	q.tails.lone.settle(t)
	if echo {
		q.tails.raiseEcho(t, th, fixChecksum)
	}
}
