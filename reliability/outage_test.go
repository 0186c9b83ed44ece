package reliability

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/polarnet/polarnet/internal/kpeer"
	"github.com/polarnet/polarnet/internal/netns"
	"github.com/polarnet/polarnet/internal/taptopo"
	"github.com/polarnet/polarnet/internal/testenv"
	"github.com/polarnet/polarnet/internal/xfer"
	"github.com/polarnet/polarnet/link"
	"github.com/polarnet/polarnet/link/impair"
	"github.com/polarnet/polarnet/link/pipe"
	"github.com/polarnet/polarnet/link/tap"
	"github.com/polarnet/polarnet/polarnet"
)

// The outage tests' hosts: the sending end and the receiving end, whether
// stacks or kernels.
var (
	outageSender   = netip.MustParsePrefix("198.18.110.1/24")
	outageReceiver = netip.MustParsePrefix("198.18.110.2/24")
)

// outageLength is how long the link drops frames; the data direction goes
// first, for outageLead, then both (see outage).
const (
	outageLength = time.Second
	outageLead   = 50 * time.Millisecond
	// outageWindow is the polarnet receiver's buffer: it bounds what is
	// lost in flight, so that gVisor's crawl (see TestOutage), should the
	// engine fail to repair it, still ends well inside ioBound.
	outageWindow = 256 << 10
)

// TestOutage cuts a link under a bulk stream for a second (link/impair
// dropping every frame, both ways, so that a whole window and its ACKs are
// lost and the sender retransmits on a timeout), then lets it through
// again: the stream moves again and every byte arrives within ioBound. Two
// polarnet stacks run over a pipe, with the default configuration and
// with RecoverySACK, and for reference two kernels over TAP devices joined
// by the same impairment (root only). How long the stream took to move
// again and its rates after the link's return, against its rate before
// the outage, are logged (docs/benchmarks.md).
//
// With RACK, the default recovery, gVisor alone crawls after such a
// timeout, at about two segments per RTO, until everything sent before it
// is acknowledged; the engine's tail probes repair it (see polarnet's
// tailProbes). RecoverySACK goes back to slow start as Linux does.
func TestOutage(t *testing.T) {
	for _, tc := range []struct {
		name     string
		recovery polarnet.LossRecovery
	}{
		{"polarnet to polarnet, pipe, default", polarnet.RecoveryRACK},
		{"polarnet to polarnet, pipe, RecoverySACK", polarnet.RecoverySACK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := pipe.New(pipe.Config{MTU: 1500})
			imp := impair.New(a, impair.Config{})
			sender := outageStack(t, imp, outageSender, func(c *polarnet.TCPConfig) { c.Recovery = tc.recovery })
			receiver := outageStack(t, b, outageReceiver, func(c *polarnet.TCPConfig) {
				c.ReceiveBuffer = polarnet.BufferRange{Default: outageWindow, Max: outageWindow}
			})
			ln, err := receiver.ListenTCP("tcp", netip.AddrPortFrom(outageReceiver.Addr(), 0), 0, net.KeepAliveConfig{})
			require.NoError(t, err)
			t.Cleanup(func() { ln.Close() })
			accepted := make(chan *polarnet.TCPConn, 1)
			go func() {
				c, _ := ln.AcceptTCP()
				accepted <- c
			}()
			c, err := sender.DialTCP(t.Context(), "tcp", netip.AddrPort{}, ln.Addr().(*net.TCPAddr).AddrPort())
			require.NoError(t, err)
			t.Cleanup(func() { c.Close() })
			s := <-accepted
			require.NotNil(t, s)
			t.Cleanup(func() { s.Close() })
			deadline(ioBound, c, s)
			outage(t, imp, c, s)
			st := sender.Stats().Total
			t.Logf("sender: %d RTO expiries, %d SACK recoveries, %d retransmits", st.RTOTimeouts, st.SACKRecovery, st.Retransmits)
		})
	}
	t.Run("kernel to kernel, TAP", func(t *testing.T) {
		senderNS, receiverNS := testenv.NewNS(t), testenv.NewNS(t)
		near := outageTAP(t, senderNS, outageSender)
		far := outageTAP(t, receiverNS, outageReceiver)
		imp := impair.New(far, impair.Config{})
		r, err := impair.NewRelay(near, imp)
		if err != nil {
			near.Close()
			far.Close()
		}
		require.NoError(t, err)
		t.Cleanup(func() { r.Close() })
		ln := kpeer.Listen(t, receiverNS, outageReceiver.Addr())
		c := kpeer.Dial(t, senderNS, ln.Addr().String())
		require.NoError(t, ln.(*net.TCPListener).SetDeadline(time.Now().Add(ioBound)))
		s, err := ln.Accept()
		require.NoError(t, err)
		t.Cleanup(func() { s.Close() })
		deadline(ioBound, c, s)
		outage(t, imp, c, s)
	})
}

// outage runs a bulk stream from c to s, drops every frame through imp
// for outageLength, and checks that the stream moves again and arrives
// exact. imp's egress must be the data's direction: it fails outageLead
// before the ACKs' direction, so that the sender, still hearing ACKs,
// sends a whole window into the outage whatever the moment it begins
// (with both at once, what is lost depends on what was in flight then). It logs the rates before the outage, in the second after the
// link's return and in the second after the stream moved again.
func outage(t *testing.T, imp *impair.Link, c xfer.HalfCloser, s net.Conn) {
	t.Helper()
	st := startStream(c, s, 7, pace{})
	rates(time.Second/2, st) // slow start and buffer tuning
	before := rates(time.Second, st)[0]
	require.NoError(t, imp.Set(impair.Config{Egress: impair.Impairment{Loss: 1}}))
	time.Sleep(outageLead)
	require.NoError(t, imp.Set(impair.Symmetric(impair.Impairment{Loss: 1}, 0)))
	time.Sleep(outageLength - outageLead)
	require.NoError(t, imp.Set(impair.Config{}))
	back := time.Now()
	moved := st.received.Load()
	resumed, after := outageResume(st, back, moved)
	assert.NotZero(t, resumed, "the stream moves again")
	resumedRate := rates(time.Second, st)[0]
	require.NoError(t, st.finish(), "the stream")
	t.Logf("%v outage: %.1f MB/s before; moving again %v after the link's return; %.1f MB/s in the second after the return (%.3f of before), %.1f MB/s in the next (%.3f); stream finished %v after the return",
		outageLength, before/1e6, resumed.Round(time.Millisecond), after/1e6, after/before, resumedRate/1e6, resumedRate/before, time.Since(back).Round(time.Millisecond))
}

// outageResume follows st from back, when it had received moved bytes,
// until it has moved again and a second has passed, or for ioBound: it
// returns how long the stream took to move again (zero if it did not) and
// its rate in the second after back.
func outageResume(st *stream, back time.Time, moved int64) (resumed time.Duration, rate float64) {
	for time.Since(back) < ioBound && (resumed == 0 || rate == 0) {
		time.Sleep(time.Millisecond)
		n, since := st.received.Load(), time.Since(back)
		if resumed == 0 && n > moved {
			resumed = since
		}
		if rate == 0 && since >= time.Second {
			rate = float64(n-moved) / since.Seconds()
		}
	}
	return resumed, rate
}

// outageStack returns a stack on l with the default configuration as tcp
// adjusts it, closed at cleanup.
func outageStack(t *testing.T, l link.Link, addr netip.Prefix, tcp func(*polarnet.TCPConfig)) *polarnet.Stack {
	t.Helper()
	cfg := polarnet.Config{Link: l, Addrs: []netip.Prefix{addr}}
	tcp(&cfg.TCP)
	st, err := polarnet.New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	return st
}

// outageTAP returns a TAP device whose kernel side is in ns with addr;
// every frame is one wire packet, as the impairment needs.
func outageTAP(t *testing.T, ns *netns.NS, addr netip.Prefix) link.Link {
	t.Helper()
	l, err := tap.New(tap.Config{Name: netns.UniqueName("pno"), MTU: 1500, DisableOffloads: true})
	require.NoError(t, err)
	if err := taptopo.Plug(ns, l.Info().Name, 1500, addr); err != nil {
		l.Close()
		require.NoError(t, err)
	}
	return l
}
