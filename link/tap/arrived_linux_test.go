package tap

import (
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/polarnet/polarnet/link"
)

// TestArrivedCount checks the count of frames the filter program lets into
// a queue's ring: a burst reads what it says is queued, and the queue comes
// back to the ring's contents from a count ahead of them (frames dropped
// after the program) and from one behind them (a frame it missed, which
// then wakes WaitRead and is read). Without the count, bursts read all.
func TestArrivedCount(t *testing.T) {
	ns := newNS(t)
	// Only the datagrams below reach the device: no IPv6 neighbour
	// discovery, and plug's neighbour entry needs no ARP.
	sysctl(t, ns, "net/ipv6/conf/default/disable_ipv6", "1")
	sysctl(t, ns, "net/ipv6/conf/all/disable_ipv6", "1")
	l := openTAP(t, Config{Queues: 1})
	plug(t, ns, l, 8)
	q := l.queues[0].(*queue)
	require.NotNil(t, q.rx.arrived, "the count is mapped")
	frames := make([]link.RxFrame, 16)
	for i := range frames {
		frames[i].Buf = make([]byte, l.Info().RxFrameSize)
	}
	arrived := q.rx.arrived
	count := func() uint64 { return atomic.LoadUint64(arrived) }
	send := func(n int) {
		before := count()
		for range n {
			sendUDP(t, ns, 0, netip.AddrPortFrom(linkAddr(8), 9), []byte("count"))
		}
		for deadline := time.Now().Add(5 * time.Second); count() < before+uint64(n) && time.Now().Before(deadline); {
			time.Sleep(time.Millisecond)
		}
		require.Equal(t, before+uint64(n), count(), "frames counted")
	}
	read := func() int {
		n, err := q.ReadBurst(frames)
		require.NoError(t, err)
		return n
	}

	q.rx.verify = true
	read() // whatever came before
	send(5)
	assert.Equal(t, 5, read(), "a burst reads what the count says")
	assert.Equal(t, count(), q.rx.seen)
	assert.Zero(t, read(), "nothing queued")

	// Ahead: three frames counted that the ring never got.
	q.rx.seen -= 3
	assert.Zero(t, read(), "the ring is empty")
	assert.Equal(t, count(), q.rx.seen, "counted again from the ring")
	send(2)
	assert.Equal(t, 2, read())

	// Behind: a frame in the ring the count does not show.
	send(1)
	q.rx.seen = count()
	assert.Zero(t, read(), "the count shows nothing")
	guard := time.AfterFunc(5*time.Second, q.Interrupt)
	defer guard.Stop()
	require.NoError(t, q.WaitRead())
	assert.Equal(t, 1, read(), "read after the wake-up")
	assert.Equal(t, count(), q.rx.seen)
	send(3)
	assert.Equal(t, 3, read())

	// Without the count (a kernel that maps no arrays) a burst reads
	// until the ring is empty.
	q.rx.arrived = nil
	send(2)
	assert.Equal(t, 2, read())
	assert.Zero(t, read())
}
