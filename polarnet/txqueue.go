package polarnet

import (
	"sync"
	"sync/atomic"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
)

// txBatchSize is how many frames the TX queue collects before it writes them
// out without waiting for the end of the poll iteration.
const txBatchSize = 64

// txQueue is the NIC's queueing discipline: gVisor hands it every outgoing
// packet, it collects them and writes them to the link queue in bursts. The
// shard's poller flushes it once per poll iteration; while the poller sleeps
// the writer flushes at once, so a packet never waits for a wakeup.
type txQueue struct {
	queue    Queue
	linkCaps Capabilities
	stats    *shardCounters

	// pollerAwake is set while the poller runs iterations (and will flush).
	pollerAwake atomic.Bool

	mu      sync.Mutex
	pending []*stack.PacketBuffer
	frames  []TxFrame
	segs    [][]byte
	closed  bool
}

var _ stack.QueueingDiscipline = (*txQueue)(nil)

func newTxQueue(q Queue, caps Capabilities, stats *shardCounters) *txQueue {
	return &txQueue{
		queue:    q,
		linkCaps: caps,
		stats:    stats,
		pending:  make([]*stack.PacketBuffer, 0, txBatchSize),
		frames:   make([]TxFrame, txBatchSize),
		segs:     make([][]byte, 0, 4*txBatchSize),
	}
}

// WritePacket implements stack.QueueingDiscipline.
func (q *txQueue) WritePacket(pkt *stack.PacketBuffer) tcpip.Error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return &tcpip.ErrClosedForSend{}
	}
	q.pending = append(q.pending, pkt.IncRef())
	if len(q.pending) >= txBatchSize || !q.pollerAwake.Load() {
		q.flushLocked()
	}
	return nil
}

// Close implements stack.QueueingDiscipline.
func (q *txQueue) Close() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.closed = true
	q.releaseLocked(0)
}

// flush writes out what is pending; the poller calls it every iteration.
func (q *txQueue) flush() {
	q.mu.Lock()
	if len(q.pending) > 0 {
		q.flushLocked()
	}
	q.mu.Unlock()
}

func (q *txQueue) flushLocked() {
	q.segs = q.segs[:0]
	frames := q.frames[:len(q.pending)]
	for i, pkt := range q.pending {
		start := len(q.segs)
		vl, off := pkt.AsViewList()
		for v := vl.Front(); v != nil; v = v.Next() {
			b := v.AsSlice()
			if off >= len(b) {
				off -= len(b)
				continue
			}
			q.segs = append(q.segs, b[off:])
			off = 0
		}
		frames[i] = TxFrame{Segs: q.segs[start:len(q.segs):len(q.segs)], Offload: q.offload(pkt)}
	}
	n, err := q.queue.WriteBurst(frames)
	var bytes uint64
	for i := range n {
		bytes += uint64(frames[i].Len())
	}
	q.stats.txFrames.Add(uint64(n))
	q.stats.txBytes.Add(bytes)
	q.stats.txBursts.Add(1)
	if dropped := len(frames) - n; dropped > 0 {
		if err != nil {
			q.stats.txErrors.Add(uint64(dropped))
		} else {
			q.stats.txRingFull.Add(uint64(dropped))
		}
	}
	for i := range frames {
		frames[i] = TxFrame{}
	}
	q.releaseLocked(0)
}

func (q *txQueue) releaseLocked(from int) {
	for i := from; i < len(q.pending); i++ {
		q.pending[i].DecRef()
		q.pending[i] = nil
	}
	q.pending = q.pending[:from]
}

// offload translates gVisor's GSO options into link offload requests, and
// seeds the pseudo-header checksum of packets gVisor left blank because the
// NIC advertises TX checksum offload.
func (q *txQueue) offload(pkt *stack.PacketBuffer) TxOffload {
	if q.linkCaps&CapTXChecksum == 0 {
		return TxOffload{}
	}
	l3 := uint16(header.EthernetMinimumSize + len(pkt.NetworkHeader().Slice()))
	l4 := pkt.TransportHeader().Slice()
	gso := pkt.GSOOptions
	if gso.Type != stack.GSONone && gso.NeedsCsum {
		off := TxOffload{
			NeedsChecksum:  true,
			ChecksumStart:  l3,
			ChecksumOffset: gso.CsumOffset,
		}
		if payload := pkt.Data().Size(); gso.MSS > 0 && payload > int(gso.MSS) {
			off.GSO = GSOTCPv4
			if gso.Type == stack.GSOTCPv6 {
				off.GSO = GSOTCPv6
			}
			off.GSOSize = gso.MSS
			off.HeaderLen = l3 + uint16(len(l4))
		}
		return off
	}
	var csumOffset uint16
	switch pkt.TransportProtocolNumber {
	case header.TCPProtocolNumber:
		csumOffset = header.TCPChecksumOffset
	case header.UDPProtocolNumber:
		csumOffset = udpChecksumOffset
	default:
		return TxOffload{}
	}
	if len(l4) < int(csumOffset)+2 {
		return TxOffload{}
	}
	// Read the addresses off the header directly: pkt.Network() boxes the
	// header in an interface, an allocation per packet.
	var src, dst tcpip.Address
	switch nh := pkt.NetworkHeader().Slice(); pkt.NetworkProtocolNumber {
	case header.IPv4ProtocolNumber:
		src, dst = header.IPv4(nh).SourceAddress(), header.IPv4(nh).DestinationAddress()
	case header.IPv6ProtocolNumber:
		src, dst = header.IPv6(nh).SourceAddress(), header.IPv6(nh).DestinationAddress()
	default:
		return TxOffload{}
	}
	length := uint16(len(l4) + pkt.Data().Size())
	sum := header.PseudoHeaderChecksum(pkt.TransportProtocolNumber, src, dst, length)
	l4[csumOffset] = byte(sum >> 8)
	l4[csumOffset+1] = byte(sum)
	return TxOffload{NeedsChecksum: true, ChecksumStart: l3, ChecksumOffset: csumOffset}
}

// udpChecksumOffset is where the checksum sits in a UDP header.
const udpChecksumOffset = 6
