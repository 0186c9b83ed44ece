package dpdk

import (
	"encoding/binary"

	"github.com/polarnet/polarnet/internal/frame"
)

// Frame layout constants.
const (
	ethHdrLen     = frame.EthLen
	etherTypeIPv4 = frame.EtherTypeIPv4
	etherTypeIPv6 = frame.EtherTypeIPv6
)

// l4ChecksumOffset returns where the checksum sits in a TCP or UDP header
// and the header's minimum length; ok is false for other protocols.
func l4ChecksumOffset(proto uint8) (off, minLen int, ok bool) {
	switch proto {
	case frame.ProtoTCP:
		return 16, 20, true
	case frame.ProtoUDP:
		return 6, 8, true
	}
	return 0, 0, false
}

// checkL4 checks the TCP or UDP checksum of an Ethernet frame in software.
// valid is true when the checksum is right, or when it is partial
// (CHECKSUM_PARTIAL: the field holds only the pseudo-header sum, as the
// local kernel leaves it for an offload that a veth or packet socket never
// performs); partial tells the second case. Frames that are not plain
// TCP or UDP over IPv4 or IPv6 (fragments, ARP, ICMP) are neither: the
// engine handles them.
func checkL4(f []byte) (valid, partial bool) {
	p, ok := frame.Parse(f)
	if !ok || p.Fragment || p.End > len(f) {
		return false, false
	}
	off, minLen, ok := l4ChecksumOffset(p.Proto)
	seg := f[p.L4:p.End]
	if !ok || len(seg) < minLen {
		return false, false
	}
	pseudo := frame.PseudoHeaderSum(p, len(seg))
	if frame.Fold(frame.Sum(seg, pseudo)) == 0xffff {
		return true, false
	}
	if binary.BigEndian.Uint16(seg[off:]) == frame.Fold(pseudo) {
		return true, true
	}
	return false, false
}

// tsoPseudoHeaderSum returns the folded pseudo-header sum without the
// transport length that DPDK's TSO wants in the TCP checksum field, for the
// frame whose headers (at least) are hdr and whose TCP header starts at
// l4Start. ok is false for anything else.
func tsoPseudoHeaderSum(hdr []byte, l4Start int) (uint16, bool) {
	p, ok := frame.ParseTruncated(hdr)
	if !ok || p.L4 != l4Start || p.Proto != frame.ProtoTCP {
		return 0, false
	}
	return frame.Fold(frame.PseudoHeaderSum(p, 0)), true
}
