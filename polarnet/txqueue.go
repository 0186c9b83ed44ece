package polarnet

import (
	"sync"
	"sync/atomic"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/polarnet/polarnet/link"
)

// txBatchSize is how many frames the TX queue collects before it writes them
// out without waiting for the end of the poll iteration.
const txBatchSize = 64

// txQueue is the NIC's queueing discipline: gVisor hands it every outgoing
// packet, it collects them and writes them to the link queue in bursts. The
// shard's poller flushes it once per poll iteration; while the poller sleeps
// the writer flushes at once, so a packet never waits for a wakeup. On the
// way out the ACK filter drops pure ACKs a later segment makes redundant, and
// may hold a pure ACK back for a segment to carry it (ackfilter.go).
type txQueue struct {
	queue    link.Queue
	linkCaps link.Capabilities
	stats    *shardCounters
	filter   bool
	delay    time.Duration // 0: pure ACKs are never held
	// holdBytes: a pure ACK is held up to delay while it acknowledges less
	// than this much beyond the flow's last ACK sent (two full-sized
	// segments), and only briefly past that.
	holdBytes uint32
	clock     *shardClock

	// pollerAwake is set while the poller runs iterations (and will flush).
	pollerAwake atomic.Bool

	mu      sync.Mutex
	pending []*stack.PacketBuffer
	// heldAt is, per pending packet, when its flow's ACK was first held
	// (shard clock); 0: not held.
	heldAt []int64
	// segs is, per pending packet, its headers as parsed when queued:
	// outside the lock, once, however many flushes the packet waits for.
	segs []segment
	held ackHolds
	// retrying counts the packets at the front of pending that a full ring
	// refused in the last flush.
	retrying int
	frames   []link.TxFrame
	iovecs   [][]byte
	drop     []bool
	hold     []bool
	brief    []bool // of the held: in the brief tier
	history  map[flowKey]flowHistory
	timer    tcpip.Timer // flushes held ACKs when their delay is up
	armed    bool
	armedFor int64 // when the armed timer fires (shard clock)
	closed   bool
	// reclaimed is scratch space for held ACKs brought back into a flush.
	reclaimed []heldACK
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

	// sacks adds SACK blocks to the pure ACKs of flows past their FIN
	// (finsack.go); finWait tells whether a flow is in FIN_WAIT_1.
	sacks   *finSACK
	finWait func(tcpip.NetworkProtocolNumber, flowKey) bool
	// tails keeps flows' last data segments (see tailProbes).
	tails *tailProbes
	// windows keeps pure ACKs within closed windows (closedwnd.go).
	windows *closedWindows
}

// txBacklogMax bounds the packets kept for the next flush when the link's
// ring is full; beyond it they are dropped (TCP retransmits them).
const txBacklogMax = 4 * txBatchSize

var _ stack.QueueingDiscipline = (*txQueue)(nil)

func newTxQueue(q link.Queue, caps link.Capabilities, mtu int, stats *shardCounters, ack ACKConfig, clock *shardClock, sacks *finSACK, windows *closedWindows, finWait func(tcpip.NetworkProtocolNumber, flowKey) bool) *txQueue {
	t := &txQueue{
		queue:     q,
		linkCaps:  caps,
		stats:     stats,
		filter:    !ack.DisableFilter,
		holdBytes: 2 * uint32(max(mtu-header.IPv4MinimumSize-header.TCPMinimumSize, 1)),
		clock:     clock,
		pending:   make([]*stack.PacketBuffer, 0, txBatchSize),
		heldAt:    make([]int64, 0, txBatchSize),
		segs:      make([]segment, 0, txBatchSize),
		frames:    make([]link.TxFrame, txBatchSize),
		iovecs:    make([][]byte, 0, 4*txBatchSize),
		drop:      make([]bool, txBatchSize),
		hold:      make([]bool, txBatchSize),
		brief:     make([]bool, txBatchSize),
		sent:      make([]int, txBatchSize),
		unsent:    make([]bool, txBatchSize),
		history:   make(map[flowKey]flowHistory),
		sacks:     sacks,
		finWait:   finWait,
		tails:     newTailProbes(windows),
		windows:   windows,
	}
	if t.filter && ack.Delay > 0 {
		t.delay = ack.Delay
	}
	t.held = newACKHolds(t.delay, min(t.delay, ackBriefDelay))
	return t
}

// WritePacket implements stack.QueueingDiscipline.
func (q *txQueue) WritePacket(pkt *stack.PacketBuffer) tcpip.Error {
	seg := parseSegment(pkt)
	q.windows.clamp(&seg, q.linkCaps&link.CapTXChecksum == 0)
	if q.sacks.concerns(&seg) {
		q.followSACK(pkt, &seg)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return &tcpip.ErrClosedForSend{}
	}
	for _, c := range q.tails.observe(pkt, &seg, q.clock) {
		q.pending, q.heldAt, q.segs = append(q.pending, c), append(q.heldAt, 0), append(q.segs, parseSegment(c))
	}
	q.pending = append(q.pending, pkt.IncRef())
	q.heldAt = append(q.heldAt, 0)
	q.segs = append(q.segs, seg)
	if q.linkCaps&link.CapTXChecksum != 0 {
		f, isFragment := fragmentOfHeader(pkt.NetworkProtocolNumber, seg.network)
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

// followSACK shows finSACK an outgoing segment and, when it has blocks for
// it, gives the segment headers of its own that carry them.
func (q *txQueue) followSACK(pkt *stack.PacketBuffer, seg *segment) {
	var buf [header.TCPMaxSACKBlocks]header.SACKBlock
	proto := pkt.NetworkProtocolNumber
	if blocks := q.sacks.sent(seg, proto, q.clock.now(), q.finWait, buf[:0]); len(blocks) > 0 {
		seg.frame = withSACK(pkt.LinkHeader().Slice(), seg, blocks, proto, q.linkCaps&link.CapTXChecksum == 0)
	}
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
	clear(q.segs)
	q.pending, q.heldAt, q.segs = q.pending[:0], q.heldAt[:0], q.segs[:0]
	q.retrying = 0
	q.held.releaseAll()
	q.tails.releaseAll()
}

// flush writes out what is pending; the poller calls it every iteration.
// Held ACKs are not pending: they are left to their timer.
func (q *txQueue) flush() {
	q.mu.Lock()
	if len(q.pending) > 0 && (!q.fragmenting || time.Since(q.fragmentingSince) > fragmentWait) {
		q.flushLocked()
	}
	q.mu.Unlock()
}

// fragmentWait bounds how long the poller leaves a fragmented datagram's
// first fragments queued for the rest to come. gVisor queues them back to
// back, but its goroutine can be descheduled in between on a loaded host:
// at 1ms, CI saw first fragments leave without their checksum.
const fragmentWait = 50 * time.Millisecond

// scratch makes the per-flush scratch space hold n packets.
func (q *txQueue) scratch(n int) {
	if n <= len(q.drop) {
		return
	}
	q.drop, q.hold, q.brief = make([]bool, n), make([]bool, n), make([]bool, n)
	q.frames, q.sent, q.unsent = make([]link.TxFrame, n), make([]int, n), make([]bool, n)
}

func (q *txQueue) flushLocked() {
	if q.pendingFragments {
		completeFragmentedUDP(q.pending)
		q.pendingFragments = false
	}
	if q.filter {
		q.reclaimHeld()
	}
	n := len(q.pending)
	q.scratch(n)
	segs, drop, hold, brief, unsent := q.segs[:n], q.drop[:n], q.hold[:n], q.brief[:n], q.unsent[:n]
	clear(drop)
	clear(hold)
	clear(unsent)
	if q.filter {
		q.stats.ackFiltered.Add(uint64(filterACKs(segs, drop, q.heldAt, q.history)))
		if q.delay > 0 {
			q.holdACKs(segs, drop, hold, brief)
		}
	}

	q.iovecs = q.iovecs[:0]
	frames, sent := q.frames[:0], q.sent[:0]
	for i, pkt := range q.pending {
		if drop[i] || hold[i] {
			continue
		}
		start := len(q.iovecs)
		if f := segs[i].frame; f != nil {
			q.iovecs = append(q.iovecs, f)
		} else {
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
		}
		frames = append(frames, link.TxFrame{Segs: q.iovecs[start:len(q.iovecs):len(q.iovecs)], Offload: q.offload(pkt, &segs[i])})
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

	// Hold the held, keep the unsent, in order, for the next flush.
	kept := 0
	for i, pkt := range q.pending {
		switch {
		case hold[i]:
			tier := holdLong
			if brief[i] {
				tier = holdBrief
			}
			q.held.push(tier, heldACK{pkt: pkt, seg: segs[i], since: q.heldAt[i]})
		case unsent[i]:
			q.pending[kept], q.heldAt[kept], segs[kept] = pkt, q.heldAt[i], segs[i]
			kept++
		default:
			pkt.DecRef()
		}
	}
	clear(q.pending[kept:])
	clear(segs[kept:]) // their header slices would keep sent packets' buffers from the GC
	q.pending, q.heldAt, q.segs = q.pending[:kept], q.heldAt[:kept], q.segs[:kept]
	q.retrying = kept
	q.armLocked()
}

// reclaimHeld brings back into the batch the held ACKs
// of the flows it sends on, for the filter to weigh them against what
// follows: mostly, a later segment carries them and they are dropped.
func (q *txQueue) reclaimHeld() {
	if q.held.len() == 0 {
		return
	}
	back := q.reclaimed[:0]
	for i := range q.pending {
		if s := &q.segs[i]; s.tcp {
			if e, ok := q.held.take(s.flow); ok {
				back = append(back, e)
			}
		}
	}
	q.putBack(back)
	clear(back)
	q.reclaimed = back[:0]
}

// putBack returns held ACKs to the pending packets, where they belong in
// each flow's order: after the packets a full ring refused in an earlier
// flush, which gVisor made before them, and before any packet queued since.
func (q *txQueue) putBack(back []heldACK) {
	at, n, k := q.retrying, len(q.pending), len(back)
	if k == 0 {
		return
	}
	for range k {
		q.pending, q.heldAt, q.segs = append(q.pending, nil), append(q.heldAt, 0), append(q.segs, segment{})
	}
	copy(q.pending[at+k:], q.pending[at:n])
	copy(q.heldAt[at+k:], q.heldAt[at:n])
	copy(q.segs[at+k:], q.segs[at:n])
	for j, e := range back {
		q.pending[at+j], q.heldAt[at+j], q.segs[at+j] = e.pkt, e.since, e.seg
	}
	q.retrying += k
}

// holdACKs marks the pure ACKs to hold back: the last segment of their flow
// in the batch, allowed to be elided, and not yet held for their tier's
// delay. One that acknowledges two full-sized segments or more is held only
// briefly (brief): a receiver should not wait longer (RFC 5681 4.2), but a
// request of a few segments is mostly answered within microseconds. So is
// one on a flow that has not answered since its last long hold ran out.
func (q *txQueue) holdACKs(segs []segment, drop, hold, brief []bool) {
	now := q.clock.now()
	holding := q.held.len()
	for i := range segs {
		a := &segs[i]
		brief[i] = false
		if drop[i] || !a.pureACK() || holding >= maxHeldACKs {
			continue
		}
		last, known := q.history[a.flow]
		if !mayElide(a, last, known) {
			continue
		}
		tier := holdLong
		if !last.answers || uint32(a.ack-last.ack) >= q.holdBytes {
			tier = holdBrief
		}
		if at := q.heldAt[i]; at != 0 && time.Duration(now-at) >= q.held.tiers[tier].delay {
			continue
		}
		if laterOfFlow(segs, drop, i) {
			continue
		}
		hold[i], brief[i] = true, tier == holdBrief
		holding++
		q.stats.ackHeld.Add(1)
		if q.heldAt[i] == 0 {
			q.heldAt[i] = now
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

// armLocked sets the timer for the first held ACK due, unless it is set for
// that time or earlier.
func (q *txQueue) armLocked() {
	when, ok := q.held.next()
	if !ok || q.armed && q.armedFor <= when {
		return
	}
	q.armed, q.armedFor = true, when
	wait := max(time.Duration(when-q.clock.now()), 1)
	if q.timer == nil {
		q.timer = q.clock.afterFuncExact(wait, q.release)
	} else {
		q.timer.Reset(wait)
	}
}

// release sends the held ACKs whose delay is up; the shard's clock calls
// it on the poller.
func (q *txQueue) release() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.armed = false
	if q.closed {
		return
	}
	due := q.held.due(q.clock.now(), q.reclaimed[:0])
	for _, e := range due {
		if h, ok := q.history[e.seg.flow]; ok && e.long {
			h.answers = false
			q.history[e.seg.flow] = h
		}
	}
	q.putBack(due)
	clear(due)
	q.reclaimed = due[:0]
	if len(q.pending) > 0 && !q.fragmenting {
		q.flushLocked()
	}
	q.armLocked()
}

// write hands frames to the link. When its ring is full, the packets of the
// frames it refused (sent[i] is frame i's pending index) are marked unsent,
// to go out with the next flush, as long as the backlog stays bounded.
func (q *txQueue) write(frames []link.TxFrame, sent []int, unsent []bool) {
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
	return len(q.pending) > 0
}

// offload translates gVisor's GSO options into link offload requests, and
// seeds the pseudo-header checksum of packets gVisor left blank because the
// NIC advertises TX checksum offload.
func (q *txQueue) offload(pkt *stack.PacketBuffer, seg *segment) link.TxOffload {
	if q.linkCaps&link.CapTXChecksum == 0 {
		return link.TxOffload{}
	}
	l3 := uint16(header.EthernetMinimumSize + len(seg.network))
	l4 := seg.transport
	gso := pkt.GSOOptions
	if gso.Type != stack.GSONone && gso.NeedsCsum {
		off := link.TxOffload{
			NeedsChecksum:  true,
			ChecksumStart:  l3,
			ChecksumOffset: gso.CsumOffset,
		}
		if payload := pkt.Data().Size(); gso.MSS > 0 && payload > int(gso.MSS) {
			off.GSO = link.GSOTCPv4
			if gso.Type == stack.GSOTCPv6 {
				off.GSO = link.GSOTCPv6
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
		return link.TxOffload{}
	}
	if len(l4) < int(csumOffset)+2 {
		return link.TxOffload{}
	}
	// Read the addresses off the header directly: pkt.Network() boxes the
	// header in an interface, an allocation per packet.
	var src, dst tcpip.Address
	switch nh := seg.network; pkt.NetworkProtocolNumber {
	case header.IPv4ProtocolNumber:
		src, dst = header.IPv4(nh).SourceAddress(), header.IPv4(nh).DestinationAddress()
	case header.IPv6ProtocolNumber:
		src, dst = header.IPv6(nh).SourceAddress(), header.IPv6(nh).DestinationAddress()
	default:
		return link.TxOffload{}
	}
	length := uint16(len(l4) + pkt.Data().Size())
	sum := header.PseudoHeaderChecksum(pkt.TransportProtocolNumber, src, dst, length)
	l4[csumOffset] = byte(sum >> 8)
	l4[csumOffset+1] = byte(sum)
	return link.TxOffload{NeedsChecksum: true, ChecksumStart: l3, ChecksumOffset: csumOffset}
}

// udpChecksumOffset is where the checksum sits in a UDP header.
const udpChecksumOffset = 6
