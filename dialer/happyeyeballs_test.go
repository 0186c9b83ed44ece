package dialer

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/polarnet/polarnet/internal/netaddr"
	"github.com/polarnet/polarnet/link"
	"github.com/polarnet/polarnet/link/pipe"
	"github.com/polarnet/polarnet/polarnet"
)

// dualStackPair is a client and a server stack with both families over a pipe,
// and a TCP listener on the server's IPv4 address only.
func dualStackPair(t *testing.T) (client *polarnet.Stack, v4, v6Refused, v6Silent netip.AddrPort) {
	la, lb := pipe.New(pipe.Config{})
	newStack := func(l link.Link, addrs ...string) *polarnet.Stack {
		var ps []netip.Prefix
		for _, a := range addrs {
			ps = append(ps, netip.MustParsePrefix(a))
		}
		st, err := polarnet.New(polarnet.Config{Link: l, Addrs: ps})
		require.NoError(t, err)
		t.Cleanup(func() { st.Close() })
		return st
	}
	client = newStack(la, "198.18.0.1/24", "fd00:198:18::1/64")
	server := newStack(lb, "198.18.0.2/24", "fd00:198:18::2/64")
	ln, err := server.ListenTCP("tcp", netip.MustParseAddrPort("198.18.0.2:0"), 0, net.KeepAliveConfig{})
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	v4 = ln.Addr().(*net.TCPAddr).AddrPort()
	v6Refused = netip.AddrPortFrom(netip.MustParseAddr("fd00:198:18::2"), v4.Port())
	v6Silent = netip.AddrPortFrom(netip.MustParseAddr("fd00:198:18::99"), v4.Port()) // nobody answers
	return client, v4, v6Refused, v6Silent
}

func dialAddrs(t *testing.T, d *Dialer, addrs ...netip.AddrPort) (net.Conn, error) {
	n, err := netaddr.ParseNetwork("tcp")
	require.NoError(t, err)
	primaries, fallbacks := byFamily(addrs)
	if d.FallbackDelay < 0 {
		return d.dialSerial(t.Context(), d.Stack, n, netip.AddrPort{}, addrs)
	}
	return d.dialParallel(t.Context(), d.Stack, n, netip.AddrPort{}, primaries, fallbacks)
}

func TestHappyEyeballsRacesTheFallbackAfterTheDelay(t *testing.T) {
	client, v4, _, v6Silent := dualStackPair(t)
	d := &Dialer{Stack: client, FallbackDelay: 20 * time.Millisecond}
	c, err := dialAddrs(t, d, v6Silent, v4)
	require.NoError(t, err, "the IPv4 fallback connects while the IPv6 primary hangs")
	defer c.Close()
	assert.Equal(t, v4, c.RemoteAddr().(*net.TCPAddr).AddrPort())
}

func TestHappyEyeballsStartsTheFallbackWhenThePrimaryFails(t *testing.T) {
	client, v4, v6Refused, _ := dualStackPair(t)
	// A delay no test would wait out: only the primary's failure can start
	// the fallback.
	d := &Dialer{Stack: client, FallbackDelay: time.Hour}
	c, err := dialAddrs(t, d, v6Refused, v4)
	require.NoError(t, err)
	defer c.Close()
	assert.Equal(t, v4, c.RemoteAddr().(*net.TCPAddr).AddrPort())
}

func TestHappyEyeballsReportsThePrimarysError(t *testing.T) {
	client, v4, v6Refused, _ := dualStackPair(t)
	v4Refused := netip.AddrPortFrom(v4.Addr(), v4.Port()+1)
	for _, delay := range []time.Duration{time.Hour, -1} {
		d := &Dialer{Stack: client, FallbackDelay: delay}
		_, err := dialAddrs(t, d, v6Refused, v4Refused)
		require.Error(t, err, "delay %v", delay)
		assert.True(t, errors.Is(err, syscall.ECONNREFUSED), "delay %v: %v", delay, err)
		var opErr *net.OpError
		require.ErrorAs(t, err, &opErr)
		assert.Equal(t, v6Refused.String(), opErr.Addr.String(), "delay %v: the primary's error", delay)
	}
}

func TestByFamilyKeepsOrder(t *testing.T) {
	a := func(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }
	p, f := byFamily([]netip.AddrPort{a("[fd00:198:18::1]:1"), a("198.18.0.1:1"), a("[fd00:198:18::2]:1"), a("198.18.0.2:1")})
	assert.Equal(t, []netip.AddrPort{a("[fd00:198:18::1]:1"), a("[fd00:198:18::2]:1")}, p)
	assert.Equal(t, []netip.AddrPort{a("198.18.0.1:1"), a("198.18.0.2:1")}, f)
}

// TestKernelPathGetsEveryField: what a polarnet stack cannot use (Control,
// MPTCP) still reaches Go's net when there is no stack.
func TestKernelPathGetsEveryField(t *testing.T) {
	called := false
	d := Dialer{FallbackDelay: time.Second, Control: func(string, string, syscall.RawConn) error { called = true; return nil }}
	d.SetMultipathTCP(true)
	k := d.kernel()
	assert.Equal(t, time.Second, k.FallbackDelay)
	require.NotNil(t, k.Control)
	require.NoError(t, k.Control("tcp", "198.18.0.1:1", nil))
	assert.True(t, called)
	assert.True(t, k.MultipathTCP())
	assert.True(t, d.MultipathTCP(), "no default stack here: Go's net decides")

	client, _, _, _ := dualStackPair(t)
	d.Stack = client
	assert.False(t, d.MultipathTCP(), "a stack has no MPTCP")
}

// TestDialCancelledMidway: a context cancelled while the SYN goes
// unanswered ends the dial as net's does.
func TestDialCancelledMidway(t *testing.T) {
	client, _, _, _ := dualStackPair(t)
	ctx, cancel := context.WithCancel(t.Context())
	time.AfterFunc(20*time.Millisecond, cancel)
	d := &Dialer{Stack: client}
	_, err := d.DialContext(ctx, "tcp", "198.18.0.99:80") // nobody answers
	require.Error(t, err)
	var opErr *net.OpError
	require.ErrorAs(t, err, &opErr)
	assert.Equal(t, "dial", opErr.Op)
	assert.Equal(t, "tcp", opErr.Net)
	assert.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, "dial tcp 198.18.0.99:80: operation was canceled", err.Error())
}
