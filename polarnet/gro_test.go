package polarnet

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/polarnet/polarnet/link"
)

// groMSS is the payload of a full segment at MTU 1500 with timestamps.
const groMSS = 1448

// delivered is a packet as the NIC received it from GRO: its IP packet.
type delivered struct {
	proto tcpip.NetworkProtocolNumber
	ip    []byte
}

// recordingDispatcher keeps a copy of every packet delivered to the NIC.
type recordingDispatcher struct{ got []delivered }

func (r *recordingDispatcher) DeliverNetworkPacket(proto tcpip.NetworkProtocolNumber, pkt *stack.PacketBuffer) {
	buf := pkt.Data().ToBuffer()
	r.got = append(r.got, delivered{proto: proto, ip: buf.Flatten()})
	buf.Release()
}

func (r *recordingDispatcher) DeliverLinkPacket(tcpip.NetworkProtocolNumber, *stack.PacketBuffer) {}

// newTestGRO returns a coalescer whose NIC records what it is given.
func newTestGRO(t *testing.T) (*rxGRO, *recordingDispatcher, *atomic.Uint64) {
	t.Helper()
	rec := &recordingDispatcher{}
	ep := newNICEndpoint(link.Info{MTU: 1500}, 1500, nil)
	ep.Attach(rec)
	var noDispatcher atomic.Uint64
	return newRxGRO(ep, &noDispatcher), rec, &noDispatcher
}

// groSeg describes a received TCP segment.
type groSeg struct {
	port    uint16 // the flow: the sender's port
	seq     uint32
	ack     uint32 // acknowledged past the peer's first sequence number
	flags   header.TCPFlags
	window  uint16
	payload []byte
	trailer int // bytes after the IP packet, as Ethernet padding
	v6      bool
	udp     bool // the IPv4 header says UDP (the rest is still a TCP header)
	sack    bool // a SACK block follows the timestamp option
}

var (
	groSrc4, groDst4 = tcpip.AddrFrom4([4]byte{198, 18, 0, 1}), tcpip.AddrFrom4([4]byte{198, 18, 0, 2})
	groSrc6          = tcpip.AddrFrom16(netip.MustParseAddr("fd00:198:18::1").As16())
	groDst6          = tcpip.AddrFrom16(netip.MustParseAddr("fd00:198:18::2").As16())
)

// frame builds s as the poller hands it over: an Ethernet frame in a packet
// whose link header is consumed. Segments carry a timestamp option, as the
// kernel's and gVisor's do.
func (s groSeg) frame() (tcpip.NetworkProtocolNumber, *stack.PacketBuffer) {
	opts := []byte{header.TCPOptionNOP, header.TCPOptionNOP, header.TCPOptionTS, 10, 0, 0, 0, 7, 0, 0, 0, 9}
	if s.sack {
		opts = append(opts, header.TCPOptionNOP, header.TCPOptionNOP, header.TCPOptionSACK, 10, 0, 0, 0, 9, 0, 0, 0, 10)
	}
	tcpLen := header.TCPMinimumSize + len(opts)
	tcpHdr := make([]byte, tcpLen)
	header.TCP(tcpHdr).Encode(&header.TCPFields{
		SrcPort: s.port, DstPort: 80, SeqNum: s.seq, AckNum: 1 + s.ack,
		DataOffset: uint8(tcpLen), Flags: s.flags, WindowSize: s.window,
	})
	copy(tcpHdr[header.TCPMinimumSize:], opts)
	var ip []byte
	proto := header.IPv4ProtocolNumber
	if s.v6 {
		proto = header.IPv6ProtocolNumber
		ip = make([]byte, header.IPv6MinimumSize)
		header.IPv6(ip).Encode(&header.IPv6Fields{
			PayloadLength: uint16(tcpLen + len(s.payload)), TransportProtocol: header.TCPProtocolNumber,
			HopLimit: 64, SrcAddr: groSrc6, DstAddr: groDst6,
		})
	} else {
		ip = make([]byte, header.IPv4MinimumSize)
		l4 := header.TCPProtocolNumber
		if s.udp {
			l4 = header.UDPProtocolNumber
		}
		header.IPv4(ip).Encode(&header.IPv4Fields{
			TotalLength: uint16(header.IPv4MinimumSize + tcpLen + len(s.payload)),
			Protocol:    uint8(l4), TTL: 64, SrcAddr: groSrc4, DstAddr: groDst4,
		})
		header.IPv4(ip).SetChecksum(^header.IPv4(ip).CalculateChecksum())
	}
	eth := make([]byte, header.EthernetMinimumSize)
	header.Ethernet(eth).Encode(&header.EthernetFields{Type: proto})
	frame := bytes.Join([][]byte{eth, ip, tcpHdr, s.payload, make([]byte, s.trailer)}, nil)
	pkt := stack.NewPacketBuffer(stack.PacketBufferOptions{Payload: buffer.MakeWithData(frame)})
	if _, ok := pkt.LinkHeader().Consume(header.EthernetMinimumSize); !ok {
		panic("short frame")
	}
	return proto, pkt
}

// feed hands segments to g as one burst would, without the final flush.
func feed(g *rxGRO, segs ...groSeg) {
	for _, s := range segs {
		proto, pkt := s.frame()
		g.enqueue(proto, pkt)
		pkt.DecRef()
	}
}

// tcpOf splits a delivered IP packet into its TCP header and payload, and
// checks that the IP length covers exactly what was delivered.
func tcpOf(t *testing.T, d delivered) (header.TCP, []byte) {
	t.Helper()
	var rest []byte
	switch d.proto {
	case header.IPv4ProtocolNumber:
		ip := header.IPv4(d.ip)
		require.Equal(t, len(d.ip), int(ip.TotalLength()), "IPv4 total length")
		rest = d.ip[header.IPv4MinimumSize:]
	case header.IPv6ProtocolNumber:
		ip := header.IPv6(d.ip)
		require.Equal(t, len(d.ip), header.IPv6MinimumSize+int(ip.PayloadLength()), "IPv6 payload length")
		rest = d.ip[header.IPv6MinimumSize:]
	default:
		t.Fatalf("delivered protocol %d", d.proto)
	}
	th := header.TCP(rest)
	return th, rest[th.DataOffset():]
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rand.Uint32())
	}
	return b
}

// stream cuts data into segments of size mss of flow port, starting at seq;
// the last one carries PSH if push.
func stream(port uint16, seq uint32, data []byte, mss int, push, v6 bool) []groSeg {
	var segs []groSeg
	for off := 0; off < len(data); off += mss {
		end := min(off+mss, len(data))
		s := groSeg{port: port, seq: seq + uint32(off), flags: header.TCPFlagAck, window: 500, payload: data[off:end], v6: v6}
		if push && end == len(data) {
			s.flags |= header.TCPFlagPsh
		}
		segs = append(segs, s)
	}
	return segs
}

// TestGROMergesABurst: the segments of a 4 KiB message cut at MSS 1448 (two
// full, the last shorter with PSH) and a longer run of full segments each
// reach the NIC as one packet carrying every byte in order.
func TestGROMergesABurst(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		for _, size := range []int{4096, 6 * groMSS} {
			name := fmt.Sprintf("%s/%dB", map[bool]string{false: "v4", true: "v6"}[v6], size)
			t.Run(name, func(t *testing.T) {
				g, rec, _ := newTestGRO(t)
				msg := randomBytes(size)
				segs := stream(7, 1000, msg, groMSS, true, v6)
				feed(g, segs[:len(segs)-1]...)
				assert.Empty(t, rec.got, "full segments without PSH wait for the rest")
				feed(g, segs[len(segs)-1])
				require.Len(t, rec.got, 1, "PSH delivers the merged segment at once")
				g.flush()
				require.Len(t, rec.got, 1)
				th, payload := tcpOf(t, rec.got[0])
				assert.Equal(t, msg, payload, "every byte, in order")
				assert.Equal(t, uint32(1000), th.SequenceNumber())
				assert.Equal(t, header.TCPFlagAck|header.TCPFlagPsh, th.Flags())
			})
		}
	}
}

// TestGROFlushDeliversWhatItHolds: the burst's end delivers segments still
// waiting for more.
func TestGROFlushDeliversWhatItHolds(t *testing.T) {
	g, rec, _ := newTestGRO(t)
	msg := randomBytes(3 * groMSS)
	feed(g, stream(7, 0, msg, groMSS, false, false)...)
	assert.Empty(t, rec.got)
	g.flush()
	require.Len(t, rec.got, 1)
	_, payload := tcpOf(t, rec.got[0])
	assert.Equal(t, msg, payload)
}

// TestGROFlushEmptiesEveryBucket: a flush hands on every packet held, also
// where flows share a bucket (gVisor's GRO has 8 of up to 8 packets each).
func TestGROFlushEmptiesEveryBucket(t *testing.T) {
	g, rec, _ := newTestGRO(t)
	const flows = 40
	for port := range uint16(flows) {
		feed(g, stream(1000+port, 0, randomBytes(groMSS), groMSS, false, false)...)
	}
	g.flush()
	assert.Equal(t, flows, len(rec.got))
	g.flush()
	assert.Equal(t, flows, len(rec.got), "nothing left")
}

// TestGROKeepsFlowsApart: interleaved segments of two flows are merged per
// flow.
func TestGROKeepsFlowsApart(t *testing.T) {
	g, rec, _ := newTestGRO(t)
	a, b := randomBytes(3*groMSS), randomBytes(3*groMSS)
	sa, sb := stream(7, 0, a, groMSS, false, false), stream(8, 5000, b, groMSS, false, false)
	for i := range sa {
		feed(g, sa[i], sb[i])
	}
	g.flush()
	require.Len(t, rec.got, 2)
	byPort := map[uint16][]byte{}
	for _, d := range rec.got {
		th, payload := tcpOf(t, d)
		byPort[th.SourcePort()] = payload
	}
	assert.Equal(t, a, byPort[7])
	assert.Equal(t, b, byPort[8])
}

// TestGRONeverMergesAcrossAGap: a missing segment splits the run; the
// receiver's TCP sees the hole.
func TestGRONeverMergesAcrossAGap(t *testing.T) {
	g, rec, _ := newTestGRO(t)
	msg := randomBytes(5 * groMSS)
	segs := stream(7, 0, msg, groMSS, false, false)
	feed(g, segs[0], segs[1], segs[3], segs[4])
	g.flush()
	require.Len(t, rec.got, 2)
	th0, p0 := tcpOf(t, rec.got[0])
	th1, p1 := tcpOf(t, rec.got[1])
	assert.Equal(t, uint32(0), th0.SequenceNumber())
	assert.Equal(t, msg[:2*groMSS], p0)
	assert.Equal(t, uint32(3*groMSS), th1.SequenceNumber())
	assert.Equal(t, msg[3*groMSS:], p1)
}

// TestGROCutsPadding: bytes after the IP packet (Ethernet padding of a short
// frame) never reach the stream.
func TestGROCutsPadding(t *testing.T) {
	g, rec, _ := newTestGRO(t)
	full, tail := randomBytes(groMSS), randomBytes(5)
	feed(g,
		groSeg{port: 7, seq: 0, flags: header.TCPFlagAck, window: 500, payload: full},
		groSeg{port: 7, seq: groMSS, flags: header.TCPFlagAck | header.TCPFlagPsh, window: 500, payload: tail, trailer: 7})
	g.flush()
	require.Len(t, rec.got, 1)
	_, payload := tcpOf(t, rec.got[0])
	assert.Equal(t, append(full, tail...), payload)
}

// TestGROKeepsPureACKs: a segment without payload (here a window update
// right after the flow's data) is never merged, and reaches the NIC after
// the data it followed, with its own window.
func TestGROKeepsPureACKs(t *testing.T) {
	for _, flags := range []header.TCPFlags{header.TCPFlagAck, header.TCPFlagAck | header.TCPFlagFin} {
		t.Run(flags.String(), func(t *testing.T) {
			g, rec, _ := newTestGRO(t)
			data := randomBytes(2 * groMSS)
			feed(g, stream(7, 0, data, groMSS, false, false)...)
			feed(g, groSeg{port: 7, seq: 2 * groMSS, flags: flags, window: 9000})
			require.Len(t, rec.got, 2, "the held data went first")
			_, payload := tcpOf(t, rec.got[0])
			assert.Equal(t, data, payload)
			th, payload := tcpOf(t, rec.got[1])
			assert.Empty(t, payload)
			assert.Equal(t, uint16(9000), th.WindowSize())
			assert.Equal(t, flags, th.Flags())
		})
	}
}

// TestGROPassesOtherPacketsInOrder: packets GRO does not merge (not TCP,
// IPv4 options, malformed lengths) leave in their place, after what it held.
func TestGROPassesOtherPacketsInOrder(t *testing.T) {
	g, rec, noDispatcher := newTestGRO(t)
	data := randomBytes(groMSS)
	feed(g, groSeg{port: 7, seq: 0, flags: header.TCPFlagAck, window: 500, payload: data})

	// A UDP datagram.
	feed(g, groSeg{port: 7, seq: groMSS, flags: header.TCPFlagAck, window: 500, payload: randomBytes(10), udp: true})
	require.Len(t, rec.got, 2)
	_, payload := tcpOf(t, rec.got[0])
	assert.Equal(t, data, payload)
	assert.Equal(t, uint8(header.UDPProtocolNumber), header.IPv4(rec.got[1].ip).Protocol())

	// A segment whose IP length claims more than the frame holds goes
	// through as it is, for gVisor to drop and count.
	proto, pkt := groSeg{port: 7, seq: 0, flags: header.TCPFlagAck, window: 500, payload: randomBytes(100)}.frame()
	short := stack.NewPacketBuffer(stack.PacketBufferOptions{Payload: buffer.MakeWithData(append(make([]byte, header.EthernetMinimumSize), pkt.Data().AsRange().ToSlice()[:80]...))})
	pkt.DecRef()
	_, ok := short.LinkHeader().Consume(header.EthernetMinimumSize)
	require.True(t, ok)
	g.enqueue(proto, short)
	short.DecRef()
	require.Len(t, rec.got, 3)
	assert.Len(t, rec.got[2].ip, 80)
	assert.Zero(t, noDispatcher.Load())
}

// TestGROWithoutDispatcher: packets for a detached NIC are counted, not
// lost silently.
func TestGROWithoutDispatcher(t *testing.T) {
	g, _, noDispatcher := newTestGRO(t)
	g.ep.Attach(nil)
	feed(g, stream(7, 0, randomBytes(3*groMSS), groMSS, false, false)...)
	g.flush()
	assert.Equal(t, uint64(1), noDispatcher.Load(), "one merged packet")
}

// discardDispatcher drops what it is given.
type discardDispatcher struct{}

func (discardDispatcher) DeliverNetworkPacket(tcpip.NetworkProtocolNumber, *stack.PacketBuffer) {}
func (discardDispatcher) DeliverLinkPacket(tcpip.NetworkProtocolNumber, *stack.PacketBuffer)    {}

// BenchmarkGROOverhead is what GRO adds to a segment it cannot merge (a
// whole 4 KiB message with PSH, as at MTU 9000 or 65535): the price paid
// where it does not help, against what it saves in gVisor's TCP where it
// does (docs/benchmarks.md).
func BenchmarkGROOverhead(b *testing.B) {
	ep := newNICEndpoint(link.Info{MTU: 65535}, 65535, nil)
	ep.Attach(discardDispatcher{})
	var noDispatcher atomic.Uint64
	g := newRxGRO(ep, &noDispatcher)
	proto, pkt := groSeg{port: 7, flags: header.TCPFlagAck | header.TCPFlagPsh, window: 500, payload: randomBytes(4096)}.frame()
	defer pkt.DecRef()
	b.Run("direct", func(b *testing.B) {
		for b.Loop() {
			ep.deliver(proto, pkt)
		}
	})
	b.Run("gro", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			g.enqueue(proto, pkt)
			g.flush()
		}
	})
}

// rxFrame is the Ethernet frame of s as a link receives it, with room to
// spare in its buffer.
func (s groSeg) rxFrame() link.RxFrame {
	proto, pkt := s.frame()
	defer pkt.DecRef()
	eth := make([]byte, header.EthernetMinimumSize)
	header.Ethernet(eth).Encode(&header.EthernetFields{Type: proto})
	buf := pkt.Data().ToBuffer()
	defer buf.Release()
	frame := append(eth, buf.Flatten()...)
	return link.RxFrame{Buf: append(frame, make([]byte, 64)...), Len: len(frame)}
}

// TestMarkLone: a frame goes around GRO only when no other frame of its TCP
// flow is in the burst; what is not TCP never does.
func TestMarkLone(t *testing.T) {
	rxFrame := groSeg.rxFrame
	ack := header.TCPFlagAck
	burst := []link.RxFrame{
		rxFrame(groSeg{port: 1, seq: 1, flags: ack, payload: []byte("a")}),           // flow 1, again below
		rxFrame(groSeg{port: 2, seq: 1, flags: ack, payload: []byte("b")}),           // alone
		rxFrame(groSeg{port: 1, seq: 2, flags: ack}),                                 // flow 1's pure ACK
		rxFrame(groSeg{port: 2, seq: 1, flags: ack, payload: []byte("c"), v6: true}), // alone: IPv6 is another flow
		rxFrame(groSeg{port: 3, seq: 1, flags: ack, payload: []byte("d"), udp: true}),
		{Buf: make([]byte, 10), Len: 10}, // shorter than an Ethernet header
		{Buf: make([]byte, 10), Len: 99}, // longer than its buffer
	}
	keys, lone := make([]uint64, len(burst)), make([]bool, len(burst))
	for i := range burst {
		var h rxHeaders
		h.parseFrame(&burst[i])
		keys[i] = tcpFlowHash(&h)
	}
	markLone(keys, lone)
	assert.Equal(t, []bool{false, true, false, true, false, false, false}, lone)
}

// TestParseBurstOneFlow: a burst is one flow's, and what it wakes stays on
// the poller's P, when every frame is a segment of one connection; another
// connection, a frame that is not TCP or one too short to parse makes it
// several.
func TestParseBurstOneFlow(t *testing.T) {
	ack := header.TCPFlagAck
	seg := func(port uint16, seq uint32, data string) link.RxFrame {
		return groSeg{port: port, seq: seq, flags: ack, payload: []byte(data)}.rxFrame()
	}
	udp := groSeg{port: 1, seq: 1, flags: ack, payload: []byte("u"), udp: true}.rxFrame()
	short := link.RxFrame{Buf: make([]byte, 10), Len: 10}
	for _, tc := range []struct {
		name  string
		burst []link.RxFrame
		want  bool
	}{
		{"one segment", []link.RxFrame{seg(1, 1, "a")}, true},
		{"one connection's segments and ACK", []link.RxFrame{seg(1, 1, "a"), seg(1, 2, "b"), seg(1, 3, "")}, true},
		{"two connections", []link.RxFrame{seg(1, 1, "a"), seg(2, 1, "b")}, false},
		{"a UDP datagram", []link.RxFrame{seg(1, 1, "a"), udp}, false},
		{"a frame too short", []link.RxFrame{seg(1, 1, "a"), short}, false},
		{"UDP alone", []link.RxFrame{udp}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := len(tc.burst)
			s := &shard{rx: tc.burst, rxHdrs: make([]rxHeaders, n), flowKeys: make([]uint64, n)}
			assert.Equal(t, tc.want, s.parseBurst(n))
			assert.Equal(t, uint64(n), s.stats.rxFrames.Load())
		})
	}
}
