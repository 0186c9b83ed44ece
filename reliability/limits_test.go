package reliability

import (
	"io"
	"net"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/polarnet/polarnet/internal/kpeer"
	"github.com/polarnet/polarnet/internal/taptopo"
	"github.com/polarnet/polarnet/internal/xfer"
	"github.com/polarnet/polarnet/polarnet"
)

// gated is a reader that reads nothing until its gate opens: an
// application that stops reading for a while.
type gated struct {
	r    io.Reader
	gate <-chan struct{}
}

func (g gated) Read(b []byte) (int, error) {
	<-g.gate
	return g.r.Read(b)
}

// TestBufferCaps fills every connection of a stack whose buffers are
// capped, both ways, while the applications at the receiving ends do not
// read: each buffer stops at its cap even though every application asked
// for 64 MiB, so the heap the stack holds stays within MaxConns × (send
// cap + receive cap), which bounds a stack's buffer memory in total. Once
// the applications read, every byte arrives. A connection beyond MaxConns
// fails with EMFILE, as polarnet's TestMaxConns shows in detail.
func TestBufferCaps(t *testing.T) {
	const (
		n        = 16 // connections each way
		bufCap   = 256 << 10
		size     = 1 << 20 // per connection: more than its buffers and the kernel's hold
		fillTime = 2 * time.Second
		// slack covers what is not a connection's buffer: the stack's
		// pools and the test's own goroutines.
		slack = 16 << 20
	)
	capped := polarnet.BufferRange{Min: 4 << 10, Default: 64 << 10, Max: bufCap}
	e := newEnv(t, taptopo.Options{Config: func(c *polarnet.Config) {
		c.MaxConns = 2 * n
		c.TCP.SendBuffer, c.TCP.ReceiveBuffer = capped, capped
	}})
	ln, err := e.Stack.ListenTCP("tcp", netip.AddrPortFrom(stack4, 0), 0, net.KeepAliveConfig{})
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	kln := kpeer.Listen(t, e.NS, kernel4)

	// Each pair is a kernel sender and a stack receiver, or the reverse.
	type sender struct {
		from xfer.HalfCloser
		to   io.Reader
	}
	var senders []sender
	for range n {
		k, s := e.accept(t, ln)
		c, kc := e.dial(t, kln)
		for _, conn := range []*polarnet.TCPConn{s, c} {
			require.NoError(t, conn.SetReadBuffer(64<<20))
			require.NoError(t, conn.SetWriteBuffer(64<<20))
		}
		senders = append(senders, sender{k, s}, sender{c, kc})
	}
	_, err = e.Stack.DialTCP(t.Context(), "tcp", netip.AddrPort{}, kln.Addr().(*net.TCPAddr).AddrPort())
	assert.ErrorIs(t, err, syscall.EMFILE, "a connection beyond MaxConns")

	// Measured with every connection made, so that what the heap gains is
	// what the data holds.
	before := liveHeap()
	gate := make(chan struct{})
	results := make(chan error, len(senders))
	for i, p := range senders {
		go func() { results <- xfer.Send(p.from, gated{p.to, gate}, size, uint64(i)) }()
	}
	time.Sleep(fillTime)
	held := int64(liveHeap()) - int64(before)
	bound := int64(2*n)*2*bufCap + slack
	assert.Less(t, held, bound, "heap held with every buffer full")
	close(gate)
	for range senders {
		assert.NoError(t, <-results)
	}
	t.Logf("%d connections with %s buffers each way, every application asking for 64 MiB: %s held, bound %s",
		2*n, mib(bufCap), mib(uint64(max(held, 0))), mib(uint64(bound)))
}
