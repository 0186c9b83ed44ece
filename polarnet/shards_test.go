package polarnet_test

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
	"golang.org/x/net/nettest"

	"github.com/polarnet/polarnet/internal/leakcheck"
	"github.com/polarnet/polarnet/internal/xfer"
	"github.com/polarnet/polarnet/link"
	"github.com/polarnet/polarnet/link/pipe"
	"github.com/polarnet/polarnet/polarnet"
)

// A frame a shard sends on pipe queue i arrives on the peer's queue i. Two
// polarnet stacks on a pipe therefore steer each other perfectly (the port
// rule is symmetric), unless one of them has its queues crossed, as below.

// crossedQueues presents a link's queues in reverse order.
type crossedQueues struct{ link.Link }

func (c crossedQueues) Queues() []link.Queue {
	q := c.Link.Queues()
	out := make([]link.Queue, len(q))
	for i := range q {
		out[len(q)-1-i] = q[i]
	}
	return out
}

func TestShardsSoftwareSteering(t *testing.T) {
	la, lb := pipe.New(pipe.Config{Queues: 2})
	a := newStack(t, la, addrA, addrA6)
	b := newStack(t, crossedQueues{lb}, addrB, addrB6)
	require.Len(t, a.Stats().Shards, 2)
	for _, server := range []netip.Addr{addrB.Addr(), addrB6.Addr()} {
		for range 8 {
			c, s := connPair(t, a, b, server)
			require.NoError(t, xfer.Exchange(c, s, 256<<10))
		}
	}
	for _, st := range []*polarnet.Stack{a, b} {
		stats := st.Stats()
		for i, sh := range stats.Shards {
			assert.NotZero(t, sh.RxFrames, "shard %d received nothing", i)
		}
		assert.NotZero(t, stats.Total.HandoffOut, "the pipe cannot steer: some frames need a hand-off")
		assert.Zero(t, stats.Total.HandoffDrop)
		// A hand-off may still be in its ring when the counters are read.
		assert.Eventually(t, func() bool {
			s := st.Stats().Total
			return s.HandoffOut+s.SharedOut == s.HandoffIn
		}, 5*time.Second, time.Millisecond, "every hand-off arrives")
	}
}

func TestShardsSteeredPipeNeedsNoHandoff(t *testing.T) {
	a, b := newPair(t, pipe.Config{Queues: 2})
	for range 16 {
		c, s := connPair(t, a, b, addrB.Addr())
		require.NoError(t, xfer.Exchange(c, s, 64<<10))
	}
	for _, st := range []*polarnet.Stack{a, b} {
		assert.Zero(t, st.Stats().Total.HandoffOut)
	}
}

func TestShardsConcurrentConnections(t *testing.T) {
	a, b := newPair(t, pipe.Config{Queues: 2})
	ln, err := b.ListenTCP("tcp", netip.AddrPortFrom(addrB.Addr(), 0), 0, net.KeepAliveConfig{})
	require.NoError(t, err)
	defer ln.Close()
	go func() {
		for {
			c, err := ln.AcceptTCP()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				sum, n, err := xfer.Hash(c)
				if err == nil {
					fmt.Fprintf(c, "%x %d", sum, n)
				}
			}()
		}
	}()
	const conns = 100
	var wg sync.WaitGroup
	errs := make(chan error, conns)
	for i := range conns {
		wg.Go(func() {
			ctx := polarnet.WithShard(context.Background(), i)
			c, err := a.DialTCP(ctx, "tcp", netip.AddrPort{}, ln.Addr().(*net.TCPAddr).AddrPort())
			if err != nil {
				errs <- err
				return
			}
			defer c.Close()
			size := int64(1000 * (i + 1))
			if _, err := c.ReadFrom(xfer.Pattern(size, uint64(i))); err != nil {
				errs <- err
				return
			}
			c.CloseWrite()
			want, _, _ := xfer.Hash(xfer.Pattern(size, uint64(i)))
			reply, _, err := readAll(c)
			if err != nil {
				errs <- err
				return
			}
			if reply != fmt.Sprintf("%x %d", want, size) {
				errs <- fmt.Errorf("conn %d: server saw %q", i, reply)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		assert.NoError(t, err)
	}
	for i, sh := range a.Stats().Shards {
		assert.NotZero(t, sh.TxFrames, "shard %d sent nothing: WithShard spreads dials", i)
	}
}

func readAll(c net.Conn) (string, int, error) {
	buf := make([]byte, 0, 128)
	tmp := make([]byte, 128)
	for {
		n, err := c.Read(tmp)
		buf = append(buf, tmp[:n]...)
		if err != nil {
			if err.Error() == "EOF" {
				return string(buf), len(buf), nil
			}
			return string(buf), len(buf), err
		}
	}
}

func TestShardsNetTestConn(t *testing.T) {
	a, b := newPair(t, pipe.Config{Queues: 2})
	nettest.TestConn(t, func() (c1, c2 net.Conn, stop func(), err error) {
		client, srv := connPair(t, a, b, addrB.Addr())
		return client, srv, func() { client.Close(); srv.Close() }, nil
	})
}

func TestShardsUDPAndPing(t *testing.T) {
	a, b := newPair(t, pipe.Config{Queues: 2})
	srv, err := b.ListenUDP("udp", netip.AddrPortFrom(addrB.Addr(), 0))
	require.NoError(t, err)
	defer srv.Close()
	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := srv.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			srv.WriteToUDPAddrPort(buf[:n], from)
		}
	}()
	for i := range 20 {
		c, err := a.DialUDP("udp", netip.AddrPort{}, srv.LocalAddr().(*net.UDPAddr).AddrPort())
		require.NoError(t, err)
		msg := fmt.Sprintf("datagram %d", i)
		_, err = c.Write([]byte(msg))
		require.NoError(t, err)
		buf := make([]byte, 100)
		n, err := c.Read(buf)
		require.NoError(t, err)
		assert.Equal(t, msg, string(buf[:n]))
		c.Close()
	}
}

func TestShardsCloseLeavesNothingBehind(t *testing.T) {
	snap := leakcheck.Take()
	func() {
		a, b := newPair(t, pipe.Config{Queues: 2})
		for range 4 {
			c, s := connPair(t, a, b, addrB.Addr())
			require.NoError(t, xfer.Exchange(c, s, 64<<10))
		}
		require.NoError(t, a.Close())
		require.NoError(t, b.Close())
	}()
	snap.Check(t)
}

func TestPinnedBusyPollers(t *testing.T) {
	a, b := newPair(t, pipe.Config{Queues: 2}, func(c *polarnet.Config) {
		c.Poll = polarnet.PollBusy
		c.CPUs = []int{0}
	})
	c, s := connPair(t, a, b, addrB.Addr())
	require.NoError(t, xfer.Exchange(c, s, 1<<20))
	_, err := polarnet.New(polarnet.Config{Link: func() link.Link { l, _ := pipe.New(pipe.Config{}); return l }(), Addrs: []netip.Prefix{addrA}, CPUs: []int{4096}})
	assert.ErrorContains(t, err, "CPU 4096")
}
