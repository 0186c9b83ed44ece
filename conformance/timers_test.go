package conformance

import (
	"context"
	"io"
	"net"
	"net/netip"
	"time"

	"github.com/stretchr/testify/require"
)

// timerScenarios check what happens when time passes: timeouts, deadlines
// and keep-alive.
func timerScenarios() []*Scenario {
	clients := []Direction{StackClient, StackStack}
	return []*Scenario{
		{Name: "dial-timeout-silent-host", Dirs: clients, Run: func(t *T, tp *Topology, ctx context.Context) *Outcome { return dialTimeout(t, tp, ctx, false) }},
		{Name: "dial-timeout-silent-host/v6", Dirs: clients, Run: func(t *T, tp *Topology, ctx context.Context) *Outcome { return dialTimeout(t, tp, ctx, true) }},
		{Name: "read-deadline", Run: readDeadline},
		{Name: "write-deadline", Run: writeDeadline},
		{Name: "keepalive-vanished-peer", Run: keepAliveVanished},
	}
}

// silentHost is an address on the shared subnet that nobody answers for.
func silentHost(v6 bool) netip.AddrPort {
	if v6 {
		return netip.MustParseAddrPort("[fd00:198:18::99]:80")
	}
	return netip.MustParseAddrPort("198.18.0.99:80")
}

// dialTimeout dials a host that never answers (its address does not
// resolve) with a one-second timeout.
func dialTimeout(t *T, tp *Topology, ctx context.Context, v6 bool) *Outcome {
	o := newOutcome()
	start := time.Now()
	c, err := tp.Client.Dial(ctx, silentHost(v6), DialOptions{Timeout: time.Second})
	d := time.Since(start)
	if c != nil {
		c.Close()
	}
	// Go's net reports a connect that ran out of time as the context's
	// deadline or the socket's, whichever it notices first: both are
	// timeouts, which is what is compared.
	result := classify(err)
	if isTimeout(err) {
		result = "timeout"
	}
	o.Fact("dial", result)
	o.Timer("dial", d)
	return o
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

// readDeadline reads an idle connection on both ends with a deadline, then
// clears the deadline and checks that the connection still works.
func readDeadline(t *T, tp *Topology, ctx context.Context) *Outcome {
	o := newOutcome()
	c, s := connect(t, tp, ctx, false, DialOptions{}, ListenOptions{})
	for _, side := range []struct {
		name     string
		conn     TCPConn
		peer     TCPConn
		deadline time.Duration
	}{{"client", c, s, 300 * time.Millisecond}, {"server", s, c, 300 * time.Millisecond}} {
		start := time.Now()
		require.NoError(t, side.conn.SetReadDeadline(start.Add(side.deadline)))
		n, err := side.conn.Read(make([]byte, 10))
		o.Fact(side.name+" read", classify(err))
		o.Fact(side.name+" bytes", n)
		o.Timer(side.name+" read", time.Since(start))
		// A deadline in the past fails at once, without blocking.
		require.NoError(t, side.conn.SetReadDeadline(time.Now().Add(-time.Second)))
		_, err = side.conn.Read(make([]byte, 10))
		o.Fact(side.name+" read with a past deadline", classify(err))
		// Cleared, the conn reads again.
		require.NoError(t, side.conn.SetReadDeadline(time.Time{}))
		setDeadline(ioTimeout, side.peer)
		_, err = side.peer.Write([]byte("ok"))
		require.NoError(t, err)
		side.conn.SetReadDeadline(time.Now().Add(ioTimeout))
		buf := make([]byte, 2)
		_, err = io.ReadFull(side.conn, buf)
		o.Fact(side.name+" read after clearing", classify(err))
		side.conn.SetReadDeadline(time.Time{})
		side.peer.SetDeadline(time.Time{})
	}
	return o
}

// writeDeadline writes to a peer that does not read until the buffers are
// full and the deadline passes.
func writeDeadline(t *T, tp *Topology, ctx context.Context) *Outcome {
	o := newOutcome()
	c, s := connect(t, tp, ctx, false, DialOptions{}, ListenOptions{})
	big := make([]byte, 64<<20)
	for _, side := range []struct {
		name string
		conn TCPConn
	}{{"client", c}, {"server", s}} {
		start := time.Now()
		require.NoError(t, side.conn.SetWriteDeadline(start.Add(500*time.Millisecond)))
		n, err := side.conn.Write(big)
		o.Fact(side.name+" write", classify(err))
		o.Fact(side.name+" wrote part of it", yesNo(n > 0 && n < len(big)))
		o.Timer(side.name+" write", time.Since(start))
	}
	return o
}

// keepAliveVanished enables keep-alive (1s idle, 1s interval, 3 probes) on
// both ends, cuts the path at the far end (its interface down) and waits
// for the near end to give up.
func keepAliveVanished(t *T, tp *Topology, ctx context.Context) *Outcome {
	o := newOutcome()
	ka := net.KeepAliveConfig{Enable: true, Idle: time.Second, Interval: time.Second, Count: 3}
	c, s := connect(t, tp, ctx, false, DialOptions{KeepAlive: ka}, ListenOptions{KeepAlive: ka})
	setDeadline(ioTimeout, c, s)
	_, err := c.Write([]byte("x"))
	require.NoError(t, err)
	_, err = io.ReadFull(s, make([]byte, 1))
	require.NoError(t, err)
	near := c
	if !tp.ClientIsNear() {
		near = s
	}
	// The path stays idle: the near end must notice by itself.
	_, err = tp.FarNS.Exec("ip", "link", "set", "dev", tp.FarDev, "down")
	require.NoError(t, err)
	start := time.Now()
	require.NoError(t, near.SetReadDeadline(start.Add(30*time.Second)))
	_, err = near.Read(make([]byte, 1))
	o.Fact("near end's read", classify(err))
	o.Timer("detection", time.Since(start))
	return o
}
