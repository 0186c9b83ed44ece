package polarnet

import "gvisor.dev/gvisor/pkg/tcpip/stack"

// heldACK is a pure ACK the TX queue keeps back for a later segment of its
// flow to carry.
type heldACK struct {
	pkt   *stack.PacketBuffer
	seg   segment
	since int64 // when the flow's first ACK of this wait was held (shard clock)
}

// maxHeldACKs bounds the ACKs held at once; past it, ACKs leave unheld.
const maxHeldACKs = 1 << 14

// ackHold keeps the held ACKs, at most one per flow, oldest first. A flow's
// entry is found by its flow in O(1): the TX queue looks up every segment it
// sends, and with thousands of connections a scan per segment would cost
// more than the ACKs saved. Taking an entry out of the middle leaves a hole
// that is skipped once it reaches the front.
type ackHold struct {
	ring       []heldACK // a power-of-two size; entry p is ring[p&(len(ring)-1)]
	head, tail uint64    // entries are the positions [head, tail)
	index      map[flowKey]uint64
}

func newACKHold() ackHold {
	return ackHold{ring: make([]heldACK, 64), index: make(map[flowKey]uint64)}
}

// len is how many ACKs are held.
func (h *ackHold) len() int { return len(h.index) }

func (h *ackHold) full() bool { return len(h.index) >= maxHeldACKs }

func (h *ackHold) at(p uint64) *heldACK { return &h.ring[p&uint64(len(h.ring)-1)] }

// push holds e, the newest ACK; its flow must have no entry.
func (h *ackHold) push(e heldACK) {
	if h.tail-h.head == uint64(len(h.ring)) {
		grown := make([]heldACK, 2*len(h.ring))
		for p := h.head; p < h.tail; p++ {
			grown[p&uint64(len(grown)-1)] = *h.at(p)
		}
		h.ring = grown
	}
	*h.at(h.tail) = e
	h.index[e.seg.flow] = h.tail
	h.tail++
}

// take removes and returns the ACK held for flow, if any.
func (h *ackHold) take(flow flowKey) (heldACK, bool) {
	p, ok := h.index[flow]
	if !ok {
		return heldACK{}, false
	}
	delete(h.index, flow)
	e := h.at(p)
	out := *e
	*e = heldACK{}
	h.skipHoles()
	return out, true
}

// oldest returns the entry held longest; there must be one.
func (h *ackHold) oldest() *heldACK { return h.at(h.head) }

// popOldest removes the entry held longest; there must be one.
func (h *ackHold) popOldest() heldACK {
	e := h.at(h.head)
	out := *e
	*e = heldACK{}
	delete(h.index, out.seg.flow)
	h.head++
	h.skipHoles()
	return out
}

func (h *ackHold) skipHoles() {
	for h.head < h.tail && h.at(h.head).pkt == nil {
		h.head++
	}
}

// releaseAll drops every held ACK.
func (h *ackHold) releaseAll() {
	for h.len() > 0 {
		h.popOldest().pkt.DecRef()
	}
	h.head, h.tail = 0, 0
}
