package rdma

import (
	"net"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/polarnet/polarnet/internal/toeplitz"
)

func TestConfigCheck(t *testing.T) {
	c, err := Config{}.check()
	require.NoError(t, err)
	assert.Equal(t, 1, c.Queues)
	assert.Equal(t, DefaultRing, c.RxRing)
	assert.Equal(t, DefaultRing, c.TxRing)
	assert.Equal(t, toeplitz.MicrosoftKey[:], c.RSSKey)

	for name, cfg := range map[string]Config{
		"queues":    {Queues: maxQueues + 1},
		"ring":      {RxRing: 8},
		"mtu":       {MTU: 10000},
		"key":       {RSSKey: make([]byte, 52)},
		"multicast": {MAC: net.HardwareAddr{1, 0, 0, 0, 0, 1}},
		"addr":      {Addrs: []netip.Addr{netip.MustParseAddr("224.0.0.1")}},
		"port":      {Port: -1},
	} {
		_, err := cfg.check()
		assert.Error(t, err, name)
	}
}

func TestConfigPlan(t *testing.T) {
	port := fakePort("mlx5_0", macN(2), 1500)
	caps := deviceCaps{maxQueueDepth: 1024, maxCQE: 4096, rss: true, maxRSSTable: 64, maxWQs: 8, rxChecksum: true}
	plan := func(cfg Config) (*setupPlan, error) {
		c, err := cfg.check()
		require.NoError(t, err)
		return c.plan(port, caps)
	}
	_, err := plan(Config{})
	assert.ErrorContains(t, err, "needs its addresses", "sharing the MAC takes addresses")
	p, err := plan(Config{MAC: macN(0x82)})
	require.NoError(t, err, "a MAC of its own needs none")
	assert.Nil(t, p.rss, "one queue: no spread")
	assert.Equal(t, 1536, p.frameSize, "1500 + Ethernet + VLAN, rounded to 64")

	p, err = plan(Config{Queues: 3, Addrs: []netip.Addr{stack4}})
	require.NoError(t, err)
	require.NotNil(t, p.rss)
	assert.Len(t, p.rss.table, 64, "bounded by the device")
	assert.Equal(t, []int{0, 1, 2, 0}, p.rss.table[:4])
	assert.Equal(t, p.rxBuf(1, 0), uint32(2*DefaultRing))
	assert.Equal(t, p.txBuf(1, 0), uint32(3*DefaultRing))

	_, err = plan(Config{Queues: 9, Addrs: []netip.Addr{stack4}})
	assert.ErrorContains(t, err, "at most 8 receive work queues")
	_, err = plan(Config{RxRing: 2048, Addrs: []netip.Addr{stack4}})
	assert.ErrorContains(t, err, "at most 1024 work requests")
	_, err = plan(Config{MTU: 9000, Addrs: []netip.Addr{stack4}})
	assert.ErrorContains(t, err, "raise the interface's MTU")
	caps.rss = false
	p, err = plan(Config{Queues: 2, Addrs: []netip.Addr{stack4}})
	require.NoError(t, err)
	assert.Nil(t, p.rss, "no RSS on the device: queue 0 receives")
	_, err = Config{}.plan(Port{Device: "x"}, caps)
	assert.ErrorContains(t, err, "no Ethernet address")
}

func TestPlanRSSTable(t *testing.T) {
	for _, c := range []struct{ queues, max, want int }{
		{2, 0, 128}, {2, 512, 128}, {3, 16, 16}, {200, 0, 256}, {4, 2, 4},
	} {
		r := planRSS(toeplitz.MicrosoftKey[:], c.queues, c.max)
		assert.Len(t, r.table, c.want, "%d queues, device max %d", c.queues, c.max)
	}
}
