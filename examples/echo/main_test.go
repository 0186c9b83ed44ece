package main

import (
	"bytes"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/polarnet/polarnet/link/linktest"
	"github.com/polarnet/polarnet/polarnet"
)

// TestEchoOnDefaultStack runs the unchanged example code on a polarnet stack
// made the default, as POLARNET_* variables would.
func TestEchoOnDefaultStack(t *testing.T) {
	la, lb := linktest.Pipe(linktest.PipeConfig{})
	a, err := polarnet.New(polarnet.Config{Link: la, Addrs: []netip.Prefix{netip.MustParsePrefix("198.18.0.1/24")}})
	require.NoError(t, err)
	defer a.Close()
	b, err := polarnet.New(polarnet.Config{Link: lb, Addrs: []netip.Prefix{netip.MustParsePrefix("198.18.0.2/24")}})
	require.NoError(t, err)
	defer b.Close()

	// One default stack per process: the server runs on b through
	// SetDefault, the client on a through the stack it is given.
	polarnet.SetDefault(b)
	defer polarnet.SetDefault(nil)
	go serve("198.18.0.2:7777")
	server := netip.MustParseAddrPort("198.18.0.2:7777")
	require.Eventually(t, func() bool {
		c, err := a.DialTCP(t.Context(), "tcp", netip.AddrPort{}, server)
		if err == nil {
			c.Close()
		}
		return err == nil
	}, 5*time.Second, 10*time.Millisecond, "server listening on b")
	polarnet.SetDefault(a)
	var out bytes.Buffer
	require.NoError(t, client(server.String(), strings.NewReader("hello\npolarnet\n"), &out))
	assert.Equal(t, "hello\npolarnet\n", out.String())
}
