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
