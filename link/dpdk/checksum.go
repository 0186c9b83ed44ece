package dpdk

import "github.com/polarnet/polarnet/internal/frame"

// Frame layout constants.
const (
	ethHdrLen     = frame.EthLen
	etherTypeIPv4 = frame.EtherTypeIPv4
	etherTypeIPv6 = frame.EtherTypeIPv6
)

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
