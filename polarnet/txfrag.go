package polarnet

import (
	"encoding/binary"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
)

// With TX checksum offload advertised, gVisor leaves a UDP datagram's
// checksum to the link, and then fragments the datagram when it exceeds the
// MTU. No link can complete a checksum that spans fragments, so the TX queue
// holds a datagram's fragments until the last one is queued (gVisor queues
// them back to back) and completes the checksum in software.

// ipFragment describes an outgoing packet that is an IP fragment.
type ipFragment struct {
	src, dst tcpip.Address
	id       uint32
	proto    uint8 // the datagram's transport protocol
	first    bool
	more     bool
}

// fragmentOf reports whether pkt is an IP fragment, and which.
func fragmentOf(pkt *stack.PacketBuffer) (ipFragment, bool) {
	return fragmentOfHeader(pkt.NetworkProtocolNumber, pkt.NetworkHeader().Slice())
}

// fragmentOfHeader is fragmentOf for a network header already sliced.
func fragmentOfHeader(proto tcpip.NetworkProtocolNumber, nh []byte) (ipFragment, bool) {
	switch proto {
	case header.IPv4ProtocolNumber:
		if len(nh) < header.IPv4MinimumSize {
			return ipFragment{}, false
		}
		ip := header.IPv4(nh)
		if !ip.More() && ip.FragmentOffset() == 0 {
			return ipFragment{}, false
		}
		return ipFragment{src: ip.SourceAddress(), dst: ip.DestinationAddress(), id: uint32(ip.ID()),
			proto: ip.Protocol(), first: ip.FragmentOffset() == 0, more: ip.More()}, true
	case header.IPv6ProtocolNumber:
		// gVisor puts the fragment header right after the fixed header
		// (polarnet adds no other extension headers).
		if len(nh) < header.IPv6MinimumSize+header.IPv6FragmentHeaderSize ||
			header.IPv6(nh).NextHeader() != header.IPv6FragmentHeader {
			return ipFragment{}, false
		}
		ip, frag := header.IPv6(nh), nh[header.IPv6MinimumSize:]
		offsetFlags := binary.BigEndian.Uint16(frag[2:])
		return ipFragment{src: ip.SourceAddress(), dst: ip.DestinationAddress(), id: binary.BigEndian.Uint32(frag[4:]),
			proto: frag[0], first: offsetFlags>>3 == 0, more: offsetFlags&1 != 0}, true
	}
	return ipFragment{}, false
}

// sameDatagram reports whether two fragments belong to one datagram.
func (f ipFragment) sameDatagram(g ipFragment) bool {
	return f.id == g.id && f.proto == g.proto && f.src == g.src && f.dst == g.dst
}

// completeFragmentedUDP fills in the checksum of every fragmented UDP
// datagram in pkts whose checksum gVisor left blank.
func completeFragmentedUDP(pkts []*stack.PacketBuffer) {
	for i, pkt := range pkts {
		f, ok := fragmentOf(pkt)
		if !ok || !f.first || f.proto != uint8(header.UDPProtocolNumber) {
			continue
		}
		udp := pkt.Data().AsRange().Capped(header.UDPMinimumSize).ToSlice()
		if len(udp) < header.UDPMinimumSize || binary.BigEndian.Uint16(udp[udpChecksumOffset:]) != 0 {
			continue
		}
		sum := header.PseudoHeaderChecksum(header.UDPProtocolNumber, f.src, f.dst, binary.BigEndian.Uint16(udp[4:]))
		sum = checksum.Combine(sum, pkt.Data().Checksum())
		complete := !f.more
		for _, next := range pkts[i+1:] {
			g, ok := fragmentOf(next)
			if !ok || !g.sameDatagram(f) {
				continue
			}
			sum = checksum.Combine(sum, next.Data().Checksum())
			if !g.more {
				complete = true
				break
			}
		}
		if !complete {
			continue // the rest went out in an earlier batch, or never came
		}
		xsum := ^sum
		if xsum == 0 {
			xsum = 0xffff // zero means "no checksum" in UDP
		}
		setDataBytes(pkt, udpChecksumOffset, byte(xsum>>8), byte(xsum))
	}
}

// setDataBytes overwrites bytes at off in pkt's payload, in place (they may
// straddle two views).
func setDataBytes(pkt *stack.PacketBuffer, off int, bytes ...byte) {
	vl, start := pkt.AsViewList()
	pos := start + len(pkt.LinkHeader().Slice()) + len(pkt.NetworkHeader().Slice()) + len(pkt.TransportHeader().Slice()) + off
	for v := vl.Front(); v != nil && len(bytes) > 0; v = v.Next() {
		b := v.AsSlice()
		for pos < len(b) && len(bytes) > 0 {
			b[pos] = bytes[0]
			bytes = bytes[1:]
			pos++
		}
		pos -= len(b)
	}
}
