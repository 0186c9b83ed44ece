package polarnet_test

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/polarnet/polarnet/link"
	"github.com/polarnet/polarnet/link/pipe"
	"github.com/polarnet/polarnet/polarnet"
)

func envOf(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestParseEnv(t *testing.T) {
	ec, err := polarnet.ParseEnv(envOf(nil))
	require.NoError(t, err)
	assert.Equal(t, "", ec.Kind, "nothing set means the kernel")

	ec, err = polarnet.ParseEnv(envOf(map[string]string{
		"POLARNET_LINK":         "tap",
		"POLARNET_DEVICE":       "tap0",
		"POLARNET_QUEUES":       "2",
		"POLARNET_MTU":          "9000",
		"POLARNET_LINK_OPTIONS": "offloads=off, x = y",
		"POLARNET_ADDR":         "198.18.0.2/24, fd00::2/64",
		"POLARNET_GATEWAY":      "198.18.0.1,fd00::1",
		"POLARNET_DNS":          "198.18.0.53, [fd00::53]:5353",
		"POLARNET_POLL":         "busy",
		"POLARNET_FALLBACK":     "fail",
	}))
	require.NoError(t, err)
	assert.Equal(t, "tap", ec.Kind)
	assert.Equal(t, link.Params{Device: "tap0", Queues: 2, MTU: 9000, Options: map[string]string{"offloads": "off", "x": "y"}}, ec.Params)
	assert.Equal(t, []netip.Prefix{netip.MustParsePrefix("198.18.0.2/24"), netip.MustParsePrefix("fd00::2/64")}, ec.Config.Addrs)
	assert.Equal(t, netip.MustParseAddr("198.18.0.1"), ec.Config.Gateway4)
	assert.Equal(t, netip.MustParseAddr("fd00::1"), ec.Config.Gateway6)
	assert.Equal(t, []netip.AddrPort{netip.MustParseAddrPort("198.18.0.53:53"), netip.MustParseAddrPort("[fd00::53]:5353")}, ec.Config.DNS)
	assert.Equal(t, polarnet.PollBusy, ec.Config.Poll)
	assert.Equal(t, polarnet.FallbackFail, ec.Fallback)

	for name, env := range map[string]map[string]string{
		"no address":   {"POLARNET_LINK": "tap"},
		"bad address":  {"POLARNET_LINK": "tap", "POLARNET_ADDR": "198.18.0.2"},
		"bad queues":   {"POLARNET_LINK": "tap", "POLARNET_ADDR": "198.18.0.2/24", "POLARNET_QUEUES": "-1"},
		"bad poll":     {"POLARNET_LINK": "tap", "POLARNET_ADDR": "198.18.0.2/24", "POLARNET_POLL": "spin"},
		"bad fallback": {"POLARNET_FALLBACK": "maybe"},
		"bad options":  {"POLARNET_LINK": "tap", "POLARNET_ADDR": "198.18.0.2/24", "POLARNET_LINK_OPTIONS": "novalue"},
	} {
		_, err := polarnet.ParseEnv(envOf(env))
		assert.Error(t, err, name)
	}
}

func TestOpenLinkRegistry(t *testing.T) {
	_, err := link.Open("no-such-link", link.Params{})
	assert.ErrorIs(t, err, link.ErrNotSupported)
	assert.ErrorContains(t, err, "no-such-link")

	var got link.Params
	link.Register("test-pipe", func(p link.Params) (link.Link, error) {
		got = p
		a, _ := pipe.New(pipe.Config{MTU: p.MTU})
		return a, nil
	})
	l, err := link.Open("test-pipe", link.Params{MTU: 9000})
	require.NoError(t, err)
	defer l.Close()
	assert.Equal(t, 9000, got.MTU)
	assert.Equal(t, 9000, l.Info().MTU)

	link.Register("test-broken", func(link.Params) (link.Link, error) {
		return nil, errors.New("no such device")
	})
	_, err = link.Open("test-broken", link.Params{})
	assert.ErrorContains(t, err, "no such device")
}

func TestConfigValidation(t *testing.T) {
	for name, mutate := range map[string]func(*polarnet.Config){
		"no link":         func(c *polarnet.Config) { c.Link = nil },
		"no address":      func(c *polarnet.Config) { c.Addrs = nil },
		"MTU above link":  func(c *polarnet.Config) { c.MTU = 9000 },
		"MTU too small":   func(c *polarnet.Config) { c.MTU = 100 },
		"bad congestion":  func(c *polarnet.Config) { c.TCP.CongestionControl = "bbr" },
		"bad buffers":     func(c *polarnet.Config) { c.TCP.SendBuffer = polarnet.BufferRange{Min: 10, Default: 5} },
		"v6 as gateway4":  func(c *polarnet.Config) { c.Gateway4 = netip.MustParseAddr("fd00::1") },
		"unknown polling": func(c *polarnet.Config) { c.Poll = 9 },
	} {
		la, _ := pipe.New(pipe.Config{})
		cfg := polarnet.Config{Link: la, Addrs: []netip.Prefix{addrA}}
		mutate(&cfg)
		s, err := polarnet.New(cfg)
		assert.Error(t, err, name)
		assert.Nil(t, s, name)
	}
}
