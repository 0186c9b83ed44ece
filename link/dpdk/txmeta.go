package dpdk

import (
	"encoding/binary"
	"fmt"

	"github.com/polarnet/polarnet/link"
)

// RTE_MBUF_F_TX_* flags of rte_mbuf_core.h (checked against the headers
// in the cgo build's tests).
const (
	mbufTxTCPSeg   = 1 << 50
	mbufTxTCPCksum = 1 << 52
	mbufTxUDPCksum = 3 << 52
	mbufTxIPCksum  = 1 << 54
	mbufTxIPv4     = 1 << 55
	mbufTxIPv6     = 1 << 56
)

// txMeta is what an mbuf needs to know to offload a frame's checksum and
// segmentation: rte_mbuf's ol_flags, l2_len, l3_len, l4_len and tso_segsz.
type txMeta struct {
	olFlags    uint64
	l2, l3, l4 uint16
	tsoSegsz   uint16
}

// offloadMeta translates the engine's offload request for a frame into mbuf
// metadata, and fixes up hdr, the frame's first bytes (at least its headers,
// in the mbuf already), the way DPDK's offloads want them:
//   - checksum offload (TCP or UDP): the checksum field holds the
//     pseudo-header sum with the transport length, as the engine leaves it;
//   - TSO: the pseudo-header sum without the length (every segment has its
//     own), and an IPv4 header checksum of zero, which the PMD recomputes
//     per segment.
//
// frameLen is the whole frame's length. With skip (SkipChecksums) nothing
// is offloaded: the frame leaves with its partial checksum.
func offloadMeta(off *link.TxOffload, hdr []byte, frameLen int, p *portPlan, skip bool) (txMeta, error) {
	if !off.NeedsChecksum && off.GSO == link.GSONone {
		return txMeta{}, nil
	}
	gso := off.GSO != link.GSONone
	switch {
	case skip && !gso:
		return txMeta{}, nil
	case gso && !p.tso:
		return txMeta{}, fmt.Errorf("a frame asks for segmentation, which the link did not offer: %w", link.ErrNotSupported)
	case !gso && !p.txChecksum:
		return txMeta{}, fmt.Errorf("a frame asks for checksum offload, which the link did not offer: %w", link.ErrNotSupported)
	}
	l4Start := int(off.ChecksumStart)
	if l4Start < ethHdrLen+20 || l4Start+int(off.ChecksumOffset)+2 > len(hdr) {
		return txMeta{}, fmt.Errorf("checksum start %d, offset %d outside the frame's %d header bytes", off.ChecksumStart, off.ChecksumOffset, len(hdr))
	}
	m := txMeta{l2: ethHdrLen, l3: uint16(l4Start - ethHdrLen)}
	v4 := false
	switch binary.BigEndian.Uint16(hdr[12:]) {
	case etherTypeIPv4:
		v4 = true
		m.olFlags |= mbufTxIPv4
	case etherTypeIPv6:
		m.olFlags |= mbufTxIPv6
	default:
		return txMeta{}, fmt.Errorf("checksum offload for EtherType %#04x", binary.BigEndian.Uint16(hdr[12:]))
	}
	csum := hdr[l4Start+int(off.ChecksumOffset):]
	switch off.ChecksumOffset {
	case 16: // TCP
		if l4Start+13 > len(hdr) {
			return txMeta{}, fmt.Errorf("TCP header beyond the frame's %d header bytes", len(hdr))
		}
		m.l4 = uint16(hdr[l4Start+12]>>4) * 4
		m.olFlags |= mbufTxTCPCksum
	case 6: // UDP
		if gso {
			return txMeta{}, fmt.Errorf("segmentation of a UDP frame")
		}
		m.l4 = 8
		m.olFlags |= mbufTxUDPCksum
	default:
		return txMeta{}, fmt.Errorf("checksum offset %d is neither TCP's nor UDP's", off.ChecksumOffset)
	}
	if !gso {
		return m, nil
	}
	if off.GSOSize == 0 || int(off.HeaderLen) != l4Start+int(m.l4) {
		return txMeta{}, fmt.Errorf("segmentation with MSS %d and header length %d (headers end at %d)", off.GSOSize, off.HeaderLen, l4Start+int(m.l4))
	}
	if frameLen <= int(off.HeaderLen)+int(off.GSOSize) {
		// One segment's worth: a plain checksum offload does.
		return m, nil
	}
	phdr, ok := tsoPseudoHeaderSum(hdr, l4Start)
	if !ok {
		return txMeta{}, fmt.Errorf("segmentation of a frame whose TCP header is not at %d", l4Start)
	}
	m.olFlags |= mbufTxTCPSeg
	m.tsoSegsz = off.GSOSize
	if v4 {
		m.olFlags |= mbufTxIPCksum
		binary.BigEndian.PutUint16(hdr[ethHdrLen+10:], 0)
	}
	binary.BigEndian.PutUint16(csum, phdr)
	return m, nil
}
