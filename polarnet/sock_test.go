package polarnet_test

import (
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/polarnet/polarnet/link/pipe"
	"github.com/polarnet/polarnet/polarnet"
)

// TestBufferSizesClamped asks for buffers far beyond the stack's ranges:
// they stay at the ranges' maximum, so a writer whose peer does not read
// gets no further than the two buffers hold.
func TestBufferSizesClamped(t *testing.T) {
	const bufMax = 64 << 10
	r := polarnet.BufferRange{Min: 4 << 10, Default: 16 << 10, Max: bufMax}
	a, b := newPair(t, pipe.Config{}, func(c *polarnet.Config) { c.TCP.SendBuffer, c.TCP.ReceiveBuffer = r, r })
	c, s := connPair(t, a, b, addrB.Addr())
	require.NoError(t, c.SetWriteBuffer(1<<30))
	require.NoError(t, s.SetReadBuffer(1<<30))
	require.NoError(t, c.SetWriteDeadline(time.Now().Add(time.Second)))
	n, err := c.Write(make([]byte, 64<<20))
	assert.ErrorIs(t, err, os.ErrDeadlineExceeded)
	assert.LessOrEqual(t, n, 2*bufMax, "bytes taken by the send and the receive buffer")
}
