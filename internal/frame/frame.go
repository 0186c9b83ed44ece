// Package frame parses and patches Ethernet frames carrying IPv4 or IPv6
// with TCP, UDP or ICMP, without gVisor: link decorators (link/impair,
// link/capture) must not import the engine's stack, and the conformance
// suite reads captured frames with the same code.
//
// Parsing is strict about bounds and lenient about everything else: a frame
// that is not understood is reported as such (ok false), never a panic.
package frame

import (
	"encoding/binary"
	"net/netip"
)

// Header lengths and protocol numbers.
const (
	EthLen  = 14
	IPv4Len = 20
	IPv6Len = 40
	TCPLen  = 20
	UDPLen  = 8

	EtherTypeIPv4 = 0x0800
	EtherTypeARP  = 0x0806
	EtherTypeIPv6 = 0x86DD

	ProtoICMP   = 1
	ProtoTCP    = 6
	ProtoUDP    = 17
	ProtoICMPv6 = 58
)

// TCP flags.
const (
	FlagFIN = 0x01
	FlagSYN = 0x02
	FlagRST = 0x04
	FlagPSH = 0x08
	FlagACK = 0x10
	FlagURG = 0x20
)

// Packet locates the layers of an IP frame. Offsets count from the start of
// the Ethernet frame; End is where the IP packet ends (frames may be padded).
type Packet struct {
	EtherType uint16
	L3, L4    int // offsets of the IP and transport headers
	End       int
	Proto     uint8 // transport protocol
	Src, Dst  netip.Addr
	// Fragment is set for any fragment of a datagram: L4 is then not a
	// transport header (except in the first fragment, FragOffset 0) and
	// checksums cover the reassembled datagram.
	Fragment   bool
	FragOffset int // in bytes
}

// Parse locates the IP and transport layers of an Ethernet frame. ok is
// false for frames that are not IPv4 or IPv6, or whose headers do not fit.
func Parse(f []byte) (p Packet, ok bool) { return parse(f, false) }

// ParseTruncated is Parse for a frame cut short by a capture's snap length:
// the IP packet may extend past f (End may exceed len(f)); the headers must
// still be there.
func ParseTruncated(f []byte) (p Packet, ok bool) { return parse(f, true) }

func parse(f []byte, truncated bool) (p Packet, ok bool) {
	if len(f) < EthLen {
		return p, false
	}
	p.EtherType = binary.BigEndian.Uint16(f[12:])
	p.L3 = EthLen
	ip := f[EthLen:]
	switch p.EtherType {
	case EtherTypeIPv4:
		if len(ip) < IPv4Len || ip[0]>>4 != 4 {
			return p, false
		}
		hl, tl := int(ip[0]&0x0f)*4, int(binary.BigEndian.Uint16(ip[2:]))
		if hl < IPv4Len || tl < hl || hl > len(ip) || (tl > len(ip) && !truncated) {
			return p, false
		}
		p.L4, p.End = EthLen+hl, EthLen+tl
		p.Proto = ip[9]
		p.Src = netip.AddrFrom4([4]byte(ip[12:16]))
		p.Dst = netip.AddrFrom4([4]byte(ip[16:20]))
		frag := binary.BigEndian.Uint16(ip[6:])
		p.Fragment = frag&0x2000 != 0 || frag&0x1fff != 0
		p.FragOffset = int(frag&0x1fff) * 8
		return p, true
	case EtherTypeIPv6:
		if len(ip) < IPv6Len || ip[0]>>4 != 6 {
			return p, false
		}
		end := IPv6Len + int(binary.BigEndian.Uint16(ip[4:]))
		if end > len(ip) && !truncated {
			return p, false
		}
		p.End = EthLen + end
		end = min(end, len(ip)) // the extension headers must be there
		p.Src = netip.AddrFrom16([16]byte(ip[8:24]))
		p.Dst = netip.AddrFrom16([16]byte(ip[24:40]))
		next, off := ip[6], IPv6Len
		// Walk the extension headers that may precede the transport header.
		for range 8 {
			switch next {
			case 0, 43, 60: // hop-by-hop, routing, destination options
				if off+2 > end {
					return p, false
				}
				next, off = ip[off], off+(int(ip[off+1])+1)*8
				if off > end {
					return p, false
				}
				continue
			case 44: // fragment
				if off+8 > end {
					return p, false
				}
				p.Fragment = true
				p.FragOffset = int(binary.BigEndian.Uint16(ip[off+2:]) &^ 7)
				next, off = ip[off], off+8
				continue
			}
			break
		}
		p.Proto, p.L4 = next, EthLen+off
		return p, true
	}
	return p, false
}

// TCP is a parsed TCP header.
type TCP struct {
	SrcPort, DstPort uint16
	Seq, Ack         uint32
	Flags            uint8
	Window           uint16
	HeaderLen        int // with options
	PayloadLen       int
	Options          TCPOptions
}

// Has reports whether all of flags are set.
func (t *TCP) Has(flags uint8) bool { return t.Flags&flags == flags }

// TCPOptions are the options of a TCP header that the suite looks at.
type TCPOptions struct {
	MSS           uint16 // 0: absent
	WindowScale   int    // -1: absent
	SACKPermitted bool
	Timestamps    bool
	TSVal, TSEcr  uint32
	SACKBlocks    int
}

// ParseTCP parses the TCP header of p in f. ok is false for another
// protocol, a fragment or a header that does not fit (in f, which may be
// truncated: see ParseTruncated).
func ParseTCP(f []byte, p Packet) (t TCP, ok bool) {
	end := min(p.End, len(f))
	if p.Proto != ProtoTCP || p.Fragment || p.L4+TCPLen > end {
		return t, false
	}
	h := f[p.L4:end]
	t.SrcPort = binary.BigEndian.Uint16(h[0:])
	t.DstPort = binary.BigEndian.Uint16(h[2:])
	t.Seq = binary.BigEndian.Uint32(h[4:])
	t.Ack = binary.BigEndian.Uint32(h[8:])
	t.HeaderLen = int(h[12]>>4) * 4
	t.Flags = h[13]
	t.Window = binary.BigEndian.Uint16(h[14:])
	if t.HeaderLen < TCPLen || t.HeaderLen > len(h) || p.L4+t.HeaderLen > p.End {
		return t, false
	}
	t.PayloadLen = p.End - p.L4 - t.HeaderLen
	t.Options = parseOptions(h[TCPLen:t.HeaderLen])
	return t, true
}

func parseOptions(b []byte) TCPOptions {
	o := TCPOptions{WindowScale: -1}
	for len(b) > 0 {
		kind := b[0]
		if kind == 0 { // end of options
			break
		}
		if kind == 1 { // no-op
			b = b[1:]
			continue
		}
		if len(b) < 2 || int(b[1]) < 2 || int(b[1]) > len(b) {
			break
		}
		opt := b[:b[1]]
		switch {
		case kind == 2 && len(opt) == 4:
			o.MSS = binary.BigEndian.Uint16(opt[2:])
		case kind == 3 && len(opt) == 3:
			o.WindowScale = int(opt[2])
		case kind == 4 && len(opt) == 2:
			o.SACKPermitted = true
		case kind == 5:
			o.SACKBlocks = (len(opt) - 2) / 8
		case kind == 8 && len(opt) == 10:
			o.Timestamps = true
			o.TSVal = binary.BigEndian.Uint32(opt[2:])
			o.TSEcr = binary.BigEndian.Uint32(opt[6:])
		}
		b = b[len(opt):]
	}
	return o
}

// UDP is a parsed UDP header.
type UDP struct {
	SrcPort, DstPort uint16
	PayloadLen       int
}

// ParseUDP parses the UDP header of p in f.
func ParseUDP(f []byte, p Packet) (u UDP, ok bool) {
	if p.Proto != ProtoUDP || p.Fragment || p.L4+UDPLen > min(p.End, len(f)) {
		return u, false
	}
	h := f[p.L4:]
	u.SrcPort = binary.BigEndian.Uint16(h[0:])
	u.DstPort = binary.BigEndian.Uint16(h[2:])
	u.PayloadLen = p.End - p.L4 - UDPLen
	return u, true
}
