package frame

import (
	"encoding/binary"
	"math/bits"
)

// Sum adds b to the running one's complement sum acc (not folded); an odd
// trailing byte is padded with zero, as RFC 1071 says. Links run it on every
// frame whose checksum they check or complete, so it adds 64-bit
// little-endian words with carry and swaps the bytes of the folded result,
// which RFC 1071 shows to be the same sum.
func Sum(b []byte, acc uint64) uint64 {
	var s, carry uint64
	for len(b) >= 32 {
		s, carry = bits.Add64(s, binary.LittleEndian.Uint64(b), carry)
		s, carry = bits.Add64(s, binary.LittleEndian.Uint64(b[8:]), carry)
		s, carry = bits.Add64(s, binary.LittleEndian.Uint64(b[16:]), carry)
		s, carry = bits.Add64(s, binary.LittleEndian.Uint64(b[24:]), carry)
		b = b[32:]
	}
	for len(b) >= 8 {
		s, carry = bits.Add64(s, binary.LittleEndian.Uint64(b), carry)
		b = b[8:]
	}
	s, carry = bits.Add64(s, carry, 0)
	s += carry
	var tail uint64
	for i, c := range b { // at most 7 bytes
		tail += uint64(c) << (8 * i)
	}
	s, carry = bits.Add64(s, tail, 0)
	s += carry
	// Fold 64 -> 16 bits; the result is the little-endian sum.
	s = s>>32 + s&0xffffffff
	s = s>>32 + s&0xffffffff
	return acc + uint64(bits.ReverseBytes16(Fold(s)))
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

// RxChecksum is what CheckRX found.
type RxChecksum uint8

const (
	RxUnknown RxChecksum = iota // not TCP or UDP, malformed, a fragment: the engine decides
	RxGood                      // verified
	RxPartial                   // the pseudo-header sum only: CHECKSUM_PARTIAL from the local kernel
	RxBad
)

// CheckRX examines the IPv4 header checksum and the TCP or UDP checksum of
// a received frame, for links that verify checksums in software. For a
// partial checksum it also returns where the checksum field is in f and the
// checksum that completes it.
func CheckRX(f []byte) (res RxChecksum, field int, complete uint16) {
	p, ok := Parse(f)
	if !ok || p.Fragment {
		return RxUnknown, 0, 0
	}
	if !IPv4HeaderOK(f, p) {
		return RxBad, 0, 0
	}
	off, _, ok := checksumField(p)
	if !ok || p.Proto != ProtoTCP && p.Proto != ProtoUDP {
		return RxUnknown, 0, 0
	}
	seg := f[p.L4:p.End]
	if p.Proto == ProtoTCP && len(seg) < TCPLen || p.Proto == ProtoUDP && len(seg) < UDPLen {
		return RxUnknown, 0, 0
	}
	if p.Proto == ProtoUDP && p.EtherType == EtherTypeIPv4 && binary.BigEndian.Uint16(seg[off:]) == 0 {
		return RxUnknown, 0, 0 // IPv4 UDP without a checksum
	}
	pseudo := Fold(PseudoHeaderSum(p, len(seg)))
	segSum := Fold(Sum(seg, 0))
	if Fold(uint64(segSum)+uint64(pseudo)) == 0xffff {
		return RxGood, 0, 0
	}
	// Linux puts the folded pseudo-header sum in the field of a
	// CHECKSUM_PARTIAL packet (~tcp_v4_check(len, saddr, daddr, 0)); the
	// two representations of zero are the same sum. The field seeds the
	// sum as it does for a NIC completing it, so the complement of the
	// segment's sum is the checksum.
	if got := binary.BigEndian.Uint16(seg[off:]); got == pseudo || (got == 0xffff && pseudo == 0) || (got == 0 && pseudo == 0xffff) {
		complete = ^segSum
		if complete == 0 {
			complete = 0xffff
		}
		return RxPartial, p.L4 + off, complete
	}
	return RxBad, 0, 0
}
