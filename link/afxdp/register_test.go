package afxdp

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/polarnet/polarnet/link"
)

func TestConfigFromParams(t *testing.T) {
	env := map[string]string{link.EnvAddr: "198.18.0.2/24,fd00:198:18::2/64"}
	cfg, err := configFromParams(link.Params{
		Device: "eth9", Queues: 2, MTU: 1400,
		Options: map[string]string{"filter": "tcp", "mode": "native", "zerocopy": "off", "frame": "2048", "ring": "512", "frames": "4096", "offloads": "off"},
	}, func(k string) string { return env[k] })
	require.NoError(t, err)
	assert.Equal(t, Config{
		Interface: "eth9", Queues: 2, MTU: 1400,
		Addresses: []netip.Prefix{netip.MustParsePrefix("198.18.0.2/24"), netip.MustParsePrefix("fd00:198:18::2/64")},
		Filter:    FilterTCP, Mode: ModeNative, ZeroCopy: ZeroCopyOff, FrameSize: 2048, RingSize: 512, Frames: 4096,
		DisableOffloads: true,
	}, cfg)

	cfg, err = configFromParams(link.Params{Device: "eth9", Options: map[string]string{"addrs": "198.18.0.3/24"}}, func(k string) string { return env[k] })
	require.NoError(t, err)
	assert.Equal(t, []netip.Prefix{netip.MustParsePrefix("198.18.0.3/24")}, cfg.Addresses)

	for _, opts := range []map[string]string{{"filter": "udp"}, {"mode": "x"}, {"zerocopy": "on"}, {"ring": "-1"}, {"addrs": "nope"}, {"colour": "blue"}, {"offloads": "maybe"}} {
		_, err := configFromParams(link.Params{Options: opts}, func(string) string { return "" })
		assert.Error(t, err, "%v", opts)
	}
}
