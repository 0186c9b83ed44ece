//go:build dpdk && linux && cgo

package dpdk

import (
	"encoding/binary"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/polarnet/polarnet/link"
	"github.com/polarnet/polarnet/link/linktest"
)

// TestTinyPool runs a link on a mempool too small for its traffic: net_tap
// keeps an mbuf per RX descriptor, the TX queue its stash, and a burst held
// by WaitRead takes the rest, so the PMD runs out while receiving. The
// shortage is counted, traffic goes on once mbufs come back, and at rest
// every mbuf is where it belongs: no leak.
func TestTinyPool(t *testing.T) {
	const (
		rxd    = 16
		pool   = 56
		frames = 100
	)
	tt := newTapTopo(t, Config{PoolSize: pool, RxDescriptors: rxd, TxDescriptors: rxd, Wait: WaitSleep, DisableOffloads: true}, false)
	l := tt.Link
	stash := l.Setup().TxStash
	require.Equal(t, pool/4, stash)
	var p *linktest.PacketSocketLink
	require.NoError(t, tt.NS.Do(func() (err error) {
		p, err = linktest.OpenPacketSocket(tt.Iface)
		return err
	}))
	t.Cleanup(func() { p.Close() })

	frame := func(dst, src net.HardwareAddr, seq int) []byte {
		b := make([]byte, 600)
		copy(b, dst)
		copy(b[6:], src)
		binary.BigEndian.PutUint16(b[12:], 0x88b5)
		binary.BigEndian.PutUint32(b[14:], uint32(seq))
		return b
	}
	send := func(to link.Queue, dst, src net.HardwareAddr, n int) {
		deadline := time.Now().Add(10 * time.Second) // bounds a queue that never drains
		for i := 0; i < n; {
			require.True(t, time.Now().Before(deadline), "%d of %d frames sent", i, n)
			batch := make([]link.TxFrame, min(16, n-i))
			for j := range batch {
				batch[j] = link.TxFrame{Segs: [][]byte{frame(dst, src, i+j)}}
			}
			sent, err := to.WriteBurst(batch)
			require.NoError(t, err)
			i += sent
			if sent < len(batch) {
				time.Sleep(time.Millisecond)
			}
		}
	}
	// receive reads tagged frames from q until want arrived, or nothing
	// did for 300ms.
	receive := func(q link.Queue, want int) int {
		bufs := make([]link.RxFrame, 32)
		for i := range bufs {
			bufs[i].Buf = make([]byte, 2048)
		}
		got := 0
		deadline := time.Now().Add(300 * time.Millisecond)
		for got < want && time.Now().Before(deadline) {
			n, err := q.ReadBurst(bufs)
			require.NoError(t, err)
			for _, f := range bufs[:n] {
				if f.Len >= 14 && binary.BigEndian.Uint16(f.Buf[12:]) == 0x88b5 {
					got++
				}
			}
			if n > 0 {
				deadline = time.Now().Add(300 * time.Millisecond)
			}
			if n == 0 {
				time.Sleep(100 * time.Microsecond)
			}
		}
		return got
	}

	q := l.Queues()[0]
	pq := p.Queues()[0]
	// The kernel queues the frames on the TAP; WaitRead's look at the
	// queue receives a burst and holds it, emptying the pool.
	send(pq, l.Info().MAC, p.Info().MAC, frames)
	time.Sleep(50 * time.Millisecond)
	require.NoError(t, q.WaitRead())
	st := l.Stats()
	assert.NotZero(t, st.RxNoMbuf, "the PMD ran out of mbufs and counted it")
	assert.Equal(t, pool, st.PoolInUse, "the held burst took every mbuf")
	// Every burst of more than the free mbufs runs short again.
	got := receive(q, frames)
	assert.Equal(t, frames-int(l.Stats().RxNoMbuf), got, "every frame the PMD had mbufs for arrived")

	// Both ways work again once the burst is released.
	send(q, p.Info().MAC, l.Info().MAC, 4*frames)
	assert.Equal(t, 4*frames, receive(pq, 4*frames))
	send(pq, l.Info().MAC, p.Info().MAC, 16) // fewer than the free mbufs
	assert.Equal(t, 16, receive(q, 16))

	st = l.Stats()
	assert.Equal(t, rxd+stash, st.PoolInUse, "at rest the PMD holds its RX descriptors' mbufs and the TX queue its stash: nothing leaked")
	t.Logf("%+v", st)
}
