package dpdk

import (
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/polarnet/polarnet/internal/frame"
)

// l4Frame builds an Ethernet frame with a TCP or UDP packet between two
// addresses of one family, its checksum complete or partial.
func l4Frame(src, dst netip.Addr, proto uint8, payload []byte, partial bool) []byte {
	off, l4Len := 16, frame.TCPLen+len(payload)
	if proto == frame.ProtoUDP {
		off, l4Len = 6, frame.UDPLen+len(payload)
	}
	var b []byte
	if src.Is4() {
		b = make([]byte, ethHdrLen+20+l4Len)
		binary.BigEndian.PutUint16(b[12:], etherTypeIPv4)
		ip := b[ethHdrLen:]
		ip[0], ip[8], ip[9] = 0x45, 64, proto
		binary.BigEndian.PutUint16(ip[2:], uint16(20+l4Len))
		copy(ip[12:], src.AsSlice())
		copy(ip[16:], dst.AsSlice())
		binary.BigEndian.PutUint16(ip[10:], ^frame.Fold(frame.Sum(ip[:20], 0)))
	} else {
		b = make([]byte, ethHdrLen+40+l4Len)
		binary.BigEndian.PutUint16(b[12:], etherTypeIPv6)
		ip := b[ethHdrLen:]
		ip[0], ip[6], ip[7] = 0x60, proto, 64
		binary.BigEndian.PutUint16(ip[4:], uint16(l4Len))
		copy(ip[8:], src.AsSlice())
		copy(ip[24:], dst.AsSlice())
	}
	l4 := b[len(b)-l4Len:]
	if proto == frame.ProtoTCP {
		l4[12] = 5 << 4
		copy(l4[20:], payload)
	} else {
		binary.BigEndian.PutUint16(l4[4:], uint16(l4Len))
		copy(l4[8:], payload)
	}
	p, _ := frame.Parse(b)
	pseudo := frame.PseudoHeaderSum(p, l4Len)
	if partial {
		binary.BigEndian.PutUint16(l4[off:], frame.Fold(pseudo))
	} else {
		binary.BigEndian.PutUint16(l4[off:], ^frame.Fold(frame.Sum(l4, pseudo)))
	}
	return b
}

func TestTSOPseudoHeaderSum(t *testing.T) {
	f := l4Frame(netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("198.18.0.2"), frame.ProtoTCP, make([]byte, 100), true)
	with := binary.BigEndian.Uint16(f[ethHdrLen+20+16:]) // partial: with the length
	without, ok := tsoPseudoHeaderSum(f[:60], ethHdrLen+20)
	assert.True(t, ok, "the headers are enough")
	assert.Equal(t, frame.Fold(uint64(with)+uint64(^uint16(120))), without, "differs by the length")
	_, ok = tsoPseudoHeaderSum(f, ethHdrLen+24)
	assert.False(t, ok)
	_, ok = tsoPseudoHeaderSum(make([]byte, 20), 14)
	assert.False(t, ok)
}
