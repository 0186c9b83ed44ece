package dialer_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/polarnet/polarnet/dialer"
	"github.com/polarnet/polarnet/link"
	"github.com/polarnet/polarnet/link/pipe"
	"github.com/polarnet/polarnet/listener"
	"github.com/polarnet/polarnet/polarnet"
)

// world is one way to dial and listen: Go's net (through the fallback) or a
// pair of polarnet stacks.
type world struct {
	name       string
	dialer     dialer.Dialer
	lc         listener.ListenConfig
	serverHost string
}

func worlds(t *testing.T) []world {
	la, lb := pipe.New(pipe.Config{})
	client := newStack(t, la, "198.18.0.1/24")
	server := newStack(t, lb, "198.18.0.2/24")
	return []world{
		{name: "kernel", serverHost: "127.0.0.1"},
		{name: "polarnet", dialer: dialer.Dialer{Stack: client}, lc: listener.ListenConfig{Stack: server}, serverHost: "198.18.0.2"},
		// Stacks configured, loopback traffic: the kernel interop path.
		{name: "interop", dialer: dialer.Dialer{Stack: client}, lc: listener.ListenConfig{Stack: server}, serverHost: "127.0.0.1"},
	}
}

func newStack(t *testing.T, l link.Link, addr string) *polarnet.Stack {
	s, err := polarnet.New(polarnet.Config{Link: l, Addrs: []netip.Prefix{netip.MustParsePrefix(addr)}})
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	return s
}

func (w *world) listen(t *testing.T) net.Listener {
	ln, err := w.lc.Listen(t.Context(), "tcp", net.JoinHostPort(w.serverHost, "0"))
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	return ln
}

// pair returns a connected client and the server's side of it.
func (w *world) pair(t *testing.T) (client, server net.Conn) {
	ln := w.listen(t)
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	client, err := w.dialer.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	server = <-accepted
	require.NotNil(t, server)
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

// unusedPort returns a port nothing listens on in w.
func (w *world) unusedPort(t *testing.T) string {
	ln := w.listen(t)
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	return net.JoinHostPort(w.serverHost, strconv.Itoa(port))
}

// shape is what a caller can observe of an error without its addresses.
type shape struct {
	Type, Op, Net, Text              string
	Timeout                          bool
	Refused, Reset, Closed, Deadline bool
	Canceled, CtxDeadline, EOF       bool
	UnknownNetwork, AddrError        bool
}

func shapeOf(err error, addrs ...string) shape {
	if err == nil {
		return shape{Type: "nil"}
	}
	s := shape{Type: typeName(err)}
	var op *net.OpError
	if errors.As(err, &op) {
		s.Op, s.Net = op.Op, op.Net
	}
	text := err.Error()
	for _, a := range addrs {
		text = strings.ReplaceAll(text, a, "ADDR")
	}
	s.Text = text
	var ne net.Error
	s.Timeout = errors.As(err, &ne) && ne.Timeout()
	s.Refused = errors.Is(err, syscall.ECONNREFUSED)
	s.Reset = errors.Is(err, syscall.ECONNRESET)
	s.Closed = errors.Is(err, net.ErrClosed)
	s.Deadline = errors.Is(err, os.ErrDeadlineExceeded)
	s.Canceled = errors.Is(err, context.Canceled)
	s.CtxDeadline = errors.Is(err, context.DeadlineExceeded)
	s.EOF = err == io.EOF
	var un net.UnknownNetworkError
	s.UnknownNetwork = errors.As(err, &un)
	var ae *net.AddrError
	s.AddrError = errors.As(err, &ae)
	return s
}

func typeName(err error) string {
	switch err.(type) {
	case *net.OpError:
		return "*net.OpError"
	}
	if err == io.EOF {
		return "io.EOF"
	}
	return "other"
}

// addrsOf lists the address spellings to mask in error texts.
func addrsOf(conns ...net.Conn) []string {
	var out []string
	for _, c := range conns {
		out = append(out, c.LocalAddr().String(), c.RemoteAddr().String())
	}
	return out
}

func TestErrorParityWithNet(t *testing.T) {
	scenarios := []struct {
		name string
		run  func(t *testing.T, w *world) shape
	}{
		{"refused", func(t *testing.T, w *world) shape {
			addr := w.unusedPort(t)
			_, err := w.dialer.Dial("tcp", addr)
			return shapeOf(err, addr)
		}},
		{"reset", func(t *testing.T, w *world) shape {
			c, s := w.pair(t)
			require.NoError(t, s.(interface{ SetLinger(int) error }).SetLinger(0))
			require.NoError(t, s.Close())
			require.NoError(t, c.SetReadDeadline(time.Now().Add(5*time.Second)))
			_, err := c.Read(make([]byte, 1))
			return shapeOf(err, addrsOf(c)...)
		}},
		{"eof", func(t *testing.T, w *world) shape {
			c, s := w.pair(t)
			require.NoError(t, s.Close())
			_, err := c.Read(make([]byte, 1))
			return shapeOf(err)
		}},
		{"read deadline", func(t *testing.T, w *world) shape {
			c, _ := w.pair(t)
			require.NoError(t, c.SetReadDeadline(time.Now().Add(10*time.Millisecond)))
			_, err := c.Read(make([]byte, 1))
			return shapeOf(err, addrsOf(c)...)
		}},
		{"write deadline", func(t *testing.T, w *world) shape {
			c, _ := w.pair(t)
			require.NoError(t, c.SetWriteDeadline(time.Now().Add(-time.Second)))
			_, err := c.Write([]byte("x"))
			return shapeOf(err, addrsOf(c)...)
		}},
		{"closed conn", func(t *testing.T, w *world) shape {
			c, _ := w.pair(t)
			addrs := addrsOf(c)
			require.NoError(t, c.Close())
			_, err := c.Read(make([]byte, 1))
			return shapeOf(err, addrs...)
		}},
		{"closed conn write", func(t *testing.T, w *world) shape {
			c, _ := w.pair(t)
			addrs := addrsOf(c)
			require.NoError(t, c.Close())
			_, err := c.Write([]byte("x"))
			return shapeOf(err, addrs...)
		}},
		{"double close", func(t *testing.T, w *world) shape {
			c, _ := w.pair(t)
			addrs := addrsOf(c)
			require.NoError(t, c.Close())
			return shapeOf(c.Close(), addrs...)
		}},
		{"set deadline after close", func(t *testing.T, w *world) shape {
			c, _ := w.pair(t)
			addrs := addrsOf(c)
			require.NoError(t, c.Close())
			return shapeOf(c.SetDeadline(time.Now()), addrs...)
		}},
		{"set read deadline after close", func(t *testing.T, w *world) shape {
			c, _ := w.pair(t)
			addrs := addrsOf(c)
			require.NoError(t, c.Close())
			return shapeOf(c.SetReadDeadline(time.Now()), addrs...)
		}},
		{"set buffer after close", func(t *testing.T, w *world) shape {
			c, _ := w.pair(t)
			addrs := addrsOf(c)
			require.NoError(t, c.Close())
			return shapeOf(c.(interface{ SetReadBuffer(int) error }).SetReadBuffer(1<<16), addrs...)
		}},
		{"set linger after close", func(t *testing.T, w *world) shape {
			c, _ := w.pair(t)
			addrs := addrsOf(c)
			require.NoError(t, c.Close())
			return shapeOf(c.(interface{ SetLinger(int) error }).SetLinger(0), addrs...)
		}},
		{"listener set deadline after close", func(t *testing.T, w *world) shape {
			ln := w.listen(t)
			addr := ln.Addr().String()
			require.NoError(t, ln.Close())
			return shapeOf(ln.(interface{ SetDeadline(time.Time) error }).SetDeadline(time.Now()), addr)
		}},
		{"listen busy wildcard port", func(t *testing.T, w *world) shape {
			ln, err := w.lc.Listen(t.Context(), "tcp", ":0")
			require.NoError(t, err)
			defer ln.Close()
			port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
			_, err = w.lc.Listen(t.Context(), "tcp", ":"+port)
			return shapeOf(err, port)
		}},
		{"closed listener", func(t *testing.T, w *world) shape {
			ln := w.listen(t)
			addr := ln.Addr().String()
			require.NoError(t, ln.Close())
			_, err := ln.Accept()
			return shapeOf(err, addr)
		}},
		{"accept deadline", func(t *testing.T, w *world) shape {
			ln := w.listen(t)
			addr := ln.Addr().String()
			require.NoError(t, ln.(interface{ SetDeadline(time.Time) error }).SetDeadline(time.Now().Add(10*time.Millisecond)))
			_, err := ln.Accept()
			return shapeOf(err, addr)
		}},
		{"cancelled context", func(t *testing.T, w *world) shape {
			ctx, cancel := context.WithCancel(t.Context())
			cancel()
			addr := w.unusedPort(t)
			_, err := w.dialer.DialContext(ctx, "tcp", addr)
			return shapeOf(err, addr)
		}},
		{"unknown network", func(t *testing.T, w *world) shape {
			_, err := w.dialer.Dial("tcp7", net.JoinHostPort(w.serverHost, "80"))
			return shapeOf(err)
		}},
		{"unknown network listen", func(t *testing.T, w *world) shape {
			_, err := w.lc.Listen(t.Context(), "udp", net.JoinHostPort(w.serverHost, "0"))
			return shapeOf(err, w.serverHost)
		}},
		{"missing port", func(t *testing.T, w *world) shape {
			_, err := w.dialer.Dial("tcp", w.serverHost)
			return shapeOf(err, w.serverHost)
		}},
		{"bad port", func(t *testing.T, w *world) shape {
			_, err := w.dialer.Dial("tcp", net.JoinHostPort(w.serverHost, "99999"))
			return shapeOf(err, w.serverHost)
		}},
		{"wrong family", func(t *testing.T, w *world) shape {
			_, err := w.dialer.Dial("tcp6", net.JoinHostPort(w.serverHost, "80"))
			return shapeOf(err, w.serverHost)
		}},
		{"listen missing port", func(t *testing.T, w *world) shape {
			_, err := w.lc.Listen(t.Context(), "tcp", w.serverHost)
			return shapeOf(err, w.serverHost)
		}},
		{"listen bad port", func(t *testing.T, w *world) shape {
			_, err := w.lc.Listen(t.Context(), "tcp", net.JoinHostPort(w.serverHost, "99999"))
			return shapeOf(err, w.serverHost)
		}},
		{"listen unknown network", func(t *testing.T, w *world) shape {
			_, err := w.lc.Listen(t.Context(), "tcp7", net.JoinHostPort(w.serverHost, "0"))
			return shapeOf(err, w.serverHost)
		}},
		{"listen wrong family", func(t *testing.T, w *world) shape {
			_, err := w.lc.Listen(t.Context(), "tcp6", net.JoinHostPort(w.serverHost, "0"))
			return shapeOf(err, w.serverHost)
		}},
	}
	ws := worlds(t)
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			want := sc.run(t, &ws[0])
			t.Logf("net: %+v", want)
			for i := range ws[1:] {
				w := &ws[1+i]
				assert.Equal(t, want, sc.run(t, w), w.name)
			}
		})
	}
}
