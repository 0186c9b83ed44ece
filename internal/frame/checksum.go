package frame

import "encoding/binary"

// Sum adds b to the running one's complement sum acc (not folded); an odd
// trailing byte is padded with zero, as RFC 1071 says.
func Sum(b []byte, acc uint64) uint64 {
	for len(b) >= 8 {
		acc += uint64(binary.BigEndian.Uint32(b)) + uint64(binary.BigEndian.Uint32(b[4:]))
		b = b[8:]
	}
	for len(b) >= 2 {
		acc += uint64(binary.BigEndian.Uint16(b))
		b = b[2:]
	}
	if len(b) == 1 {
		acc += uint64(b[0]) << 8
	}
	return acc
}

// Fold folds a running sum into 16 bits (not complemented).
func Fold(acc uint64) uint16 {
	for acc>>16 != 0 {
		acc = acc&0xffff + acc>>16
	}
	return uint16(acc)
}

// PseudoHeaderSum is the running sum of p's IPv4 or IPv6 pseudo-header for
// a transport segment of length bytes.
func PseudoHeaderSum(p Packet, length int) uint64 {
	src, dst := p.Src.AsSlice(), p.Dst.AsSlice()
	acc := Sum(src, 0)
	acc = Sum(dst, acc)
	return acc + uint64(p.Proto) + uint64(length)
}

// checksumField returns where the transport checksum of p sits, relative to
// the transport header, and whether it covers a pseudo-header.
func checksumField(p Packet) (off int, pseudo, ok bool) {
	switch p.Proto {
	case ProtoTCP:
		return 16, true, true
	case ProtoUDP:
		return 6, true, true
	case ProtoICMPv6:
		return 2, true, true
	case ProtoICMP:
		return 2, false, true
	}
	return 0, false, false
}

// FixChecksum recomputes the transport checksum of p (TCP, UDP, ICMP or
// ICMPv6) in f from scratch. It reports false, leaving f alone, for other
// protocols and for fragments, whose checksum covers the whole datagram.
//
// It completes a partial checksum (CHECKSUM_PARTIAL: the field holds the
// pseudo-header sum only) as well as it refreshes a full one.
func FixChecksum(f []byte, p Packet) bool {
	off, pseudo, ok := checksumField(p)
	if !ok || p.Fragment || p.L4+off+2 > p.End || p.End > len(f) {
		return false
	}
	seg := f[p.L4:p.End]
	seg[off], seg[off+1] = 0, 0
	var acc uint64
	if pseudo {
		acc = PseudoHeaderSum(p, len(seg))
	}
	sum := ^Fold(Sum(seg, acc))
	if sum == 0 && p.Proto == ProtoUDP {
		sum = 0xffff // zero means "no checksum" for UDP
	}
	binary.BigEndian.PutUint16(seg[off:], sum)
	return true
}

// ChecksumOK reports whether the transport checksum of p in f is right.
// Protocols without one it knows, fragments and IPv4 UDP without a checksum
// count as right.
func ChecksumOK(f []byte, p Packet) bool {
	off, pseudo, ok := checksumField(p)
	if !ok || p.Fragment || p.L4+off+2 > p.End || p.End > len(f) {
		return true
	}
	seg := f[p.L4:p.End]
	if p.Proto == ProtoUDP && p.EtherType == EtherTypeIPv4 && binary.BigEndian.Uint16(seg[off:]) == 0 {
		return true
	}
	var acc uint64
	if pseudo {
		acc = PseudoHeaderSum(p, len(seg))
	}
	return Fold(Sum(seg, acc)) == 0xffff
}

// IPv4HeaderOK reports whether the IPv4 header checksum of p is right (true
// for IPv6, which has none).
func IPv4HeaderOK(f []byte, p Packet) bool {
	if p.EtherType != EtherTypeIPv4 {
		return true
	}
	return Fold(Sum(f[p.L3:p.L4], 0)) == 0xffff
}

// CompletePartial finishes a CHECKSUM_PARTIAL frame as a NIC would: the
// one's complement sum of f[start:end] (whose checksum field already holds
// the pseudo-header sum) is stored, complemented, at start+offset. It
// reports false if the offsets do not fit.
func CompletePartial(f []byte, start, offset, end int) bool {
	if start < 0 || end > len(f) || start+offset+2 > end {
		return false
	}
	sum := ^Fold(Sum(f[start:end], 0))
	binary.BigEndian.PutUint16(f[start+offset:], sum)
	return true
}

// ClampMSS lowers the MSS option of a TCP SYN in f to mss if it is larger,
// as a middlebox clamping MSS does, and recomputes the checksum. It reports
// whether it changed the frame.
func ClampMSS(f []byte, p Packet, mss uint16) bool {
	t, ok := ParseTCP(f, p)
	if !ok || !t.Has(FlagSYN) || t.Options.MSS == 0 || t.Options.MSS <= mss {
		return false
	}
	opts := f[p.L4+TCPLen : p.L4+t.HeaderLen]
	for i := 0; i < len(opts); {
		switch kind := opts[i]; {
		case kind == 0:
			return false
		case kind == 1:
			i++
		case i+1 >= len(opts) || opts[i+1] < 2:
			return false
		case kind == 2 && opts[i+1] == 4 && i+4 <= len(opts):
			binary.BigEndian.PutUint16(opts[i+2:], mss)
			return FixChecksum(f, p)
		default:
			i += int(opts[i+1])
		}
	}
	return false
}
