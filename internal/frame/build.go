package frame

import (
	"encoding/binary"
	"net"
	"net/netip"
)

// TCPSpec describes a TCP segment to build.
type TCPSpec struct {
	SrcMAC, DstMAC net.HardwareAddr // nil: zeros
	Src, Dst       netip.AddrPort   // both IPv4 or both IPv6
	Seq, Ack       uint32
	Flags          uint8
	Window         uint16
	// Options are raw TCP options; they are padded with end-of-options to
	// a multiple of 4 bytes.
	Options []byte
	Payload []byte
}

// MSSOption returns the MSS option for TCPSpec.Options.
func MSSOption(mss uint16) []byte { return []byte{2, 4, byte(mss >> 8), byte(mss)} }

// TCPFrame builds an Ethernet frame carrying s, with correct IP and TCP
// checksums. The IP packet starts at EthLen.
func TCPFrame(s TCPSpec) []byte {
	opts := append([]byte(nil), s.Options...)
	for len(opts)%4 != 0 {
		opts = append(opts, 0)
	}
	f, t := ipFrame(s.SrcMAC, s.DstMAC, s.Src.Addr(), s.Dst.Addr(), ProtoTCP, TCPLen+len(opts)+len(s.Payload))
	binary.BigEndian.PutUint16(t[0:], s.Src.Port())
	binary.BigEndian.PutUint16(t[2:], s.Dst.Port())
	binary.BigEndian.PutUint32(t[4:], s.Seq)
	binary.BigEndian.PutUint32(t[8:], s.Ack)
	t[12] = byte((TCPLen + len(opts)) / 4 << 4)
	t[13] = s.Flags
	binary.BigEndian.PutUint16(t[14:], s.Window)
	copy(t[TCPLen:], opts)
	copy(t[TCPLen+len(opts):], s.Payload)
	p, _ := Parse(f)
	FixChecksum(f, p)
	return f
}

// UDPFrame builds an Ethernet frame carrying a UDP datagram from src to dst
// (both IPv4 or both IPv6), with correct checksums. MACs may be nil (zeros).
func UDPFrame(srcMAC, dstMAC net.HardwareAddr, src, dst netip.AddrPort, payload []byte) []byte {
	f, u := ipFrame(srcMAC, dstMAC, src.Addr(), dst.Addr(), ProtoUDP, UDPLen+len(payload))
	binary.BigEndian.PutUint16(u[0:], src.Port())
	binary.BigEndian.PutUint16(u[2:], dst.Port())
	binary.BigEndian.PutUint16(u[4:], uint16(UDPLen+len(payload)))
	copy(u[UDPLen:], payload)
	p, _ := Parse(f)
	FixChecksum(f, p)
	return f
}

// ipFrame returns an Ethernet frame with an IP header from src to dst
// (TTL 64, IPv4 with don't-fragment and its header checksum) for a
// transport segment of l4Len bytes, and the segment's part of the frame,
// zeroed, for the caller to fill in.
func ipFrame(srcMAC, dstMAC net.HardwareAddr, src, dst netip.Addr, proto uint8, l4Len int) (f, l4 []byte) {
	v6 := src.Is6()
	ipLen := IPv4Len
	etherType := uint16(EtherTypeIPv4)
	if v6 {
		ipLen, etherType = IPv6Len, EtherTypeIPv6
	}
	f = make([]byte, EthLen+ipLen+l4Len)
	copy(f[0:6], dstMAC)
	copy(f[6:12], srcMAC)
	binary.BigEndian.PutUint16(f[12:], etherType)
	ip := f[EthLen:]
	if v6 {
		ip[0] = 6 << 4
		binary.BigEndian.PutUint16(ip[4:], uint16(l4Len))
		ip[6], ip[7] = proto, 64
		s, d := src.As16(), dst.As16()
		copy(ip[8:], s[:])
		copy(ip[24:], d[:])
	} else {
		ip[0] = 4<<4 | IPv4Len/4
		binary.BigEndian.PutUint16(ip[2:], uint16(ipLen+l4Len))
		ip[6] = 0x40 // don't fragment
		ip[8], ip[9] = 64, proto
		s, d := src.As4(), dst.As4()
		copy(ip[12:], s[:])
		copy(ip[16:], d[:])
		binary.BigEndian.PutUint16(ip[10:], ^Fold(Sum(ip[:IPv4Len], 0)))
	}
	return f, ip[ipLen:]
}
