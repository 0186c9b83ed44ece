package polarnet_test

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
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"

	"github.com/polarnet/polarnet/internal/xfer"
	"github.com/polarnet/polarnet/link"
	"github.com/polarnet/polarnet/link/pipe"
	"github.com/polarnet/polarnet/polarnet"
)

func TestMaxConns(t *testing.T) {
	a, b := newPair(t, pipe.Config{}, func(c *polarnet.Config) { c.MaxConns = 2 })
	ln, err := b.ListenTCP("tcp", netip.AddrPortFrom(addrB.Addr(), 0), 0, net.KeepAliveConfig{})
	require.NoError(t, err)
	defer ln.Close()
	server := ln.Addr().(*net.TCPAddr).AddrPort()

	var conns []*polarnet.TCPConn
	for range 2 {
		c, err := a.DialTCP(t.Context(), "tcp", netip.AddrPort{}, server)
		require.NoError(t, err)
		conns = append(conns, c)
	}
	_, err = a.DialTCP(t.Context(), "tcp", netip.AddrPort{}, server)
	var op *net.OpError
	require.ErrorAs(t, err, &op)
	assert.Equal(t, "dial", op.Op)
	assert.ErrorIs(t, err, syscall.EMFILE)

	// b holds at most two: the third waits in the backlog, Accept says EMFILE.
	for range 2 {
		c, err := ln.Accept()
		require.NoError(t, err)
		defer c.Close()
	}
	conns[0].Close()
	c3, err := a.DialTCP(t.Context(), "tcp", netip.AddrPort{}, server)
	require.NoError(t, err, "a closed conn frees its slot")
	defer c3.Close()
	_, err = ln.Accept()
	assert.ErrorIs(t, err, syscall.EMFILE)
	var ne net.Error
	require.ErrorAs(t, err, &ne)
}

func TestShutdownLetsConnsFinish(t *testing.T) {
	a, b := newPair(t, pipe.Config{})
	c, s := connPair(t, a, b, addrB.Addr())
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		done <- b.Shutdown(ctx)
	}()
	// The listener is gone, the established conn still works.
	require.Eventually(t, func() bool {
		_, err := a.DialTCP(t.Context(), "tcp", netip.AddrPort{}, netip.AddrPortFrom(addrB.Addr(), 1))
		return errors.Is(err, syscall.ECONNREFUSED)
	}, 5*time.Second, 10*time.Millisecond)
	require.NoError(t, xfer.Exchange(c, s, 1<<20))
	s.Close()
	require.NoError(t, <-done)

	// With a deadline, conns left open are reset.
	a2, b2 := newPair(t, pipe.Config{})
	c2, _ := connPair(t, a2, b2, addrB.Addr())
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	assert.ErrorIs(t, b2.Shutdown(ctx), context.DeadlineExceeded)
	require.NoError(t, c2.SetReadDeadline(time.Now().Add(5*time.Second)))
	_, err := c2.Read(make([]byte, 1))
	assert.ErrorIs(t, err, syscall.ECONNRESET, "the peer of a conn reset at shutdown sees the reset")
}

func TestMartianSourcesAreDropped(t *testing.T) {
	la, raw := pipe.New(pipe.Config{})
	s := newStack(t, la, addrA, addrA6)
	q := raw.Queues()[0]
	udp := func(src string) []byte {
		frame := make([]byte, header.EthernetMinimumSize+header.IPv4MinimumSize+header.UDPMinimumSize)
		header.Ethernet(frame).Encode(&header.EthernetFields{DstAddr: tcpip.LinkAddress(la.Info().MAC), Type: header.IPv4ProtocolNumber})
		ip := header.IPv4(frame[header.EthernetMinimumSize:])
		ip.Encode(&header.IPv4Fields{
			TotalLength: uint16(len(frame) - header.EthernetMinimumSize), Protocol: uint8(header.UDPProtocolNumber), TTL: 64,
			SrcAddr: tcpip.AddrFromSlice(netip.MustParseAddr(src).AsSlice()), DstAddr: tcpip.AddrFromSlice(addrA.Addr().AsSlice()),
		})
		ip.SetChecksum(^ip.CalculateChecksum())
		header.UDP(ip[header.IPv4MinimumSize:]).Encode(&header.UDPFields{SrcPort: 9, DstPort: 9, Length: header.UDPMinimumSize})
		return frame
	}
	martians := []string{"0.0.0.0", "127.0.0.1", "224.0.0.1", "255.255.255.255", "240.0.0.1", "198.18.0.255", addrA.Addr().String()}
	for _, src := range append(martians, "198.18.0.9") {
		n, err := q.WriteBurst([]link.TxFrame{{Segs: [][]byte{udp(src)}}})
		require.NoError(t, err)
		require.Equal(t, 1, n)
	}
	require.Eventually(t, func() bool { return s.Stats().Total.RxFrames == uint64(len(martians)+1) }, 5*time.Second, time.Millisecond)
	assert.Equal(t, uint64(len(martians)), s.Stats().Total.RxMartian)
}
