package polarnet

import (
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"
)

// verifyTransportChecksum checks the TCP or UDP checksum of an IP packet (the
// Ethernet header already removed) that the link did not validate. The NIC
// tells gVisor that checksums are offloaded so it never checks a frame twice;
// this is the software half of that promise.
//
// It also checks the IPv4 header checksum. It reports false only for a
// checksum it could compute and found wrong.
// Malformed headers pass: gVisor's own parsing drops and counts them. So do
// fragments, whose checksum covers the reassembled datagram.
func verifyTransportChecksum(ethType tcpip.NetworkProtocolNumber, pkt []byte) bool {
	var (
		proto    uint8
		l4       []byte
		src, dst tcpip.Address
	)
	switch ethType {
	case header.IPv4ProtocolNumber:
		ip := header.IPv4(pkt)
		if len(pkt) < header.IPv4MinimumSize {
			return true
		}
		hl, tl := int(ip.HeaderLength()), int(ip.TotalLength())
		if hl < header.IPv4MinimumSize || hl > len(pkt) {
			return true
		}
		// gVisor skips the header checksum too when the NIC claims RX
		// offload, so it is checked here for every frame the link did not.
		if checksum.Checksum(pkt[:hl], 0) != 0xffff {
			return false
		}
		if tl < hl || tl > len(pkt) || ip.More() || ip.FragmentOffset() != 0 {
			return true
		}
		proto, l4 = ip.Protocol(), pkt[hl:tl]
		src, dst = ip.SourceAddress(), ip.DestinationAddress()
	case header.IPv6ProtocolNumber:
		if len(pkt) < header.IPv6MinimumSize {
			return true
		}
		ip := header.IPv6(pkt)
		end := header.IPv6MinimumSize + int(ip.PayloadLength())
		if end > len(pkt) {
			return true
		}
		var ok bool
		if proto, l4, ok = skipIPv6Extensions(ip.NextHeader(), pkt[header.IPv6MinimumSize:end]); !ok {
			return true
		}
		src, dst = ip.SourceAddress(), ip.DestinationAddress()
	default:
		return true
	}
	switch tcpip.TransportProtocolNumber(proto) {
	case header.TCPProtocolNumber:
		if len(l4) < header.TCPMinimumSize {
			return true
		}
	case header.UDPProtocolNumber:
		if len(l4) < header.UDPMinimumSize {
			return true
		}
		if ethType == header.IPv4ProtocolNumber && header.UDP(l4).Checksum() == 0 {
			return true // IPv4 UDP without a checksum
		}
	default:
		return true
	}
	sum := header.PseudoHeaderChecksum(tcpip.TransportProtocolNumber(proto), src, dst, uint16(len(l4)))
	return checksum.Checksum(l4, sum) == 0xffff
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
