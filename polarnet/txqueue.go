package polarnet

import (
	"sync"
	"sync/atomic"
	"time"

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
// the writer flushes at once, so a packet never waits for a wakeup. On the
// way out the ACK filter drops pure ACKs a later segment makes redundant, and
// may hold a pure ACK for a few microseconds for a segment to carry it.
type txQueue struct {
	queue    Queue
	linkCaps Capabilities
	stats    *shardCounters
	filter   bool
	delay    time.Duration // 0: pure ACKs are never held
	clock    *shardClock

	// pollerAwake is set while the poller runs iterations (and will flush).
	pollerAwake atomic.Bool

	mu      sync.Mutex
	pending []*stack.PacketBuffer
	heldAt  []int64 // per pending packet: when the filter first held it (shard clock); 0: not held
	// waiting counts the pending packets the last flush left, when all
	// are held ACKs: until more come, only their timer has work to do.
	waiting int
	frames  []TxFrame
	iovecs  [][]byte
	segs    []segment
	drop    []bool
	hold    []bool
	history map[flowKey]flowHistory
	timer   tcpip.Timer // flushes held ACKs when their delay is up
	armed   bool
	closed  bool
	// fragmenting is set while gVisor is queueing a fragmented datagram:
	// the queue flushes only after its last fragment (see txfrag.go), or
	// once fragmentWait has passed since the first, should the rest never
	// come.
	fragmenting      bool
	fragmentingSince time.Time
	// pendingFragments is set when a fragment is queued, so a flush parses
	// the batch for fragmented datagrams only when there is one.
	pendingFragments bool
	// sent maps frames to pending packets; unsent marks the packets a full
	// ring refused, kept for the next flush.
	sent   []int
	unsent []bool
}

// txBacklogMax bounds the packets kept for the next flush when the link's
// ring is full; beyond it they are dropped (TCP retransmits them).
const txBacklogMax = 4 * txBatchSize

var _ stack.QueueingDiscipline = (*txQueue)(nil)

func newTxQueue(q Queue, caps Capabilities, stats *shardCounters, ack ACKConfig, clock *shardClock) *txQueue {
	t := &txQueue{
		queue:    q,
		linkCaps: caps,
		stats:    stats,
		filter:   !ack.DisableFilter,
		clock:    clock,
		pending:  make([]*stack.PacketBuffer, 0, txBatchSize),
		heldAt:   make([]int64, 0, txBatchSize),
		frames:   make([]TxFrame, txBatchSize),
		iovecs:   make([][]byte, 0, 4*txBatchSize),
		segs:     make([]segment, txBatchSize),
		drop:     make([]bool, txBatchSize),
		hold:     make([]bool, txBatchSize),
		sent:     make([]int, txBatchSize),
		unsent:   make([]bool, txBatchSize),
		history:  make(map[flowKey]flowHistory),
	}
	if t.filter && ack.Delay > 0 {
		t.delay = ack.Delay
	}
	return t
}

// WritePacket implements stack.QueueingDiscipline.
func (q *txQueue) WritePacket(pkt *stack.PacketBuffer) tcpip.Error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return &tcpip.ErrClosedForSend{}
	}
	q.pending = append(q.pending, pkt.IncRef())
	q.heldAt = append(q.heldAt, 0)
	if q.linkCaps&CapTXChecksum != 0 {
		f, isFragment := fragmentOf(pkt)
		more := isFragment && f.more
		if more && !q.fragmenting {
			q.fragmentingSince = time.Now()
		}
		q.fragmenting = more
		q.pendingFragments = q.pendingFragments || isFragment
	}
	if !q.fragmenting && (len(q.pending) >= txBatchSize || !q.pollerAwake.Load()) {
		q.flushLocked()
	}
	return nil
}

// Close implements stack.QueueingDiscipline.
func (q *txQueue) Close() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.closed = true
	if q.timer != nil {
		q.timer.Stop()
	}
	for i, pkt := range q.pending {
		pkt.DecRef()
		q.pending[i] = nil
	}
	q.pending, q.heldAt = q.pending[:0], q.heldAt[:0]
	q.waiting = 0
}

// flush writes out what is pending; the poller calls it every iteration.
// Held ACKs alone are left to their timer: a spinning poller would
// otherwise parse and filter them again on every iteration.
func (q *txQueue) flush() {
	q.mu.Lock()
	if len(q.pending) > q.waiting && (!q.fragmenting || time.Since(q.fragmentingSince) > fragmentWait) {
		q.flushLocked()
	}
	q.mu.Unlock()
}

// fragmentWait bounds how long the poller leaves a fragmented datagram's
// first fragments queued for the rest to come. gVisor queues them back to
// back, but its goroutine can be descheduled in between on a loaded host:
// at 1ms, CI saw first fragments leave without their checksum.
const fragmentWait = 50 * time.Millisecond

func (q *txQueue) flushLocked() {
	n := len(q.pending)
	if n > cap(q.segs) {
		q.segs, q.drop, q.hold = make([]segment, n), make([]bool, n), make([]bool, n)
		q.frames, q.sent, q.unsent = make([]TxFrame, n), make([]int, n), make([]bool, n)
	}
	segs, drop, hold, unsent := q.segs[:n], q.drop[:n], q.hold[:n], q.unsent[:n]
	clear(drop)
	clear(hold)
	clear(unsent)
	if q.pendingFragments {
		completeFragmentedUDP(q.pending)
		q.pendingFragments = false
	}
	if q.filter {
		for i, pkt := range q.pending {
			segs[i] = parseSegment(pkt)
		}
		q.stats.ackFiltered.Add(uint64(filterACKs(segs, drop, q.history)))
		// A full batch goes out whole: held ACKs must not keep it full.
		if q.delay > 0 && n < txBatchSize {
			q.holdACKs(segs, drop, hold)
		}
	}

	q.iovecs = q.iovecs[:0]
	frames, sent := q.frames[:0], q.sent[:0]
	for i, pkt := range q.pending {
		if drop[i] || hold[i] {
			continue
		}
		start := len(q.iovecs)
		vl, off := pkt.AsViewList()
		for v := vl.Front(); v != nil; v = v.Next() {
			b := v.AsSlice()
			if off >= len(b) {
				off -= len(b)
				continue
			}
			q.iovecs = append(q.iovecs, b[off:])
			off = 0
		}
		frames = append(frames, TxFrame{Segs: q.iovecs[start:len(q.iovecs):len(q.iovecs)], Offload: q.offload(pkt)})
		sent = append(sent, i)
	}
	if len(frames) > 0 {
		q.write(frames, sent, unsent)
	}
	if q.filter {
		for i := range hold {
			drop[i] = drop[i] || hold[i] || unsent[i]
		}
		remember(segs, drop, q.history)
	}

	// Keep the held and the unsent packets, in order, for the next flush.
	kept, retrying := 0, false
	for i, pkt := range q.pending {
		if hold[i] || unsent[i] {
			q.pending[kept], q.heldAt[kept] = pkt, q.heldAt[i]
			kept++
			retrying = retrying || unsent[i]
			continue
		}
		pkt.DecRef()
	}
	clear(q.pending[kept:])
	q.pending, q.heldAt = q.pending[:kept], q.heldAt[:kept]
	q.waiting = kept
	if retrying {
		q.waiting = 0
	}
	if kept > 0 && !q.armed {
		q.armed = true
		if q.timer == nil {
			q.timer = q.clock.afterFuncExact(q.delay, q.release)
		} else {
			q.timer.Reset(q.delay)
		}
	}
}

// holdACKs marks the pure ACKs to keep back: the last segment of their flow
// in the batch, allowed to be elided, and not yet held for the full delay.
func (q *txQueue) holdACKs(segs []segment, drop, hold []bool) {
	now := q.clock.now()
	for i := range segs {
		a := &segs[i]
		if drop[i] || !a.pureACK() || !mayElide(a, q.history) {
			continue
		}
		if at := q.heldAt[i]; at != 0 && time.Duration(now-at) >= q.delay {
			continue
		}
		last := true
		for j := i + 1; j < len(segs); j++ {
			if !drop[j] && segs[j].tcp && segs[j].flow == a.flow {
				last = false
				break
			}
		}
		if last {
			hold[i] = true
			if q.heldAt[i] == 0 {
				q.heldAt[i] = now
				q.stats.ackHeld.Add(1)
			}
		}
	}
}

// release flushes the held ACKs whose delay is up; the shard's clock calls
// it on the poller.
func (q *txQueue) release() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.armed = false
	if !q.closed && len(q.pending) > 0 && !q.fragmenting {
		q.flushLocked()
	}
}

// write hands frames to the link. When its ring is full, the packets of the
// frames it refused (sent[i] is frame i's pending index) are marked unsent,
// to go out with the next flush, as long as the backlog stays bounded.
func (q *txQueue) write(frames []TxFrame, sent []int, unsent []bool) {
	n, err := q.queue.WriteBurst(frames)
	var bytes uint64
	for i := range n {
		bytes += uint64(frames[i].Len())
	}
	q.stats.txFrames.Add(uint64(n))
	q.stats.txBytes.Add(bytes)
	q.stats.txBursts.Add(1)
	if refused := len(frames) - n; refused > 0 {
		switch {
		case err != nil:
			q.stats.txErrors.Add(uint64(refused))
		case len(q.pending) > txBacklogMax:
			q.stats.txRingFull.Add(uint64(refused))
		default:
			for _, i := range sent[n:] {
				unsent[i] = true
			}
			q.stats.txRetried.Add(uint64(refused))
		}
	}
	clear(frames)
}

// backlogged reports whether packets wait for room in the link's ring.
func (q *txQueue) backlogged() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	for i := range q.pending {
		if q.heldAt[i] == 0 {
			return true
		}
	}
	return false
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
