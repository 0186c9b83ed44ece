package dpdk

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/polarnet/polarnet/internal/toeplitz"
	"github.com/polarnet/polarnet/link"
)

func TestConfigDefaults(t *testing.T) {
	c, err := Config{Device: "net_af_packet0,iface=eth1"}.withDefaults()
	require.NoError(t, err)
	assert.Equal(t, 1, c.Queues)
	assert.Equal(t, 1024, c.RxDescriptors)
	assert.Equal(t, 1024, c.TxDescriptors)
	assert.Equal(t, PoolSizeFor(1, 1024, 1024), c.PoolSize)
	assert.Equal(t, 20*time.Microsecond, c.PollInterval)
	assert.Equal(t, time.Millisecond, c.PollIntervalMax)
	assert.Equal(t, 100*time.Millisecond, c.LinkPollInterval)
	assert.Equal(t, WaitAuto, c.Wait)

	for _, bad := range []Config{
		{},
		{Device: "x", Queues: -1},
		{Device: "x", Queues: 5000},
		{Device: "x", RxDescriptors: -2},
		{Device: "x", MTU: 67},
		{Device: "x", MTU: 70000},
		{Device: "x", MAC: net.HardwareAddr{1, 0, 0, 0, 0, 1}},
		{Device: "x", PoolSize: -1},
		{Device: "x", MbufDataRoom: 100},
		{Device: "x", RSSKey: make([]byte, 16)},
		{Device: "x", Isolate: true},
		{Device: "x", Isolate: true, IsolateAddrs: []netip.Addr{netip.MustParseAddr("ff02::1")}},
		{Device: "x", Wait: 9},
		{Device: "x", PollInterval: time.Millisecond, PollIntervalMax: time.Microsecond},
	} {
		_, err := bad.withDefaults()
		assert.Error(t, err, "%+v", bad)
	}
}

func TestPoolSizeFor(t *testing.T) {
	// 1.5 × (1024 + 1024 + 32 + 64) = 3216 → 4095.
	assert.Equal(t, 4095, PoolSizeFor(1, 1024, 1024))
	assert.Equal(t, 16383, PoolSizeFor(4, 1024, 1024))
	assert.Equal(t, 1023, PoolSizeFor(1, 128, 128)) // 1.5 × 352 = 528
	for q := 1; q <= 8; q++ {
		n := PoolSizeFor(q, 512, 512)
		assert.Equal(t, 0, (n+1)&n, "power of two minus one")
		assert.GreaterOrEqual(t, n, q*(512+512+rxBurst+txBurst))
	}
}

func TestDataRoom(t *testing.T) {
	var c Config
	assert.Equal(t, 2048, c.dataRoom(1518))
	assert.Equal(t, 9024, c.dataRoom(9018))
	assert.Equal(t, 2048, c.dataRoom(65553), "jumbo frames go in chains")
	c.MbufDataRoom = 4096
	assert.Equal(t, 4096, c.dataRoom(1518))
}

func TestRSSKey(t *testing.T) {
	var c Config
	assert.Equal(t, toeplitz.MicrosoftKey[:], c.rssKey(40))
	assert.Equal(t, toeplitz.MicrosoftKey[:], c.rssKey(0))
	k52 := c.rssKey(52)
	assert.Len(t, k52, 52)
	assert.Equal(t, toeplitz.MicrosoftKey[:12], k52[40:], "repeated to the PMD's size")
}

func TestEALArgs(t *testing.T) {
	for _, c := range []struct {
		cfg  EALConfig
		want []string
	}{
		{EALConfig{}, []string{"polarnet", "-l", "0", "--in-memory", "--no-pci", "--log-level", "*:warning", "--no-telemetry"}},
		{EALConfig{NoHuge: true}, []string{"polarnet", "-l", "0", "-m", "256", "--no-huge", "--no-shconf", "--no-pci", "--log-level", "*:warning", "--no-telemetry"}},
		{EALConfig{Lcores: "2-3", MemoryMB: 1024, FilePrefix: "pn1", HugeDir: "/mnt/huge", Allow: []string{"0000:03:00.0", "0000:03:00.1"}, LogLevel: "7"},
			[]string{"polarnet", "-l", "2-3", "-m", "1024", "--huge-dir", "/mnt/huge", "--file-prefix", "pn1", "-a", "0000:03:00.0", "-a", "0000:03:00.1", "--log-level", "7", "--no-telemetry"}},
		{EALConfig{VDevs: []string{"net_null0"}, Drivers: []string{"/opt/pmd.so"}, Extra: []string{"--iova-mode=va"}},
			[]string{"polarnet", "-l", "0", "--in-memory", "--no-pci", "--vdev", "net_null0", "-d", "/opt/pmd.so", "--log-level", "*:warning", "--no-telemetry", "--iova-mode=va"}},
	} {
		got, err := c.cfg.Args()
		require.NoError(t, err)
		assert.Equal(t, c.want, got)
	}
	for _, bad := range []EALConfig{{Lcores: "0 1"}, {MemoryMB: -1}, {NoHuge: true, HugeDir: "/x"}, {FilePrefix: "a/b"}} {
		_, err := bad.Args()
		assert.Error(t, err, "%+v", bad)
	}
	assert.True(t, (&EALConfig{}).isZero())
	assert.False(t, (&EALConfig{NoHuge: true}).isZero())
}

func TestDeviceSpec(t *testing.T) {
	assert.True(t, isVdev("net_memif0,role=server"))
	assert.True(t, isVdev("net_tap0"))
	assert.False(t, isVdev("0000:03:00.0"))
	name, args := splitDevice(" net_af_packet0,iface=eth1,qpairs=2")
	assert.Equal(t, "net_af_packet0", name)
	assert.Equal(t, "iface=eth1,qpairs=2", args)
}

func TestConfigFromParams(t *testing.T) {
	cfg, err := configFromParams(link.Params{
		Device: "net_memif0,role=client,socket=/run/pn.sock", Queues: 2, MTU: 9000,
		Options: map[string]string{
			"rxd": "512", "txd": "256", "pool": "8191", "dataroom": "4096", "mac": "02:00:00:00:00:09",
			"offloads": "off", "skipcsum": "on", "promisc": "true", "isolate": "198.18.0.2;fd00:198:18::2",
			"wait": "sleep", "poll": "10us", "pollmax": "500us", "waitup": "5s",
			"lcores": "1", "mem": "512", "prefix": "pn", "hugedir": "/mnt/huge", "loglevel": "7", "nohuge": "off",
			"allow": "0000:03:00.0;0000:03:00.1",
		},
	})
	require.NoError(t, err)
	mac, _ := net.ParseMAC("02:00:00:00:00:09")
	assert.Equal(t, Config{
		Device: "net_memif0,role=client,socket=/run/pn.sock", Queues: 2, MTU: 9000,
		RxDescriptors: 512, TxDescriptors: 256, PoolSize: 8191, MbufDataRoom: 4096, MAC: mac,
		DisableOffloads: true, SkipChecksums: true, Promiscuous: true,
		Isolate: true, IsolateAddrs: []netip.Addr{netip.MustParseAddr("198.18.0.2"), netip.MustParseAddr("fd00:198:18::2")},
		Wait: WaitSleep, PollInterval: 10 * time.Microsecond, PollIntervalMax: 500 * time.Microsecond,
		WaitUp: 5 * time.Second,
		EAL: EALConfig{Lcores: "1", MemoryMB: 512, FilePrefix: "pn", HugeDir: "/mnt/huge", LogLevel: "7",
			Allow: []string{"0000:03:00.0", "0000:03:00.1"}},
	}, cfg)
	for _, opts := range []map[string]string{{"rxd": "x"}, {"wait": "never"}, {"mac": "zz"}, {"colour": "blue"}, {"isolate": "nope"}, {"offloads": "maybe"}, {"waitup": "soon"}} {
		_, err := configFromParams(link.Params{Device: "net_null0", Options: opts})
		assert.Error(t, err, "%v", opts)
	}
}
