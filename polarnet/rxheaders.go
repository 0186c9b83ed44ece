package polarnet

import (
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"

	"github.com/polarnet/polarnet/link"
)

// rxHeaders is what the RX path reads of a received frame, parsed once (by
// parseFrame) and read by each check the poller makes before gVisor sees
// the frame. It holds the headers as they came, malformed or not: each
// reader applies its own rule to what is missing, and a frame none of them
// drops goes to gVisor, which drops and counts what is malformed.
type rxHeaders struct {
	ethType tcpip.NetworkProtocolNumber
	// pkt is what follows the Ethernet header, up to the frame's end
	// (Ethernet padding included): an IP packet, an ARP message, or other.
	pkt []byte
	// hasIP: pkt holds a fixed IPv4 or IPv6 header, so src, dst and end
	// are set.
	hasIP    bool
	src, dst tcpip.Address
	// end is where the IP packet ends by its length field (IPv4 total
	// length; IPv6 fixed header and payload length), not checked against
	// len(pkt) or netLen.
	end int
	// netLen is the length of the IP headers (IPv4 header length; IPv6
	// fixed and extension headers), 0 when they cannot be followed: no
	// fixed header, an IPv4 header length out of bounds, or an IPv6 chain
	// that holds a fragment header or that skipIPv6Extensions cannot
	// follow.
	netLen int
	// fragment: the transport header is not to be read, the packet being
	// an IPv4 fragment or having IPv6 extension headers that hold a
	// fragment header or cannot be followed.
	fragment bool
	// proto is the protocol of what follows the IP headers (set with
	// netLen).
	proto uint8
	// l4 is pkt from netLen on (Ethernet padding included; not cut at
	// end), nil for fragments and when netLen is 0.
	l4 []byte
}

// parseFrame reads the headers of a received frame; a frame shorter than
// an Ethernet header or longer than its buffer reads as nothing (zero
// rxHeaders), for the poller drops it.
func (h *rxHeaders) parseFrame(f *link.RxFrame) {
	if f.Len < header.EthernetMinimumSize || f.Len > len(f.Buf) {
		*h = rxHeaders{}
		return
	}
	frame := f.Buf[:f.Len]
	h.parse(header.Ethernet(frame).Type(), frame[header.EthernetMinimumSize:])
}

// parse reads the headers of pkt, a packet of network protocol ethType
// (what follows an Ethernet header, or an IP packet quoted by an ICMP
// error). Every field of h is set.
func (h *rxHeaders) parse(ethType tcpip.NetworkProtocolNumber, pkt []byte) {
	*h = rxHeaders{ethType: ethType, pkt: pkt}
	switch ethType {
	case header.IPv4ProtocolNumber:
		h.parseIPv4()
	case header.IPv6ProtocolNumber:
		h.parseIPv6()
	}
}

func (h *rxHeaders) parseIPv4() {
	if len(h.pkt) < header.IPv4MinimumSize {
		return
	}
	ip := header.IPv4(h.pkt)
	h.hasIP = true
	h.src, h.dst = ip.SourceAddress(), ip.DestinationAddress()
	h.end = int(ip.TotalLength())
	hl := int(ip.HeaderLength())
	if hl < header.IPv4MinimumSize || hl > len(h.pkt) {
		return
	}
	h.netLen, h.proto = hl, ip.Protocol()
	if ip.More() || ip.FragmentOffset() != 0 {
		h.fragment = true
		return
	}
	h.l4 = h.pkt[hl:]
}

func (h *rxHeaders) parseIPv6() {
	if len(h.pkt) < header.IPv6MinimumSize {
		return
	}
	ip := header.IPv6(h.pkt)
	h.hasIP = true
	h.src, h.dst = ip.SourceAddress(), ip.DestinationAddress()
	h.end = header.IPv6MinimumSize + int(ip.PayloadLength())
	proto, l4, ok := skipIPv6Extensions(ip.NextHeader(), h.pkt[header.IPv6MinimumSize:])
	if !ok {
		h.fragment = true
		return
	}
	h.netLen, h.proto, h.l4 = len(h.pkt)-len(l4), proto, l4
}

// skipIPv6Extensions walks the extension headers that may precede TCP or UDP.
// ok is false for fragments and for chains it cannot follow.
func skipIPv6Extensions(next uint8, b []byte) (proto uint8, l4 []byte, ok bool) {
	for range 8 {
		switch next {
		case uint8(header.IPv6HopByHopOptionsExtHdrIdentifier),
			uint8(header.IPv6RoutingExtHdrIdentifier),
			uint8(header.IPv6DestinationOptionsExtHdrIdentifier):
			if len(b) < 2 {
				return 0, nil, false
			}
			n := (int(b[1]) + 1) * 8
			if n > len(b) {
				return 0, nil, false
			}
			next, b = b[0], b[n:]
		case uint8(header.IPv6FragmentExtHdrIdentifier):
			return 0, nil, false
		default:
			return next, b, true
		}
	}
	return 0, nil, false
}

// tcp returns the TCP header of a segment that is not a fragment, at least
// its fixed part; nil for anything else.
func (h *rxHeaders) tcp() header.TCP {
	if tcpip.TransportProtocolNumber(h.proto) != header.TCPProtocolNumber || len(h.l4) < header.TCPMinimumSize {
		return nil
	}
	return header.TCP(h.l4)
}

// validTCP is tcp for a header whose data offset is within it; nil for
// anything else.
func (h *rxHeaders) validTCP() header.TCP {
	th := h.tcp()
	if th == nil || int(th.DataOffset()) < header.TCPMinimumSize || int(th.DataOffset()) > len(th) {
		return nil
	}
	return th
}

// flow keys the flow of a received TCP segment whose header is th (from
// tcp) as the segments we send on it are.
func (h *rxHeaders) flow(th header.TCP) flowKey {
	return flowKey{src: h.dst, dst: h.src, srcPort: th.DestinationPort(), dstPort: th.SourcePort()}
}

// Received frames keep their headers in a view of their own. gVisor's IPv4
// and IPv6 layers take a reference to the network header's view
// (NetworkHeader().View()) and then read headers again; the buffer sees its
// chunk shared and clones it, copying the whole chunk: 4 to 64 KiB for a
// data segment, once per segment received. With the headers apart, the clone
// copies a 128-byte chunk.

// splitHeadersAbove is the frame length from which the headers get their own
// view: for a shorter frame the clone costs about what the extra view would.
const splitHeadersAbove = 256

// headerSplit returns where a received Ethernet frame whose headers are h
// splits: after its Ethernet, IP and TCP or UDP headers, or 0 to keep it
// whole.
func headerSplit(h *rxHeaders) int {
	frameLen := header.EthernetMinimumSize + len(h.pkt)
	if frameLen <= splitHeadersAbove {
		return 0
	}
	n := headersLength(h)
	if n == 0 || header.EthernetMinimumSize+n == frameLen {
		return 0
	}
	return header.EthernetMinimumSize + n
}

// headersLength returns the length of a packet's IP and TCP or UDP
// headers; 0 for anything else, which stays in one view.
func headersLength(h *rxHeaders) int {
	var l4Headers int
	switch tcpip.TransportProtocolNumber(h.proto) {
	case header.TCPProtocolNumber:
		th := h.tcp()
		if th == nil {
			return 0
		}
		l4Headers = int(th.DataOffset())
		if l4Headers < header.TCPMinimumSize || l4Headers > len(th) {
			return 0
		}
	case header.UDPProtocolNumber:
		l4Headers = header.UDPMinimumSize
		if l4Headers > len(h.l4) {
			return 0
		}
	default:
		return 0
	}
	return h.netLen + l4Headers
}
