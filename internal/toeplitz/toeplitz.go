// Package toeplitz computes the Toeplitz hash that NICs use for receive-side
// scaling (RSS), as the Microsoft RSS specification defines it, so that
// polarnet can predict on which receive queue a flow lands: the queue is the
// indirection table (RETA) entry the hash selects.
//
// The hash input is the flow's tuple in network byte order, source first:
// source address, destination address, then, for TCP and UDP, source port
// and destination port. For a frame a host receives, the source is the peer.
package toeplitz

import (
	"encoding/binary"
	"fmt"
	"net/netip"
)

// MicrosoftKey is the 40-byte key of the Microsoft RSS specification's
// verification examples, and the default key of many NIC drivers.
var MicrosoftKey = [40]byte{
	0x6d, 0x5a, 0x56, 0xda, 0x25, 0x5b, 0x0e, 0xc2,
	0x41, 0x67, 0x25, 0x3d, 0x43, 0xa3, 0x8f, 0xb0,
	0xd0, 0xca, 0x2b, 0xcb, 0xae, 0x7b, 0x30, 0xb4,
	0x77, 0xcb, 0x2d, 0xa3, 0x80, 0x30, 0xf2, 0x0c,
	0x6a, 0x42, 0xb7, 0x3b, 0xbe, 0xac, 0x01, 0xfa,
}

// MaxInput is the longest input a Key hashes: an IPv6 4-tuple (two 16-byte
// addresses and two ports).
const MaxInput = 36

// Key is a Toeplitz key prepared for hashing: for every input byte position
// and value, the XOR of the 32-bit key windows its set bits select.
type Key struct {
	raw   []byte
	table [][256]uint32 // table[i][b]: the contribution of byte value b at input position i
}

// NewKey prepares key. It must be at least 4 bytes longer than the longest
// input to hash; an input longer than len(key)-4 is an error at Hash.
func NewKey(key []byte) (*Key, error) {
	if len(key) < 8 {
		return nil, fmt.Errorf("toeplitz: key of %d bytes; need at least 8", len(key))
	}
	k := &Key{raw: append([]byte(nil), key...)}
	n := min(len(key)-4, MaxInput)
	k.table = make([][256]uint32, n)
	for i := range n {
		for bit := range 8 {
			w := window(key, i*8+bit)
			mask := byte(0x80 >> bit)
			for b := range 256 {
				if byte(b)&mask != 0 {
					k.table[i][b] ^= w
				}
			}
		}
	}
	return k, nil
}

// Bytes returns a copy of the key.
func (k *Key) Bytes() []byte { return append([]byte(nil), k.raw...) }

// MaxInput returns the longest input k can hash.
func (k *Key) MaxInput() int { return len(k.table) }

// window returns the 32 key bits starting at bit position pos (bit 0 is the
// most significant bit of key[0]); bits past the end of the key are zero.
func window(key []byte, pos int) uint32 {
	var w uint32
	for i := range 32 {
		p := pos + i
		if p/8 < len(key) && key[p/8]&(0x80>>(p%8)) != 0 {
			w |= 1 << (31 - i)
		}
	}
	return w
}

// Hash returns the Toeplitz hash of input. It panics if input is longer than
// MaxInput: callers hash tuples of a known length.
func (k *Key) Hash(input []byte) uint32 {
	if len(input) > len(k.table) {
		panic(fmt.Sprintf("toeplitz: input of %d bytes, the key hashes at most %d", len(input), len(k.table)))
	}
	var h uint32
	for i, b := range input {
		h ^= k.table[i][b]
	}
	return h
}

// Hash is the reference Toeplitz hash, bit by bit as the specification
// states it: for every set bit of input, XOR in the 32 key bits starting at
// that bit's position. key must be at least len(input)+4 bytes long.
func Hash(key, input []byte) uint32 {
	var h uint32
	for i, b := range input {
		for bit := range 8 {
			if b&(0x80>>bit) != 0 {
				h ^= window(key, i*8+bit)
			}
		}
	}
	return h
}

// Tuple appends to dst the hash input of a flow from src to dst addresses,
// with ports when withPorts (TCP and UDP 4-tuple hashing) and without (IP
// 2-tuple hashing). Both addresses must be of the same family; IPv4-mapped
// IPv6 addresses count as IPv4.
func Tuple(buf []byte, src, dst netip.AddrPort, withPorts bool) []byte {
	sa, da := src.Addr().Unmap(), dst.Addr().Unmap()
	buf = append(buf, sa.AsSlice()...)
	buf = append(buf, da.AsSlice()...)
	if withPorts {
		buf = binary.BigEndian.AppendUint16(buf, src.Port())
		buf = binary.BigEndian.AppendUint16(buf, dst.Port())
	}
	return buf
}
