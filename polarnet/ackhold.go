package polarnet

import (
	"time"

	"gvisor.dev/gvisor/pkg/tcpip/stack"
)

// heldACK is a pure ACK the ACK filter keeps back for a later segment of its
// flow to carry. seg.heldAt is when the flow's first ACK of this wait was
// held.
type heldACK struct {
	pkt  *stack.PacketBuffer
	seg  segment
	long bool // held in the long tier
}

// reclaim takes out the held ACKs of the flows segs send on, for the TX
// queue to put back into its batch, where mark weighs them against what
// follows: mostly, a later segment carries them and they are dropped. The
// result is scratch space, valid until the next reclaim or expired.
func (f *ackFilter) reclaim(segs []segment) []heldACK {
	back := f.reclaimed[:0]
	if f.held.len() == 0 {
		return back
	}
	for i := range segs {
		if s := &segs[i]; s.tcp {
			if e, ok := f.held.take(s.flow); ok {
				back = append(back, e)
			}
		}
	}
	f.reclaimed = back[:0]
	return back
}

// holdACKs marks the pure ACKs to hold back: the last segment of their flow
// in the batch, allowed to be elided, and not yet held for their tier's
// delay. One that acknowledges two full-sized segments or more is held only
// briefly (brief): a receiver should not wait longer (RFC 5681 4.2), but a
// request of a few segments is mostly answered within microseconds. So is
// one on a flow that has not answered since its last long hold ran out.
func (f *ackFilter) holdACKs(segs []segment, drop, hold, brief []bool) {
	now := f.clock.now()
	holding := f.held.len()
	for i := range segs {
		a := &segs[i]
		brief[i] = false
		if drop[i] || !a.pureACK() || holding >= maxHeldACKs {
			continue
		}
		last, known := f.history[a.flow]
		if !mayElide(a, last, known) {
			continue
		}
		tier := holdLong
		if !last.answers || uint32(a.ack-last.ack) >= f.holdBytes {
			tier = holdBrief
		}
		if at := a.heldAt; at != 0 && time.Duration(now-at) >= f.held.tiers[tier].delay {
			continue
		}
		if laterOfFlow(segs, drop, i) {
			continue
		}
		hold[i], brief[i] = true, tier == holdBrief
		holding++
		f.stats.ackHeld.Add(1)
		if a.heldAt == 0 {
			a.heldAt = now
		}
	}
}

// laterOfFlow reports whether a segment after segs[i] in the batch, still
// to be sent, belongs to its flow.
func laterOfFlow(segs []segment, drop []bool, i int) bool {
	for j := i + 1; j < len(segs); j++ {
		if !drop[j] && segs[j].tcp && segs[j].flow.same(&segs[i].flow) {
			return true
		}
	}
	return false
}

// keep holds the packets mark chose to hold, in their tiers, taking them
// out of pending (their entries are set to nil).
func (f *ackFilter) keep(pending []*stack.PacketBuffer, segs []segment) {
	for i, h := range f.hold[:len(segs)] {
		if !h {
			continue
		}
		tier := holdLong
		if f.brief[i] {
			tier = holdBrief
		}
		f.held.push(tier, heldACK{pkt: pending[i], seg: segs[i]})
		pending[i] = nil
	}
}

// arm sets the timer for the first held ACK due, unless it is set for that
// time or earlier.
func (f *ackFilter) arm() {
	when, ok := f.held.next()
	if !ok || f.armed && f.armedFor <= when {
		return
	}
	f.armed, f.armedFor = true, when
	wait := max(time.Duration(when-f.clock.now()), 1)
	if f.timer == nil {
		f.timer = f.clock.afterFuncExact(wait, f.fire)
	} else {
		f.timer.Reset(wait)
	}
}

// expired is for the timer's call: it takes out the held ACKs whose delay
// is up, for the TX queue to send, and forgets that their flows answer
// where a long hold ran out. The result is scratch space, as reclaim's.
func (f *ackFilter) expired() []heldACK {
	f.armed = false
	due := f.held.due(f.clock.now(), f.reclaimed[:0])
	for _, e := range due {
		if h, ok := f.history[e.seg.flow]; ok && e.long {
			h.answers = false
			f.history[e.seg.flow] = h
		}
	}
	f.reclaimed = due[:0]
	return due
}

// close stops the timer and lets go of the held ACKs.
func (f *ackFilter) close() {
	if f.timer != nil {
		f.timer.Stop()
	}
	f.held.releaseAll()
}

// maxHeldACKs bounds the ACKs held at once; past it, ACKs leave unheld.
const maxHeldACKs = 1 << 14

// The two ways an ACK is held: up to the configured delay while it
// acknowledges less than two full-sized segments on a flow that answers,
// briefly otherwise.
const (
	holdLong = iota
	holdBrief
	holdTiers
)

// ackHolds keeps the held ACKs, at most one per flow, in a FIFO per tier:
// within a tier every ACK waits as long, so the oldest is always the first
// due.
type ackHolds struct {
	tiers [holdTiers]ackFIFO
}

func newACKHolds(long, brief time.Duration) ackHolds {
	return ackHolds{tiers: [holdTiers]ackFIFO{newACKFIFO(long), newACKFIFO(brief)}}
}

// len is how many ACKs are held.
func (h *ackHolds) len() int { return len(h.tiers[holdLong].index) + len(h.tiers[holdBrief].index) }

// push holds e in tier; its flow must have no entry.
func (h *ackHolds) push(tier int, e heldACK) {
	e.long = tier == holdLong
	h.tiers[tier].push(e)
}

// take removes and returns the ACK held for flow, if any.
func (h *ackHolds) take(flow flowKey) (heldACK, bool) {
	for i := range h.tiers {
		if e, ok := h.tiers[i].take(flow); ok {
			return e, true
		}
	}
	return heldACK{}, false
}

// due appends to out, and removes, the ACKs whose wait is over at now.
func (h *ackHolds) due(now int64, out []heldACK) []heldACK {
	for i := range h.tiers {
		t := &h.tiers[i]
		for len(t.index) > 0 && time.Duration(now-t.oldest().seg.heldAt) >= t.delay {
			out = append(out, t.popOldest())
		}
	}
	return out
}

// next returns when the first held ACK is due; ok is false when none is held.
func (h *ackHolds) next() (when int64, ok bool) {
	for i := range h.tiers {
		t := &h.tiers[i]
		if len(t.index) == 0 {
			continue
		}
		if at := t.oldest().seg.heldAt + int64(t.delay); !ok || at < when {
			when, ok = at, true
		}
	}
	return when, ok
}

// releaseAll drops every held ACK.
func (h *ackHolds) releaseAll() {
	for i := range h.tiers {
		t := &h.tiers[i]
		for len(t.index) > 0 {
			t.popOldest().pkt.DecRef()
		}
	}
}

// ackFIFO is one tier's held ACKs, oldest first. A flow's entry is found by
// its flow in O(1): the filter looks up every segment the TX queue sends,
// and with thousands of connections a scan per segment would cost more
// than the ACKs saved. Taking an entry out of the middle leaves a hole that
// is skipped once it reaches the front.
type ackFIFO struct {
	delay      time.Duration
	ring       []heldACK // a power-of-two size; entry p is ring[p&(len(ring)-1)]
	head, tail uint64    // entries are the positions [head, tail)
	index      map[flowKey]uint64
}

func newACKFIFO(delay time.Duration) ackFIFO {
	return ackFIFO{delay: delay, ring: make([]heldACK, 64), index: make(map[flowKey]uint64)}
}

func (f *ackFIFO) at(p uint64) *heldACK { return &f.ring[p&uint64(len(f.ring)-1)] }

func (f *ackFIFO) push(e heldACK) {
	if f.tail-f.head == uint64(len(f.ring)) {
		grown := make([]heldACK, 2*len(f.ring))
		for p := f.head; p < f.tail; p++ {
			grown[p&uint64(len(grown)-1)] = *f.at(p)
		}
		f.ring = grown
	}
	*f.at(f.tail) = e
	f.index[e.seg.flow] = f.tail
	f.tail++
}

func (f *ackFIFO) take(flow flowKey) (heldACK, bool) {
	p, ok := f.index[flow]
	if !ok {
		return heldACK{}, false
	}
	delete(f.index, flow)
	e := f.at(p)
	out := *e
	*e = heldACK{}
	f.skipHoles()
	return out, true
}

// oldest returns the entry held longest; there must be one.
func (f *ackFIFO) oldest() *heldACK { return f.at(f.head) }

// popOldest removes the entry held longest; there must be one.
func (f *ackFIFO) popOldest() heldACK {
	e := f.at(f.head)
	out := *e
	*e = heldACK{}
	delete(f.index, out.seg.flow)
	f.head++
	f.skipHoles()
	return out
}

func (f *ackFIFO) skipHoles() {
	for f.head < f.tail && f.at(f.head).pkt == nil {
		f.head++
	}
}
