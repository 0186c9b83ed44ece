package polarnet

import (
	"sync"
	"sync/atomic"

	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/seqnum"
)

// closedWindows keeps our pure ACKs acceptable to a peer whose receive
// window is closed. gVisor sends a pure ACK with the sequence number
// SND.NXT; when the peer's window closed below it (gVisor's receiver
// rounds its right edge down to its window scale, so a window that fills
// may end before data already sent), the peer takes the ACK for an
// out-of-window segment (RFC 9293 3.10.7.4) and drops it, window update
// and all. If that peer is a gVisor stack that waits for this very ACK to
// drain its send buffer and read again, both ends stall for good. Linux
// never sends a pure ACK past the peer's window (tcp_acceptable_seq): the
// engine does the same, for the only case that needs it, a closed window,
// whose edge is the peer's ACK number alone. Other flows cost RX a header
// read per TCP frame and TX one atomic load per pure ACK.
type closedWindows struct {
	n     atomic.Int32 // len(flows)
	mu    sync.Mutex
	flows map[flowKey]seqnum.Value // keyed as we send; the peer's ACK number
}

// maxClosedWindows bounds the flows kept: past it, all are forgotten (a
// flow still closed is back on its peer's next segment).
const maxClosedWindows = 1 << 16

func newClosedWindows() *closedWindows {
	return &closedWindows{flows: make(map[flowKey]seqnum.Value)}
}

// received follows a received packet whose headers are h.
func (w *closedWindows) received(h *rxHeaders) {
	th := h.tcp()
	if th == nil {
		return
	}
	flags, zero := th.Flags(), th.WindowSize() == 0
	if flags&header.TCPFlagAck == 0 || !zero && w.n.Load() == 0 {
		return
	}
	key, ack := h.flow(th), seqnum.Value(th.AckNumber())
	w.mu.Lock()
	defer w.mu.Unlock()
	was, known := w.flows[key]
	switch {
	case flags&(header.TCPFlagSyn|header.TCPFlagRst) != 0:
		delete(w.flows, key)
	case known && ack.LessThan(was):
		// Reordered: older than what set the entry.
	case zero:
		if !known && len(w.flows) >= maxClosedWindows {
			clear(w.flows)
		}
		w.flows[key] = ack
	default:
		delete(w.flows, key)
	}
	w.n.Store(int32(len(w.flows)))
}

// closed reports whether the peer of flow last advertised a closed window,
// and its ACK number then.
func (w *closedWindows) closed(flow flowKey) (seqnum.Value, bool) {
	if w.n.Load() == 0 {
		return 0, false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	ack, ok := w.flows[flow]
	return ack, ok
}

// clamp moves an outgoing pure ACK's sequence number back to the edge of
// its peer's closed window, if it is past it. fullChecksum tells whether
// the segment carries its complete checksum, to be updated; otherwise the
// link completes it later.
func (w *closedWindows) clamp(s *segment, fullChecksum bool) {
	if !s.tcp || s.payload != 0 || s.flags&^header.TCPFlagPsh != header.TCPFlagAck {
		return
	}
	edge, ok := w.closed(s.flow)
	th := header.TCP(s.transport)
	seq := th.SequenceNumber()
	if !ok || !edge.LessThan(seqnum.Value(seq)) {
		return
	}
	putTCPUint32(th, header.TCPSeqNumOffset, uint32(edge), fullChecksum)
}
