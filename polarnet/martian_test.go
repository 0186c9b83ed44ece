package polarnet

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
)

// TestMartianUnspecifiedIPv6 covers the packets a host may send from ::
// (neighbour and router solicitations during duplicate address detection,
// and MLD reports, which come behind a hop-by-hop header) and those it may
// not.
func TestMartianUnspecifiedIPv6(t *testing.T) {
	st := &Stack{cfg: Config{Addrs: []netip.Prefix{netip.MustParsePrefix("fd00:198:18::2/64")}}}
	packet := func(next tcpip.TransportProtocolNumber, hopByHop bool) []byte {
		const hbhLen = 8
		pkt := make([]byte, header.IPv6MinimumSize+hbhLen)
		fields := header.IPv6Fields{
			PayloadLength: hbhLen, TransportProtocol: next, HopLimit: 1,
			SrcAddr: header.IPv6Any, DstAddr: header.IPv6AllNodesMulticastAddress,
		}
		if hopByHop {
			fields.TransportProtocol = tcpip.TransportProtocolNumber(header.IPv6HopByHopOptionsExtHdrIdentifier)
			pkt[header.IPv6MinimumSize] = byte(next)
		}
		header.IPv6(pkt).Encode(&fields)
		return pkt
	}
	for _, tc := range []struct {
		name    string
		pkt     []byte
		dropped bool
	}{
		{"ICMPv6 (neighbour solicitation)", packet(header.ICMPv6ProtocolNumber, false), false},
		{"ICMPv6 behind hop-by-hop (MLD report)", packet(header.ICMPv6ProtocolNumber, true), false},
		{"UDP", packet(header.UDPProtocolNumber, false), true},
		{"TCP behind hop-by-hop", packet(header.TCPProtocolNumber, true), true},
		{"hop-by-hop header cut off", packet(header.ICMPv6ProtocolNumber, true)[:header.IPv6MinimumSize], true},
	} {
		assert.Equal(t, tc.dropped, st.martian(parseIP(header.IPv6ProtocolNumber, tc.pkt)), tc.name)
	}
}
