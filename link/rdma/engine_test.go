package rdma

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/polarnet/polarnet/internal/xfer"
	"github.com/polarnet/polarnet/polarnet"
)

// TestEngineOverFakeDevices runs two polarnet stacks of two shards each on
// links over fake devices, sharing their interfaces' MACs with the kernel
// (flow rules by address, ARP copied): TCP connections between them carry
// data both ways, and since the links steer with RSS and the dialer picks
// ports whose hash lands on its own shard, no frame is handed between
// shards in software.
func TestEngineOverFakeDevices(t *testing.T) {
	w := newFakeWire(true)
	addrA, addrB := netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("198.18.0.2")
	la := newFakeLink(t, w, 1, Config{Queues: 2, Addrs: []netip.Addr{addrA}}, nil)
	lb := newFakeLink(t, w, 2, Config{Queues: 2, Addrs: []netip.Addr{addrB}}, nil)
	sa, err := polarnet.New(polarnet.Config{Link: la.Link, Addrs: []netip.Prefix{netip.PrefixFrom(addrA, 24)}})
	require.NoError(t, err)
	t.Cleanup(func() { sa.Close() })
	sb, err := polarnet.New(polarnet.Config{Link: lb.Link, Addrs: []netip.Prefix{netip.PrefixFrom(addrB, 24)}})
	require.NoError(t, err)
	t.Cleanup(func() { sb.Close() })

	ln, err := sb.ListenTCP("tcp", netip.AddrPortFrom(addrB, 7000), 0, net.KeepAliveConfig{})
	require.NoError(t, err)
	defer ln.Close()
	const conns, size = 8, 256 << 10
	var wg sync.WaitGroup
	errs := make(chan error, 2*conns)
	for range conns {
		wg.Add(2)
		go func() {
			defer wg.Done()
			c, err := ln.AcceptTCP()
			if err != nil {
				errs <- err
				return
			}
			defer c.Close()
			// Echo what arrives, then half-close.
			if _, err := c.ReadFrom(c); err != nil {
				errs <- err
				return
			}
			errs <- c.CloseWrite()
		}()
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			c, err := sa.DialTCP(ctx, "tcp", netip.AddrPort{}, netip.AddrPortFrom(addrB, 7000))
			if err != nil {
				errs <- err
				return
			}
			defer c.Close()
			errs <- echo(c, size)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	for name, st := range map[string]polarnet.Stats{"dialer": sa.Stats(), "listener": sb.Stats()} {
		assert.Zero(t, st.Total.HandoffOut, "%s: frames handed between shards in software", name)
		for i, sh := range st.Shards {
			assert.NotZero(t, sh.RxFrames, "%s: shard %d received nothing: no spread", name, i)
		}
	}
	assert.Zero(t, lb.dev.dropped, "flow control: nothing dropped")
}

// echo writes size bytes of a pattern to c and reads them back.
func echo(c *polarnet.TCPConn, size int64) error {
	want, _, _ := xfer.Hash(xfer.Pattern(size, 7))
	done := make(chan error, 1)
	go func() {
		sum, n, err := xfer.Hash(c)
		if err == nil && (n != size || sum != want) {
			err = fmt.Errorf("echoed %d of %d bytes, hash match %v", n, size, sum == want)
		}
		done <- err
	}()
	if _, err := c.ReadFrom(xfer.Pattern(size, 7)); err != nil {
		return err
	}
	if err := c.CloseWrite(); err != nil {
		return err
	}
	return <-done
}
