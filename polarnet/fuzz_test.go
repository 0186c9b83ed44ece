package polarnet

import (
	"net/netip"
	"testing"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
)

// The parsers the engine runs on every received frame, before gVisor sees
// it, must never panic on any input.

// seedFrames are IP packets of each kind the parsers know, for the corpus.
func seedFrames() [][]byte {
	v4 := make([]byte, header.IPv4MinimumSize+header.TCPMinimumSize)
	header.IPv4(v4).Encode(&header.IPv4Fields{
		TotalLength: uint16(len(v4)), Protocol: uint8(header.TCPProtocolNumber), TTL: 64,
		SrcAddr: tcpip.AddrFrom4([4]byte{198, 18, 0, 2}), DstAddr: tcpip.AddrFrom4([4]byte{198, 18, 0, 1}),
	})
	header.TCP(v4[header.IPv4MinimumSize:]).Encode(&header.TCPFields{SrcPort: 80, DstPort: 40000, DataOffset: header.TCPMinimumSize, Flags: header.TCPFlagAck})
	v6 := make([]byte, header.IPv6MinimumSize+8+header.UDPMinimumSize)
	header.IPv6(v6).Encode(&header.IPv6Fields{
		PayloadLength: 8 + header.UDPMinimumSize, TransportProtocol: tcpip.TransportProtocolNumber(header.IPv6HopByHopOptionsExtHdrIdentifier), HopLimit: 64,
		SrcAddr: tcpip.AddrFrom16([16]byte{0: 0xfd, 15: 2}), DstAddr: tcpip.AddrFrom16([16]byte{0: 0xfd, 15: 1}),
	})
	v6[header.IPv6MinimumSize] = uint8(header.UDPProtocolNumber)
	icmp := make([]byte, header.IPv4MinimumSize+header.ICMPv4MinimumSize)
	copy(icmp, v4[:header.IPv4MinimumSize])
	icmp[9] = uint8(header.ICMPv4ProtocolNumber)
	icmp[header.IPv4MinimumSize] = byte(header.ICMPv4DstUnreachable)
	icmp = append(icmp, v4...)
	return [][]byte{v4, v6, icmp, {}, {0x45}}
}

func FuzzReceivedPacketParsers(f *testing.F) {
	for _, p := range seedFrames() {
		f.Add(uint16(header.IPv4ProtocolNumber), p)
		f.Add(uint16(header.IPv6ProtocolNumber), p)
		f.Add(uint16(header.ARPProtocolNumber), p)
	}
	addrs := []netip.Prefix{netip.MustParsePrefix("198.18.0.1/24"), netip.MustParsePrefix("fd00::1/64")}
	la := &Stack{cfg: Config{Addrs: addrs}, ownOrBroadcast: ownOrBroadcast(addrs)}
	la.shards = make([]*shard, 3)
	windows, sacks := newClosedWindows(), newFinSACK()
	f.Fuzz(func(t *testing.T, ethType uint16, pkt []byte) {
		h := parseIP(tcpip.NetworkProtocolNumber(ethType), pkt)
		if h.netLen > len(pkt) || h.l4 != nil && len(pkt)-len(h.l4) != h.netLen {
			t.Fatalf("IP headers of %d bytes, transport at %d, in %d", h.netLen, len(pkt)-len(h.l4), len(pkt))
		}
		verifyTransportChecksum(h)
		la.martian(h)
		if o := la.owner(h); o >= len(la.shards) || o < toAll {
			t.Fatalf("owner %d of %d shards", o, len(la.shards))
		}
		tcpFlowHash(h)
		windows.received(h)
		sacks.received(h, 0)
		if n := headerSplit(h); n > header.EthernetMinimumSize+len(pkt) {
			t.Fatalf("split at %d of %d", n, header.EthernetMinimumSize+len(pkt))
		}
	})
}

func FuzzTCPOptions(f *testing.F) {
	f.Add([]byte{header.TCPOptionNOP, header.TCPOptionNOP, header.TCPOptionSACK, 10, 0, 0, 0, 1, 0, 0, 0, 2})
	f.Add([]byte{header.TCPOptionMSS, 4, 5, 0xb4, header.TCPOptionEOL})
	f.Add([]byte{header.TCPOptionWS, 0})
	f.Fuzz(func(t *testing.T, opts []byte) { hasSACKBlocks(opts) })
}
