package polarnet

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gvisor.dev/gvisor/pkg/tcpip/header"
)

// tailFlow sends segments of one flow through tailProbes at the times a
// frozen shard clock gives, as the TX queue would.
type tailFlow struct {
	t     *testing.T
	p     *tailProbes
	clock *shardClock
}

func newTailFlow(t *testing.T) *tailFlow {
	f := &tailFlow{t: t, p: newTailProbes(newClosedWindows()), clock: newShardClock(func() {})}
	f.clock.freeze(int64(time.Hour))
	t.Cleanup(f.p.releaseAll)
	return f
}

// send observes a segment at the clock's time plus after and returns the
// sequence numbers (less one) of the copies to send ahead of it.
func (f *tailFlow) send(after time.Duration, s seg) []uint32 {
	f.t.Helper()
	f.clock.freeze(f.clock.now() + int64(after))
	pkt := packet(s)
	defer pkt.DecRef()
	sg := parseSegment(pkt)
	var seqs []uint32
	copies, _, _ := f.p.observe(pkt, &sg, f.clock, time.Millisecond)
	for _, c := range copies {
		seqs = append(seqs, header.TCP(c.TransportHeader().Slice()).SequenceNumber()-1)
		c.DecRef()
	}
	return seqs
}

// data is a 1000-byte data segment of port 1 at seq.
func data(seq uint32) seg { return seg{port: 1, seq: seq, flags: ackPsh, payload: 1000} }

// A retransmission after a silence, below the kept segments, brings copies
// of the flow's last three data segments ahead of it.
func TestTailProbesAfterSilence(t *testing.T) {
	f := newTailFlow(t)
	for seq := uint32(0); seq < 5000; seq += 1000 {
		require.Empty(t, f.send(0, data(seq)), "new data")
	}
	assert.Empty(t, f.send(time.Duration(tailSilence)/2, data(0)), "a retransmission before the silence")
	assert.Equal(t, []uint32{2000, 3000, 4000}, f.send(time.Duration(tailSilence), data(1000)), "a timeout's retransmission")
	assert.Equal(t, []uint32{2000, 3000, 4000}, f.send(2*time.Duration(tailSilence), data(1000)), "the next timeout's")
	assert.Empty(t, f.send(0, data(2000)), "the retransmissions that follow")
}

// A retransmission of a kept segment (a tail-loss probe), pure ACKs and
// flows with fewer than three data segments bring no copies.
func TestTailProbesNotForProbes(t *testing.T) {
	f := newTailFlow(t)
	f.send(0, data(0))
	f.send(0, data(1000))
	assert.Empty(t, f.send(time.Second, data(0)), "two segments kept")
	f.send(0, data(2000))
	assert.Empty(t, f.send(time.Second, data(2000)), "a tail-loss probe")
	assert.Empty(t, f.send(time.Second, seg{port: 1, seq: 0, flags: ack}), "a pure ACK")
}

// No copies go into a window the peer has closed: the retransmission is a
// zero window probe.
func TestTailProbesNotIntoClosedWindow(t *testing.T) {
	f := newTailFlow(t)
	for seq := uint32(0); seq < 5000; seq += 1000 {
		f.send(0, data(seq))
	}
	pkt := packet(data(0))
	flow := parseSegment(pkt).flow
	pkt.DecRef()
	f.p.windows.flows[flow] = 1
	f.p.windows.n.Store(1)
	assert.Empty(t, f.send(time.Second, data(1000)), "window closed")
	clear(f.p.windows.flows)
	f.p.windows.n.Store(0)
	assert.Equal(t, []uint32{2000, 3000, 4000}, f.send(time.Second, data(1000)), "window open")
}

// An RST or a new SYN ends what is kept of a flow; a FIN does not, for
// data sent before it may still need repair, but the flows past their FIN
// go first when too many are followed, which is bounded.
func TestTailProbesForget(t *testing.T) {
	for _, flags := range []header.TCPFlags{header.TCPFlagSyn, header.TCPFlagRst} {
		f := newTailFlow(t)
		for seq := uint32(0); seq < 3000; seq += 1000 {
			f.send(0, data(seq))
		}
		f.send(0, seg{port: 1, seq: 3000, flags: flags})
		assert.Empty(t, f.p.flows, "flags %v", flags)
		assert.Empty(t, f.send(time.Second, data(0)), "flags %v", flags)
	}
	f := newTailFlow(t)
	for seq := uint32(0); seq < 5000; seq += 1000 {
		f.send(0, data(seq))
	}
	f.send(0, seg{port: 1, seq: 5000, flags: header.TCPFlagFin | header.TCPFlagAck})
	assert.Equal(t, []uint32{2000, 3000, 4000}, f.send(time.Second, data(1000)), "past the FIN, a timeout's retransmission")

	for port := range uint16(maxTailFlows - 1) {
		pkt := packet(seg{port: port + 2, flags: ackPsh, payload: 1})
		sg := parseSegment(pkt)
		f.p.observe(pkt, &sg, f.clock, time.Millisecond)
		pkt.DecRef()
	}
	require.Len(t, f.p.flows, maxTailFlows)
	f.send(0, seg{port: maxTailFlows + 1, flags: ackPsh, payload: 1})
	assert.Len(t, f.p.flows, maxTailFlows, "the flow past its FIN went")
	fin := packet(seg{port: 1})
	defer fin.DecRef()
	assert.NotContains(t, f.p.flows, parseSegment(fin).flow)
	f.send(0, seg{port: maxTailFlows + 2, flags: ackPsh, payload: 1})
	assert.Len(t, f.p.flows, 1, "then all")
}
