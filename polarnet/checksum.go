package polarnet

import (
	"encoding/binary"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"
)

// verifyTransportChecksum checks the TCP or UDP checksum of a received
// packet that the link did not validate. The NIC tells gVisor that
// checksums are offloaded so it never checks a frame twice; this is the
// software half of that promise.
//
// It also checks the IPv4 header checksum. It reports false only for a
// checksum it could compute and found wrong.
// Malformed headers pass: gVisor's own parsing drops and counts them. So do
// fragments, whose checksum covers the reassembled datagram. The checksum
// covers the packet up to its length field's end, not Ethernet padding.
func verifyTransportChecksum(h *rxHeaders) bool {
	switch h.ethType {
	case header.IPv4ProtocolNumber:
		if h.netLen == 0 {
			return true
		}
		// gVisor skips the header checksum too when the NIC claims RX
		// offload, so it is checked here for every frame the link did not.
		if checksum.Checksum(h.pkt[:h.netLen], 0) != 0xffff {
			return false
		}
	case header.IPv6ProtocolNumber:
	default:
		return true
	}
	if h.l4 == nil || h.end < h.netLen || h.end > len(h.pkt) {
		return true // a fragment, malformed, or a length past the frame
	}
	l4 := h.pkt[h.netLen:h.end]
	switch tcpip.TransportProtocolNumber(h.proto) {
	case header.TCPProtocolNumber:
		if len(l4) < header.TCPMinimumSize {
			return true
		}
	case header.UDPProtocolNumber:
		if len(l4) < header.UDPMinimumSize {
			return true
		}
		if h.ethType == header.IPv4ProtocolNumber && header.UDP(l4).Checksum() == 0 {
			return true // IPv4 UDP without a checksum
		}
	default:
		return true
	}
	sum := header.PseudoHeaderChecksum(tcpip.TransportProtocolNumber(h.proto), h.src, h.dst, uint16(len(l4)))
	return checksum.Checksum(l4, sum) == 0xffff
}

// putTCPUint32 writes v at offset at of th and, when fixChecksum (the
// segment carries its complete checksum), updates the checksum for it
// (RFC 1624, eqn. 3) over the 16-bit words it spans: at need not be even.
func putTCPUint32(th header.TCP, at int, v uint32, fixChecksum bool) {
	from, to := at&^1, (at+5)&^1
	var was [6]byte
	old := was[:copy(was[:], th[from:to])]
	binary.BigEndian.PutUint32(th[at:], v)
	if fixChecksum {
		sum := checksum.Combine(^th.Checksum(), ^checksum.Checksum(old, 0))
		th.SetChecksum(^checksum.Combine(sum, checksum.Checksum(th[from:to], 0)))
	}
}
