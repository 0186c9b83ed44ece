package polarnet

import (
	"encoding/binary"

	"gvisor.dev/gvisor/pkg/tcpip/header"
)

// sackEcho lets gVisor's RACK take the SACK of a retransmission for what it
// is. A receiver echoes the timestamp of the last segment that advanced its
// window (RFC 7323 §4.3), so an ACK that SACKs a retransmission sent above
// a hole (a tail-loss probe, most often) echoes a time before that
// retransmission, and gVisor's RACK (rack.go, update) ignores the SACK as
// possibly the original's: the hole below is not marked lost, and a tail
// whose last segments were lost waits for the RTO instead of a round trip
// (seen in captures of transfers at 5% loss). Linux's RACK asks only that
// such an RTT sample be no shorter than the minimum RTT. So the poller
// raises the echo of an ACK that carries SACK blocks to the timestamp of
// the flow's last retransmission when it is older. gVisor reads the echo
// for RACK, for RTT samples and to detect a spurious recovery; only the
// RTT sample of an ACK that also advances is affected, and by no more than
// the time between retransmissions of one recovery.

// tsOnlyHeader is the length of a TCP header whose only options are a
// timestamp and two NOPs: anything longer may carry SACK blocks.
const tsOnlyHeader = header.TCPMinimumSize + 2 + header.TCPOptionTSLength

// mayCarrySACK reports whether th, a TCP header whose data offset is within
// it, may carry SACK blocks: its options are longer than a timestamp's, or
// as long but not laid out as gVisor and Linux lay out a timestamp (NOP,
// NOP, timestamp): without timestamps, one SACK block takes that length.
func mayCarrySACK(th header.TCP) bool {
	switch n := int(th.DataOffset()); {
	case n > tsOnlyHeader:
		return true
	case n < tsOnlyHeader:
		return false
	}
	o := th[header.TCPMinimumSize:]
	return o[0] != header.TCPOptionNOP || o[1] != header.TCPOptionNOP || o[2] != header.TCPOptionTS
}

// tsAt returns where in th, a TCP header whose data offset is within it,
// the timestamp option's TSval is (its echo follows), or -1 for none.
func tsAt(th header.TCP) int {
	i := tcpOption(th[header.TCPMinimumSize:th.DataOffset()], header.TCPOptionTS)
	if i < 0 || header.TCPMinimumSize+i+header.TCPOptionTSLength > int(th.DataOffset()) {
		return -1
	}
	return header.TCPMinimumSize + i + 2
}

// sentTSVal returns the timestamp an outgoing TCP segment carries.
func sentTSVal(s *segment) (uint32, bool) {
	th := header.TCP(s.transport)
	at := tsAt(th)
	if at < 0 {
		return 0, false
	}
	return binary.BigEndian.Uint32(th[at:]), true
}

// raiseEcho raises the echo of a received segment of flow t, whose TCP
// header is th and which carries SACK blocks, if sackEcho says so.
// fixChecksum tells whether the segment's checksum is complete, to be
// updated.
func (p *tailProbes) raiseEcho(t *flowTail, th header.TCP, fixChecksum bool) {
	if th.Flags()&(header.TCPFlagSyn|header.TCPFlagRst) != 0 || !t.rtx {
		return
	}
	at := tsAt(th) + 4 // the echo
	if at < 4 || int32(t.rtxTSVal-binary.BigEndian.Uint32(th[at:])) <= 0 {
		return
	}
	putTCPUint32(th, at, t.rtxTSVal, fixChecksum)
}
