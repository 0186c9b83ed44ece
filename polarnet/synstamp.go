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
	at := tsAt(th) + 4 // the echo
	if at < 4 {
		return
	}
	if echo := binary.BigEndian.Uint32(th[at:]); int32(st.last-echo) > 0 && int32(echo-st.tsVal) >= 0 {
		putTCPUint32(th, at, st.last, fixChecksum)
	}
}
