package polarnet_test

import (
	"net"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/polarnet/polarnet/link"
	"github.com/polarnet/polarnet/link/pipe"
	"github.com/polarnet/polarnet/polarnet"
)

var (
	addrA  = netip.MustParsePrefix("198.18.0.1/24")
	addrB  = netip.MustParsePrefix("198.18.0.2/24")
	addrA6 = netip.MustParsePrefix("fd00:198:18::1/64")
	addrB6 = netip.MustParsePrefix("fd00:198:18::2/64")
)

// newPair returns two stacks joined by an in-memory pipe link; both are
// closed when the test ends.
func newPair(t testing.TB, pc pipe.Config, tweak ...func(*polarnet.Config)) (a, b *polarnet.Stack) {
	t.Helper()
	la, lb := pipe.New(pc)
	a = newStack(t, la, addrA, addrA6, tweak...)
	b = newStack(t, lb, addrB, addrB6, tweak...)
	return a, b
}

func newStack(t testing.TB, l link.Link, v4, v6 netip.Prefix, tweak ...func(*polarnet.Config)) *polarnet.Stack {
	t.Helper()
	cfg := polarnet.Config{Link: l, Addrs: []netip.Prefix{v4, v6}}
	for _, f := range tweak {
		f(&cfg)
	}
	s, err := polarnet.New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	return s
}

// connPair returns a connected TCP conn pair: client on a, server side on b.
func connPair(t testing.TB, a, b *polarnet.Stack, server netip.Addr) (client, srv *polarnet.TCPConn) {
	t.Helper()
	ln, err := b.ListenTCP("tcp", netip.AddrPortFrom(server, 0), 0, net.KeepAliveConfig{})
	require.NoError(t, err)
	defer ln.Close()
	accepted := make(chan *polarnet.TCPConn, 1)
	go func() {
		c, err := ln.AcceptTCP()
		if err != nil {
			close(accepted)
			return
		}
		accepted <- c
	}()
	client, err = a.DialTCP(t.Context(), "tcp", netip.AddrPort{}, ln.Addr().(*net.TCPAddr).AddrPort())
	require.NoError(t, err)
	srv = <-accepted
	require.NotNil(t, srv)
	t.Cleanup(func() { client.Close(); srv.Close() })
	return client, srv
}

// protocolCounter reads a stack's protocol counter, failing the test if path
// names none.
func protocolCounter(t testing.TB, st *polarnet.Stack, path string) uint64 {
	t.Helper()
	n, ok := st.ProtocolCounter(path)
	require.True(t, ok, "no protocol counter %s", path)
	return n
}
