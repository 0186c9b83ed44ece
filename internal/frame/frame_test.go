package frame

import (
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var (
	src4 = netip.MustParseAddrPort("198.18.0.1:1234")
	dst4 = netip.MustParseAddrPort("198.18.0.2:80")
	src6 = netip.MustParseAddrPort("[fd00:198:18::1]:1234")
	dst6 = netip.MustParseAddrPort("[fd00:198:18::2]:80")
)

func TestBuildAndParseTCP(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		src, dst := src4, dst4
		if v6 {
			src, dst = src6, dst6
		}
		opts := append(MSSOption(1460), 1, 3, 3, 7, 4, 2, 8, 10, 0, 0, 0, 5, 0, 0, 0, 9)
		f := TCPFrame(TCPSpec{Src: src, Dst: dst, Seq: 100, Ack: 200, Flags: FlagSYN | FlagACK, Window: 512, Options: opts, Payload: []byte("hi")})
		p, ok := Parse(f)
		require.True(t, ok)
		assert.Equal(t, src.Addr(), p.Src)
		assert.Equal(t, dst.Addr(), p.Dst)
		assert.True(t, ChecksumOK(f, p))
		assert.True(t, IPv4HeaderOK(f, p))
		tcp, ok := ParseTCP(f, p)
		require.True(t, ok)
		assert.Equal(t, TCP{
			SrcPort: 1234, DstPort: 80, Seq: 100, Ack: 200, Flags: FlagSYN | FlagACK, Window: 512,
			HeaderLen: 40, PayloadLen: 2,
			Options: TCPOptions{MSS: 1460, WindowScale: 7, SACKPermitted: true, Timestamps: true, TSVal: 5, TSEcr: 9},
		}, tcp)

		// Any single bit flip in the IP packet is caught by a checksum,
		// except in the fields of an IPv6 header that no checksum covers
		// and that carry no data (traffic class, flow label, hop limit).
		for bit := 0; bit < (len(f)-EthLen)*8; bit += 7 {
			if byteAt := bit / 8; v6 && (byteAt < 4 || byteAt == 7) {
				continue
			}
			g := append([]byte(nil), f...)
			g[EthLen+bit/8] ^= 1 << (bit % 8)
			q, ok := Parse(g)
			if !ok {
				continue
			}
			assert.False(t, q == p && ChecksumOK(g, q) && IPv4HeaderOK(g, q), "bit %d", bit)
		}
	}
}

func TestBuildAndParseUDP(t *testing.T) {
	for _, ends := range [][2]netip.AddrPort{{src4, dst4}, {src6, dst6}} {
		f := UDPFrame(nil, nil, ends[0], ends[1], []byte("datagram"))
		p, ok := Parse(f)
		require.True(t, ok)
		assert.Equal(t, ends[0].Addr(), p.Src)
		assert.Equal(t, ends[1].Addr(), p.Dst)
		assert.True(t, ChecksumOK(f, p))
		assert.True(t, IPv4HeaderOK(f, p))
		u, ok := ParseUDP(f, p)
		require.True(t, ok)
		assert.Equal(t, UDP{SrcPort: 1234, DstPort: 80, PayloadLen: 8}, u)
		assert.Equal(t, "datagram", string(f[p.L4+UDPLen:p.End]))
	}
}

func TestPartialChecksum(t *testing.T) {
	f := TCPFrame(TCPSpec{Src: src4, Dst: dst4, Flags: FlagACK, Payload: []byte("some payload")})
	p, _ := Parse(f)
	want := binary.BigEndian.Uint16(f[p.L4+16:])
	// A CHECKSUM_PARTIAL frame holds the pseudo-header sum only.
	binary.BigEndian.PutUint16(f[p.L4+16:], Fold(PseudoHeaderSum(p, p.End-p.L4)))
	assert.False(t, ChecksumOK(f, p))
	require.True(t, CompletePartial(f, p.L4, 16, len(f)))
	assert.Equal(t, want, binary.BigEndian.Uint16(f[p.L4+16:]))

	binary.BigEndian.PutUint16(f[p.L4+16:], Fold(PseudoHeaderSum(p, p.End-p.L4)))
	require.True(t, FixChecksum(f, p))
	assert.Equal(t, want, binary.BigEndian.Uint16(f[p.L4+16:]))
}

func TestClampMSS(t *testing.T) {
	f := TCPFrame(TCPSpec{Src: src6, Dst: dst6, Flags: FlagSYN, Options: append([]byte{1, 1}, MSSOption(1440)...)})
	p, _ := Parse(f)
	assert.False(t, ClampMSS(f, p, 1500), "only lowers")
	assert.True(t, ClampMSS(f, p, 1000))
	tcp, _ := ParseTCP(f, p)
	assert.Equal(t, uint16(1000), tcp.Options.MSS)
	assert.True(t, ChecksumOK(f, p))

	ack := TCPFrame(TCPSpec{Src: src6, Dst: dst6, Flags: FlagACK, Options: MSSOption(1440)})
	p, _ = Parse(ack)
	assert.False(t, ClampMSS(ack, p, 1000), "only SYNs")
}

func TestParseRejects(t *testing.T) {
	f := TCPFrame(TCPSpec{Src: src4, Dst: dst4, Flags: FlagACK})
	for _, n := range []int{0, 13, EthLen + 19} {
		_, ok := Parse(f[:n])
		assert.False(t, ok, "%d bytes", n)
	}
	arp := append(make([]byte, 12), 0x08, 0x06)
	_, ok := Parse(append(arp, make([]byte, 28)...))
	assert.False(t, ok)
}

func TestParseTruncated(t *testing.T) {
	for _, src := range []netip.AddrPort{src4, src6} {
		dst := dst4
		if src.Addr().Is6() {
			dst = dst6
		}
		f := TCPFrame(TCPSpec{Src: src, Dst: dst, Flags: FlagACK, Options: MSSOption(1000), Payload: make([]byte, 1000)})
		cut := f[:100]
		_, ok := Parse(cut)
		assert.False(t, ok)
		p, ok := ParseTruncated(cut)
		require.True(t, ok)
		assert.Equal(t, len(f), p.End)
		tcp, ok := ParseTCP(cut, p)
		require.True(t, ok)
		assert.Equal(t, 1000, tcp.PayloadLen)
		assert.Equal(t, uint16(1000), tcp.Options.MSS)
		assert.True(t, ChecksumOK(cut, p), "unknowable: counted as right")
		assert.False(t, FixChecksum(cut, p))
	}
}

func TestParseFragments(t *testing.T) {
	f := TCPFrame(TCPSpec{Src: src4, Dst: dst4, Flags: FlagACK, Payload: make([]byte, 64)})
	binary.BigEndian.PutUint16(f[EthLen+6:], 0x2000|3) // MF, offset 3*8
	p, ok := Parse(f)
	require.True(t, ok)
	assert.True(t, p.Fragment)
	assert.Equal(t, 24, p.FragOffset)
	_, ok = ParseTCP(f, p)
	assert.False(t, ok, "not a transport header")
	assert.False(t, FixChecksum(f, p))
}
