package polarnet

import (
	"encoding/binary"
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
// It is the TX queue's, used under its lock.
type synStamps map[flowKey]synStamp

// synStamp is a flow's first SYN: its sequence number, timestamp, and when
// it went (shard clock).
type synStamp struct {
	seq   seqnum.Value
	tsVal uint32
	at    int64
}

// maxSynStamps bounds the flows remembered; past it, all are forgotten
// (a retransmission after that keeps gVisor's timestamp).
const maxSynStamps = 1 << 12

// restamp follows an outgoing segment seg and, if it is a SYN sent again,
// updates its timestamp. fixChecksum tells whether the segment carries its
// complete checksum.
func (m synStamps) restamp(seg *segment, clock *shardClock, fixChecksum bool) {
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
	first, ok := m[seg.flow]
	if !ok || first.seq != seq || first.tsVal != ts {
		if !ok && len(m) >= maxSynStamps {
			clear(m)
		}
		m[seg.flow] = synStamp{seq: seq, tsVal: ts, at: now}
		return
	}
	ms := func(ns int64) uint32 { return uint32(ns / int64(time.Millisecond)) }
	putTCPUint32(th, at, ts+ms(now)-ms(first.at), fixChecksum)
}
