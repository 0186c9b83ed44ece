package polarnet

import (
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/seqnum"
)

// A received pure ACK that a later segment of its flow in the same burst
// supersedes is dropped before gVisor sees it. Linux acknowledges two full
// segments or more at once (a 4 KiB request at MTU 1500), and its answer
// follows with the same acknowledgement; a bulk receiver's ACKs follow one
// another. gVisor costs about as much per pure ACK as per data segment, and
// the later segment tells it everything the earlier one did: the drop is an
// ACK lost on the wire, with its information delivered in the same burst.
// Only an ACK that says nothing more is dropped: no data, flags ACK (and
// PSH) alone, no SACK blocks; and the flow's next frame in the burst must
// acknowledge more, or as much while carrying data (so a run of duplicate
// ACKs, a loss signal, stays whole), with a window no smaller (the right
// edge no lower, whatever the scale): the ACK filter's rules (ackfilter.go)
// on the way in.

// supersededACKs sets drop[i] for each frame of a burst, whose headers are
// hdrs[i] and whose TCP flow hashes to keys[i], that is such a pure ACK; the
// frame after it of its flow must pass valid (its length and checksum), as
// the drop counts on its delivery. A frame read as the one after an ACK is
// not read again when its own turn comes (a run of ACKs reads each once).
func supersededACKs(hdrs []rxHeaders, keys []uint64, drop []bool, valid func(j int) bool) {
	var next segment // the frame at nextAt, read
	nextAt := -1
	for i := range hdrs {
		drop[i] = false
		if keys[i] == 0 {
			continue
		}
		a := next
		if nextAt != i {
			a = rxSegment(&hdrs[i])
		}
		if !a.pureACK() {
			continue
		}
		for j := i + 1; j < len(hdrs); j++ {
			if keys[j] != keys[i] {
				continue
			}
			next, nextAt = rxSegment(&hdrs[j]), j
			drop[i] = supersedes(&next, &a) && (a.ack.LessThan(next.ack) || next.payload > 0) && valid(j)
			break
		}
	}
}

// rxSegment reads what the ACK filter's rules need of a received frame's
// headers; its flow is named as the segments we send on it name theirs.
func rxSegment(h *rxHeaders) segment {
	th := h.validTCP()
	if th == nil {
		return segment{}
	}
	return segment{
		tcp:     true,
		flow:    h.flow(th),
		flags:   th.Flags(),
		ack:     seqnum.Value(th.AckNumber()),
		window:  th.WindowSize(),
		payload: h.end - h.netLen - int(th.DataOffset()),
		sack:    hasSACKBlocks(th[header.TCPMinimumSize:th.DataOffset()]),
	}
}
