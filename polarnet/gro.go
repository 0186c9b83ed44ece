package polarnet

import (
	"encoding/binary"
	"sync/atomic"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/stack/gro"
)

// Receive coalescing. gVisor's TCP costs about the same per segment
// whatever its size, and acknowledges every segment it processes. A peer
// whose MTU is below its message size sends a message as several segments
// that arrive back to back, usually in one RX burst: gVisor's stack/gro
// merges the in-order segments of a flow (same ACK number, flags and
// options, contiguous sequence numbers, all but the last of one size) into
// one packet, which TCP then processes and acknowledges once. The poller
// feeds it each burst and flushes it at the burst's end, so no packet waits
// for a later burst or for a sleeping poller.

// rxGRO is a shard's receive coalescer; only its poller uses it.
type rxGRO struct {
	gro          gro.GRO
	ep           *nicEndpoint
	noDispatcher *atomic.Uint64
	handed       int // packets handed on to the NIC, for flush
}

var _ stack.NetworkDispatcher = (*rxGRO)(nil)

func newRxGRO(ep *nicEndpoint, noDispatcher *atomic.Uint64) *rxGRO {
	g := &rxGRO{ep: ep, noDispatcher: noDispatcher}
	g.gro.Init(true)
	g.gro.Dispatcher = g
	return g
}

// enqueue takes a received packet whose Ethernet header is consumed and
// whose checksums the link or the poller verified. The caller keeps its
// reference; GRO takes one of its own for a packet it holds.
func (g *rxGRO) enqueue(proto tcpip.NetworkProtocolNumber, pkt *stack.PacketBuffer) {
	if !coalescible(proto, pkt) {
		// Everything held goes first, so that packets GRO does not
		// merge keep their place: a pure ACK after a flow's data,
		// above all, which GRO would merge into the held segment,
		// keeping that one's window and losing a window update.
		g.flush()
		g.DeliverNetworkPacket(proto, pkt)
		return
	}
	pkt.NetworkProtocolNumber = proto
	// GRO skips its own checksum and length checks on validated packets;
	// the NIC marks every packet validated anyway.
	pkt.RXChecksumValidated = true
	g.gro.Enqueue(pkt)
}

// markLone sets lone[i] for each frame of a burst, whose TCP flow hashes to
// keys[i], that is the only one of its flow in the burst: GRO has nothing
// to merge it with, and the poller delivers it directly: going through GRO
// for nothing costs CPU (docs/benchmarks.md). Frames that are not TCP, or
// not well formed (key 0), are never lone.
func markLone(keys []uint64, lone []bool) {
	for i, key := range keys {
		lone[i] = key != 0
		for j, other := range keys {
			if j != i && other == key {
				lone[i] = false
				break
			}
		}
	}
}

// tcpFlowHash hashes a received frame's TCP flow: addresses and ports; 0
// when it is not a TCP segment. Two flows may collide: that only sends
// their frames through GRO.
func tcpFlowHash(h *rxHeaders) uint64 {
	if tcpip.TransportProtocolNumber(h.proto) != header.TCPProtocolNumber || len(h.l4) < 4 {
		return 0
	}
	var addrs []byte
	if h.ethType == header.IPv4ProtocolNumber {
		addrs = h.pkt[12:20]
	} else {
		addrs = h.pkt[8:40]
	}
	const mix = 0x9e3779b97f4a7c15 // odd: multiplying by it spreads bits
	hash := uint64(binary.LittleEndian.Uint32(h.l4))
	for ; len(addrs) >= 8; addrs = addrs[8:] {
		hash = (hash ^ binary.LittleEndian.Uint64(addrs)) * mix
	}
	return hash | 1
}

// flush hands on every packet GRO holds. gro.GRO.Flush takes out only the
// first packet of each bucket (it unlinks the packet it stands on, which
// ends its walk of the bucket), so flush calls it until a call hands on
// nothing. A packet left behind waited for a later burst, and a later
// segment of its flow, alone in its burst and so not given to GRO, went
// ahead of it: the receiver saw a hole and answered with SACK blocks on a
// lossless link, and its peer recovered for nothing (docs/benchmarks.md).
func (g *rxGRO) flush() {
	for {
		before := g.handed
		g.gro.Flush()
		if g.handed == before {
			return
		}
	}
}

// DeliverNetworkPacket implements stack.NetworkDispatcher: GRO's output
// goes to the NIC.
func (g *rxGRO) DeliverNetworkPacket(proto tcpip.NetworkProtocolNumber, pkt *stack.PacketBuffer) {
	g.handed++
	if !g.ep.deliver(proto, pkt) {
		g.noDispatcher.Add(1)
	}
}

// DeliverLinkPacket implements stack.NetworkDispatcher.
func (g *rxGRO) DeliverLinkPacket(proto tcpip.NetworkProtocolNumber, pkt *stack.PacketBuffer) {
	if d := g.ep.dispatcher.Load(); d != nil {
		(*d).DeliverLinkPacket(proto, pkt)
	}
}

// coalescible reports whether pkt is a well-formed TCP segment with payload
// in IPv4 without options or fragmentation, or in IPv6 without extension
// headers: what may be merged. It cuts off what follows the IP packet
// (Ethernet pads short frames), since GRO takes everything after the
// headers for payload and would merge padding into the stream; gVisor's
// IP layer trims it only later, too late for a merged packet.
func coalescible(proto tcpip.NetworkProtocolNumber, pkt *stack.PacketBuffer) bool {
	size := pkt.Data().Size()
	var ipLen, total int
	var h []byte
	switch proto {
	case header.IPv4ProtocolNumber:
		var ok bool
		if h, ok = pkt.Data().PullUp(header.IPv4MinimumSize + header.TCPMinimumSize); !ok {
			return false
		}
		ip := header.IPv4(h)
		if !ip.IsValid(size) || ip.HeaderLength() != header.IPv4MinimumSize || ip.Protocol() != uint8(header.TCPProtocolNumber) ||
			ip.More() || ip.FragmentOffset() != 0 {
			return false
		}
		ipLen, total = header.IPv4MinimumSize, int(ip.TotalLength())
	case header.IPv6ProtocolNumber:
		var ok bool
		if h, ok = pkt.Data().PullUp(header.IPv6MinimumSize + header.TCPMinimumSize); !ok {
			return false
		}
		ip := header.IPv6(h)
		if !ip.IsValid(size) || ip.NextHeader() != uint8(header.TCPProtocolNumber) {
			return false
		}
		ipLen, total = header.IPv6MinimumSize, header.IPv6MinimumSize+int(ip.PayloadLength())
	default:
		return false
	}
	if off := int(header.TCP(h[ipLen:]).DataOffset()); off < header.TCPMinimumSize || total-ipLen <= off {
		return false // malformed, or no payload
	}
	if total < size {
		pkt.Data().CapLength(total)
	}
	return true
}
