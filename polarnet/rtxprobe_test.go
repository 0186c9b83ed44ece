package polarnet

import (
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gvisor.dev/gvisor/pkg/tcpip/header"

	"github.com/polarnet/polarnet/internal/frame"
)

// loneConn is an echoConn on a frozen clock, whose lone retransmissions
// are sent when the test says.
type loneConn struct{ echoConn }

func newLoneConn(t *testing.T) loneConn {
	c := loneConn{echoConn{newSACKConn(t, 0, false)}}
	c.q.clock.freeze(int64(time.Hour))
	t.Cleanup(c.q.Close)
	return c
}

// after moves the clock on by d, runs the queue's timer for lone
// retransmissions, and returns the sequence numbers it sent.
func (c loneConn) after(d time.Duration) []uint32 {
	c.q.clock.freeze(c.q.clock.now() + int64(d))
	c.out.mu.Lock()
	before := len(c.out.sent)
	c.out.mu.Unlock()
	c.q.resendLone()
	c.out.mu.Lock()
	defer c.out.mu.Unlock()
	var seqs []uint32
	for _, th := range c.out.sent[before:] {
		seqs = append(seqs, th.SequenceNumber())
	}
	return seqs
}

// A retransmission followed by nothing goes again after the delay, then
// after twice and four times it, and no more.
func TestLoneRetransmissionSentAgain(t *testing.T) {
	c := newLoneConn(t)
	delay := c.q.loneDelay()
	c.data(1000, 100)
	c.data(2000, 101)
	c.data(1000, 150)
	assert.Empty(t, c.after(delay/2), "before the delay")
	assert.Equal(t, []uint32{1000}, c.after(delay/2), "after it")
	assert.Empty(t, c.after(delay*3/2), "before twice the delay")
	assert.Equal(t, []uint32{1000}, c.after(delay/2), "after twice the delay")
	assert.Equal(t, []uint32{1000}, c.after(4*delay), "after four times")
	assert.Empty(t, c.after(time.Second), "no more")
	assert.Zero(t, c.q.tails.lone.n.Load())
	assert.Equal(t, uint64(loneResends), c.q.stats.resent.Load())
}

// A lone retransmission that goes again after a silence brings copies of
// the flow's last data segments ahead of it, as a timeout's retransmission
// does: after an outage, whichever of the two first reaches the receiver
// must bring them, or its newer timestamp makes the receiver's PAWS check
// drop them.
func TestLoneRetransmissionBringsTail(t *testing.T) {
	c := newLoneConn(t)
	c.q.clock.protocolFloor = time.Duration(tailSilence)
	for seq := uint32(1000); seq <= 5000; seq += 1000 {
		c.data(seq, 100)
	}
	c.data(1000, 101) // lost, with nothing sent after it
	assert.Equal(t, []uint32{3000, 4000, 5000, 1000}, c.after(time.Duration(tailSilence)), "after a silence")
	assert.Equal(t, []uint32{3000, 4000, 5000, 1000}, c.after(2*time.Duration(tailSilence)), "and again")
}

// An ACK received or data sent after the retransmission settles it; so
// does a closed window, where it is a zero window probe.
func TestLoneRetransmissionSettled(t *testing.T) {
	c := newLoneConn(t)
	c.data(1000, 100)
	c.data(1000, 150)
	c.ack(1000, tsOption(9, 100))
	assert.Empty(t, c.after(time.Second), "an ACK came")

	c.data(1000, 160)
	c.data(2000, 161)
	assert.Empty(t, c.after(time.Second), "new data went")

	c.data(1000, 170)
	c.ack(500, nil)
	assert.Empty(t, c.after(time.Second), "an old ACK")

	c.data(1000, 180)
	w := windowConn{c.sackConn}
	w.q.windows.received(parseRx(frame.TCPFrame(frame.TCPSpec{Src: c.dst, Dst: c.src, Seq: 1, Ack: 1000, Flags: frame.FlagACK, Window: 0})))
	assert.Empty(t, c.after(time.Second), "a closed window")
	assert.Zero(t, c.q.tails.lone.n.Load())
}

// After an ACK with SACK blocks (in recovery), the flow's last data
// segment, new or not, is sent again when nothing follows it for the lossy
// floor; an ACK without SACK blocks ends that.
func TestRecoveryTailSentAgain(t *testing.T) {
	c := newLoneConn(t)
	c.q.clock.protocolFloor = 50 * time.Millisecond
	c.data(1000, 100)
	c.data(2000, 101)
	c.data(3000, 102)
	assert.Empty(t, c.after(time.Second), "new data, no loss seen: gVisor's probe's")
	require.Zero(t, c.q.clock.lossyAt.Load())
	c.ack(1000, sackEchoing(100))
	assert.NotZero(t, c.q.clock.lossyAt.Load(), "the shard saw loss: its probe timers take the lossy floor")
	c.data(1000, 150) // the repair
	c.data(4000, 151) // and new data the window allows
	assert.Empty(t, c.after(lossyFloor/2))
	assert.Equal(t, []uint32{4000}, c.after(lossyFloor/2), "the recovery's last segment")
	c.ack(3000, nil) // the hole filled, short of the recovery's end
	assert.Empty(t, c.after(100*time.Millisecond), "answered")
	c.data(5000, 152)
	assert.Equal(t, []uint32{5000}, c.after(lossyFloor), "still in recovery")
	c.ack(6000, nil)
	assert.Empty(t, c.after(time.Second), "answered")

	c.data(6000, 160)
	assert.Empty(t, c.after(time.Second), "out of recovery")
	assert.Zero(t, c.q.tails.lone.n.Load())
}

// The wait of a lone retransmission: MinRecoveryTimer's floor, the lossy
// floor for a second after SACK blocks, never less than two round trips.
func TestRecoveryWait(t *testing.T) {
	const floor = 50 * time.Millisecond
	ms := int64(time.Millisecond)
	f := flowTail{minRTT: -1}
	now := int64(time.Hour)
	assert.Equal(t, floor, f.recoveryWait(now, floor), "no loss seen")
	f.sackAt = now
	assert.Equal(t, lossyFloor, f.recoveryWait(now+lossyMemory-1, floor), "loss seen lately")
	assert.Equal(t, floor, f.recoveryWait(now+lossyMemory, floor), "not lately")
	assert.Equal(t, time.Millisecond, f.recoveryWait(now, time.Millisecond), "a lower MinRecoveryTimer")

	// Round trips from timestamps: sent at 1000 ms on the flow's clock,
	// echoed 40 ms later.
	th := header.TCP(frame.TCPFrame(frame.TCPSpec{Src: remote, Dst: local, Seq: 1, Ack: 1, Flags: frame.FlagACK, Window: 1, Options: tsOption(9, 1000)})[header.EthernetMinimumSize+header.IPv4MinimumSize:])
	f.tsBase = now/ms - 1000
	f.sampleRTT(th, now+40*ms)
	assert.Equal(t, int64(40), f.minRTT)
	assert.Equal(t, 80*time.Millisecond, f.recoveryWait(now, floor), "two round trips")
	f.sampleRTT(th, now+60*ms)
	assert.Equal(t, int64(40), f.minRTT, "the least")
}

// A D-SACK block, below the ACK number, shows no hole.
func TestSACKsAbove(t *testing.T) {
	th := func(ack uint32, opts []byte) header.TCP {
		f := frame.TCPFrame(frame.TCPSpec{Src: remote, Dst: local, Seq: 1, Ack: ack, Flags: frame.FlagACK, Window: 1, Options: opts})
		return header.TCP(f[header.EthernetMinimumSize+header.IPv4MinimumSize:])
	}
	assert.True(t, sacksAbove(th(1000, sackEchoing(100))), "a hole")
	assert.False(t, sacksAbove(th(3000, append(tsOption(9, 1), sackOption([2]uint32{2000, 3000})...))), "a D-SACK")
	assert.True(t, sacksAbove(th(3000, append(tsOption(9, 1), sackOption([2]uint32{2000, 3000}, [2]uint32{4000, 5000})...))), "a D-SACK and a hole")
	assert.False(t, sacksAbove(th(3000, tsOption(9, 1))), "no SACK")
}

// A connection without timestamps enters recovery at an ACK with one SACK
// block, whose header is as long as that of a timestamp alone.
func TestRecoveryWithoutTimestamps(t *testing.T) {
	c := newLoneConn(t)
	c.q.clock.protocolFloor = 50 * time.Millisecond
	c.data(1000, 0)
	c.data(2000, 0)
	c.data(3000, 0)
	c.ack(1000, sackOption([2]uint32{2000, 3000}))
	c.data(1000, 0) // the repair
	c.data(4000, 0) // and new data the window allows
	assert.Empty(t, c.after(lossyFloor/2))
	assert.Equal(t, []uint32{4000}, c.after(lossyFloor/2), "the recovery's last segment")
	c.ack(5000, nil)
	assert.Zero(t, c.q.tails.lone.n.Load(), "out of recovery")
}

func TestMayCarrySACK(t *testing.T) {
	th := func(opts []byte) header.TCP {
		f := frame.TCPFrame(frame.TCPSpec{Src: netip.MustParseAddrPort("198.18.0.1:1"), Dst: netip.MustParseAddrPort("198.18.0.2:2"), Flags: frame.FlagACK, Options: opts})
		return header.TCP(f[header.EthernetMinimumSize+header.IPv4MinimumSize:])
	}
	assert.False(t, mayCarrySACK(th(nil)), "no options")
	assert.False(t, mayCarrySACK(th(tsOption(1, 2))), "a timestamp")
	assert.True(t, mayCarrySACK(th(sackOption([2]uint32{2000, 3000}))), "one SACK block")
	assert.True(t, mayCarrySACK(th(sackEchoing(2))), "a timestamp and a SACK block")
}
