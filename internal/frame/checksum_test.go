package frame

import (
	"encoding/binary"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSum compares Sum with RFC 1071's sum of big-endian 16-bit words at
// every length and alignment the word loops and the tail can meet.
func TestSum(t *testing.T) {
	b := make([]byte, 300)
	for i := range b {
		b[i] = byte(i*151 + 7)
	}
	for start := range 8 {
		for end := start; end <= len(b); end++ {
			var want uint64
			for i := start; i < end; i += 2 {
				w := uint64(b[i]) << 8
				if i+1 < end {
					w |= uint64(b[i+1])
				}
				want += w
			}
			require.Equal(t, Fold(want), Fold(Sum(b[start:end], 0)), "b[%d:%d]", start, end)
		}
	}
	assert.Equal(t, Fold(0x1234+0xffff), Fold(Sum([]byte{0xff, 0xff}, 0x1234)), "the running sum is added")
}

// TestCheckRX: a correct checksum is good; the field holding only the
// pseudo-header sum (as the local kernel leaves a CHECKSUM_PARTIAL packet)
// is partial, and CheckRX says where and how to complete it; anything else
// is bad; what is not TCP or UDP is left to the engine.
func TestCheckRX(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		src, dst := src4, dst4
		if v6 {
			src, dst = src6, dst6
		}
		for _, n := range []int{0, 1, 1459} {
			payload := make([]byte, n)
			for i := range payload {
				payload[i] = byte(i*7 + n)
			}
			for _, udp := range []bool{false, true} {
				good := TCPFrame(TCPSpec{Src: src, Dst: dst, Seq: 1, Flags: FlagACK, Window: 100, Payload: payload})
				off := 16
				if udp {
					good, off = UDPFrame(nil, nil, src, dst, payload), 6
				}
				res, _, _ := CheckRX(good)
				assert.Equal(t, RxGood, res, "v6=%v udp=%v len=%d", v6, udp, n)

				p, ok := Parse(good)
				require.True(t, ok)
				field := p.L4 + off
				partial := append([]byte(nil), good...)
				binary.BigEndian.PutUint16(partial[field:], Fold(PseudoHeaderSum(p, p.End-p.L4)))
				res, at, complete := CheckRX(partial)
				require.Equal(t, RxPartial, res, "v6=%v udp=%v len=%d", v6, udp, n)
				assert.Equal(t, field, at)
				binary.BigEndian.PutUint16(partial[at:], complete)
				assert.True(t, ChecksumOK(partial, p), "completed checksum %#x", complete)

				bad := append([]byte(nil), good...)
				bad[len(bad)-1-n/2] ^= 0x10
				res, _, _ = CheckRX(bad)
				assert.Equal(t, RxBad, res, "v6=%v udp=%v len=%d", v6, udp, n)
			}
		}
	}
	for _, other := range [][]byte{nil, make([]byte, 10), make([]byte, 60)} {
		res, _, _ := CheckRX(other)
		assert.Equal(t, RxUnknown, res)
	}
	frag := UDPFrame(nil, nil, src4, dst4, []byte("a fragment"))
	frag[EthLen+6] = 0x20 // more fragments
	frag[EthLen+10], frag[EthLen+11] = 0, 0
	binary.BigEndian.PutUint16(frag[EthLen+10:], ^Fold(Sum(frag[EthLen:EthLen+IPv4Len], 0)))
	res, _, _ := CheckRX(frag)
	assert.Equal(t, RxUnknown, res, "fragments are the engine's")
	badIP := TCPFrame(TCPSpec{Src: src4, Dst: dst4, Flags: FlagACK})
	badIP[EthLen+8]-- // the TTL, under the header checksum
	res, _, _ = CheckRX(badIP)
	assert.Equal(t, RxBad, res, "a wrong IPv4 header checksum")
}

func BenchmarkSum(b *testing.B) {
	for _, n := range []int{64, 1500, 9001} {
		buf := make([]byte, n)
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			b.SetBytes(int64(n))
			var acc uint64
			for b.Loop() {
				acc += Sum(buf, 0)
			}
			_ = acc
		})
	}
}
