package conformance

import (
	"context"
	"io"
	"net/netip"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/polarnet/polarnet/internal/frame"
	"github.com/polarnet/polarnet/internal/xfer"
)

// connectionScenarios open and close connections in every way TCP allows.
func connectionScenarios() []*Scenario {
	return []*Scenario{
		{Name: "handshake-close", Run: func(t *T, tp *Topology, ctx context.Context) *Outcome { return handshakeClose(t, tp, ctx, false) }},
		{Name: "handshake-close/v6", Run: func(t *T, tp *Topology, ctx context.Context) *Outcome { return handshakeClose(t, tp, ctx, true) }},
		{Name: "simultaneous-close", Run: simultaneousClose},
		{Name: "close-with-unread-data", Run: closeWithUnreadData},
		{Name: "abortive-close/client", Run: func(t *T, tp *Topology, ctx context.Context) *Outcome { return abortiveClose(t, tp, ctx, true) }},
		{Name: "abortive-close/server", Run: func(t *T, tp *Topology, ctx context.Context) *Outcome { return abortiveClose(t, tp, ctx, false) }},
		{Name: "half-close/client-first", Run: func(t *T, tp *Topology, ctx context.Context) *Outcome { return halfClose(t, tp, ctx, true, false) }},
		{Name: "half-close/server-first", Run: func(t *T, tp *Topology, ctx context.Context) *Outcome { return halfClose(t, tp, ctx, false, false) }},
		{Name: "half-close/client-first/v6", Run: func(t *T, tp *Topology, ctx context.Context) *Outcome { return halfClose(t, tp, ctx, true, true) }},
		{Name: "refused", Run: func(t *T, tp *Topology, ctx context.Context) *Outcome { return refused(t, tp, ctx, false) }},
		{Name: "refused/v6", Run: func(t *T, tp *Topology, ctx context.Context) *Outcome { return refused(t, tp, ctx, true) }},
	}
}

// closeSignals summarises the FINs and RSTs each side sent on a flow.
type closeSignals struct {
	clientFIN, serverFIN, clientRST, serverRST int
}

func signalsOf(segs []seg) closeSignals {
	var s closeSignals
	for _, x := range segs {
		switch {
		case x.fromClient && x.tcp.Has(frame.FlagFIN):
			s.clientFIN++
		case !x.fromClient && x.tcp.Has(frame.FlagFIN):
			s.serverFIN++
		}
		switch {
		case x.fromClient && x.tcp.Has(frame.FlagRST):
			s.clientRST++
		case !x.fromClient && x.tcp.Has(frame.FlagRST):
			s.serverRST++
		}
	}
	return s
}

// flowOf returns the captured segments of the connection c (client side).
func flowOf(tp *Topology, c TCPConn) []seg {
	local, remote := portsOf(c)
	return flowSegments(segments(tp), local, remote)
}

// finAcked reports whether a side's FIN was acknowledged by the other.
func finAcked(segs []seg, fromClient bool) bool {
	for _, s := range segs {
		if s.fromClient == fromClient && s.tcp.Has(frame.FlagFIN) {
			return ackedUpTo(segs, !fromClient, s.tcp.Seq+uint32(s.tcp.PayloadLen)+1)
		}
	}
	return false
}

// ackedUpTo reports whether a side acknowledged everything before end.
func ackedUpTo(segs []seg, fromClient bool, end uint32) bool {
	for _, s := range segs {
		if s.fromClient == fromClient && s.tcp.Has(frame.FlagACK) && int32(s.tcp.Ack-end) >= 0 {
			return true
		}
	}
	return false
}

// handshakeClose opens a connection, exchanges a message each way and
// closes it in order: the client first, then the server once it read EOF.
func handshakeClose(t *T, tp *Topology, ctx context.Context, v6 bool) *Outcome {
	o := newOutcome()
	c, s := connect(t, tp, ctx, v6, DialOptions{}, ListenOptions{})
	setDeadline(ioTimeout, c, s)
	_, err := c.Write([]byte("hello"))
	require.NoError(t, err)
	buf := make([]byte, 5)
	_, err = io.ReadFull(s, buf)
	require.NoError(t, err)
	require.Equal(t, "hello", string(buf))
	_, err = s.Write([]byte("bye"))
	require.NoError(t, err)
	_, err = io.ReadFull(c, buf[:3])
	require.NoError(t, err)
	require.Equal(t, "bye", string(buf[:3]))

	flow := func() []seg { return flowOf(tp, c) }
	require.NoError(t, c.Close())
	_, err = s.Read(buf)
	o.Fact("server read after the client's close", classify(err))
	require.NoError(t, s.Close())
	done := waitFor(3*time.Second, func() bool {
		f := flow()
		return finAcked(f, true) && finAcked(f, false)
	})
	o.Fact("both FINs sent and acknowledged", yesNo(done))
	sig := signalsOf(flow())
	o.Fact("FINs (client, server)", [2]int{sig.clientFIN, sig.serverFIN})
	o.Fact("RSTs", sig.clientRST+sig.serverRST)
	return o
}

// simultaneousClose closes both ends at the same instant: the FINs cross,
// both ends go through CLOSING, and nothing is reset.
func simultaneousClose(t *T, tp *Topology, ctx context.Context) *Outcome {
	o := newOutcome()
	c, s := connect(t, tp, ctx, false, DialOptions{}, ListenOptions{})
	setDeadline(ioTimeout, c, s)
	_, err := c.Write([]byte("x"))
	require.NoError(t, err)
	_, err = io.ReadFull(s, make([]byte, 1))
	require.NoError(t, err)
	flow := func() []seg { return flowOf(tp, c) }

	start := make(chan struct{})
	errs := make(chan error, 2)
	for _, conn := range []TCPConn{c, s} {
		go func() {
			<-start
			errs <- conn.Close()
		}()
	}
	close(start)
	require.NoError(t, <-errs)
	require.NoError(t, <-errs)
	done := waitFor(3*time.Second, func() bool {
		f := flow()
		return finAcked(f, true) && finAcked(f, false)
	})
	o.Fact("both FINs sent and acknowledged", yesNo(done))
	// Anything wrong (a RST answering a FIN) would follow at once.
	time.Sleep(200 * time.Millisecond)
	sig := signalsOf(flow())
	o.Fact("RSTs", sig.clientRST+sig.serverRST)
	o.Fact("FINs (client, server)", [2]int{sig.clientFIN, sig.serverFIN})
	return o
}

// closeWithUnreadData closes a server that has unread data: it must reset
// the connection (RFC 2525 2.17) and the client's read fails.
func closeWithUnreadData(t *T, tp *Topology, ctx context.Context) *Outcome {
	o := newOutcome()
	c, s := connect(t, tp, ctx, false, DialOptions{}, ListenOptions{})
	setDeadline(ioTimeout, c, s)
	const sent = 4000
	_, err := c.Write(make([]byte, sent))
	require.NoError(t, err)
	_, err = io.ReadFull(s, make([]byte, 1000))
	require.NoError(t, err)
	// Wait until the server has everything (its ACK covers it), so what
	// stays unread is known.
	flow := func() []seg { return flowOf(tp, c) }
	require.True(t, waitFor(ioTimeout, func() bool { return acked(flow(), false, sent) }), "the server never acknowledged the data")
	require.NoError(t, s.Close())
	_, err = c.Read(make([]byte, 1))
	o.Fact("client read after the server's close", classify(err))
	sig := signalsOf(flow())
	o.Fact("server sent RST", yesNo(sig.serverRST > 0))
	o.Fact("server sent FIN", yesNo(sig.serverFIN > 0))
	return o
}

// acked reports whether a side has acknowledged n bytes of the other's
// data (after the handshake).
func acked(segs []seg, fromClient bool, n int) bool {
	for _, s := range segs {
		if s.fromClient != fromClient && s.tcp.Has(frame.FlagSYN) {
			return ackedUpTo(segs, fromClient, s.tcp.Seq+1+uint32(n))
		}
	}
	return false
}

// abortiveClose closes one end with SO_LINGER 0: it sends RST instead of
// FIN and the other end's read fails with ECONNRESET.
func abortiveClose(t *T, tp *Topology, ctx context.Context, clientAborts bool) *Outcome {
	o := newOutcome()
	c, s := connect(t, tp, ctx, false, DialOptions{}, ListenOptions{})
	setDeadline(ioTimeout, c, s)
	aborter, peer := s, c
	if clientAborts {
		aborter, peer = c, s
	}
	_, err := aborter.Write([]byte("x"))
	require.NoError(t, err)
	_, err = io.ReadFull(peer, make([]byte, 1))
	require.NoError(t, err)
	require.NoError(t, aborter.SetLinger(0))
	require.NoError(t, aborter.Close())
	_, err = peer.Read(make([]byte, 1))
	o.Fact("peer read after the abort", classify(err))
	_, err = peer.Write([]byte("y"))
	o.Fact("peer write after the abort", classify(err))
	sig := signalsOf(flowOf(tp, c))
	rst, fin := sig.serverRST, sig.serverFIN
	if clientAborts {
		rst, fin = sig.clientRST, sig.clientFIN
	}
	o.Fact("aborter sent RST", yesNo(rst > 0))
	o.Fact("aborter sent FIN", yesNo(fin > 0))
	return o
}

// halfClose runs a 64 KiB exchange in which one side shuts down writing and
// keeps reading while the other still sends.
func halfClose(t *T, tp *Topology, ctx context.Context, clientFirst, v6 bool) *Outcome {
	o := newOutcome()
	c, s := connect(t, tp, ctx, v6, DialOptions{}, ListenOptions{})
	setDeadline(ioTimeout, c, s)
	first, second := xfer.HalfCloser(c), xfer.HalfCloser(s)
	if !clientFirst {
		first, second = s, c
	}
	err := xfer.Exchange(first, second, 64<<10)
	require.NoError(t, err)
	o.Fact("exchange", classify(err))
	return o
}

// refused dials a port nobody listens on: the server's RST makes the dial
// fail with ECONNREFUSED.
func refused(t *T, tp *Topology, ctx context.Context, v6 bool) *Outcome {
	o := newOutcome()
	ln, err := tp.Server.Listen(v6, ListenOptions{})
	require.NoError(t, err)
	addr := addrOf(ln)
	require.NoError(t, ln.Close())
	dctx, cancel := context.WithTimeout(ctx, ioTimeout)
	defer cancel()
	start := time.Now()
	c, err := tp.Client.Dial(dctx, netip.AddrPortFrom(addr.Addr(), addr.Port()), DialOptions{})
	if c != nil {
		c.Close()
	}
	o.Fact("dial", classify(err))
	o.Elapsed("dial", time.Since(start))
	return o
}
