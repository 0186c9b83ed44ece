package polarnet

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/polarnet/polarnet/internal/frame"
	"github.com/polarnet/polarnet/link"
)

// sentTCP parses a frame the queue sent, checking its checksums.
func sentTCP(t *testing.T, f []byte) frame.TCP {
	t.Helper()
	p, ok := frame.Parse(f)
	require.True(t, ok)
	assert.True(t, frame.ChecksumOK(f, p), "TCP checksum")
	tcp, ok := frame.ParseTCP(f, p)
	require.True(t, ok)
	return tcp
}

// A SYN or SYN-ACK sent again leaves with its first timestamp moved on by
// the milliseconds since the first went; anything else keeps its own.
func TestSynStamps(t *testing.T) {
	for _, caps := range []link.Capabilities{0, link.CapTXChecksum} {
		for _, flags := range []uint8{frame.FlagSYN, frame.FlagSYN | frame.FlagACK} {
			c := newSACKConn(t, caps, false)
			at := func(d time.Duration, seq uint32, flags uint8) uint32 {
				c.q.clock.freeze(int64(time.Hour + d))
				opts := append(frame.MSSOption(1460), tsOption(7000, 0)...)
				f := c.sendFrame(frame.TCPSpec{Src: c.src, Dst: c.dst, Seq: seq, Flags: flags, Window: 1000, Options: opts})
				return sentTCP(t, f).Options.TSVal
			}
			assert.Equal(t, uint32(7000), at(0, 100, flags), "the first")
			assert.Equal(t, uint32(8000), at(time.Second+time.Millisecond/2, 100, flags), "a retransmission a second later")
			assert.Equal(t, uint32(10000), at(3*time.Second, 100, flags), "the next, two seconds after it")
			assert.Equal(t, uint32(7000), at(4*time.Second, 900, flags), "a new connection's")
			assert.Equal(t, uint32(7000), at(5*time.Second, 900, frame.FlagACK), "not a SYN")
		}
	}
}

// The first segment received for a handshake whose SYN or SYN-ACK went
// again, echoing the first's timestamp, leaves echoing the latest; later
// segments, and those of a handshake sent once, keep their echo.
func TestSynStampsAnswered(t *testing.T) {
	for _, caps := range []link.Capabilities{0, link.CapTXChecksum} {
		c := echoConn{newSACKConn(t, caps, false)}
		synACK := func(d time.Duration, seq uint32) {
			c.q.clock.freeze(int64(time.Hour + d))
			opts := append(frame.MSSOption(1460), tsOption(7000, 40)...)
			c.sendFrame(frame.TCPSpec{Src: c.src, Dst: c.dst, Seq: seq, Ack: 41, Flags: frame.FlagSYN | frame.FlagACK, Window: 1000, Options: opts})
		}
		synACK(0, 100)
		assert.Equal(t, uint32(7000), c.ack(101, tsOption(50, 7000)), "sent once")

		synACK(0, 200)
		synACK(time.Second, 200)
		assert.Equal(t, int32(1), c.q.syns.resent.Load(), "one flow sent again")
		assert.Equal(t, uint32(8000), c.ack(201, tsOption(50, 7000)), "the first answer, echoing the first")
		assert.Equal(t, uint32(7000), c.ack(201, tsOption(51, 7000)), "the next")
		assert.Zero(t, c.q.syns.resent.Load(), "forgotten")

		synACK(2*time.Second, 300)
		synACK(3*time.Second, 300)
		assert.Equal(t, uint32(6000), c.ack(301, tsOption(52, 6000)), "an echo from before the handshake")

		synACK(4*time.Second, 400)
		synACK(6*time.Second, 400)
		assert.Equal(t, uint32(9000), c.ack(401, tsOption(53, 9000)), "echoing the latest already")
		assert.Zero(t, c.q.syns.resent.Load())
	}
}

// What a flow sends after its peer sent its SYN or SYN-ACK again leaves
// echoing the repeat's timestamp if it echoed an earlier one: a SYN-ACK
// and the segments up to the first that is not a SYN; a repeat with the
// same timestamp changes nothing.
func TestPeerStamps(t *testing.T) {
	for _, caps := range []link.Capabilities{0, link.CapTXChecksum} {
		for _, peerFlags := range []uint8{frame.FlagSYN, frame.FlagSYN | frame.FlagACK} {
			c := newSACKConn(t, caps, false)
			peer := func(seq, ts uint32) {
				f := frame.TCPFrame(frame.TCPSpec{Src: c.dst, Dst: c.src, Seq: seq, Ack: 1, Flags: peerFlags, Window: 1000, Options: tsOption(ts, 0)})
				h := parseRx(f)
				c.q.received(h, h.tcp(), true)
			}
			send := func(flags uint8, ecr uint32) uint32 {
				f := c.sendFrame(frame.TCPSpec{Src: c.src, Dst: c.dst, Seq: 1, Ack: 501, Flags: flags, Window: 1000, Options: tsOption(9, ecr)})
				return sentTCP(t, f).Options.TSEcr
			}
			peer(500, 100)
			assert.Equal(t, uint32(100), send(frame.FlagACK, 100), "the first")
			peer(500, 100)
			assert.Equal(t, uint32(100), send(frame.FlagACK, 100), "a repeat of the same stamp")

			peer(500, 1100)
			assert.Equal(t, uint32(1100), send(frame.FlagSYN|frame.FlagACK, 100), "a SYN-ACK answering the repeat")
			assert.Equal(t, uint32(1100), send(frame.FlagACK, 100), "the first segment after")
			assert.Equal(t, uint32(100), send(frame.FlagACK, 100), "forgotten")
			assert.Zero(t, c.q.peers.again.Load())

			peer(700, 2000)
			peer(700, 3000)
			assert.Equal(t, uint32(3000), send(frame.FlagACK, 3000), "echoing the repeat already")
			assert.Equal(t, uint32(50), send(frame.FlagACK, 50), "forgotten")
		}
	}
}
