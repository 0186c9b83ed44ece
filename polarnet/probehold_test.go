package polarnet

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/seqnum"

	"github.com/polarnet/polarnet/internal/frame"
)

// sentCount is how many frames the queue has written.
func (c loneConn) sentCount() int {
	c.out.mu.Lock()
	defer c.out.mu.Unlock()
	return len(c.out.sent)
}

// probe sends, as from gVisor's probe timer, 1000 bytes at seq, and reports
// whether a frame left.
func (c loneConn) probe(seq, ts uint32) bool {
	before := c.sentCount()
	c.q.clock.probing.Store(&shardTimer{})
	defer c.q.clock.probing.Store(nil)
	c.data(seq, ts)
	return c.sentCount() > before
}

// peerACK passes an ACK from the peer through the poller's checks and
// returns the D-SACK block to add to it, if any.
func (c loneConn) peerACK(ack uint32) (header.SACKBlock, bool) {
	f := frame.TCPFrame(frame.TCPSpec{Src: c.dst, Dst: c.src, Seq: 1, Ack: ack, Flags: frame.FlagACK, Window: 1000, Options: tsOption(9, 100)})
	h := parseRx(f)
	return c.q.received(h, h.tcp(), true)
}

// requireNeedless passes the peer's ACK of ack, which covers the withheld
// probe of the segment at seq: it shows the probe needless, is to carry a
// D-SACK of it, and the probe never leaves.
func (c loneConn) requireNeedless(ack, seq uint32) {
	c.t.Helper()
	dsack, needless := c.peerACK(ack)
	require.True(c.t, needless, "the ACK covering the probe")
	assert.Equal(c.t, header.SACKBlock{Start: seqnum.Value(seq), End: seqnum.Value(ack)}, dsack)
	assert.Empty(c.t, c.after(time.Second), "dropped")
}

// A probe within the floor after the flow's last segment is withheld; an
// ACK that covers it shows it needless: it is dropped, never sent, and
// the ACK is to carry a D-SACK of it.
func TestProbeWithheldThenNeedless(t *testing.T) {
	c := newLoneConn(t)
	c.data(1000, 100)
	c.data(2000, 101)
	require.False(t, c.probe(2000, 102), "withheld")
	_, needless := c.peerACK(2000)
	assert.False(t, needless, "an ACK below the probe")
	c.requireNeedless(3000, 2000)
	assert.Equal(t, uint64(1), c.q.stats.probesHeld.Load())
	assert.Equal(t, uint64(1), c.q.stats.probesNeedless.Load())
	assert.Zero(t, c.q.stats.probesReleased.Load())
	assert.Zero(t, c.q.tails.lone.n.Load())
}

// A withheld probe goes once the floor has passed since the flow's last
// segment out or ACK in, and is then followed as a lone retransmission.
func TestProbeWithheldGoes(t *testing.T) {
	c := newLoneConn(t)
	delay := c.q.loneDelay()
	c.data(1000, 100)
	c.data(2000, 101)
	require.False(t, c.probe(2000, 102))
	assert.Empty(t, c.after(delay/2))
	c.peerACK(2000) // progress, not the probe's: the wait starts again
	assert.Empty(t, c.after(delay*3/4), "the ACK restarted the wait")
	assert.Equal(t, []uint32{2000}, c.after(delay/4), "the floor passed")
	assert.Equal(t, []uint32{2000}, c.after(delay), "then alone, sent again")
	c.peerACK(3000)
	assert.Empty(t, c.after(time.Second), "answered")
	assert.Zero(t, c.q.stats.probesNeedless.Load(), "it went")
	assert.Equal(t, uint64(1), c.q.stats.probesReleased.Load(), "the probe")
	assert.Equal(t, uint64(1), c.q.stats.resent.Load(), "the engine's resend")
}

// A probe past the floor is held only until the poller has delivered the
// burst in hand: it goes with the next round of timers, unless an ACK in
// that burst covers it.
func TestProbePastTheFloor(t *testing.T) {
	c := newLoneConn(t)
	c.data(1000, 100)
	c.data(2000, 101)
	c.q.clock.freeze(c.q.clock.now() + int64(c.q.loneDelay()))
	require.False(t, c.probe(2000, 150), "held for the burst in hand")
	assert.Equal(t, []uint32{2000}, c.after(0), "then it goes")

	c.data(3000, 160)
	c.q.clock.freeze(c.q.clock.now() + int64(c.q.loneDelay()))
	require.False(t, c.probe(3000, 170))
	c.requireNeedless(4000, 3000) // an ACK in the burst answers it
	assert.Equal(t, uint64(1), c.q.stats.probesNeedless.Load())
	assert.Equal(t, uint64(1), c.q.stats.probesReleased.Load())
}

// Only a probe is withheld: a retransmission of another timer, or of a
// segment before the flow's last, goes at once.
func TestProbeNotWithheld(t *testing.T) {
	c := newLoneConn(t)
	c.data(1000, 100)
	c.data(2000, 101)
	before := c.sentCount()
	c.data(2000, 102)
	assert.Greater(t, c.sentCount(), before, "not from the probe timer")
	assert.True(t, c.probe(1000, 103), "not the flow's last segment")
}

// The D-SACK block goes after the segment's options, its payload kept and
// its headers consistent; not into one that has SACK blocks or no room.
func TestWithDSACK(t *testing.T) {
	block := header.SACKBlock{Start: 2000, End: 3000}
	payload := []byte("response")
	for _, v6 := range []bool{false, true} {
		for _, full := range []bool{false, true} {
			src, dst := remote, local
			if v6 {
				src, dst = rem6, local6
			}
			f := frame.TCPFrame(frame.TCPSpec{Src: src, Dst: dst, Seq: 1, Ack: 3000, Flags: frame.FlagACK | frame.FlagPSH, Window: 1000, Options: tsOption(9, 100), Payload: payload})
			h := parseRx(f)
			out := withDSACK(f, h, h.tcp(), block, full)
			require.NotNil(t, out)
			p, ok := frame.Parse(out)
			require.True(t, ok)
			if full {
				assert.True(t, frame.ChecksumOK(out, p), "v6 %v", v6)
			}
			oh := parseRx(out)
			th := oh.tcp()
			opts := th.ParsedOptions()
			assert.Equal(t, []header.SACKBlock{block}, opts.SACKBlocks, "v6 %v", v6)
			assert.Equal(t, uint32(9), opts.TSVal)
			assert.Equal(t, uint32(3000), th.AckNumber())
			assert.Equal(t, payload, []byte(th.Payload()[:len(payload)]), "v6 %v", v6)
			assert.Equal(t, len(out)-header.EthernetMinimumSize, oh.end, "IP length")
		}
	}
	f := frame.TCPFrame(frame.TCPSpec{Src: remote, Dst: local, Seq: 1, Ack: 3000, Flags: frame.FlagACK, Window: 1000, Options: sackEchoing(100)})
	h := parseRx(f)
	assert.Nil(t, withDSACK(f, h, h.tcp(), block, true), "SACK blocks already")
}
