package polarnet

import (
	"encoding/binary"
	"sync/atomic"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/seqnum"
)

// synStamps gives a retransmitted SYN or SYN-ACK a timestamp of its own
// time. gVisor sends the handshake's first timestamp again with every
// retransmission (connect.go keeps the options it built), then takes the
// peer's echo of it for the connection's first RTT sample, as if the
// retransmission were the original: a connection whose SYN or SYN-ACK was
// lost once starts with an SRTT above a second and an RTO of three, which a
// lossy transfer pays at its first timeout. Linux stamps each
// retransmission afresh. So the TX queue remembers each flow's first SYN
// and moves a later copy's timestamp on by the milliseconds since: gVisor's
// timestamps count the shard clock's milliseconds, so the new one is never
// ahead of those the connection sends next.
//
// A fresh stamp is not enough when the peer had the first SYN-ACK and its
// ACK was lost: the peer answers the retransmission, a duplicate, with the
// echo of the first (RFC 7323 §4.3), and gVisor seeds the SRTT with the
// second between them (captures at 5% loss). gVisor then averages RTT
// samples over a window's worth of ACKs (RFC 7323 appendix G), so the SRTT
// takes about a second of transfer to come down, and each tail-loss probe
// meanwhile waits two SRTTs. So the first segment received for a handshake
// whose SYN went again, if it echoes an earlier stamp, leaves the poller
// echoing the latest: the sample is then the retransmission's round trip.
//
// It is the TX queue's, used under its lock but for resent.
type synStamps struct {
	m map[flowKey]synStamp
	// resent counts the flows in m whose SYN went again: the poller looks
	// up what it receives only while some are.
	resent atomic.Int32
}

// synStamp is a flow's first SYN: its sequence number, timestamp, and when
// it went (shard clock); and, once it went again, the latest timestamp.
type synStamp struct {
	seq   seqnum.Value
	tsVal uint32
	at    int64
	again bool
	last  uint32
}

// maxSynStamps bounds the flows remembered; past it, all are forgotten
// (a retransmission after that keeps gVisor's timestamp).
const maxSynStamps = 1 << 12

// restamp follows an outgoing segment seg and, if it is a SYN sent again,
// updates its timestamp. fixChecksum tells whether the segment carries its
// complete checksum.
func (m *synStamps) restamp(seg *segment, clock *shardClock, fixChecksum bool) {
	if !seg.tcp || seg.flags&header.TCPFlagSyn == 0 {
		return
	}
	th := header.TCP(seg.transport)
	at := tsAt(th)
	if at < 0 {
		return
	}
	seq, ts := seqnum.Value(th.SequenceNumber()), binary.BigEndian.Uint32(th[at:])
	now := clock.now()
	first, ok := m.m[seg.flow]
	if !ok || first.seq != seq || first.tsVal != ts {
		if !ok && len(m.m) >= maxSynStamps {
			clear(m.m)
			m.resent.Store(0)
		}
		if ok && first.again {
			m.resent.Add(-1)
		}
		m.m[seg.flow] = synStamp{seq: seq, tsVal: ts, at: now}
		return
	}
	ms := func(ns int64) uint32 { return uint32(ns / int64(time.Millisecond)) }
	if !first.again {
		m.resent.Add(1)
	}
	first.again, first.last = true, ts+ms(now)-ms(first.at)
	m.m[seg.flow] = first
	putTCPUint32(th, at, first.last, fixChecksum)
}

// answered follows a segment received for flow f (keyed as we send), whose
// TCP header th has its data offset within it: if the flow's SYN went
// again, the flow is forgotten and an echo of an earlier stamp is raised
// to the latest. fixChecksum tells whether the segment's checksum is
// complete, to be updated.
func (m *synStamps) answered(f flowKey, th header.TCP, fixChecksum bool) {
	st, ok := m.m[f]
	if !ok || !st.again {
		return
	}
	delete(m.m, f)
	m.resent.Add(-1)
	raiseEchoWithin(th, st.tsVal, st.last, fixChecksum)
}

// raiseEchoWithin raises the echo of the TCP segment th, whose data offset
// is within it, to to if it echoes a time from from on and before to.
// fixChecksum tells whether the segment's checksum is complete, to be
// updated.
func raiseEchoWithin(th header.TCP, from, to uint32, fixChecksum bool) {
	at := tsAt(th) + 4 // the echo
	if at < 4 {
		return
	}
	if echo := binary.BigEndian.Uint32(th[at:]); int32(to-echo) > 0 && int32(echo-from) >= 0 {
		putTCPUint32(th, at, to, fixChecksum)
	}
}

// peerStamps is synStamps' other half: the peer's SYN or SYN-ACK sent
// again. A peer stamps its repeat afresh, but when we had the first and
// our answer was lost, gVisor answers the repeat with the first's echo
// (RFC 7323 §4.3) and the peer seeds its SRTT with the second between
// them: a kernel sender at 5% loss then waited 2.3 s for its first
// tail-loss probe (captures of the conformance exchange). So the poller
// notes each flow's first SYN and a repeat's timestamp, and the TX queue
// raises the echo of what the flow sends next to the repeat's, until the
// first segment that is not a SYN, after which the flow is forgotten.
//
// It is the TX queue's, used under its lock but for again.
type peerStamps struct {
	m map[flowKey]peerStamp
	// again counts the flows in m whose peer sent its SYN again: the TX
	// queue looks up what it sends only while some are.
	again atomic.Int32
}

// peerStamp is the peer's first SYN on a flow: its sequence number and
// timestamp, and once it came again, the latest timestamp.
type peerStamp struct {
	seq   seqnum.Value
	first uint32
	again bool
	last  uint32
}

// note follows a received SYN of flow f (keyed as we send), whose TCP
// header th has its data offset within it.
func (m *peerStamps) note(f flowKey, th header.TCP) {
	at := tsAt(th)
	if at < 0 {
		return
	}
	seq, ts := seqnum.Value(th.SequenceNumber()), binary.BigEndian.Uint32(th[at:])
	st, ok := m.m[f]
	switch {
	case ok && st.seq == seq && int32(ts-st.last) > 0:
		if !st.again {
			m.again.Add(1)
		}
		st.again, st.last = true, ts
	case ok && st.seq == seq:
		return
	default:
		if !ok && len(m.m) >= maxSynStamps {
			clear(m.m)
			m.again.Store(0)
		}
		if ok && st.again {
			m.again.Add(-1)
		}
		st = peerStamp{seq: seq, first: ts, last: ts}
	}
	m.m[f] = st
}

// echo raises the echo of seg, about to be sent, if its flow's peer sent
// its SYN again, and forgets the flow once seg is not a SYN. fixChecksum
// tells whether the segment carries its complete checksum.
func (m *peerStamps) echo(seg *segment, fixChecksum bool) {
	if !seg.tcp {
		return
	}
	st, ok := m.m[seg.flow]
	if !ok || !st.again {
		return
	}
	if seg.flags&header.TCPFlagSyn == 0 {
		delete(m.m, seg.flow)
		m.again.Add(-1)
	}
	raiseEchoWithin(header.TCP(seg.transport), st.first, st.last, fixChecksum)
}
