package polarnet

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"

	"github.com/polarnet/polarnet/internal/frame"
	"github.com/polarnet/polarnet/link"
)

// parseRx parses the headers of a received Ethernet frame, as the poller
// does.
func parseRx(frame []byte) *rxHeaders {
	h := new(rxHeaders)
	h.parseFrame(&link.RxFrame{Buf: frame, Len: len(frame)})
	return h
}

// parseIP parses the headers of pkt, an IP packet of network protocol
// ethType without its Ethernet header.
func parseIP(ethType tcpip.NetworkProtocolNumber, pkt []byte) *rxHeaders {
	h := new(rxHeaders)
	h.parse(ethType, pkt)
	return h
}

// frameWith builds an Ethernet frame of an IP packet whose transport
// header is l4 (followed by payload bytes), for headerSplit's cases.
func frameWith(ethType tcpip.NetworkProtocolNumber, ipHeader, l4 []byte, payload int) []byte {
	eth := make([]byte, header.EthernetMinimumSize)
	header.Ethernet(eth).Encode(&header.EthernetFields{Type: ethType})
	frame := append(append(eth, ipHeader...), l4...)
	return append(frame, make([]byte, payload)...)
}

func TestHeaderSplit(t *testing.T) {
	src, dst := tcpip.AddrFrom4([4]byte{198, 18, 0, 2}), tcpip.AddrFrom4([4]byte{198, 18, 0, 1})
	ipv4 := func(proto tcpip.TransportProtocolNumber, options int, fragment bool) []byte {
		h := header.IPv4(make([]byte, header.IPv4MinimumSize+options))
		fields := header.IPv4Fields{TotalLength: 4096, Protocol: uint8(proto), TTL: 64, SrcAddr: src, DstAddr: dst}
		if fragment {
			fields.Flags = header.IPv4FlagMoreFragments
		}
		h.Encode(&fields)
		h.SetHeaderLength(uint8(len(h)))
		return h
	}
	ipv6 := func(next uint8, ext []byte) []byte {
		h := header.IPv6(make([]byte, header.IPv6MinimumSize))
		h.Encode(&header.IPv6Fields{PayloadLength: 4096, TransportProtocol: tcpip.TransportProtocolNumber(next), HopLimit: 64})
		return append(h, ext...)
	}
	tcp := func(options int) []byte {
		h := header.TCP(make([]byte, header.TCPMinimumSize+options))
		h.Encode(&header.TCPFields{SrcPort: 1, DstPort: 2, DataOffset: uint8(len(h)), Flags: header.TCPFlagAck})
		return h
	}
	udp := make([]byte, header.UDPMinimumSize)
	// A destination-options header of 8 bytes whose next header is TCP.
	destOptions := []byte{uint8(header.TCPProtocolNumber), 0, 1, 4, 0, 0, 0, 0}
	const eth = header.EthernetMinimumSize

	for _, tc := range []struct {
		name  string
		frame []byte
		want  int
	}{
		{"IPv4 TCP with timestamps", frameWith(header.IPv4ProtocolNumber, ipv4(header.TCPProtocolNumber, 0, false), tcp(12), 4096), eth + 20 + 32},
		{"IPv4 with options, TCP", frameWith(header.IPv4ProtocolNumber, ipv4(header.TCPProtocolNumber, 8, false), tcp(0), 4096), eth + 28 + 20},
		{"IPv4 UDP", frameWith(header.IPv4ProtocolNumber, ipv4(header.UDPProtocolNumber, 0, false), udp, 4096), eth + 20 + 8},
		{"IPv6 TCP", frameWith(header.IPv6ProtocolNumber, ipv6(uint8(header.TCPProtocolNumber), nil), tcp(12), 4096), eth + 40 + 32},
		{"IPv6 extension, TCP", frameWith(header.IPv6ProtocolNumber, ipv6(uint8(header.IPv6DestinationOptionsExtHdrIdentifier), destOptions), tcp(0), 4096), eth + 48 + 20},
		{"pure ACK: too short to split", frameWith(header.IPv4ProtocolNumber, ipv4(header.TCPProtocolNumber, 0, false), tcp(12), 0), 0},
		{"IPv4 fragment", frameWith(header.IPv4ProtocolNumber, ipv4(header.TCPProtocolNumber, 0, true), tcp(0), 4096), 0},
		{"ICMP", frameWith(header.IPv4ProtocolNumber, ipv4(header.ICMPv4ProtocolNumber, 0, false), udp, 4096), 0},
		{"ARP", frameWith(header.ARPProtocolNumber, nil, nil, 300), 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, headerSplit(parseRx(tc.frame)))
		})
	}

	// Headers cut short: nothing to split at (frames this short are never
	// split, so headersLength is asked directly).
	truncated := append(ipv4(header.TCPProtocolNumber, 0, false), tcp(0)[:10]...)
	assert.Zero(t, headersLength(parseIP(header.IPv4ProtocolNumber, truncated)), "truncated TCP header")
	offsetPastEnd := append(ipv4(header.TCPProtocolNumber, 0, false), tcp(40)[:50]...)
	assert.Zero(t, headersLength(parseIP(header.IPv4ProtocolNumber, offsetPastEnd)), "TCP data offset past the packet")
	assert.Zero(t, headersLength(parseIP(header.IPv6ProtocolNumber, ipv6(uint8(header.UDPProtocolNumber), nil))), "no UDP header")
}

// TestParseRx covers what rxHeaders holds of each kind of packet, malformed
// ones included: each reader of it relies on these.
func TestParseRx(t *testing.T) {
	seg := func(src, dst netip.AddrPort, payload int) []byte {
		return frame.TCPFrame(frame.TCPSpec{Src: src, Dst: dst, Seq: 1, Ack: 1, Flags: frame.FlagACK, Window: 100, Payload: make([]byte, payload)})
	}
	const eth = header.EthernetMinimumSize

	t.Run("IPv4 TCP with Ethernet padding", func(t *testing.T) {
		f := append(seg(remote, local, 4), make([]byte, 6)...)
		h := parseRx(f)
		require.True(t, h.hasIP)
		assert.Equal(t, header.IPv4ProtocolNumber, h.ethType)
		assert.Equal(t, f[eth:], h.pkt)
		assert.Equal(t, tcpip.AddrFrom4(remote.Addr().As4()), h.src)
		assert.Equal(t, tcpip.AddrFrom4(local.Addr().As4()), h.dst)
		assert.Equal(t, header.IPv4MinimumSize, h.netLen)
		assert.Equal(t, header.IPv4MinimumSize+header.TCPMinimumSize+4, h.end, "end by total length, before the padding")
		assert.Len(t, h.l4, header.TCPMinimumSize+4+6, "l4 not cut at end")
		assert.False(t, h.fragment)
		require.NotNil(t, h.tcp())
		assert.Equal(t, flowKey{src: h.dst, dst: h.src, srcPort: local.Port(), dstPort: remote.Port()}, h.flow(h.tcp()))
	})
	t.Run("IPv6 TCP", func(t *testing.T) {
		h := parseRx(seg(rem6, local6, 0))
		require.True(t, h.hasIP)
		assert.Equal(t, header.IPv6MinimumSize, h.netLen)
		assert.Equal(t, header.IPv6MinimumSize+header.TCPMinimumSize, h.end)
		assert.Equal(t, tcpip.AddrFrom16(rem6.Addr().As16()), h.src)
		assert.NotNil(t, h.tcp())
	})
	t.Run("IPv4 fragment", func(t *testing.T) {
		f := seg(remote, local, 4)
		header.IPv4(f[eth:]).SetFlagsFragmentOffset(header.IPv4FlagMoreFragments, 0)
		h := parseRx(f)
		assert.True(t, h.fragment)
		assert.Equal(t, header.IPv4MinimumSize, h.netLen, "the IPv4 header is known")
		assert.Nil(t, h.l4)
		assert.Nil(t, h.tcp())
	})
	t.Run("IPv6 fragment header", func(t *testing.T) {
		f := seg(rem6, local6, 0)
		header.IPv6(f[eth:]).SetNextHeader(uint8(header.IPv6FragmentExtHdrIdentifier))
		h := parseRx(f)
		assert.True(t, h.hasIP)
		assert.True(t, h.fragment)
		assert.Zero(t, h.netLen)
		assert.Nil(t, h.l4)
	})
	t.Run("IPv4 header length past the packet", func(t *testing.T) {
		f := seg(remote, local, 0)[:eth+header.IPv4MinimumSize+8]
		header.IPv4(f[eth:]).SetHeaderLength(60)
		h := parseRx(f)
		assert.True(t, h.hasIP, "addresses are read")
		assert.False(t, h.fragment)
		assert.Zero(t, h.netLen)
		assert.Nil(t, h.l4)
	})
	t.Run("short", func(t *testing.T) {
		f := seg(remote, local, 0)[:eth+header.IPv4MinimumSize-1]
		assert.Equal(t, rxHeaders{ethType: header.IPv4ProtocolNumber, pkt: f[eth:]}, *parseRx(f))
	})
	t.Run("frame longer than its buffer", func(t *testing.T) {
		var h rxHeaders
		h.parseFrame(&link.RxFrame{Buf: seg(remote, local, 0), Len: 999})
		assert.Equal(t, rxHeaders{}, h)
	})
}

// TestRxHeadersAllocateNothing: parsing a frame and every check the poller
// makes with it allocate nothing.
func TestRxHeadersAllocateNothing(t *testing.T) {
	addrs := []netip.Prefix{netip.MustParsePrefix("198.18.0.1/24"), netip.MustParsePrefix("fd00::1/64")}
	st := &Stack{cfg: Config{Addrs: addrs}, ownOrBroadcast: ownOrBroadcast(addrs), windows: newClosedWindows(), sacks: newFinSACK()}
	st.shards = make([]*shard, 3)
	frames := []link.RxFrame{}
	for i, pkt := range seedFrames() {
		ethType := header.IPv4ProtocolNumber
		if i == 1 {
			ethType = header.IPv6ProtocolNumber // seedFrames' IPv6 packet
		}
		f := make([]byte, header.EthernetMinimumSize, header.EthernetMinimumSize+len(pkt)+300)
		header.Ethernet(f).Encode(&header.EthernetFields{Type: ethType})
		f = append(append(f, pkt...), make([]byte, 300)...) // long enough to split
		frames = append(frames, link.RxFrame{Buf: f, Len: len(f)})
	}
	hs := make([]rxHeaders, len(frames))
	keys, lone := make([]uint64, len(frames)), make([]bool, len(frames))
	allocs := testing.AllocsPerRun(100, func() {
		for i := range frames {
			hs[i].parseFrame(&frames[i])
			keys[i] = tcpFlowHash(&hs[i])
		}
		markLone(keys, lone)
		for i := range hs {
			h := &hs[i]
			verifyTransportChecksum(h)
			st.martian(h)
			st.windows.received(h)
			st.sacks.received(h, 0)
			st.owner(h)
			headerSplit(h)
		}
	})
	assert.Zero(t, allocs)
}
