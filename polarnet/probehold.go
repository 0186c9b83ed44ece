package polarnet

import (
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/seqnum"
)

// The tail-loss probe's floor (TCPConfig.MinRecoveryTimer, or lossyFloor
// for a flow that saw loss lately: recoveryWait) is held on the way out,
// per flow. The clock floors the probe timer's wake-up, but gVisor re-arms
// a pending timer without telling the clock when the new deadline is later
// (tcp/timer.go, enable), so the floored wake-up of an earlier send finds
// a later send's deadline, two SRTT after it, passed and probes however
// recently that send left: at 64 connections of 4 KiB requests, ACKs
// merely late drew 0.1–0.3% of segments as probes, and each, with no
// D-SACK from a gVisor receiver, cost a recovery. So when gVisor sends,
// from its probe timer, a retransmission of the flow's last data segment,
// the TX queue withholds it: it goes when the floor has passed since the
// flow's last segment out with no segment of the flow out and no ACK in
// (each restarts the wait), as Linux re-arms its probe, and not before the
// poller has delivered the burst in hand, which may answer it (the probe
// timer runs before that burst reaches gVisor: shard.poll). An ACK that
// covers it drops it and carries in a D-SACK block for it, which ends
// gVisor's probe episode without a recovery (rack.go, detectTLPRecovery),
// as a peer's D-SACK of a needless probe would. Delivered before the
// probe, that ACK would have ended the episode with a recovery.

// probing reports whether a retransmission of flow t starting at seq is
// gVisor's tail-loss probe: sent from the probe timer (which runs on the
// poller) and repeating the flow's last data segment, or, after a
// coalesced send, a part of it.
func probing(t *flowTail, seq seqnum.Value, clock *shardClock) bool {
	last := t.last[tailCopies-1]
	return clock.probing.Load() != nil && last != nil && !seq.LessThan(tailSeq(last))
}

// withDSACK returns a copy of frame, a received TCP segment whose headers
// are h and TCP header th, with the D-SACK block b added, or nil when the
// segment carries SACK blocks already (a D-SACK block comes first) or has
// no room for one. fixChecksum tells whether its checksum is complete, to
// be kept so.
func withDSACK(frame []byte, h *rxHeaders, th header.TCP, b header.SACKBlock, fixChecksum bool) []byte {
	hl := int(th.DataOffset())
	if tcpOption(th[header.TCPMinimumSize:hl], header.TCPOptionSACK) >= 0 {
		return nil
	}
	end := min(max(h.end-h.netLen, hl), len(th))
	eth := frame[:header.EthernetMinimumSize]
	return sackFrame(eth, h.pkt[:h.netLen], th, th[hl:end], []header.SACKBlock{b}, h.ethType, fixChecksum)
}
