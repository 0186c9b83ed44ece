package tap

import (
	"encoding/binary"
	"fmt"

	"github.com/polarnet/polarnet/link"
)

// The virtio-net header that precedes every frame on a TAP opened with
// IFF_VNET_HDR (struct virtio_net_hdr in <linux/virtio_net.h>).
//
// The link uses the 10-byte legacy layout, the TUN default. The 12-byte
// virtio 1.0 layout only appends num_buffers, which counts the buffers of a
// frame under VIRTIO_NET_F_MRG_RXBUF: TUN always reads and writes a frame in
// one piece, so the field would be two bytes of padding per frame. New still
// sets the size and the byte order (little-endian, as in virtio 1.0) with
// TUNSETVNETHDRSZ and TUNSETVNETLE, because both are per-device settings an
// existing device may have been given other values for.
const vnetHdrLen = 10

// Values of vnetHdr.flags and vnetHdr.gsoType.
const (
	vnetNeedsCsum = 1 // VIRTIO_NET_HDR_F_NEEDS_CSUM: checksum is partial
	vnetDataValid = 2 // VIRTIO_NET_HDR_F_DATA_VALID: checksum was verified

	vnetGSONone  = 0 // VIRTIO_NET_HDR_GSO_NONE
	vnetGSOTCPv4 = 1 // VIRTIO_NET_HDR_GSO_TCPV4
	vnetGSOTCPv6 = 4 // VIRTIO_NET_HDR_GSO_TCPV6
)

// vnetHdr is a decoded virtio-net header. Offsets count from the start of the
// Ethernet frame.
type vnetHdr struct {
	flags      uint8
	gsoType    uint8
	hdrLen     uint16 // Ethernet+IP+TCP header length: a hint for the kernel's linear copy
	gsoSize    uint16 // payload bytes per segment
	csumStart  uint16 // where checksumming starts
	csumOffset uint16 // where, from csumStart, the checksum goes
}

// encode writes h into b, which must hold vnetHdrLen bytes.
func (h *vnetHdr) encode(b []byte) {
	_ = b[vnetHdrLen-1]
	b[0] = h.flags
	b[1] = h.gsoType
	binary.LittleEndian.PutUint16(b[2:], h.hdrLen)
	binary.LittleEndian.PutUint16(b[4:], h.gsoSize)
	binary.LittleEndian.PutUint16(b[6:], h.csumStart)
	binary.LittleEndian.PutUint16(b[8:], h.csumOffset)
}

// decodeVnetHdr reads a header from b, which must hold vnetHdrLen bytes.
func decodeVnetHdr(b []byte) vnetHdr {
	_ = b[vnetHdrLen-1]
	return vnetHdr{
		flags:      b[0],
		gsoType:    b[1],
		hdrLen:     binary.LittleEndian.Uint16(b[2:]),
		gsoSize:    binary.LittleEndian.Uint16(b[4:]),
		csumStart:  binary.LittleEndian.Uint16(b[6:]),
		csumOffset: binary.LittleEndian.Uint16(b[8:]),
	}
}

// checksumValid reports whether a received frame needs no checksum check:
// the kernel verified it (DATA_VALID), or the frame never left this host and
// carries a partial checksum only (NEEDS_CSUM, CHECKSUM_PARTIAL in Linux).
func (h *vnetHdr) checksumValid() bool {
	return h.flags&(vnetNeedsCsum|vnetDataValid) != 0
}

// txVnetHdr returns the header that asks the kernel for the offloads o of a
// frame of frameLen bytes.
//
// The conventions of the engine and of Linux agree, so the frame is passed
// through unchanged: the TCP checksum field holds the pseudo-header sum
// including the TCP length of the whole frame (what gVisor's buildTCPHdr and
// Linux's __tcp_v4_send_check both store; tcp_gso_segment adjusts it per
// segment), and hdr_len is the Ethernet+IP+TCP header length.
//
// A frame whose payload fits in one segment is sent without GSO, as Linux
// itself does: older kernels reject such a header with EINVAL, newer ones
// ignore the GSO fields.
func txVnetHdr(o *link.TxOffload, frameLen int) (vnetHdr, error) {
	var h vnetHdr
	if o.NeedsChecksum {
		h.flags = vnetNeedsCsum
		h.csumStart = o.ChecksumStart
		h.csumOffset = o.ChecksumOffset
	}
	switch o.GSO {
	case link.GSONone:
		return h, nil
	case link.GSOTCPv4:
		h.gsoType = vnetGSOTCPv4
	case link.GSOTCPv6:
		h.gsoType = vnetGSOTCPv6
	default:
		return vnetHdr{}, fmt.Errorf("tap: unknown GSO kind %d", o.GSO)
	}
	h.hdrLen = o.HeaderLen
	if frameLen-int(o.HeaderLen) <= int(o.GSOSize) {
		h.gsoType = vnetGSONone
	} else {
		h.gsoSize = o.GSOSize
	}
	return h, nil
}
