package rdma

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/polarnet/polarnet/link"
)

func TestConfigFromParams(t *testing.T) {
	env := map[string]string{link.EnvAddr: "198.18.0.2/24, fd00:198:18::2/64"}
	cfg, err := configFromParams(link.Params{Device: "enp5s0f0np0", Queues: 4, MTU: 9000}, func(k string) string { return env[k] })
	require.NoError(t, err)
	assert.Equal(t, Config{Netdev: "enp5s0f0np0", Queues: 4, MTU: 9000,
		Addrs: []netip.Addr{netip.MustParseAddr("198.18.0.2"), netip.MustParseAddr("fd00:198:18::2")}}, cfg)

	cfg, err = configFromParams(link.Params{Options: map[string]string{
		"rdma-device": "mlx5_1", "port": "2", "mac": "02:00:00:00:00:01", "addrs": "198.18.0.5+198.18.0.6",
		"rx-ring": "1024", "tx-ring": "256", "rss": "off",
	}}, func(k string) string { return env[k] })
	require.NoError(t, err)
	assert.Equal(t, "mlx5_1", cfg.Device)
	assert.Equal(t, 2, cfg.Port)
	assert.Equal(t, "02:00:00:00:00:01", cfg.MAC.String())
	assert.Equal(t, []netip.Addr{netip.MustParseAddr("198.18.0.5"), netip.MustParseAddr("198.18.0.6")}, cfg.Addrs, "the option wins over POLARNET_ADDR")
	assert.Equal(t, 1024, cfg.RxRing)
	assert.Equal(t, 256, cfg.TxRing)
	assert.True(t, cfg.DisableRSS)

	for _, opts := range []map[string]string{{"port": "x"}, {"mac": "nope"}, {"rss": "maybe"}, {"addrs": "300.1.1.1"}, {"color": "blue"}} {
		_, err := configFromParams(link.Params{Options: opts}, nil)
		assert.Error(t, err, "%v", opts)
	}
}
