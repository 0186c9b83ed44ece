package polarnet

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/polarnet/polarnet/internal/frame"
	"github.com/polarnet/polarnet/link"
)

// windowConn drives one connection through a TX queue: what it sends goes
// through the queue, what it receives to the queue's closedWindows.
type windowConn struct{ *sackConn }

func newWindowConn(t *testing.T, caps link.Capabilities, v6 bool) windowConn {
	return windowConn{newSACKConn(t, caps, v6)}
}

// receive hands the queue a segment from the peer.
func (c windowConn) receive(flags uint8, ack uint32, window uint16) {
	f := frame.TCPFrame(frame.TCPSpec{Src: c.dst, Dst: c.src, Seq: 7000, Ack: ack, Flags: flags, Window: window})
	c.q.windows.received(parseRx(f))
}

// send sends a segment and returns it as it left, its checksum checked.
func (c windowConn) send(flags uint8, seq uint32, payload int) frame.TCP {
	c.t.Helper()
	f := c.sendFrame(frame.TCPSpec{Src: c.src, Dst: c.dst, Seq: seq, Ack: 7000, Flags: flags, Window: 1000, Options: timestamps, Payload: make([]byte, payload)})
	p, ok := frame.Parse(f)
	require.True(c.t, ok)
	assert.True(c.t, frame.ChecksumOK(f, p), "TCP checksum")
	tcp, ok := frame.ParseTCP(f, p)
	require.True(c.t, ok)
	return tcp
}

func TestClosedWindowClampsPureACKs(t *testing.T) {
	for _, caps := range []link.Capabilities{0, link.CapTXChecksum} {
		for _, v6 := range []bool{false, true} {
			name := map[bool]string{false: "v4", true: "v6"}[v6] + map[bool]string{false: "/checksum", true: "/offload"}[caps != 0]
			t.Run(name, func(t *testing.T) {
				c := newWindowConn(t, caps, v6)
				// Open window: nothing changes.
				c.receive(frame.FlagACK, 1000, 64)
				assert.Equal(t, uint32(5000), c.send(frame.FlagACK, 5000, 0).Seq)

				// The peer closes its window at 1000, below the 5000 we
				// have sent: pure ACKs (with PSH too) go out at its edge.
				c.receive(frame.FlagACK, 1000, 0)
				assert.Equal(t, uint32(1000), c.send(frame.FlagACK, 5000, 0).Seq)
				assert.Equal(t, uint32(1000), c.send(frame.FlagACK|frame.FlagPSH, 5000, 0).Seq)
				// Data, FINs and ACKs at or below the edge keep theirs.
				assert.Equal(t, uint32(999), c.send(frame.FlagACK, 999, 0).Seq)
				assert.Equal(t, uint32(5000), c.send(frame.FlagACK, 5000, 100).Seq)
				assert.Equal(t, uint32(5000), c.send(frame.FlagACK|frame.FlagFIN, 5000, 0).Seq)

				// A reordered older segment does not move the edge back.
				c.receive(frame.FlagACK, 900, 0)
				assert.Equal(t, uint32(1000), c.send(frame.FlagACK, 5000, 0).Seq)
				// A later one moves it forward.
				c.receive(frame.FlagACK, 2000, 0)
				assert.Equal(t, uint32(2000), c.send(frame.FlagACK, 5000, 0).Seq)

				// The window reopens: pure ACKs go out as gVisor made them.
				c.receive(frame.FlagACK, 2000, 10)
				assert.Equal(t, uint32(5000), c.send(frame.FlagACK, 5000, 0).Seq)
				assert.Zero(t, c.q.windows.n.Load())
			})
		}
	}
}

func TestClosedWindowForgetsOnResetAndSYN(t *testing.T) {
	for _, flags := range []uint8{frame.FlagRST | frame.FlagACK, frame.FlagSYN | frame.FlagACK} {
		c := newWindowConn(t, 0, false)
		c.receive(frame.FlagACK, 1000, 0)
		require.Equal(t, int32(1), c.q.windows.n.Load())
		c.receive(flags, 1000, 0)
		assert.Zero(t, c.q.windows.n.Load(), "flags %#x", flags)
		assert.Equal(t, uint32(5000), c.send(frame.FlagACK, 5000, 0).Seq)
	}
}
