package reliability

import (
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/polarnet/polarnet/internal/kpeer"
	"github.com/polarnet/polarnet/internal/leakcheck"
	"github.com/polarnet/polarnet/internal/taptopo"
	"github.com/polarnet/polarnet/polarnet"
)

// traffic is what runs through a stack while it is shut down: kernel
// clients streaming through the stack's echo server, and the stack's own
// streams to a kernel server.
type traffic struct {
	ln *polarnet.TCPListener
	// echoes stream from kernel clients through the stack's echo handlers
	// and back; outgoing stream from the stack's dials to the kernel.
	echoes, outgoing []*stream
	// peers are the kernel's ends of the echoes and outgoing streams.
	peers []net.Conn
	// handlers reports the end of each echo handler.
	handlers chan error
}

// startTraffic starts n echo streams and n outgoing streams.
func startTraffic(t *testing.T, e *env, n int) *traffic {
	t.Helper()
	ln, err := e.Stack.ListenTCP("tcp", netip.AddrPortFrom(stack4, 0), 0, net.KeepAliveConfig{})
	require.NoError(t, err)
	tr := &traffic{ln: ln, handlers: make(chan error, n)}
	kln := kpeer.Listen(t, e.NS, kernel4)
	for i := range n {
		k, s := e.accept(t, ln)
		go func() {
			_, err := io.Copy(s, s)
			if err == nil {
				err = s.CloseWrite()
			}
			s.Close()
			tr.handlers <- err
		}()
		tr.echoes = append(tr.echoes, startStream(k, k, uint64(10+i), pace{}))
		c, kc := e.dial(t, kln)
		tr.outgoing = append(tr.outgoing, startStream(c, kc, uint64(100+i), pace{}))
		tr.peers = append(tr.peers, k, kc)
	}
	// Every stream moves before the shutdown begins.
	for _, s := range append(tr.echoes, tr.outgoing...) {
		require.Eventually(t, func() bool { return s.received.Load() > 0 }, ioBound, time.Millisecond)
	}
	return tr
}

// trafficEnv builds a topology of two queues (two shards, and the TAP
// device's steering program) with n streams each way through it, and
// checks at cleanup, once the stack, the kernel's sockets and the
// namespace are gone, that no goroutine or file descriptor (the TAP
// queues', the steering program's) is left behind.
func trafficEnv(t *testing.T, n int) (*env, *traffic) {
	t.Helper()
	leaks := leakcheck.Take()
	t.Cleanup(func() { leaks.Check(t) })
	e := newEnv(t, taptopo.Options{Queues: 2})
	tr := startTraffic(t, e, n)
	t.Cleanup(e.stallReport(t, stallAfter))
	return e, tr
}

// stallAfter is how long a test of this file runs before it reports what
// its stack is doing: it takes well under a second unless the traffic
// stalls, which fails it only at ioBound.
const stallAfter = 20 * time.Second

// resetWait bounds how long the kernel's ends of the connections a stack
// resets may take to see the reset: it is on the wire at once, or never.
const resetWait = 5 * time.Second

// checkReset checks that the streams' kernel ends see the stack's reset.
func (tr *traffic) checkReset(t *testing.T, streams []*stream) {
	t.Helper()
	deadline(resetWait, tr.peers...)
	for _, s := range streams {
		err := s.finish()
		assert.True(t, errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE),
			"the kernel's end of a connection the stack reset sees the reset: %v", err)
	}
}

// TestShutdownWithLiveTraffic shuts a stack down while data flows both
// ways: its listener closes at once (new connections are refused), the
// connections whose clients finish within the grace period complete
// byte-exact, the rest are reset when it ends (their peers see the reset),
// Shutdown says it had to reset some, and no goroutine, file descriptor,
// steering program or TAP device is left behind. The grace period ends
// when the test cancels it, once the clients that finish have.
func TestShutdownWithLiveTraffic(t *testing.T) {
	const n = 4
	e, tr := trafficEnv(t, n)

	ctx, endGrace := context.WithCancel(t.Context())
	defer endGrace()
	shutdown := make(chan error, 1)
	go func() { shutdown <- e.Stack.Shutdown(ctx) }()
	require.Eventually(t, func() bool {
		err := e.NS.Do(func() error {
			c, err := net.DialTimeout("tcp", tr.ln.Addr().String(), ioBound)
			if err == nil {
				c.Close()
			}
			return err
		})
		return errors.Is(err, syscall.ECONNREFUSED)
	}, ioBound, 10*time.Millisecond, "new connections refused once the listener is closed")

	// Half the echo clients finish; their handlers end cleanly.
	for _, s := range tr.echoes[:n/2] {
		assert.NoError(t, s.finish(), "an echo finished within the grace period")
		assert.NoError(t, <-tr.handlers, "its handler")
	}
	endGrace()
	assert.ErrorIs(t, <-shutdown, context.Canceled, "Shutdown reset the connections left")
	tr.checkReset(t, append(tr.echoes[n/2:], tr.outgoing...))
	for range n - n/2 {
		assert.Error(t, <-tr.handlers, "a handler of a reset connection")
	}
	assertDeviceGone(t, e)
}

// TestCloseWithLiveTraffic closes a stack while data flows both ways:
// every connection is reset (its peer sees ECONNRESET, the application's
// end an error, never a hang), and nothing is left behind.
func TestCloseWithLiveTraffic(t *testing.T) {
	const n = 4
	e, tr := trafficEnv(t, n)
	require.NoError(t, e.Stack.Close())
	tr.checkReset(t, append(tr.echoes, tr.outgoing...))
	for range n {
		assert.Error(t, <-tr.handlers, "a handler of a reset connection")
	}
	_, err := tr.ln.Accept()
	assert.ErrorIs(t, err, net.ErrClosed, "the listener is closed")
	assertDeviceGone(t, e)
}

// assertDeviceGone checks that the stack's TAP device went with its link.
func assertDeviceGone(t *testing.T, e *env) {
	t.Helper()
	_, err := e.NS.Exec("ip", "link", "show", "dev", e.Device)
	assert.Error(t, err, "the TAP device is gone")
}
