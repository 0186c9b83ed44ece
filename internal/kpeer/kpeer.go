// Package kpeer pairs a polarnet stack with the kernel's TCP in a network
// namespace, for the engine tests every link runs against a kernel peer:
// kernel listeners and dialers inside the namespace, connected conns in both
// directions, and an HTTP exchange both ways.
package kpeer

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/polarnet/polarnet/internal/netns"
	"github.com/polarnet/polarnet/internal/xfer"
	"github.com/polarnet/polarnet/polarnet"
)

// Directions of Pairs, the keys of its map.
const (
	PolarnetClient = "polarnet client, kernel server"
	KernelClient   = "kernel client, polarnet server"
)

// Listen opens a kernel TCP listener on addr (port 0) in ns, closed at
// cleanup.
func Listen(t testing.TB, ns *netns.NS, addr netip.Addr) net.Listener {
	t.Helper()
	var ln net.Listener
	require.NoError(t, ns.Do(func() (err error) {
		ln, err = net.Listen("tcp", netip.AddrPortFrom(addr, 0).String())
		return err
	}))
	t.Cleanup(func() { ln.Close() })
	return ln
}

// Dial dials addr with the kernel from ns, closed at cleanup.
func Dial(t testing.TB, ns *netns.NS, addr string) *net.TCPConn {
	t.Helper()
	var c net.Conn
	require.NoError(t, ns.Do(func() (err error) {
		c, err = net.DialTimeout("tcp", addr, 10*time.Second)
		return err
	}))
	t.Cleanup(func() { c.Close() })
	return c.(*net.TCPConn)
}

// Pairs returns connected conns both ways between st (on local) and the
// kernel in ns (on kernel): PolarnetClient and KernelClient, each as
// {client, server}.
func Pairs(t testing.TB, st *polarnet.Stack, ns *netns.NS, kernel, local netip.Addr) map[string][2]xfer.HalfCloser {
	t.Helper()
	out := map[string][2]xfer.HalfCloser{}
	kln := Listen(t, ns, kernel)
	accepted := make(chan net.Conn, 1)
	go func() { c, _ := kln.Accept(); accepted <- c }()
	pc, err := st.DialTCP(t.Context(), "tcp", netip.AddrPort{}, kln.Addr().(*net.TCPAddr).AddrPort())
	require.NoError(t, err)
	kc := <-accepted
	require.NotNil(t, kc)
	t.Cleanup(func() { pc.Close(); kc.Close() })
	out[PolarnetClient] = [2]xfer.HalfCloser{pc, kc.(*net.TCPConn)}

	pln, err := st.ListenTCP("tcp", netip.AddrPortFrom(local, 0), 0, net.KeepAliveConfig{})
	require.NoError(t, err)
	t.Cleanup(func() { pln.Close() })
	paccepted := make(chan *polarnet.TCPConn, 1)
	go func() { c, _ := pln.AcceptTCP(); paccepted <- c }()
	kc2 := Dial(t, ns, pln.Addr().String())
	ps := <-paccepted
	require.NotNil(t, ps)
	t.Cleanup(func() { ps.Close() })
	out[KernelClient] = [2]xfer.HalfCloser{kc2, ps}
	return out
}

// HTTP posts three 100 KiB bodies each way between st (on local) and an
// HTTP server of the kernel in ns (on kernel), and checks the answers.
func HTTP(t *testing.T, st *polarnet.Stack, ns *netns.NS, kernel, local netip.Addr) {
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "%s %s %d", r.Method, r.URL.Path, len(body))
	})
	post := func(t *testing.T, dial func(ctx context.Context, network, addr string) (net.Conn, error), url string) {
		hc := &http.Client{Transport: &http.Transport{DialContext: dial}, Timeout: 10 * time.Second}
		defer hc.CloseIdleConnections()
		for i := range 3 {
			resp, err := hc.Post(fmt.Sprintf("%s%d", url, i), "application/octet-stream", xfer.Pattern(100<<10, uint64(i)))
			require.NoError(t, err)
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			require.NoError(t, err)
			assert.Equal(t, fmt.Sprintf("POST /p%d %d", i, 100<<10), string(body))
		}
	}
	t.Run(PolarnetClient, func(t *testing.T) {
		ln := Listen(t, ns, kernel)
		srv := &http.Server{Handler: handler}
		go srv.Serve(ln)
		defer srv.Close()
		post(t, func(ctx context.Context, network, addr string) (net.Conn, error) {
			return st.DialTCP(ctx, network, netip.AddrPort{}, netip.MustParseAddrPort(addr))
		}, "http://"+ln.Addr().String()+"/p")
	})
	t.Run(KernelClient, func(t *testing.T) {
		ln, err := st.ListenTCP("tcp", netip.AddrPortFrom(local, 0), 0, net.KeepAliveConfig{})
		require.NoError(t, err)
		srv := &http.Server{Handler: handler}
		go srv.Serve(ln)
		defer srv.Close()
		post(t, func(ctx context.Context, network, addr string) (net.Conn, error) {
			var c net.Conn
			err := ns.Do(func() (err error) {
				c, err = (&net.Dialer{}).DialContext(ctx, network, addr)
				return err
			})
			return c, err
		}, "http://"+ln.Addr().String()+"/p")
	})
}

// ExchangeVia dials a kernel listener in ns on kernel with dial, whose conn
// must come out of a polarnet stack (a *polarnet.TCPConn: dialer.Dial with
// a default stack set), and exchanges size bytes each way with it.
func ExchangeVia(t testing.TB, dial func(network, addr string) (net.Conn, error), ns *netns.NS, kernel netip.Addr, size int64) {
	t.Helper()
	ln := Listen(t, ns, kernel)
	accepted := make(chan net.Conn, 1)
	go func() { c, _ := ln.Accept(); accepted <- c }()
	c, err := dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	defer c.Close()
	require.IsType(t, &polarnet.TCPConn{}, c)
	kc := <-accepted
	require.NotNil(t, kc)
	defer kc.Close()
	assert.NoError(t, xfer.Exchange(c.(*polarnet.TCPConn), kc.(*net.TCPConn), size))
}
