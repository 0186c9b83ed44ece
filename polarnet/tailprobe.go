package polarnet

import (
	"encoding/binary"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/seqnum"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
)

// tailProbes lets a RACK sender whose whole window was lost repair it at
// once after the retransmission timeout, where gVisor alone crawls at about
// two segments per RTO: the first ACK of the timeout's retransmission makes
// RACK mark everything sent before it lost and enter fast recovery, whose
// pipe estimate (SetPipe) takes lost segments from the SACK scoreboard
// only, which the timeout cleared, so all of them count as in flight. Only
// SACK blocks above the hole correct it, and gVisor sends nothing above
// the hole in that state; so the TX queue keeps each flow's last data
// segments and sends them again just ahead of a retransmission that comes
// after a silence (copiesAhead): the receiver SACKs them (ahead of the
// retransmission, their timestamps still pass its PAWS check) and gVisor
// counts the holes below them as lost. A copy the receiver already had costs a duplicate.
// No copies go into a closed window: there the retransmission is a zero
// window probe, and copies past the window would only be dropped.
//
// It is the TX queue's, used under its lock.
type tailProbes struct {
	flows   map[flowKey]*flowTail
	windows *closedWindows
	lone    loneRetransmissions
}

// flowTail is what tailProbes keeps of a flow: its last data segments,
// oldest first, the end of the highest data sent and when the last data
// segment went (shard clock); for sackEcho, the timestamp of the last
// retransmission, if it had one; for loneRetransmissions, that
// retransmission (or, in recovery, data segment) while nothing followed
// it, when it went, how long it waits and how many times it went again,
// or a withheld tail-loss probe (probehold.go), its sequence space, and
// since when it waits; whether it is in recovery, until where, and when
// an ACK with SACK blocks last came; for its round trip (recoveryWait),
// the shard clock's milliseconds less the timestamp of its last data
// segment out, and the least round trip seen.
type flowTail struct {
	flow      flowKey
	last      [tailCopies]*stack.PacketBuffer
	end       seqnum.Value
	at        int64
	rtxTSVal  uint32
	rtx       bool // rtxTSVal is set
	rtxPkt    *stack.PacketBuffer
	rtxAt     int64
	wait      time.Duration
	resends   int
	fin       bool // the flow sent its FIN
	held      bool // rtxPkt is a withheld probe, not sent yet
	heldSeq   header.SACKBlock
	sacked    bool         // in recovery (loneRetransmissions.recovering)
	recoverTo seqnum.Value // the end of the data sent at the last SACK
	sackAt    int64
	tsBase    int64 // 0: no timestamp seen
	minRTT    int64 // -1: no sample yet
}

const (
	// tailCopies is how many segments are sent again: gVisor takes a hole
	// as lost once two SMSS above it are SACKed, and two segments may
	// fall short of that (a short one, or SMSS above the payload size).
	tailCopies = 3
	// tailSilence is the least time without data on a flow before a
	// retransmission is taken for a timeout's: below the 200ms minimum RTO,
	// above the tail-loss probe's 50ms floor (TCPConfig).
	tailSilence = int64(100 * time.Millisecond)
	// maxTailFlows bounds the flows followed, and so the packet buffers
	// kept alive; past it, tailProbes forgets the flows that sent their
	// FIN (they may still repair data sent before it), and if that is not
	// enough starts afresh.
	maxTailFlows = 1 << 10
)

func newTailProbes(windows *closedWindows) *tailProbes {
	return &tailProbes{flows: make(map[flowKey]*flowTail), windows: windows}
}

// observe follows pkt, about to be queued, and returns the copies to queue
// ahead of it (each with a reference of its own), if any. When pkt is kept
// as the flow's lone retransmission, due is when it goes again; held tells
// that pkt is a tail-loss probe withheld, not to be queued (probehold.go).
// floor is MinRecoveryTimer's (recoveryWait).
func (p *tailProbes) observe(pkt *stack.PacketBuffer, seg *segment, clock *shardClock, floor time.Duration) (probes []*stack.PacketBuffer, due int64, held bool) {
	if !seg.tcp {
		return nil, 0, false
	}
	if seg.flags&(header.TCPFlagRst|header.TCPFlagSyn) != 0 {
		p.forget(seg.flow) // a SYN starts a connection that may reuse the flow
		return nil, 0, false
	}
	t := p.flows[seg.flow]
	if t != nil && seg.flags&header.TCPFlagFin != 0 {
		t.fin = true
	}
	if seg.payload == 0 {
		return nil, 0, false
	}
	seq, now := seqnum.Value(header.TCP(seg.transport).SequenceNumber()), clock.now()
	if t == nil {
		if len(p.flows) >= maxTailFlows {
			p.forgetFinished()
		}
		if len(p.flows) >= maxTailFlows {
			p.releaseAll()
		}
		t = &flowTail{flow: seg.flow, end: seq, minRTT: -1}
		p.flows[seg.flow] = t
	}
	if !p.windowClosed(seg.flow) {
		probes = t.copiesAhead(seq, now, nil)
	}
	end := seq.Add(seqnum.Size(seg.payload))
	ts, hasTS := sentTSVal(seg)
	if hasTS {
		t.tsBase = now/int64(time.Millisecond) - int64(ts)
	}
	wait := t.recoveryWait(now, floor)
	switch {
	case !seq.LessThan(t.end):
		if t.last[0] != nil {
			t.last[0].DecRef()
		}
		copy(t.last[:], t.last[1:])
		t.last[tailCopies-1] = pkt.IncRef()
		t.end = end
		if !t.sacked || t.held {
			p.lone.sent(t, now)
			break
		}
		p.lone.follow(t, pkt, now, wait)
		due = now + int64(wait)
	case probing(t, seq, clock):
		clock.noteProbeFlow(t)
		p.lone.hold(t, pkt, header.SACKBlock{Start: seq, End: end}, wait)
		return probes, t.rtxAt + int64(wait), true
	default:
		t.rtxTSVal, t.rtx = ts, hasTS
		p.lone.follow(t, pkt, now, wait)
		due = now + int64(wait)
	}
	t.at = now
	return probes, due, false
}

// copiesAhead appends to out, each with a reference of its own, the copies
// of flow t's last data segments to go ahead of a retransmission from seq
// at now: one below them after a silence of tailSilence. Whichever of the
// flow's retransmissions first reaches the receiver after an outage, the
// timeout's or a lone one sent again (loneRetransmissions.due), must bring
// them: its timestamp, newer than theirs, would make the receiver's PAWS
// check drop them for good.
func (t *flowTail) copiesAhead(seq seqnum.Value, now int64, out []*stack.PacketBuffer) []*stack.PacketBuffer {
	if oldest := t.last[0]; oldest == nil || now-t.at < tailSilence || !seq.LessThan(tailSeq(oldest)) {
		return out
	}
	for _, c := range t.last {
		out = append(out, c.IncRef())
	}
	return out
}

// lossyFloor is the floor of the tail-loss probe and of the lone
// retransmissions of a flow that saw SACK blocks in the last lossyMemory,
// unless MinRecoveryTimer is lower: on a path that lost a segment lately,
// a probe is likelier a repair than a duplicate, and a lost tail at 5%
// loss came every 30 segments; about Linux's probe floor (two ticks plus
// two round trips).
const (
	lossyFloor  = 5 * time.Millisecond
	lossyMemory = int64(time.Second)
)

// recoveryWait is how long, at now, flow t's probe waits after its last
// segment out and a lone retransmission of it waits for an answer: floor,
// or lossyFloor if the flow saw SACK blocks lately, but no less than two
// of its least round trips (from timestamps, so in milliseconds).
func (t *flowTail) recoveryWait(now int64, floor time.Duration) time.Duration {
	if t.sackAt != 0 && now-t.sackAt < lossyMemory {
		floor = min(floor, lossyFloor)
	}
	return max(floor, time.Duration(2*t.minRTT)*time.Millisecond)
}

// sampleRTT takes a round-trip sample from a received ACK of flow t whose
// TCP header th carries no SACK blocks (their echo is an older segment's),
// at now.
func (t *flowTail) sampleRTT(th header.TCP, now int64) {
	at := tsAt(th)
	if at < 0 || t.tsBase == 0 {
		return
	}
	ecr := int64(binary.BigEndian.Uint32(th[at+4:]))
	rtt := now/int64(time.Millisecond) - t.tsBase - ecr
	if rtt >= 0 && rtt < int64(time.Minute/time.Millisecond) && (t.minRTT < 0 || rtt < t.minRTT) {
		t.minRTT = rtt
	}
}

func (p *tailProbes) windowClosed(f flowKey) bool {
	_, closed := p.windows.closed(f)
	return closed
}

// tailSeq is the sequence number of a kept segment.
func tailSeq(pkt *stack.PacketBuffer) seqnum.Value {
	return seqnum.Value(header.TCP(pkt.TransportHeader().Slice()).SequenceNumber())
}

// forget drops what is kept of a flow.
func (p *tailProbes) forget(f flowKey) {
	if t := p.flows[f]; t != nil {
		p.release(t)
		delete(p.flows, f)
	}
}

// forgetFinished drops what is kept of the flows that sent their FIN.
func (p *tailProbes) forgetFinished() {
	for f, t := range p.flows {
		if t.fin {
			p.release(t)
			delete(p.flows, f)
		}
	}
}

// releaseAll drops everything kept.
func (p *tailProbes) releaseAll() {
	for _, t := range p.flows {
		p.release(t)
	}
	clear(p.flows)
}

func (p *tailProbes) release(t *flowTail) {
	for i, c := range t.last {
		if c != nil {
			c.DecRef()
			t.last[i] = nil
		}
	}
	p.lone.settle(t)
	p.lone.recovering(t, false)
}
