package polarnet

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
)

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
			ethType := header.Ethernet(tc.frame).Type()
			assert.Equal(t, tc.want, headerSplit(ethType, tc.frame))
		})
	}

	// Headers cut short: nothing to split at (frames this short are never
	// split, so headersLength is asked directly).
	truncated := append(ipv4(header.TCPProtocolNumber, 0, false), tcp(0)[:10]...)
	assert.Zero(t, headersLength(header.IPv4ProtocolNumber, truncated), "truncated TCP header")
	offsetPastEnd := append(ipv4(header.TCPProtocolNumber, 0, false), tcp(40)[:50]...)
	assert.Zero(t, headersLength(header.IPv4ProtocolNumber, offsetPastEnd), "TCP data offset past the packet")
	assert.Zero(t, headersLength(header.IPv6ProtocolNumber, ipv6(uint8(header.UDPProtocolNumber), nil)), "no UDP header")
}
