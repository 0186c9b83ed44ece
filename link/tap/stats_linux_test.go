package tap_test

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/polarnet/polarnet/internal/taptopo"
	"github.com/polarnet/polarnet/polarnet"
)

// The kernel's counters of the TAP device, read in the namespace the
// device was moved to, match what the engine counted: every frame the
// kernel queued to the link was read, every frame written was taken.
func TestLinkStatsMatchEngine(t *testing.T) {
	topo := taptopo.New(t, taptopo.Options{})
	sock, err := topo.Stack.ListenUDP("udp4", netip.AddrPortFrom(taptopo.Stack4, 9000))
	require.NoError(t, err)
	defer sock.Close()

	const n = 100
	require.NoError(t, topo.NS.Do(func() error {
		c, err := net.Dial("udp4", netip.AddrPortFrom(taptopo.Stack4, 9000).String())
		if err != nil {
			return err
		}
		defer c.Close()
		for range n {
			if _, err := c.Write([]byte("count me")); err != nil {
				return err
			}
		}
		return nil
	}))
	buf := make([]byte, 64)
	for range n {
		require.NoError(t, sock.SetReadDeadline(time.Now().Add(5*time.Second)))
		_, err := sock.Read(buf)
		require.NoError(t, err)
	}

	var st polarnet.Stats
	require.Eventually(t, func() bool {
		st = topo.Stack.Stats()
		if len(st.Link) != 1 {
			return false
		}
		l := st.Link[0]
		return l.RxFrames == st.Total.RxFrames && l.TxFrames == st.Total.TxFrames
	}, 5*time.Second, 10*time.Millisecond, "link %+v, engine rx %d tx %d", st.Link, st.Total.RxFrames, st.Total.TxFrames)
	l := st.Link[0]
	assert.Equal(t, -1, l.Queue, "TAP counts per device")
	assert.GreaterOrEqual(t, l.RxFrames, uint64(n))
	assert.Equal(t, st.Total.RxBytes, l.RxBytes)
	assert.Zero(t, l.RxRingFull)
	assert.Zero(t, l.TxDropped)
	assert.Zero(t, l.PoolSize, "TAP has no buffer pool")
}
