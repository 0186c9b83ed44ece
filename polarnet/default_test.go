package polarnet_test

import (
	"bytes"
	"errors"
	"log/slog"
	"net/netip"
	"strconv"
	"strings"
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
		"POLARNET_LINK":          "tap",
		"POLARNET_DEVICE":        "tap0",
		"POLARNET_QUEUES":        "2",
		"POLARNET_MTU":           "9000",
		"POLARNET_LINK_OPTIONS":  "offloads=off, x = y",
		"POLARNET_ADDR":          "198.18.0.2/24, fd00::2/64",
		"POLARNET_GATEWAY":       "198.18.0.1,fd00::1",
		"POLARNET_DNS":           "198.18.0.53, [fd00::53]:5353",
		"POLARNET_POLL":          "busy",
		"POLARNET_FALLBACK":      "fail",
		"POLARNET_KERNEL_ROUTES": "10.0.0.0/8, fd10::/16",
		"POLARNET_KERNEL_LISTEN": "all",
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
	assert.Equal(t, []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd10::/16")}, ec.Config.KernelRoutes)
	assert.Equal(t, polarnet.KernelListenAll, ec.Config.KernelListen)

	for name, env := range map[string]map[string]string{
		"no address":   {"POLARNET_LINK": "tap"},
		"bad address":  {"POLARNET_LINK": "tap", "POLARNET_ADDR": "198.18.0.2"},
		"bad queues":   {"POLARNET_LINK": "tap", "POLARNET_ADDR": "198.18.0.2/24", "POLARNET_QUEUES": "-1"},
		"bad poll":     {"POLARNET_LINK": "tap", "POLARNET_ADDR": "198.18.0.2/24", "POLARNET_POLL": "spin"},
		"bad fallback": {"POLARNET_FALLBACK": "maybe"},
		"bad options":  {"POLARNET_LINK": "tap", "POLARNET_ADDR": "198.18.0.2/24", "POLARNET_LINK_OPTIONS": "novalue"},
		"bad routes":   {"POLARNET_LINK": "tap", "POLARNET_ADDR": "198.18.0.2/24", "POLARNET_KERNEL_ROUTES": "10.0.0.1"},
		"bad listen":   {"POLARNET_LINK": "tap", "POLARNET_ADDR": "198.18.0.2/24", "POLARNET_KERNEL_LISTEN": "some"},
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

// TestConfigValidationSaysWhy: addresses and MTUs that cannot work fail at
// New with an error that names the value and the rule.
func TestConfigValidationSaysWhy(t *testing.T) {
	v6 := netip.MustParsePrefix("fd00:198:19:40::2/64")
	for name, tc := range map[string]struct {
		mutate func(*polarnet.Config)
		want   string
	}{
		"gateway off the link": {func(c *polarnet.Config) { c.Gateway4 = netip.MustParseAddr("198.19.41.1") },
			"gateway 198.19.41.1 is outside every prefix of the stack ([198.19.40.2/24])"},
		"gateway6 off the link": {func(c *polarnet.Config) { c.Gateway6 = netip.MustParseAddr("fd00:1::1") },
			"gateway fd00:1::1 is outside every prefix of the stack ([fd00:198:19:40::2/64])"},
		"gateway is own address": {func(c *polarnet.Config) { c.Gateway4 = netip.MustParseAddr("198.19.40.2") },
			"gateway 198.19.40.2 is the stack's own address"},
		"network address": {func(c *polarnet.Config) { c.Addrs[0] = netip.MustParsePrefix("198.19.40.0/24") },
			"address 198.19.40.0/24 is the network address of 198.19.40.0/24"},
		"broadcast address": {func(c *polarnet.Config) { c.Addrs[0] = netip.MustParsePrefix("198.19.40.255/24") },
			"address 198.19.40.255/24 is the broadcast address of 198.19.40.0/24"},
		"MTU above the link": {func(c *polarnet.Config) { c.MTU = 9000 },
			"MTU 9000 is more than link LINK carries (1500)"},
		"MTU below IPv4's minimum": {func(c *polarnet.Config) { c.MTU = 500 },
			"MTU 500 on link LINK is below IPv4's minimum of 576"},
		"MTU below IPv6's minimum": {func(c *polarnet.Config) { c.MTU = 1000 },
			"MTU 1000 on link LINK is below IPv6's minimum of 1280, which address fd00:198:19:40::2/64 needs"},
	} {
		t.Run(name, func(t *testing.T) {
			la, _ := pipe.New(pipe.Config{})
			cfg := polarnet.Config{Link: la, Addrs: []netip.Prefix{netip.MustParsePrefix("198.19.40.2/24"), v6}}
			tc.mutate(&cfg)
			s, err := polarnet.New(cfg)
			assert.Nil(t, s)
			require.Error(t, err)
			want := "polarnet: " + strings.ReplaceAll(tc.want, "LINK", strconv.Quote(la.Info().Name))
			assert.True(t, strings.HasPrefix(err.Error(), want), "%q does not start with %q", err, want)
		})
	}
	// Accepted: a /31 and /32 have no network or broadcast address, an
	// IPv6 link-local gateway is on every link, IPv4 alone may run at 576.
	for name, mutate := range map[string]func(*polarnet.Config){
		"/31":                   func(c *polarnet.Config) { c.Addrs = []netip.Prefix{netip.MustParsePrefix("198.19.40.0/31")} },
		"/32":                   func(c *polarnet.Config) { c.Addrs = []netip.Prefix{netip.MustParsePrefix("198.19.40.255/32")} },
		"link-local gateway":    func(c *polarnet.Config) { c.Gateway6 = netip.MustParseAddr("fe80::1") },
		"IPv4 alone at MTU 576": func(c *polarnet.Config) { c.Addrs, c.MTU = c.Addrs[:1], 576 },
	} {
		la, _ := pipe.New(pipe.Config{})
		cfg := polarnet.Config{Link: la, Addrs: []netip.Prefix{netip.MustParsePrefix("198.19.40.2/24"), v6}}
		mutate(&cfg)
		s, err := polarnet.New(cfg)
		if assert.NoError(t, err, name) {
			s.Close()
		}
	}
}

// TestNewFromEnvFallback: a link that fails to open falls back to the
// kernel with a log line naming the link, the device and the error, while
// addresses that cannot work are an error under either policy.
func TestNewFromEnvFallback(t *testing.T) {
	link.Register("test-unopenable", func(link.Params) (link.Link, error) {
		return nil, errors.New("device or resource busy")
	})
	var logged bytes.Buffer
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&logged, nil)))
	defer slog.SetDefault(prev)
	env := map[string]string{"POLARNET_LINK": "test-unopenable", "POLARNET_DEVICE": "pnt-busy", "POLARNET_ADDR": "198.19.40.2/24"}
	s, err := polarnet.NewFromEnv(envOf(env))
	require.NoError(t, err)
	assert.Nil(t, s)
	assert.Contains(t, logged.String(), `POLARNET_LINK=test-unopenable on device \"pnt-busy\" failed`)
	assert.Contains(t, logged.String(), "device or resource busy")
	assert.Contains(t, logged.String(), "device=pnt-busy")

	env["POLARNET_GATEWAY"] = "198.19.41.1"
	_, err = polarnet.NewFromEnv(envOf(env))
	assert.ErrorContains(t, err, "gateway 198.19.41.1 is outside every prefix")
}

func TestConfigValidation(t *testing.T) {
	for name, mutate := range map[string]func(*polarnet.Config){
		"no link":           func(c *polarnet.Config) { c.Link = nil },
		"no address":        func(c *polarnet.Config) { c.Addrs = nil },
		"MTU above link":    func(c *polarnet.Config) { c.MTU = 9000 },
		"MTU too small":     func(c *polarnet.Config) { c.MTU = 100 },
		"bad congestion":    func(c *polarnet.Config) { c.TCP.CongestionControl = "bbr" },
		"bad buffers":       func(c *polarnet.Config) { c.TCP.SendBuffer = polarnet.BufferRange{Min: 10, Default: 5} },
		"v6 as gateway4":    func(c *polarnet.Config) { c.Gateway4 = netip.MustParseAddr("fd00::1") },
		"unknown polling":   func(c *polarnet.Config) { c.Poll = 9 },
		"bad kernel route":  func(c *polarnet.Config) { c.KernelRoutes = []netip.Prefix{{}} },
		"bad kernel listen": func(c *polarnet.Config) { c.KernelListen = 7 },
	} {
		la, _ := pipe.New(pipe.Config{})
		cfg := polarnet.Config{Link: la, Addrs: []netip.Prefix{addrA}}
		mutate(&cfg)
		s, err := polarnet.New(cfg)
		assert.Error(t, err, name)
		assert.Nil(t, s, name)
	}
}
