package polarnet

import (
	"errors"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/polarnet/polarnet/link"
)

// recordingQueue is a link.Queue that keeps what is written: the frames,
// their offload requests and their TCP headers.
type recordingQueue struct {
	mu       sync.Mutex
	sent     []header.TCP
	frames   [][]byte
	offloads []link.TxOffload
}

func (r *recordingQueue) ReadBurst([]link.RxFrame) (int, error) { return 0, nil }
func (r *recordingQueue) WaitRead() error                       { return nil }
func (r *recordingQueue) Interrupt()                            {}
func (r *recordingQueue) WriteBurst(frames []link.TxFrame) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, f := range frames {
		var flat []byte
		for _, s := range f.Segs {
			flat = append(flat, s...)
		}
		ipLen := header.IPv4MinimumSize
		if header.Ethernet(flat).Type() == header.IPv6ProtocolNumber {
			ipLen = header.IPv6MinimumSize
		}
		r.sent = append(r.sent, header.TCP(flat[header.EthernetMinimumSize+ipLen:]))
		r.frames = append(r.frames, flat)
		r.offloads = append(r.offloads, f.Offload)
	}
	return len(frames), nil
}

// acks returns the ACK numbers of what was sent, in order.
func (r *recordingQueue) acks() []uint32 {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []uint32
	for _, s := range r.sent {
		out = append(out, s.AckNumber())
	}
	return out
}

type seg struct {
	port    uint16 // the flow: local port
	seq     uint32 // the sequence number, less one
	flags   header.TCPFlags
	ack     uint32
	window  uint16
	payload int
	sack    bool
	v6      bool // an IPv6 flow: the same ports, other addresses
}

// packet builds an outgoing IPv4/TCP packet as gVisor would hand it to the
// queueing discipline (Ethernet header included).
func packet(s seg) *stack.PacketBuffer {
	var opts []byte
	if s.sack {
		opts = []byte{header.TCPOptionNOP, header.TCPOptionNOP, header.TCPOptionSACK, 10, 0, 0, 0, 1, 0, 0, 0, 2}
	}
	pkt := stack.NewPacketBuffer(stack.PacketBufferOptions{
		ReserveHeaderBytes: 128,
		Payload:            buffer.MakeWithData(make([]byte, s.payload)),
	})
	th := header.TCP(pkt.TransportHeader().Push(header.TCPMinimumSize + len(opts)))
	th.Encode(&header.TCPFields{
		SrcPort: s.port, DstPort: 80, SeqNum: 1 + s.seq, AckNum: s.ack,
		DataOffset: uint8(header.TCPMinimumSize + len(opts)), Flags: s.flags, WindowSize: s.window,
	})
	copy(th[header.TCPMinimumSize:], opts)
	pkt.TransportProtocolNumber = header.TCPProtocolNumber
	if s.v6 {
		ip := header.IPv6(pkt.NetworkHeader().Push(header.IPv6MinimumSize))
		ip.Encode(&header.IPv6Fields{
			PayloadLength: uint16(pkt.Size() - header.IPv6MinimumSize), TransportProtocol: header.TCPProtocolNumber, HopLimit: 64,
			SrcAddr: tcpip.AddrFrom16(netip.MustParseAddr("fd00:198:18::1").As16()), DstAddr: tcpip.AddrFrom16(netip.MustParseAddr("fd00:198:18::2").As16()),
		})
		pkt.NetworkProtocolNumber = header.IPv6ProtocolNumber
	} else {
		ip := header.IPv4(pkt.NetworkHeader().Push(header.IPv4MinimumSize))
		ip.Encode(&header.IPv4Fields{
			TotalLength: uint16(pkt.Size()), Protocol: uint8(header.TCPProtocolNumber), TTL: 64,
			SrcAddr: tcpip.AddrFrom4([4]byte{198, 18, 0, 1}), DstAddr: tcpip.AddrFrom4([4]byte{198, 18, 0, 2}),
		})
		pkt.NetworkProtocolNumber = header.IPv4ProtocolNumber
	}
	header.Ethernet(pkt.LinkHeader().Push(header.EthernetMinimumSize)).Encode(&header.EthernetFields{Type: pkt.NetworkProtocolNumber})
	return pkt
}

const (
	ack    = header.TCPFlagAck
	ackPsh = header.TCPFlagAck | header.TCPFlagPsh
)

// newQueue returns a TX queue writing to lq, as an awake poller's.
func newQueue(lq link.Queue, cfg ACKConfig) *txQueue {
	q := newTxQueue(lq, 0, 1500, new(shardCounters), cfg, newShardClock(func() {}), newFinSACK(), newClosedWindows(), inFinWait1)
	q.pollerAwake.Store(true)
	return q
}

// batch sends a warm-up segment per flow (so the filter knows the flows, with
// ACK number 100 and the given window, as flows that answer), then segs as
// one batch, and returns the ACK numbers that left, warm-ups excluded.
func batch(t *testing.T, cfg ACKConfig, lastWindow uint16, segs ...seg) ([]uint32, *txQueue) {
	t.Helper()
	rq := &recordingQueue{}
	q := newQueue(rq, cfg)
	type flow struct {
		port uint16
		v6   bool
	}
	seen := map[flow]bool{}
	for _, s := range segs {
		if f := (flow{s.port, s.v6}); !seen[f] {
			seen[f] = true
			require.Nil(t, q.WritePacket(packet(seg{port: s.port, flags: ackPsh, ack: 100, window: lastWindow, payload: 1, v6: s.v6})))
		}
	}
	q.flush()
	warm := len(rq.acks())
	for _, s := range segs {
		pkt := packet(s)
		require.Nil(t, q.WritePacket(pkt))
		pkt.DecRef()
	}
	q.flush()
	return rq.acks()[warm:], q
}

func TestACKFilterDrops(t *testing.T) {
	noDelay := ACKConfig{Delay: -1}
	for _, tc := range []struct {
		name string
		segs []seg
		want []uint32
	}{
		{"answer carries the ACK", []seg{{port: 1, flags: ack, ack: 200, window: 500}, {port: 1, flags: ackPsh, ack: 200, window: 500, payload: 64}}, []uint32{200}},
		{"later ACK acknowledges more", []seg{{port: 1, flags: ack, ack: 200, window: 500}, {port: 1, flags: ack, ack: 300, window: 500}}, []uint32{300}},
		{"PSH on a pure ACK changes nothing", []seg{{port: 1, flags: ackPsh, ack: 200, window: 500}, {port: 1, flags: ack, ack: 300, window: 500}}, []uint32{300}},
		{"a FIN carries it too", []seg{{port: 1, flags: ack, ack: 200, window: 500}, {port: 1, flags: ack | header.TCPFlagFin, ack: 200, window: 500}}, []uint32{200}},
		{"IPv6: answer carries the ACK", []seg{{port: 1, flags: ack, ack: 200, window: 500, v6: true}, {port: 1, flags: ackPsh, ack: 200, window: 500, payload: 64, v6: true}}, []uint32{200}},
		{"several ACKs, one answer", []seg{{port: 1, flags: ack, ack: 200, window: 500}, {port: 1, flags: ack, ack: 300, window: 500}, {port: 1, flags: ackPsh, ack: 300, window: 600, payload: 64}}, []uint32{300}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, q := batch(t, noDelay, 500, tc.segs...)
			assert.Equal(t, tc.want, got)
			assert.Equal(t, uint64(len(tc.segs)-len(tc.want)), q.stats.ackFiltered.Load())
		})
	}
}

func TestACKFilterNeverDrops(t *testing.T) {
	noDelay := ACKConfig{Delay: -1}
	for _, tc := range []struct {
		name       string
		lastWindow uint16
		segs       []seg
	}{
		{"another flow follows", 500, []seg{{port: 1, flags: ack, ack: 200, window: 500}, {port: 2, flags: ack, ack: 300, window: 500}}},
		{"SACK blocks", 500, []seg{{port: 1, flags: ack, ack: 200, window: 500, sack: true}, {port: 1, flags: ack, ack: 300, window: 500}}},
		{"duplicate ACK", 500, []seg{{port: 1, flags: ack, ack: 100, window: 500}, {port: 1, flags: ackPsh, ack: 100, window: 500, payload: 10}}},
		{"opens a zero window", 0, []seg{{port: 1, flags: ack, ack: 200, window: 500}, {port: 1, flags: ack, ack: 300, window: 0}}},
		{"later window smaller", 500, []seg{{port: 1, flags: ack, ack: 200, window: 500}, {port: 1, flags: ack, ack: 300, window: 400}}},
		{"later ACK older", 500, []seg{{port: 1, flags: ack, ack: 300, window: 500}, {port: 1, flags: ack, ack: 200, window: 500}}},
		{"later segment resets", 500, []seg{{port: 1, flags: ack, ack: 200, window: 500}, {port: 1, flags: ack | header.TCPFlagRst, ack: 300, window: 500}}},
		{"carries a FIN", 500, []seg{{port: 1, flags: ack | header.TCPFlagFin, ack: 200, window: 500}, {port: 1, flags: ack, ack: 300, window: 500}}},
		{"carries a SYN", 500, []seg{{port: 1, flags: ack | header.TCPFlagSyn, ack: 200, window: 500}, {port: 1, flags: ack, ack: 300, window: 500}}},
		{"carries data", 500, []seg{{port: 1, flags: ackPsh, ack: 200, window: 500, payload: 1}, {port: 1, flags: ack, ack: 300, window: 500}}},
		{"carries a RST", 500, []seg{{port: 1, flags: ack | header.TCPFlagRst, ack: 200, window: 500}, {port: 1, flags: ack, ack: 300, window: 500}}},
		// The later segment would supersede it by number and window: only
		// the opening of the zero window keeps it.
		{"opens a zero window, a later segment would carry it", 0, []seg{{port: 1, flags: ack, ack: 200, window: 500}, {port: 1, flags: ackPsh, ack: 300, window: 500, payload: 10}}},
		{"same ports, other addresses", 500, []seg{{port: 1, flags: ack, ack: 200, window: 500}, {port: 1, flags: ack, ack: 300, window: 500, v6: true}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, q := batch(t, noDelay, tc.lastWindow, tc.segs...)
			assert.Equal(t, []uint32{tc.segs[0].ack, tc.segs[1].ack}, got)
			assert.Zero(t, q.stats.ackFiltered.Load())
		})
	}
	t.Run("unknown flow", func(t *testing.T) {
		rq := &recordingQueue{}
		q := newQueue(rq, noDelay)
		for _, s := range []seg{{port: 9, flags: ack, ack: 200, window: 5}, {port: 9, flags: ack, ack: 300, window: 5}} {
			require.Nil(t, q.WritePacket(packet(s)))
		}
		q.flush()
		assert.Equal(t, []uint32{200, 300}, rq.acks(), "the first ACKs of a flow the filter has not seen pass")
	})
	t.Run("filter off", func(t *testing.T) {
		got, q := batch(t, ACKConfig{DisableFilter: true}, 500, seg{port: 1, flags: ack, ack: 200, window: 500}, seg{port: 1, flags: ack, ack: 300, window: 500})
		assert.Equal(t, []uint32{200, 300}, got)
		assert.Nil(t, q.acks, "a disabled filter is none")
	})
}

// TestACKDelayNeverHolds: the ACKs the filter must never drop are never held
// either, however long the delay: alone in their batch, each leaves at once.
func TestACKDelayNeverHolds(t *testing.T) {
	cfg := ACKConfig{Delay: time.Hour}
	for _, tc := range []struct {
		name       string
		lastWindow uint16
		seg        seg
	}{
		{"SACK blocks", 500, seg{port: 1, flags: ack, ack: 200, window: 500, sack: true}},
		{"duplicate ACK", 500, seg{port: 1, flags: ack, ack: 100, window: 500}},
		{"opens a zero window", 0, seg{port: 1, flags: ack, ack: 200, window: 500}},
		{"carries a FIN", 500, seg{port: 1, flags: ack | header.TCPFlagFin, ack: 200, window: 500}},
		{"carries a SYN", 500, seg{port: 1, flags: ack | header.TCPFlagSyn, ack: 200, window: 500}},
		{"carries a RST", 500, seg{port: 1, flags: ack | header.TCPFlagRst, ack: 200, window: 500}},
		{"carries data", 500, seg{port: 1, flags: ackPsh, ack: 200, window: 500, payload: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, q := batch(t, cfg, tc.lastWindow, tc.seg)
			assert.Equal(t, []uint32{tc.seg.ack}, got)
			assert.Zero(t, q.stats.ackHeld.Load())
			q.Close()
		})
	}
	t.Run("unknown flow", func(t *testing.T) {
		rq := &recordingQueue{}
		q := newQueue(rq, cfg)
		pkt := packet(seg{port: 9, flags: ack, ack: 200, window: 5})
		require.Nil(t, q.WritePacket(pkt))
		pkt.DecRef()
		q.flush()
		assert.Equal(t, []uint32{200}, rq.acks())
		assert.Zero(t, q.stats.ackHeld.Load())
		q.Close()
	})
}

func TestACKDelayHoldsThenReleases(t *testing.T) {
	cfg := ACKConfig{Delay: 50 * time.Millisecond}
	got, q := batch(t, cfg, 500, seg{port: 1, flags: ack, ack: 200, window: 500})
	assert.Empty(t, got, "the lone pure ACK is held")
	assert.Equal(t, uint64(1), q.stats.ackHeld.Load())

	// An answer within the delay carries it: one segment leaves. (It
	// follows the warm-up's byte: at the same sequence number it would be
	// a retransmission, which loneRetransmissions sends again.)
	pkt := packet(seg{port: 1, flags: ackPsh, seq: 1, ack: 200, window: 500, payload: 64})
	require.Nil(t, q.WritePacket(pkt))
	pkt.DecRef()
	q.flush()
	rq := q.queue.(*recordingQueue)
	assert.Equal(t, []uint32{100, 200}, rq.acks(), "warm-up, then the answer alone")
	assert.Equal(t, uint64(1), q.stats.ackFiltered.Load())

	// Without an answer, the ACK leaves when its delay is up.
	pkt = packet(seg{port: 1, flags: ack, ack: 300, window: 500})
	require.Nil(t, q.WritePacket(pkt))
	pkt.DecRef()
	q.flush()
	assert.Len(t, rq.acks(), 2)
	require.Eventually(t, func() bool {
		q.clock.run(q.clock.read())
		return len(rq.acks()) == 3
	}, 5*time.Second, time.Millisecond)
	assert.Equal(t, uint32(300), rq.acks()[2])
}

// send queues segs on q as one batch and flushes it.
func send(t *testing.T, q *txQueue, segs ...seg) {
	t.Helper()
	for _, s := range segs {
		pkt := packet(s)
		require.Nil(t, q.WritePacket(pkt))
		pkt.DecRef()
	}
	q.flush()
}

// TestACKDelayHoldsManyFlows: held ACKs wait outside the batch, so many
// connections acknowledging at once are all held (64 connections, each
// waiting for its answer, filled the batch and sent every ACK before), and
// each answer takes its flow's ACK with it.
func TestACKDelayHoldsManyFlows(t *testing.T) {
	rq := &recordingQueue{}
	q := newQueue(rq, ACKConfig{Delay: time.Hour})
	const flows = 3 * txBatchSize
	var acks, answers []seg
	for port := range uint16(flows) {
		acks = append(acks, seg{port: port + 1, flags: ack, ack: 200, window: 500})
		answers = append(answers, seg{port: port + 1, flags: ackPsh, ack: 200, window: 500, payload: 64})
		send(t, q, seg{port: port + 1, flags: ackPsh, ack: 100, window: 500, payload: 1})
	}
	warm := len(rq.acks())
	require.Equal(t, flows, warm, "first ACKs of unknown flows pass")

	send(t, q, acks...)
	assert.Equal(t, warm, len(rq.acks()), "every flow's ACK is held")
	assert.Equal(t, uint64(flows), q.stats.ackHeld.Load())
	assert.Equal(t, flows, q.acks.held.len())

	// Answers come in another order than the ACKs were held.
	slices.Reverse(answers)
	send(t, q, answers...)
	assert.Equal(t, 2*flows, len(rq.sent), "the answers, and nothing else, left")
	for _, th := range rq.sent[warm:] {
		assert.Len(t, th.Payload(), 64)
	}
	assert.Equal(t, uint64(flows), q.stats.ackFiltered.Load())
	assert.Zero(t, q.acks.held.len())
	q.Close()
}

// TestACKDelayBriefPastTwoSegments: an ACK for two full-sized segments or
// more waits only ackBriefDelay, as RFC 5681 asks of a receiver; below that
// it waits the whole delay. At MTU 1500 a full-sized segment is 1460 bytes.
func TestACKDelayBriefPastTwoSegments(t *testing.T) {
	got, q := batch(t, ACKConfig{Delay: time.Hour}, 500, seg{port: 1, flags: ack, ack: 100 + 2*1460, window: 500})
	require.Empty(t, got)
	assert.Equal(t, 1, q.acks.held.len())
	assert.Len(t, q.acks.held.tiers[holdBrief].index, 1, "two segments' worth waits briefly")
	rq := q.queue.(*recordingQueue)
	require.Eventually(t, func() bool {
		q.clock.run(q.clock.read())
		return len(rq.acks()) == 2
	}, 5*time.Second, time.Millisecond)
	assert.Equal(t, uint32(100+2*1460), rq.acks()[1])
	q.Close()

	got, q = batch(t, ACKConfig{Delay: time.Hour}, 500, seg{port: 1, flags: ack, ack: 100 + 2*1460 - 1, window: 500})
	assert.Empty(t, got, "less is held")
	assert.Len(t, q.acks.held.tiers[holdLong].index, 1, "for the whole delay")
	// The next ACK counts from the last one sent, not the held one: it
	// replaces the held one, and waits briefly at most.
	send(t, q, seg{port: 1, flags: ack, ack: 100 + 2*1460, window: 500})
	assert.Equal(t, uint64(1), q.stats.ackFiltered.Load(), "the held one was dropped")
	assert.Empty(t, q.acks.held.tiers[holdLong].index)
	rq = q.queue.(*recordingQueue)
	require.Eventually(t, func() bool {
		q.clock.run(q.clock.read())
		return len(rq.acks()) == 2
	}, 5*time.Second, time.Millisecond)
	assert.Equal(t, []uint32{100, 100 + 2*1460}, rq.acks())
	q.Close()

	// A brief wait behind a long one on another flow ends on time.
	got, q = batch(t, ACKConfig{Delay: time.Hour}, 500,
		seg{port: 1, flags: ack, ack: 200, window: 500}, seg{port: 2, flags: ack, ack: 100, window: 500})
	require.Equal(t, []uint32{100}, got, "port 2's ACK repeats its warm-up: a duplicate, sent")
	send(t, q, seg{port: 2, flags: ack, ack: 100 + 2*1460, window: 500})
	rq = q.queue.(*recordingQueue)
	require.Eventually(t, func() bool {
		q.clock.run(q.clock.read())
		return len(rq.acks()) == 4
	}, 5*time.Second, time.Millisecond)
	assert.Equal(t, uint32(100+2*1460), rq.acks()[3])
	assert.Len(t, q.acks.held.tiers[holdLong].index, 1, "port 1's ACK still waits")
	q.Close()
}

// TestACKDelayKeepsFirstHoldTime: an ACK that replaces a held one inherits
// its hold time, so a flow's acknowledgement waits at most the delay
// however many ACKs follow each other.
func TestACKDelayKeepsFirstHoldTime(t *testing.T) {
	got, q := batch(t, ACKConfig{Delay: time.Hour}, 500, seg{port: 1, flags: ack, ack: 200, window: 500})
	require.Empty(t, got)
	first := q.acks.held.tiers[holdLong].oldest().seg.heldAt
	require.NotZero(t, first)
	for ackNo := uint32(300); ackNo < 1000; ackNo += 100 {
		send(t, q, seg{port: 1, flags: ack, ack: ackNo, window: 500})
		require.Equal(t, 1, q.acks.held.len())
		assert.Equal(t, ackNo, uint32(q.acks.held.tiers[holdLong].oldest().seg.ack))
		assert.Equal(t, first, q.acks.held.tiers[holdLong].oldest().seg.heldAt)
	}
	q.Close()
}

// TestACKDelayHeldACKGoesFirst: a later segment of the flow that does not
// convey the held ACK (here, a smaller window) takes it out first, so the
// peer sees the flow's segments in the order gVisor made them.
func TestACKDelayHeldACKGoesFirst(t *testing.T) {
	got, q := batch(t, ACKConfig{Delay: time.Hour}, 500, seg{port: 1, flags: ack, ack: 200, window: 500})
	require.Empty(t, got)
	send(t, q, seg{port: 2, flags: ackPsh, ack: 50, window: 500, payload: 8}, seg{port: 1, flags: ackPsh, ack: 200, window: 400, payload: 64})
	rq := q.queue.(*recordingQueue)
	require.Len(t, rq.sent, 4, "warm-up, then three segments")
	assert.Equal(t, []uint32{100, 200, 50, 200}, rq.acks())
	assert.Empty(t, rq.sent[1].Payload(), "the held ACK, first")
	assert.Equal(t, uint16(500), rq.sent[1].WindowSize())
	assert.Len(t, rq.sent[3].Payload(), 64)
	assert.Zero(t, q.stats.ackFiltered.Load())
	q.Close()
}

// narrowQueue takes at most room frames per burst, recording them.
type narrowQueue struct {
	recordingQueue
	room int
}

func (n *narrowQueue) WriteBurst(frames []link.TxFrame) (int, error) {
	return n.recordingQueue.WriteBurst(frames[:min(n.room, len(frames))])
}

func TestTxQueueKeepsWhatAFullRingRefused(t *testing.T) {
	nq := &narrowQueue{room: 2}
	q := newQueue(nq, ACKConfig{DisableFilter: true})
	for i := range 5 {
		pkt := packet(seg{port: 1, flags: ackPsh, ack: uint32(100 + i), window: 500, payload: 10})
		require.Nil(t, q.WritePacket(pkt))
		pkt.DecRef()
	}
	q.flush()
	assert.Equal(t, []uint32{100, 101}, nq.acks())
	assert.True(t, q.backlogged(), "three frames wait for room")
	q.flush()
	q.flush()
	assert.Equal(t, []uint32{100, 101, 102, 103, 104}, nq.acks(), "every frame left, in order")
	assert.False(t, q.backlogged())
	assert.Equal(t, uint64(3+1), q.stats.txRetried.Load(), "refused 3, then 1")
	assert.Zero(t, q.stats.txRingFull.Load(), "nothing dropped")
}

// TestACKDelayReleaseKeepsOrder: a held ACK whose delay runs out while a
// later segment of its flow waits for the next flush leaves before it.
func TestACKDelayReleaseKeepsOrder(t *testing.T) {
	got, q := batch(t, ACKConfig{Delay: time.Millisecond}, 500, seg{port: 1, flags: ack, ack: 200, window: 500})
	require.Empty(t, got)
	pkt := packet(seg{port: 1, flags: ackPsh, ack: 200, window: 400, payload: 64})
	require.Nil(t, q.WritePacket(pkt))
	pkt.DecRef()
	time.Sleep(2 * time.Millisecond)
	q.release()
	rq := q.queue.(*recordingQueue)
	require.Len(t, rq.sent, 3, "warm-up, the held ACK, the segment")
	assert.Empty(t, rq.sent[1].Payload(), "the held ACK first")
	assert.Len(t, rq.sent[2].Payload(), 64)
	q.Close()
}

// TestACKDelayLongOnlyWhereAnswered: an ACK is held long only on a flow
// that sends data (a bulk receiver's ACKs would just arrive late), and not
// again once a long hold ran out, until the flow sends data once more.
func TestACKDelayLongOnlyWhereAnswered(t *testing.T) {
	rq := &recordingQueue{}
	q := newQueue(rq, ACKConfig{Delay: time.Millisecond})
	send(t, q, seg{port: 1, flags: ack, ack: 100, window: 500})
	send(t, q, seg{port: 1, flags: ack, ack: 200, window: 500})
	assert.Len(t, q.acks.held.tiers[holdBrief].index, 1, "a flow that never sent data: brief")
	require.Eventually(t, func() bool {
		q.clock.run(q.clock.read())
		return len(rq.acks()) == 2
	}, 5*time.Second, time.Millisecond)

	send(t, q, seg{port: 1, flags: ackPsh, ack: 200, window: 500, payload: 64})
	send(t, q, seg{port: 1, flags: ack, ack: 300, window: 500})
	assert.Len(t, q.acks.held.tiers[holdLong].index, 1, "once it answers: long")
	require.Eventually(t, func() bool {
		q.clock.run(q.clock.read())
		return len(rq.acks()) == 4
	}, 5*time.Second, time.Millisecond, "out when the delay is up")

	send(t, q, seg{port: 1, flags: ack, ack: 400, window: 500})
	assert.Len(t, q.acks.held.tiers[holdBrief].index, 1, "no answer came: brief again")
	q.Close()
}

// failingWrites refuses every burst with err.
type failingWrites struct {
	recordingQueue
	err error
}

func (f *failingWrites) WriteBurst([]link.TxFrame) (int, error) { return 0, f.err }

// TestTxQueueWriteMeters: every link write is counted in the TX batch
// histogram, and a failed one is logged, unless the link is closed.
func TestTxQueueWriteMeters(t *testing.T) {
	for _, tc := range []struct {
		name   string
		err    error
		logged int
	}{
		{"written", nil, 0},
		{"failed", errors.New("device gone"), 1},
		{"closed", link.ErrClosed, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var lq link.Queue = &recordingQueue{}
			if tc.err != nil {
				lq = &failingWrites{err: tc.err}
			}
			q := newQueue(lq, ACKConfig{DisableFilter: true})
			var refused []int
			q.logWriteError = func(err error, n int) {
				assert.Equal(t, tc.err, err)
				refused = append(refused, n)
			}
			send(t, q, seg{port: 1, flags: ackPsh, ack: 100, window: 500, payload: 10}, seg{port: 1, flags: ackPsh, ack: 101, window: 500, payload: 10})
			batches := q.stats.m.txBatch.snapshot()
			assert.Equal(t, uint64(1), batches.Count())
			assert.Equal(t, uint64(2), batches.Sum)
			assert.Len(t, refused, tc.logged)
			if tc.logged > 0 {
				assert.Equal(t, []int{2}, refused)
				assert.Equal(t, uint64(2), q.stats.txErrors.Load())
			}
		})
	}
}
