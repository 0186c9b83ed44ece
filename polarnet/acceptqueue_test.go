package polarnet_test

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/polarnet/polarnet/internal/leakcheck"
	"github.com/polarnet/polarnet/internal/xfer"
	"github.com/polarnet/polarnet/link/pipe"
	"github.com/polarnet/polarnet/polarnet"
)

// TestShardsShareOneAcceptQueue listens with a backlog of 2 on two shards
// without accepting: three connections queue, whichever shards they reach,
// and further connection requests are dropped on every shard until Accept
// makes room. Each shard's listener holds two: the third to reach one
// shard finds it full unless one was moved out to the spill; a fourth
// would be queued on the other shard without the poller's check.
func TestShardsShareOneAcceptQueue(t *testing.T) {
	for _, shards := range [][]int{{0, 1, 0}, {0, 0, 0}} {
		t.Run(fmt.Sprint(shards), func(t *testing.T) { shareOneAcceptQueue(t, shards) })
	}
}

// shareOneAcceptQueue dials the three connections to queue on shards.
func shareOneAcceptQueue(t *testing.T, shards []int) {
	snap := leakcheck.Take()
	func() {
		a, b := newPair(t, pipe.Config{Queues: 2})
		ln, err := b.ListenTCP("tcp", netip.AddrPortFrom(addrB.Addr(), 0), 2, net.KeepAliveConfig{})
		require.NoError(t, err)
		defer ln.Close()
		addr := ln.Addr().(*net.TCPAddr).AddrPort()
		dial := func(shard int, timeout time.Duration) (*polarnet.TCPConn, error) {
			ctx, cancel := context.WithTimeout(polarnet.WithShard(t.Context(), shard), timeout)
			defer cancel()
			return a.DialTCP(ctx, "tcp", netip.AddrPort{}, addr)
		}
		var clients []*polarnet.TCPConn
		defer func() {
			for _, c := range clients {
				c.Close()
			}
		}()
		// The pipe steers a's shard i to b's shard i.
		for i, shard := range shards {
			c, err := dial(shard, 10*time.Second)
			require.NoError(t, err)
			clients = append(clients, c)
			require.Eventually(t, func() bool { return polarnet.Queued(ln) == i+1 }, 10*time.Second, time.Millisecond)
		}
		for shard := range 2 {
			_, err := dial(shard, 300*time.Millisecond)
			assert.ErrorIs(t, err, context.DeadlineExceeded, "shard %d queued a fourth", shard)
		}
		assert.Equal(t, 3, polarnet.Queued(ln))
		assert.NotZero(t, protocolCounter(t, b, "TCP.ListenOverflowSynDrop"))

		// Accepting one makes room for one more, on either shard.
		var servers []*polarnet.TCPConn
		defer func() {
			for _, s := range servers {
				s.Close()
			}
		}()
		accept := func() {
			require.NoError(t, ln.SetDeadline(time.Now().Add(10*time.Second)))
			s, err := ln.AcceptTCP()
			require.NoError(t, err)
			servers = append(servers, s)
		}
		accept()
		c, err := dial(1, 10*time.Second)
		require.NoError(t, err)
		clients = append(clients, c)
		for range 3 {
			accept()
		}
		assert.Equal(t, 0, polarnet.Queued(ln))
		// Every connection queued works, byte for byte.
		for _, c := range clients {
			i := 0
			for i < len(servers) && servers[i].RemoteAddr().String() != c.LocalAddr().String() {
				i++
			}
			require.Less(t, i, len(servers), "%v was not accepted", c.LocalAddr())
			assert.NoError(t, xfer.Exchange(c, servers[i], 64<<10))
		}
		for _, st := range []*polarnet.Stack{a, b} {
			require.NoError(t, st.Close())
		}
	}()
	snap.Check(t)
}

// TestListenerCloseResetsTheSpill: connections moved to the spill and
// never accepted are reset when the listener closes, as gVisor resets those
// in a listener's queue, and nothing is left behind.
func TestListenerCloseResetsTheSpill(t *testing.T) {
	snap := leakcheck.Take()
	func() {
		a, b := newPair(t, pipe.Config{Queues: 2})
		ln, err := b.ListenTCP("tcp", netip.AddrPortFrom(addrB.Addr(), 0), 2, net.KeepAliveConfig{})
		require.NoError(t, err)
		addr := ln.Addr().(*net.TCPAddr).AddrPort()
		var clients []*polarnet.TCPConn
		for range 2 { // shard 0's listener holds two: one goes to the spill
			c, err := a.DialTCP(polarnet.WithShard(t.Context(), 0), "tcp", netip.AddrPort{}, addr)
			require.NoError(t, err)
			defer c.Close()
			clients = append(clients, c)
		}
		require.Eventually(t, func() bool { return polarnet.Spilled(ln) == 1 }, 10*time.Second, time.Millisecond)
		require.NoError(t, ln.Close())
		for _, c := range clients {
			require.NoError(t, c.SetReadDeadline(time.Now().Add(10*time.Second)))
			_, err := c.Read(make([]byte, 1))
			assert.ErrorIs(t, err, syscall.ECONNRESET)
		}
		for _, st := range []*polarnet.Stack{a, b} {
			require.NoError(t, st.Close())
		}
	}()
	snap.Check(t)
}
