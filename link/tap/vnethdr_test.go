package tap

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/polarnet/polarnet/link"
)

func TestVnetHdrEncoding(t *testing.T) {
	for _, tc := range []struct {
		name  string
		hdr   vnetHdr
		bytes []byte
	}{
		{"zero", vnetHdr{}, make([]byte, vnetHdrLen)},
		{"GSO TCPv4", vnetHdr{
			flags: vnetNeedsCsum, gsoType: vnetGSOTCPv4,
			hdrLen: 66, gsoSize: 1448, csumStart: 34, csumOffset: 16,
		}, []byte{1, 1, 66, 0, 0xa8, 0x05, 34, 0, 16, 0}},
		{"GSO TCPv6, large values", vnetHdr{
			flags: vnetNeedsCsum, gsoType: vnetGSOTCPv6,
			hdrLen: 0x1234, gsoSize: 0xfedc, csumStart: 54, csumOffset: 16,
		}, []byte{1, 4, 0x34, 0x12, 0xdc, 0xfe, 54, 0, 16, 0}},
		{"data valid", vnetHdr{flags: vnetDataValid}, []byte{2, 0, 0, 0, 0, 0, 0, 0, 0, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := make([]byte, vnetHdrLen)
			tc.hdr.encode(b)
			assert.Equal(t, tc.bytes, b, "encoding (little-endian, as TUNSETVNETLE asks)")
			assert.Equal(t, tc.hdr, decodeVnetHdr(tc.bytes))
		})
	}
}

func TestVnetHdrChecksumValid(t *testing.T) {
	for flags, want := range map[uint8]bool{
		0:                             false,
		vnetNeedsCsum:                 true,
		vnetDataValid:                 true,
		vnetNeedsCsum | vnetDataValid: true,
		4:                             false, // VIRTIO_NET_HDR_F_RSC_INFO alone
	} {
		h := vnetHdr{flags: flags}
		assert.Equal(t, want, h.checksumValid(), "flags %#x", flags)
	}
}

func TestTxVnetHdr(t *testing.T) {
	const (
		v4Hdr = 14 + 20 + 32 // Ethernet, IPv4, TCP with timestamps
		v6Hdr = 14 + 40 + 32
	)
	gso := func(kind link.GSOKind, hdrLen uint16) link.TxOffload {
		return link.TxOffload{
			NeedsChecksum: true, ChecksumStart: hdrLen - 32, ChecksumOffset: 16,
			GSO: kind, GSOSize: 1448, HeaderLen: hdrLen,
		}
	}
	for _, tc := range []struct {
		name     string
		offload  link.TxOffload
		frameLen int
		want     vnetHdr
	}{
		{"none", link.TxOffload{}, 1514, vnetHdr{}},
		{"checksum", link.TxOffload{NeedsChecksum: true, ChecksumStart: 34, ChecksumOffset: 6}, 200,
			vnetHdr{flags: vnetNeedsCsum, csumStart: 34, csumOffset: 6}},
		{"GSO TCPv4", gso(link.GSOTCPv4, v4Hdr), v4Hdr + 30000,
			vnetHdr{flags: vnetNeedsCsum, gsoType: vnetGSOTCPv4, hdrLen: v4Hdr, gsoSize: 1448, csumStart: 34, csumOffset: 16}},
		{"GSO TCPv6", gso(link.GSOTCPv6, v6Hdr), v6Hdr + 60000,
			vnetHdr{flags: vnetNeedsCsum, gsoType: vnetGSOTCPv6, hdrLen: v6Hdr, gsoSize: 1448, csumStart: 54, csumOffset: 16}},
		{"GSO, one byte over one segment", gso(link.GSOTCPv4, v4Hdr), v4Hdr + 1449,
			vnetHdr{flags: vnetNeedsCsum, gsoType: vnetGSOTCPv4, hdrLen: v4Hdr, gsoSize: 1448, csumStart: 34, csumOffset: 16}},
		{"GSO, payload of one segment", gso(link.GSOTCPv4, v4Hdr), v4Hdr + 1448,
			vnetHdr{flags: vnetNeedsCsum, hdrLen: v4Hdr, csumStart: 34, csumOffset: 16}},
		{"GSO, no payload", gso(link.GSOTCPv6, v6Hdr), v6Hdr,
			vnetHdr{flags: vnetNeedsCsum, hdrLen: v6Hdr, csumStart: 54, csumOffset: 16}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, err := txVnetHdr(&tc.offload, tc.frameLen)
			require.NoError(t, err)
			assert.Equal(t, tc.want, h)
		})
	}

	_, err := txVnetHdr(&link.TxOffload{GSO: 9, GSOSize: 1000}, 5000)
	assert.EqualError(t, err, "tap: unknown GSO kind 9")
}
