package reliability

import (
	"context"
	"io"
	"net"
	"net/netip"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/polarnet/polarnet/internal/kpeer"
	"github.com/polarnet/polarnet/internal/leakcheck"
	"github.com/polarnet/polarnet/internal/taptopo"
	"github.com/polarnet/polarnet/internal/xfer"
	"github.com/polarnet/polarnet/polarnet"
)

// TestCarrierOutage takes the kernel side of the TAP device down under
// two streams (one each way) and brings it back a second later: the
// connections ride it out and every byte arrives, and the counters show
// the frames the link refused meanwhile.
//
// It runs with each loss recovery, both streams in bulk. With RACK, the
// default, gVisor alone would crawl after the timeout that found a window
// in flight (see polarnet's tailProbes): the engine sends the flow's last
// segments again ahead of the timeout's retransmission, and the stream
// goes on at once, as with RecoverySACK, which goes back to slow start
// after the timeout as Linux does (TestOutage measures both).
func TestCarrierOutage(t *testing.T) {
	for _, tc := range []struct {
		name     string
		recovery polarnet.LossRecovery
	}{
		{"RACK", polarnet.RecoveryRACK},
		{"SACK recovery", polarnet.RecoverySACK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			carrierOutage(t, tc.recovery)
		})
	}
}

// carrierOutage is TestCarrierOutage with the stack's loss recovery.
func carrierOutage(t *testing.T, recovery polarnet.LossRecovery) {
	const outage = time.Second
	e := newEnv(t, taptopo.Options{Config: func(c *polarnet.Config) { c.TCP.Recovery = recovery }})
	ln, err := e.Stack.ListenTCP("tcp", netip.AddrPortFrom(stack4, 0), 0, net.KeepAliveConfig{})
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	k1, s1 := e.accept(t, ln)
	s2, k2 := e.dial(t, kpeer.Listen(t, e.NS, kernel4))
	up, down := startStream(k1, s1, 5, pace{}), startStream(s2, k2, 6, pace{})
	rates(floodWindow/2, up, down)

	before := e.Stack.Stats().Total
	e.setLink(t, "down")
	time.Sleep(outage)
	during := e.Stack.Stats().Total
	e.setLink(t, "up")
	moving(t, up, down)
	require.NoError(t, up.finish(), "kernel→stack stream")
	require.NoError(t, down.finish(), "stack→kernel stream")

	refused := during.TxRetried + during.TxRingFull + during.TxErrors - before.TxRetried - before.TxRingFull - before.TxErrors
	assert.Positive(t, refused, "frames the link refused while down")
	after := e.Stack.Stats().Total
	t.Logf("%v down: %d frames refused (%d kept and retried, %d dropped on a full backlog, %d errors), %d poll wakeups, %d poll errors; %d RTO expiries in all",
		outage, refused, during.TxRetried-before.TxRetried, during.TxRingFull-before.TxRingFull, during.TxErrors-before.TxErrors,
		during.PollWakeups-before.PollWakeups, during.PollErrors-before.PollErrors, after.RTOTimeouts)
}

// TestLinkDownForLong keeps the kernel side of the TAP device down for
// longer than the applications wait: each learns it from the error Go's
// net would give (a write that cannot drain ends at its deadline, a dial
// at its context's, keep-alive gives up on an idle connection with
// ETIMEDOUT), the counters show the frames the link refused, and once the
// device is up again new connections work.
func TestLinkDownForLong(t *testing.T) {
	e := newEnv(t, taptopo.Options{})
	ln := kpeer.Listen(t, e.NS, kernel4)
	idle, busy := linkFaultConns(t, e, ln)
	before := e.Stack.Stats().Total
	e.setLink(t, "down")
	linkFaultErrors(t, e, ln, idle, busy)
	after := e.Stack.Stats().Total
	assert.Positive(t, after.TxErrors-before.TxErrors, "frames refused while down")
	e.setLink(t, "up")
	c, k := e.dial(t, ln)
	require.NoError(t, xfer.Exchange(c, k, 1<<20), "a connection made after the outage")
	t.Logf("while down: %d frames refused, %d poll errors", after.TxErrors-before.TxErrors, after.PollErrors-before.PollErrors)
}

// TestDeviceDeleted deletes the TAP device under live connections: they
// fail with the errors Go's net would give, the counters show that the
// link fails both ways, and closing the stack leaves no goroutine or file
// descriptor behind.
func TestDeviceDeleted(t *testing.T) {
	// Registered first, so it runs last: after the stack, the kernel's
	// sockets and the namespace are gone.
	leaks := leakcheck.Take()
	t.Cleanup(func() { leaks.Check(t) })
	e := newEnv(t, taptopo.Options{})
	ln := kpeer.Listen(t, e.NS, kernel4)
	idle, busy := linkFaultConns(t, e, ln)
	before := e.Stack.Stats().Total
	out, err := e.NS.Exec("ip", "link", "del", "dev", e.Device)
	require.NoError(t, err, out)
	linkFaultErrors(t, e, ln, idle, busy)
	after := e.Stack.Stats().Total
	assert.Positive(t, after.TxErrors-before.TxErrors, "frames the deleted device refused")
	assert.Positive(t, after.PollErrors-before.PollErrors, "reads the deleted device failed")
	assert.NoError(t, e.Stack.Close())
	t.Logf("after the deletion: %d frames refused, %d poll errors, %d poll wakeups", after.TxErrors-before.TxErrors, after.PollErrors-before.PollErrors, after.PollWakeups-before.PollWakeups)
}

// linkFaultConns returns two connections from the stack to ln: one idle
// with a keep-alive that gives up after about three seconds without an
// answer, and one for writing.
func linkFaultConns(t *testing.T, e *env, ln net.Listener) (idle, busy *polarnet.TCPConn) {
	t.Helper()
	idle, _ = e.dial(t, ln)
	busy, _ = e.dial(t, ln)
	require.NoError(t, idle.SetKeepAliveConfig(net.KeepAliveConfig{Enable: true, Idle: time.Second, Interval: time.Second, Count: 2}))
	return idle, busy
}

// linkFaultErrors checks the errors applications get while the link is
// broken.
func linkFaultErrors(t *testing.T, e *env, ln net.Listener, idle, busy *polarnet.TCPConn) {
	t.Helper()
	require.NoError(t, busy.SetWriteDeadline(time.Now().Add(time.Second)))
	_, err := io.Copy(busy, xfer.Pattern(1<<30, 8))
	assert.ErrorIs(t, err, os.ErrDeadlineExceeded, "a write that cannot drain")

	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	_, err = e.Stack.DialTCP(ctx, "tcp", netip.AddrPort{}, ln.Addr().(*net.TCPAddr).AddrPort())
	assert.ErrorIs(t, err, context.DeadlineExceeded, "a dial")
	var ne net.Error
	if assert.ErrorAs(t, err, &ne) {
		assert.True(t, ne.Timeout(), "a dial's error is a timeout")
	}

	_, err = idle.Read(make([]byte, 1))
	assert.ErrorIs(t, err, syscall.ETIMEDOUT, "keep-alive on an idle connection")
}
