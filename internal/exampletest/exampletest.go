// Package exampletest runs the examples' unchanged code on polarnet stacks
// made the default, as the POLARNET_* variables would make them.
package exampletest

import (
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/polarnet/polarnet/link"
	"github.com/polarnet/polarnet/link/pipe"
	"github.com/polarnet/polarnet/polarnet"
)

// ServerThenClient joins two stacks by a pipe, starts serve on the server
// stack (198.18.0.2) as the default stack, waits until it listens on port,
// then makes the client stack (198.18.0.1) the default for the rest of the
// test. A process has one default stack, hence the switch. It returns the
// server's address.
func ServerThenClient(t *testing.T, port uint16, serve func(addr string) error) netip.AddrPort {
	la, lb := pipe.New(pipe.Config{})
	client := newStack(t, la, "198.18.0.1/24")
	server := newStack(t, lb, "198.18.0.2/24")
	addr := netip.AddrPortFrom(netip.MustParseAddr("198.18.0.2"), port)

	polarnet.SetDefault(server)
	t.Cleanup(func() { polarnet.SetDefault(nil) })
	go serve(addr.String())
	require.Eventually(t, func() bool {
		c, err := client.DialTCP(t.Context(), "tcp", netip.AddrPort{}, addr)
		if err == nil {
			c.Close()
		}
		return err == nil
	}, 5*time.Second, 10*time.Millisecond, "server listening on %v", addr)
	polarnet.SetDefault(client)
	return addr
}

func newStack(t *testing.T, l link.Link, prefix string) *polarnet.Stack {
	st, err := polarnet.New(polarnet.Config{Link: l, Addrs: []netip.Prefix{netip.MustParsePrefix(prefix)}})
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	return st
}
