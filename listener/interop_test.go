package listener_test

import (
	"context"
	"io"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/net/nettest"

	"github.com/polarnet/polarnet/dialer"
	"github.com/polarnet/polarnet/link"
	"github.com/polarnet/polarnet/link/pipe"
	"github.com/polarnet/polarnet/listener"
	"github.com/polarnet/polarnet/polarnet"
)

var (
	clientAddr = netip.MustParsePrefix("198.19.40.1/24")
	serverAddr = netip.MustParsePrefix("198.19.40.2/24")
)

// stackPair returns two stacks on a pipe link; tweak adjusts the server's
// config.
func stackPair(t *testing.T, tweak func(*polarnet.Config)) (client, server *polarnet.Stack) {
	la, lb := pipe.New(pipe.Config{})
	newStack := func(l link.Link, p netip.Prefix, tweak func(*polarnet.Config)) *polarnet.Stack {
		cfg := polarnet.Config{Link: l, Addrs: []netip.Prefix{p}}
		if tweak != nil {
			tweak(&cfg)
		}
		s, err := polarnet.New(cfg)
		require.NoError(t, err)
		t.Cleanup(func() { s.Close() })
		return s
	}
	return newStack(la, clientAddr, nil), newStack(lb, serverAddr, tweak)
}

// echoOnce accepts n conns from ln, answering each with what it reads and
// reporting their dynamic types.
func echoOnce(t *testing.T, ln net.Listener, n int) <-chan net.Conn {
	out := make(chan net.Conn, n)
	go func() {
		for range n {
			c, err := ln.Accept()
			if err != nil {
				close(out)
				return
			}
			go func() { io.Copy(c, c); c.Close() }()
			out <- c
		}
	}()
	return out
}

func roundTrip(t *testing.T, c net.Conn) {
	t.Helper()
	defer c.Close()
	require.NoError(t, c.SetDeadline(time.Now().Add(5*time.Second)))
	_, err := c.Write([]byte("ping"))
	require.NoError(t, err)
	buf := make([]byte, 4)
	_, err = io.ReadFull(c, buf)
	require.NoError(t, err)
	assert.Equal(t, "ping", string(buf))
}

func TestWildcardListenAcceptsOnStackAndLoopback(t *testing.T) {
	client, server := stackPair(t, nil)
	lc := listener.ListenConfig{Stack: server}
	ln, err := lc.Listen(t.Context(), "tcp", ":0")
	require.NoError(t, err)
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	assert.Equal(t, "[::]:"+strconv.Itoa(port), ln.Addr().String(), "as net reports a wildcard")
	accepted := echoOnce(t, ln, 3)

	d := dialer.Dialer{Stack: client, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", net.JoinHostPort(serverAddr.Addr().String(), strconv.Itoa(port)))
	require.NoError(t, err)
	assert.IsType(t, &polarnet.TCPConn{}, c)
	roundTrip(t, c)
	assert.IsType(t, &polarnet.TCPConn{}, <-accepted)

	for _, host := range []string{"127.0.0.1", "::1"} {
		c, err := net.DialTimeout("tcp", net.JoinHostPort(host, strconv.Itoa(port)), 5*time.Second)
		require.NoError(t, err, host)
		roundTrip(t, c)
		assert.IsType(t, &net.TCPConn{}, <-accepted, host)
	}
	assert.EqualValues(t, 2, server.Stats().KernelAccepts)
	assert.EqualValues(t, 0, client.Stats().KernelDials)
}

func TestMergedListenerErrorsAsNet(t *testing.T) {
	_, server := stackPair(t, nil)
	shapes := func(lc *listener.ListenConfig) []string {
		ln, err := lc.Listen(t.Context(), "tcp", ":0")
		require.NoError(t, err)
		addr := ln.Addr().String()
		require.NoError(t, ln.(interface{ SetDeadline(time.Time) error }).SetDeadline(time.Now().Add(10*time.Millisecond)))
		_, timeout := ln.Accept()
		require.Error(t, timeout)
		assert.True(t, timeout.(net.Error).Timeout())
		require.NoError(t, ln.Close())
		_, closed := ln.Accept()
		again := ln.Close()
		setAfterClose := ln.(interface{ SetDeadline(time.Time) error }).SetDeadline(time.Time{})
		var out []string
		for _, err := range []error{timeout, closed, again, setAfterClose} {
			require.Error(t, err)
			out = append(out, strings.ReplaceAll(err.Error(), addr, "ADDR"))
		}
		return out
	}
	assert.Equal(t, shapes(&listener.ListenConfig{}), shapes(&listener.ListenConfig{Stack: server}))
}

func TestListenBusyPortReportsTheAddressAsNet(t *testing.T) {
	_, server := stackPair(t, nil)
	for _, lc := range []*listener.ListenConfig{{}, {Stack: server}} {
		ln, err := lc.Listen(t.Context(), "tcp", ":0")
		require.NoError(t, err)
		port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
		_, err = lc.Listen(t.Context(), "tcp", ":"+port)
		require.Error(t, err)
		assert.Equal(t, "listen tcp :"+port+": bind: address already in use", err.Error())
		ln.Close()
	}
}

func TestKernelListenModes(t *testing.T) {
	loopback := func(port int) error {
		c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(port), 5*time.Second)
		if err == nil {
			c.Close()
		}
		return err
	}
	t.Run("none", func(t *testing.T) {
		_, server := stackPair(t, func(c *polarnet.Config) { c.KernelListen = polarnet.KernelListenNone })
		ln, err := (&listener.ListenConfig{Stack: server}).Listen(t.Context(), "tcp", ":0")
		require.NoError(t, err)
		defer ln.Close()
		assert.IsType(t, &polarnet.TCPListener{}, ln)
		assert.Error(t, loopback(ln.Addr().(*net.TCPAddr).Port))
	})
	t.Run("all", func(t *testing.T) {
		_, server := stackPair(t, func(c *polarnet.Config) { c.KernelListen = polarnet.KernelListenAll })
		ln, err := (&listener.ListenConfig{Stack: server}).Listen(t.Context(), "tcp4", ":0")
		require.NoError(t, err)
		defer ln.Close()
		port := ln.Addr().(*net.TCPAddr).Port
		assert.Equal(t, "0.0.0.0:"+strconv.Itoa(port), ln.Addr().String())
		// The kernel listens on its wildcard: the port is taken there.
		_, err = net.Listen("tcp4", "0.0.0.0:"+strconv.Itoa(port))
		assert.Error(t, err)
		accepted := echoOnce(t, ln, 1)
		require.NoError(t, loopback(port))
		assert.IsType(t, &net.TCPConn{}, <-accepted)
	})
}

func TestLoopbackAndForeignListensAreKernelListens(t *testing.T) {
	_, server := stackPair(t, nil)
	lc := listener.ListenConfig{Stack: server}
	for _, addr := range []string{"127.0.0.1:0", "[::1]:0", "localhost:0"} {
		ln, err := lc.Listen(t.Context(), "tcp", addr)
		require.NoError(t, err, addr)
		assert.IsType(t, &net.TCPListener{}, ln, addr)
		ln.Close()
		pc, err := lc.ListenPacket(context.Background(), "udp", addr)
		require.NoError(t, err, addr)
		assert.IsType(t, &net.UDPConn{}, pc, addr)
		pc.Close()
	}
	ln, err := lc.Listen(t.Context(), "tcp", net.JoinHostPort(serverAddr.Addr().String(), "0"))
	require.NoError(t, err)
	defer ln.Close()
	assert.IsType(t, &polarnet.TCPListener{}, ln, "the stack's own address")
}

// TestNetTestConnOnBothPaths runs x/net's conformance test for net.Conn on
// conns from a wildcard listen on a stack: dialed through the stack, and
// dialed to the kernel's loopback through the same dialer.
func TestNetTestConnOnBothPaths(t *testing.T) {
	client, server := stackPair(t, nil)
	ln, err := (&listener.ListenConfig{Stack: server}).Listen(t.Context(), "tcp", ":0")
	require.NoError(t, err)
	defer ln.Close()
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	d := dialer.Dialer{Stack: client, Timeout: 5 * time.Second}
	for _, tc := range []struct {
		path, host string
		conn       net.Conn
	}{
		{"stack", serverAddr.Addr().String(), &polarnet.TCPConn{}},
		{"kernel", "127.0.0.1", &net.TCPConn{}},
	} {
		t.Run(tc.path, func(t *testing.T) {
			nettest.TestConn(t, func() (c1, c2 net.Conn, stop func(), err error) {
				c1, err = d.Dial("tcp", net.JoinHostPort(tc.host, port))
				if err != nil {
					return nil, nil, nil, err
				}
				if c2, err = ln.Accept(); err != nil {
					c1.Close()
					return nil, nil, nil, err
				}
				assert.IsType(t, tc.conn, c1)
				assert.IsType(t, tc.conn, c2)
				return c1, c2, func() { c1.Close(); c2.Close() }, nil
			})
		})
	}
}
