package polarnet

import (
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/assert"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"
)

func TestVerifyTransportChecksum(t *testing.T) {
	pkt := make([]byte, header.IPv4MinimumSize+header.UDPMinimumSize+4)
	ip := header.IPv4(pkt)
	ip.Encode(&header.IPv4Fields{
		TotalLength: uint16(len(pkt)), Protocol: uint8(header.UDPProtocolNumber), TTL: 64,
		SrcAddr: tcpip.AddrFrom4([4]byte{198, 18, 0, 2}), DstAddr: tcpip.AddrFrom4([4]byte{198, 18, 0, 1}),
	})
	ip.SetChecksum(^ip.CalculateChecksum())
	udp := header.UDP(pkt[header.IPv4MinimumSize:])
	udp.Encode(&header.UDPFields{SrcPort: 1, DstPort: 2, Length: uint16(len(udp))})
	copy(udp[header.UDPMinimumSize:], "data")
	sum := header.PseudoHeaderChecksum(header.UDPProtocolNumber, ip.SourceAddress(), ip.DestinationAddress(), uint16(len(udp)))
	udp.SetChecksum(^checksum.Checksum(udp, sum))
	assert.True(t, verifyTransportChecksum(parseIP(header.IPv4ProtocolNumber, pkt)))

	badPayload := append([]byte(nil), pkt...)
	badPayload[len(badPayload)-1] ^= 1
	assert.False(t, verifyTransportChecksum(parseIP(header.IPv4ProtocolNumber, badPayload)))

	badHeader := append([]byte(nil), pkt...)
	badHeader[8]-- // TTL, covered by the header checksum only
	assert.False(t, verifyTransportChecksum(parseIP(header.IPv4ProtocolNumber, badHeader)))
}

func TestPutTCPUint32(t *testing.T) {
	for _, at := range []int{header.TCPSeqNumOffset, 28, 29} {
		th := make(header.TCP, 40)
		for i := range th {
			th[i] = byte(i*37 + 11)
		}
		th.SetChecksum(0)
		th.SetChecksum(^checksum.Checksum(th, 0))
		putTCPUint32(th, at, 0xdeadbeef, true)
		assert.Equal(t, uint32(0xdeadbeef), binary.BigEndian.Uint32(th[at:]), "at %d", at)
		assert.Equal(t, uint16(0xffff), checksum.Checksum(th, 0), "at %d", at)
	}
}
