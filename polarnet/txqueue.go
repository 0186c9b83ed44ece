package polarnet

import (
	"errors"
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
// way out its ACK filter (ackFilter, which owns its state and timer) drops
// pure ACKs a later segment makes redundant, and may hold a pure ACK back
// for a segment to carry it.
type txQueue struct {
	queue    link.Queue
	linkCaps link.Capabilities
	stats    *shardCounters
	clock    *shardClock
	// logWriteError logs a failed link write and how many frames it
	// refused; the shard sets it (nil: not logged).
	logWriteError func(err error, refused int)

	// pollerAwake is set while the poller runs iterations (and will flush).
	pollerAwake atomic.Bool

	mu      sync.Mutex
	pending []*stack.PacketBuffer
	// segs is, per pending packet, its headers as parsed when queued:
	// outside the lock, once, however many flushes the packet waits for.
	segs []segment
	// acks is the ACK filter, nil when disabled; the ACKs it holds are not
	// pending.
	acks *ackFilter
	// retrying counts the packets at the front of pending that a full ring
	// refused in the last flush.
	retrying int
	frames   []link.TxFrame
	iovecs   [][]byte
	closed   bool
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
	// syns restamps retransmitted SYNs, peers raises the echo answering
	// the peer's (synstamp.go).
	syns  synStamps
	peers peerStamps
	// loneTimer sends lone retransmissions again (rtxprobe.go).
	loneTimer tcpip.Timer
	loneArmed bool
	loneAt    int64 // when the armed timer goes off (shard clock)
	// windows keeps pure ACKs within closed windows (closedwnd.go).
	windows *closedWindows
}

// txBacklogMax bounds the packets kept for the next flush when the link's
// ring is full; beyond it they are dropped (TCP retransmits them).
const txBacklogMax = 4 * txBatchSize

var _ stack.QueueingDiscipline = (*txQueue)(nil)

func newTxQueue(q link.Queue, caps link.Capabilities, mtu int, stats *shardCounters, ack ACKConfig, clock *shardClock, sacks *finSACK, windows *closedWindows, finWait func(tcpip.NetworkProtocolNumber, flowKey) bool) *txQueue {
	t := &txQueue{
		queue:    q,
		linkCaps: caps,
		stats:    stats,
		clock:    clock,
		pending:  make([]*stack.PacketBuffer, 0, txBatchSize),
		segs:     make([]segment, 0, txBatchSize),
		frames:   make([]link.TxFrame, txBatchSize),
		iovecs:   make([][]byte, 0, 4*txBatchSize),
		sent:     make([]int, txBatchSize),
		unsent:   make([]bool, txBatchSize),
		sacks:    sacks,
		finWait:  finWait,
		tails:    newTailProbes(windows),
		syns:     synStamps{m: make(map[flowKey]synStamp)},
		peers:    peerStamps{m: make(map[flowKey]peerStamp)},
		windows:  windows,
	}
	t.acks = newACKFilter(ack, mtu, stats, clock, t.release)
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
	q.syns.restamp(&seg, q.clock, q.linkCaps&link.CapTXChecksum == 0)
	if q.peers.again.Load() > 0 {
		q.peers.echo(&seg, q.linkCaps&link.CapTXChecksum == 0)
	}
	copies, due, held := q.tails.observe(pkt, &seg, q.clock, q.loneDelay())
	for _, c := range copies {
		q.pending, q.segs = append(q.pending, c), append(q.segs, parseSegment(c))
	}
	q.stats.resent.Add(uint64(len(copies)))
	if due != 0 {
		q.armLone(due)
	}
	if held {
		q.stats.probesHeld.Add(1)
		return nil
	}
	q.pending = append(q.pending, pkt.IncRef())
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
	for i, pkt := range q.pending {
		pkt.DecRef()
		q.pending[i] = nil
	}
	clear(q.segs)
	q.pending, q.segs = q.pending[:0], q.segs[:0]
	q.retrying = 0
	if q.acks != nil {
		q.acks.close()
	}
	q.tails.releaseAll()
	if q.loneTimer != nil {
		q.loneTimer.Stop()
	}
}

// flush writes out what is pending; the poller calls it every iteration.
// Held ACKs are not pending: they are left to the ACK filter's timer.
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
	if n <= len(q.unsent) {
		return
	}
	q.frames, q.sent, q.unsent = make([]link.TxFrame, n), make([]int, n), make([]bool, n)
}

// flushLocked writes out the batch: the ACK filter brings back into it the
// ACKs it holds for the batch's flows and marks what it drops or holds, and
// what a full ring refuses waits for the next flush.
func (q *txQueue) flushLocked() {
	if q.pendingFragments {
		completeFragmentedUDP(q.pending)
		q.pendingFragments = false
	}
	if q.acks != nil {
		q.putBack(q.acks.reclaim(q.segs))
	}
	n := len(q.pending)
	q.scratch(n)
	segs, unsent := q.segs[:n], q.unsent[:n]
	clear(unsent)
	if q.acks != nil {
		q.acks.mark(segs)
	}
	if frames, sent := q.gather(segs); len(frames) > 0 {
		q.write(frames, sent, unsent)
	}
	if q.acks != nil {
		q.acks.written(q.pending, segs, unsent)
	}
	q.keepUnsent(unsent)
}

// gather makes the frames to write of the pending packets the ACK filter
// does not withhold; sent[i] is frame i's pending index.
func (q *txQueue) gather(segs []segment) (frames []link.TxFrame, sent []int) {
	q.iovecs = q.iovecs[:0]
	frames, sent = q.frames[:0], q.sent[:0]
	for i, pkt := range q.pending {
		if q.acks != nil && q.acks.withheld(i) {
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
	return frames, sent
}

// keepUnsent keeps the packets a full ring refused, in order, for the next
// flush, and lets go of the others. The ACKs the filter now holds are no
// longer pending: their entries are nil.
func (q *txQueue) keepUnsent(unsent []bool) {
	kept := 0
	for i, pkt := range q.pending {
		switch {
		case unsent[i]:
			q.pending[kept], q.segs[kept] = pkt, q.segs[i]
			kept++
		case pkt != nil:
			pkt.DecRef()
		}
	}
	clear(q.pending[kept:])
	clear(q.segs[kept:]) // their header slices would keep sent packets' buffers from the GC
	q.pending, q.segs = q.pending[:kept], q.segs[:kept]
	q.retrying = kept
}

// putBack moves held ACKs back into pending, where they belong in each
// flow's order: after the packets a full ring refused in an earlier flush,
// which gVisor made before them, and before any packet queued since. It
// clears back, whose references are the batch's now.
func (q *txQueue) putBack(back []heldACK) {
	at, n, k := q.retrying, len(q.pending), len(back)
	if k == 0 {
		return
	}
	for range k {
		q.pending, q.segs = append(q.pending, nil), append(q.segs, segment{})
	}
	copy(q.pending[at+k:], q.pending[at:n])
	copy(q.segs[at+k:], q.segs[at:n])
	for j, e := range back {
		q.pending[at+j], q.segs[at+j] = e.pkt, e.seg
	}
	clear(back)
	q.retrying += k
}

// release sends the held ACKs whose delay is up: the ACK filter's timer
// calls it, from the shard's clock on the poller.
func (q *txQueue) release() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return
	}
	q.putBack(q.acks.expired())
	if len(q.pending) > 0 && !q.fragmenting {
		q.flushLocked()
	}
	q.acks.arm()
}

// write hands frames to the link, and counts the write in the shard's
// stats and TX batch histogram. When its ring is full, the packets of the
// frames it refused (sent[i] is frame i's pending index) are marked unsent,
// to go out with the next flush, as long as the backlog stays bounded.
func (q *txQueue) write(frames []link.TxFrame, sent []int, unsent []bool) {
	n, err := q.queue.WriteBurst(frames)
	q.stats.m.txBatch.observe(uint64(len(frames)))
	if err != nil && !errors.Is(err, link.ErrClosed) && q.logWriteError != nil {
		q.logWriteError(err, len(frames)-n)
	}
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

// queued is how many packets wait: the pending ones and the ACKs the
// filter holds.
func (q *txQueue) queued() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := len(q.pending)
	if q.acks != nil {
		n += q.acks.held.len()
	}
	return n
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
