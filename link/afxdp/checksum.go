package afxdp

import (
	"encoding/binary"
	"math/bits"
)

// Internet checksums (RFC 1071) for the link's two checksum duties: telling
// a checksum-partial frame of the local kernel from a corrupt one on RX, and
// completing frames in software on TX where the kernel cannot be asked to.

// sum returns the one's complement sum of b, folded to 16 bits, as if b
// were a sequence of big-endian 16-bit words (a trailing odd byte padded
// with zero). It adds 64-bit little-endian words with carry and swaps the
// bytes of the folded result, which RFC 1071 shows to be equivalent.
func sum(b []byte) uint16 {
	var acc, carry uint64
	for len(b) >= 32 {
		acc, carry = bits.Add64(acc, binary.LittleEndian.Uint64(b), carry)
		acc, carry = bits.Add64(acc, binary.LittleEndian.Uint64(b[8:]), carry)
		acc, carry = bits.Add64(acc, binary.LittleEndian.Uint64(b[16:]), carry)
		acc, carry = bits.Add64(acc, binary.LittleEndian.Uint64(b[24:]), carry)
		b = b[32:]
	}
	for len(b) >= 8 {
		acc, carry = bits.Add64(acc, binary.LittleEndian.Uint64(b), carry)
		b = b[8:]
	}
	acc, carry = bits.Add64(acc, carry, 0)
	acc += carry
	var tail uint64
	switch {
	case len(b) >= 4:
		tail = uint64(binary.LittleEndian.Uint32(b))
		b = b[4:]
		if len(b) >= 2 {
			tail += uint64(binary.LittleEndian.Uint16(b)) << 32
			b = b[2:]
		}
		if len(b) == 1 {
			tail += uint64(b[0]) << 48
		}
	case len(b) >= 2:
		tail = uint64(binary.LittleEndian.Uint16(b))
		if len(b) == 3 {
			tail += uint64(b[2]) << 16
		}
	case len(b) == 1:
		tail = uint64(b[0])
	}
	acc, carry = bits.Add64(acc, tail, 0)
	acc += carry
	// Fold 64 -> 16 bits; the result is the little-endian sum.
	acc = acc>>32 + acc&0xffffffff
	acc = acc>>32 + acc&0xffffffff
	acc = acc>>16 + acc&0xffff
	acc = acc>>16 + acc&0xffff
	return bits.ReverseBytes16(uint16(acc))
}

// add16 adds two one's complement 16-bit sums.
func add16(a, b uint16) uint16 {
	s := uint32(a) + uint32(b)
	return uint16(s>>16 + s&0xffff)
}

// rxChecksum is what checkRX found.
type rxChecksum uint8

const (
	rxChecksumUnknown rxChecksum = iota // not TCP or UDP, malformed, a fragment: the engine decides
	rxChecksumGood                      // verified
	rxChecksumPartial                   // the pseudo-header sum only: CHECKSUM_PARTIAL from the local kernel
	rxChecksumBad
)

// checkRX examines the TCP or UDP checksum of an Ethernet frame carrying
// IPv4 or IPv6 (without extension headers). For a partial checksum it also
// returns where the checksum field is in the frame and the checksum that
// completes it.
func checkRX(frame []byte) (res rxChecksum, field int, complete uint16) {
	if len(frame) < ethHdrLen {
		return rxChecksumUnknown, 0, 0
	}
	var (
		proto  uint8
		l4     []byte
		l4off  int
		pseudo uint16
	)
	switch binary.BigEndian.Uint16(frame[12:]) {
	case etherTypeIPv4:
		ip := frame[ethHdrLen:]
		if len(ip) < 20 || ip[0]>>4 != 4 {
			return rxChecksumUnknown, 0, 0
		}
		hl, tl := int(ip[0]&0xf)*4, int(binary.BigEndian.Uint16(ip[2:]))
		if hl < 20 || tl < hl || tl > len(ip) {
			return rxChecksumUnknown, 0, 0
		}
		if binary.BigEndian.Uint16(ip[6:])&0x3fff != 0 {
			return rxChecksumUnknown, 0, 0 // a fragment
		}
		if sum(ip[:hl]) != 0xffff {
			return rxChecksumBad, 0, 0
		}
		proto, l4, l4off = ip[9], ip[hl:tl], ethHdrLen+hl
		pseudo = add16(sum(ip[12:20]), uint16(proto))
	case etherTypeIPv6:
		ip := frame[ethHdrLen:]
		if len(ip) < 40 || ip[0]>>4 != 6 {
			return rxChecksumUnknown, 0, 0
		}
		end := 40 + int(binary.BigEndian.Uint16(ip[4:]))
		if end > len(ip) {
			return rxChecksumUnknown, 0, 0
		}
		proto, l4, l4off = ip[6], ip[40:end], ethHdrLen+40
		pseudo = add16(sum(ip[8:40]), uint16(proto))
	default:
		return rxChecksumUnknown, 0, 0
	}
	switch proto {
	case protoTCP:
		if len(l4) < 20 {
			return rxChecksumUnknown, 0, 0
		}
		field = 16
	case protoUDP:
		if len(l4) < 8 {
			return rxChecksumUnknown, 0, 0
		}
		if binary.BigEndian.Uint16(l4[6:]) == 0 && frame[12] == 0x08 {
			return rxChecksumUnknown, 0, 0 // IPv4 UDP without a checksum
		}
		field = 6
	default:
		return rxChecksumUnknown, 0, 0
	}
	length := uint16(len(l4))
	pseudo = add16(pseudo, length)
	l4sum := sum(l4)
	if add16(l4sum, pseudo) == 0xffff {
		return rxChecksumGood, 0, 0
	}
	// Linux puts the folded pseudo-header sum in the field of a
	// CHECKSUM_PARTIAL packet (~tcp_v4_check(len, saddr, daddr, 0)); the
	// two representations of zero are the same sum. The field seeds the
	// sum as it does for a NIC completing it, so the complement of the
	// segment's sum is the checksum.
	if got := binary.BigEndian.Uint16(l4[field:]); got == pseudo || (got^0xffff == 0 && pseudo == 0) || (got == 0 && pseudo == 0xffff) {
		complete = ^l4sum
		if complete == 0 {
			complete = 0xffff
		}
		return rxChecksumPartial, l4off + field, complete
	}
	return rxChecksumBad, 0, 0
}

// completeChecksum finishes a checksum-partial frame as a NIC would. The
// frame is pieces in order (the UMEM frames it spans); the field at
// start+off, within the first piece, holds the pseudo-header sum, and the
// sum of the bytes from start to the end goes there, complemented (0 sent
// as 0xffff, which UDP needs and TCP does not mind).
func completeChecksum(pieces [][]byte, start, off int) {
	var acc uint16
	odd := false // the piece starts at an odd offset from start
	for i, p := range pieces {
		if i == 0 {
			p = p[start:]
		}
		s := sum(p)
		if odd {
			// Its bytes sit the other way round in the 16-bit words.
			s = bits.ReverseBytes16(s)
		}
		acc = add16(acc, s)
		odd = odd != (len(p)%2 == 1)
	}
	c := ^acc
	if c == 0 {
		c = 0xffff
	}
	binary.BigEndian.PutUint16(pieces[0][start+off:], c)
}
