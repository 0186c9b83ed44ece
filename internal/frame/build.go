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
	tcpLen := TCPLen + len(opts) + len(s.Payload)
	v6 := s.Src.Addr().Is6()
	ipLen := IPv4Len
	etherType := uint16(EtherTypeIPv4)
	if v6 {
		ipLen, etherType = IPv6Len, EtherTypeIPv6
	}
	f := make([]byte, EthLen+ipLen+tcpLen)
	copy(f[0:6], s.DstMAC)
	copy(f[6:12], s.SrcMAC)
	binary.BigEndian.PutUint16(f[12:], etherType)
	ip := f[EthLen:]
	if v6 {
		ip[0] = 6 << 4
		binary.BigEndian.PutUint16(ip[4:], uint16(tcpLen))
		ip[6], ip[7] = ProtoTCP, 64
		src, dst := s.Src.Addr().As16(), s.Dst.Addr().As16()
		copy(ip[8:], src[:])
		copy(ip[24:], dst[:])
	} else {
		ip[0] = 4<<4 | IPv4Len/4
		binary.BigEndian.PutUint16(ip[2:], uint16(ipLen+tcpLen))
		ip[6] = 0x40 // don't fragment
		ip[8], ip[9] = 64, ProtoTCP
		src, dst := s.Src.Addr().As4(), s.Dst.Addr().As4()
		copy(ip[12:], src[:])
		copy(ip[16:], dst[:])
		binary.BigEndian.PutUint16(ip[10:], ^Fold(Sum(ip[:IPv4Len], 0)))
	}
	t := ip[ipLen:]
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
