package polarnet

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

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

// A retransmission followed by nothing goes again once, after the delay.
func TestLoneRetransmissionSentAgain(t *testing.T) {
	c := newLoneConn(t)
	c.data(1000, 100)
	c.data(2000, 101)
	c.data(1000, 150)
	assert.Empty(t, c.after(c.q.loneDelay()/2), "before the delay")
	assert.Equal(t, []uint32{1000}, c.after(c.q.loneDelay()), "after it")
	assert.Empty(t, c.after(time.Second), "once")
	assert.Zero(t, c.q.tails.lone.n.Load())
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
