package polarnet

import (
	"time"

	"gvisor.dev/gvisor/pkg/tcpip/stack"
)

// heldACK is a pure ACK the TX queue keeps back for a later segment of its
// flow to carry.
type heldACK struct {
	pkt   *stack.PacketBuffer
	seg   segment
	since int64 // when the flow's first ACK of this wait was held (shard clock)
	long  bool  // held in the long tier
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
		for len(t.index) > 0 && time.Duration(now-t.oldest().since) >= t.delay {
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
		if at := t.oldest().since + int64(t.delay); !ok || at < when {
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
// its flow in O(1): the TX queue looks up every segment it sends, and with
// thousands of connections a scan per segment would cost more than the
// ACKs saved. Taking an entry out of the middle leaves a hole that is
// skipped once it reaches the front.
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
