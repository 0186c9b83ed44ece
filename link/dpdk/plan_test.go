package dpdk

import (
	"net"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/polarnet/polarnet/link"
)

// The capabilities the PMDs of the tests report (DPDK 22.11), and a NIC's.
func afPacketInfo(queues int) *portInfo {
	return &portInfo{driver: "net_af_packet", name: "net_af_packet0", maxRxQueues: queues, maxTxQueues: queues,
		maxRxPktLen: 1518, maxMTU: 65535, minMTU: 46, mtu: 1500, txOffloadCapa: txOffloadMultiSegs | 1<<0,
		mac: net.HardwareAddr{2, 0, 0, 0, 0, 1}} // as DPDK 22.11's PMD reports (max_mtu left at ethdev's default)
}

func memifInfo() *portInfo {
	return &portInfo{driver: "net_memif", name: "net_memif0", maxRxQueues: 255, maxTxQueues: 255,
		maxRxPktLen: 1518, maxMTU: 1500, minMTU: 68, mtu: 1500, txOffloadCapa: txOffloadMultiSegs,
		mac: net.HardwareAddr{2, 0, 0, 0, 0, 2}}
}

func tapInfo() *portInfo {
	return &portInfo{driver: "net_tap", name: "net_tap0", maxRxQueues: 16, maxTxQueues: 16,
		maxRxPktLen: 1522, maxMTU: 1500, minMTU: 68, mtu: 1500,
		rxOffloadCapa: rxOffloadScatter | rxOffloadIPv4Cksum | rxOffloadUDPCksum | rxOffloadTCPCksum,
		txOffloadCapa: txOffloadMultiSegs | txOffloadIPv4Cksum | txOffloadUDPCksum | txOffloadTCPCksum | txOffloadTCPTSO,
		rssOffloads:   rssWanted, hashKeySize: 40, mac: net.HardwareAddr{2, 0, 0, 0, 0, 3}}
}

func nicInfo() *portInfo {
	return &portInfo{driver: "mlx5_pci", name: "0000:03:00.0", maxRxQueues: 64, maxTxQueues: 64,
		maxRxPktLen: 9238, maxMTU: 9216, minMTU: 68, mtu: 1500,
		rxOffloadCapa: rxOffloadScatter | rxOffloadIPv4Cksum | rxOffloadUDPCksum | rxOffloadTCPCksum,
		txOffloadCapa: txOffloadMultiSegs | txOffloadIPv4Cksum | txOffloadUDPCksum | txOffloadTCPCksum | txOffloadTCPTSO,
		rssOffloads:   rssWanted, retaSize: 512, hashKeySize: 40, mac: net.HardwareAddr{2, 0, 0, 0, 0, 4}}
}

func mustPlan(t *testing.T, c Config, info *portInfo) *portPlan {
	t.Helper()
	c.Device = "dev"
	c, err := c.withDefaults()
	require.NoError(t, err)
	p, err := plan(&c, info)
	require.NoError(t, err)
	return p
}

func TestPlanAFPacket(t *testing.T) {
	p := mustPlan(t, Config{}, afPacketInfo(1))
	assert.Equal(t, 1500, p.mtu)
	assert.False(t, p.setMTU)
	assert.Equal(t, 1518, p.frameSize)
	assert.Equal(t, 2048, p.dataRoom)
	assert.Equal(t, rxChecksumLink, p.rxChecksum, "the local kernel's partial checksums are checked in the link")
	assert.Equal(t, link.CapRXChecksum, p.caps, "no TX offloads")
	assert.False(t, p.txChecksum)
	assert.False(t, p.rss)

	_, err := plan(&Config{Queues: 2}, afPacketInfo(1))
	assert.ErrorIs(t, err, ErrTooFewQueues)
	_, err = plan(&Config{MTU: 9000}, afPacketInfo(1))
	assert.ErrorContains(t, err, "outside net_af_packet0's range 46..1500", "ethdev's limit: the PMD's max_rx_pktlen")
	assert.ErrorContains(t, err, "vdev spec")

	p = mustPlan(t, Config{Queues: 2}, afPacketInfo(2))
	assert.False(t, p.rss, "no RSS: the kernel's fanout spreads")
}

// TestPlanAFPacketJumbo: a net_af_packet port the link created takes any
// MTU its ring slots hold, set on the kernel interface by the link (ethdev
// would refuse it), with mbufs as large as a slot's data.
func TestPlanAFPacketJumbo(t *testing.T) {
	info := afPacketInfo(1)
	info.afFrameSlot = 2048
	p := mustPlan(t, Config{MTU: 1280}, info)
	assert.True(t, p.setMTU, "within ethdev's range: through the PMD")
	assert.False(t, p.setIfaceMTU)
	assert.Equal(t, 2048, p.dataRoom)

	c := Config{Device: "dev", MTU: 9000}
	c, err := c.withDefaults()
	require.NoError(t, err)
	_, err = plan(&c, info)
	assert.ErrorContains(t, err, "does not fit net_af_packet0's ring slots of 2048 bytes (MTU 1964 at most)")
	assert.ErrorContains(t, err, "framesz=12288")

	info.afFrameSlot = 12288
	p = mustPlan(t, Config{MTU: 9000}, info)
	assert.False(t, p.setMTU)
	assert.True(t, p.setIfaceMTU)
	assert.Equal(t, 9018, p.frameSize)
	assert.Equal(t, 12288, p.dataRoom, "the PMD wants a whole slot's data (12288 - 32) in one mbuf")
	assert.Equal(t, 1, p.maxTxSegs)

	c = Config{Device: "dev", MTU: 9000, MbufDataRoom: 9216}
	c, err = c.withDefaults()
	require.NoError(t, err)
	_, err = plan(&c, info)
	assert.ErrorContains(t, err, "MbufDataRoom 9216 is smaller than net_af_packet0's ring slots")
}

func TestAFPacketArgs(t *testing.T) {
	for _, c := range []struct {
		args string
		mtu  int
		want string
		slot int
	}{
		{"iface=eth1", 0, "iface=eth1", 2048},
		{"iface=eth1", 1964, "iface=eth1", 2048},
		{"iface=eth1", 1965, "iface=eth1,framesz=4096,blocksz=4096", 4096},
		{"iface=eth1,framecnt=1024", 9000, "iface=eth1,framecnt=1024,framesz=12288,blocksz=12288", 12288},
		{"iface=eth1,blocksz=24576", 9000, "iface=eth1,blocksz=24576,framesz=12288", 12288},
		{"iface=eth1,framesz=16384,blocksz=16384", 9000, "iface=eth1,framesz=16384,blocksz=16384", 16384},
		{"iface=eth1,framesz=4096", 9000, "iface=eth1,framesz=4096", 4096}, // plan refuses the MTU
	} {
		got, slot, err := afPacketArgs(c.args, c.mtu)
		require.NoError(t, err, "%q mtu %d", c.args, c.mtu)
		assert.Equal(t, c.want, got, "%q mtu %d", c.args, c.mtu)
		assert.Equal(t, c.slot, slot, "%q mtu %d", c.args, c.mtu)
	}
	_, _, err := afPacketArgs("iface=eth1,blocksz=16384", 9000)
	assert.ErrorContains(t, err, "no multiple")
	_, _, err = afPacketArgs("iface=eth1,framesz=x", 1500)
	assert.ErrorContains(t, err, "not a size")
	assert.Equal(t, "eth1", vdevArg("iface=eth1,qpairs=2", "iface"))
	assert.Equal(t, "", vdevArg("iface=eth1", "qpairs"))
}

func TestPlanMemif(t *testing.T) {
	p := mustPlan(t, Config{MTU: 65000, SkipChecksums: true}, memifInfo())
	assert.Equal(t, 65000, p.mtu)
	assert.False(t, p.setMTU, "memif neither sets nor enforces an MTU")
	assert.Equal(t, 2048, p.dataRoom)
	assert.Equal(t, 32, p.maxTxSegs)
	assert.Equal(t, 33, p.maxRxSegs)
	assert.Equal(t, link.CapRXChecksum|link.CapTXChecksum, p.caps)
	assert.Equal(t, rxChecksumTrusted, p.rxChecksum)
	assert.Equal(t, 256, p.txStash)
	assert.Equal(t, uint64(txOffloadMultiSegs), p.txOffloads)

	p = mustPlan(t, Config{}, memifInfo())
	assert.Equal(t, rxChecksumEngine, p.rxChecksum)
	assert.Zero(t, p.caps)
}

func TestPlanTap(t *testing.T) {
	p := mustPlan(t, Config{}, tapInfo())
	assert.Equal(t, rxChecksumPMD, p.rxChecksum)
	assert.True(t, p.txChecksum)
	assert.True(t, p.tso)
	assert.Equal(t, link.CapRXChecksum|link.CapTXChecksum|link.CapGSO, p.caps)
	assert.Equal(t, 65535, p.gsoMaxSize)
	assert.Equal(t, 32, p.maxTxSegs, "a 64 KiB TSO frame spans 2 KiB mbufs")

	p = mustPlan(t, Config{DisableOffloads: true}, tapInfo())
	assert.Zero(t, p.caps)
	assert.Equal(t, rxChecksumEngine, p.rxChecksum)

	p = mustPlan(t, Config{Queues: 2}, tapInfo())
	assert.True(t, p.rss)
	assert.False(t, p.steer, "no RETA: the link cannot predict the queue")
}

func TestPlanNIC(t *testing.T) {
	p := mustPlan(t, Config{Queues: 4, MTU: 9000}, nicInfo())
	assert.True(t, p.setMTU)
	assert.Equal(t, 9024, p.dataRoom)
	assert.True(t, p.rss)
	assert.True(t, p.steer)
	assert.Equal(t, uint64(rssWanted), p.rssHF)
	assert.Len(t, p.rssKey, 40)
	assert.True(t, p.tso)

	// A NIC hashing TCP but not UDP by ports cannot be predicted for both.
	info := nicInfo()
	info.rssOffloads &^= rssIPv4UDP | rssIPv6UDP
	p = mustPlan(t, Config{Queues: 4}, info)
	assert.True(t, p.rss)
	assert.False(t, p.steer)

	// A pool too small for the TX stash a TSO frame needs.
	c := Config{Device: "x", PoolSize: 63}
	c, _ = c.withDefaults()
	_, err := plan(&c, nicInfo())
	assert.ErrorContains(t, err, "raise Config.PoolSize")

	// Jumbo frames in small mbufs need scatter on receive.
	noScatter := nicInfo()
	noScatter.rxOffloadCapa &^= rxOffloadScatter
	c = Config{Device: "x", MTU: 9000, MbufDataRoom: 2048}
	c, _ = c.withDefaults()
	_, err = plan(&c, noScatter)
	assert.ErrorContains(t, err, "scatter")
}

func TestPlanIsolate(t *testing.T) {
	addrs := []netip.Addr{netip.MustParseAddr("198.18.0.2")}
	p := mustPlan(t, Config{Isolate: true, IsolateAddrs: addrs, Queues: 4}, nicInfo())
	assert.False(t, p.rss, "the rules' RSS action spreads instead")
	assert.False(t, p.steer)
	assert.Len(t, p.rules, 2)
	assert.Equal(t, 4, p.rules[0].queues)
	assert.Len(t, p.rssKey, 40)
}

func TestMemifArgs(t *testing.T) {
	for _, c := range []struct {
		args string
		mtu  int
		want string
	}{
		{"role=server", 0, "role=server,rsize=14"},
		{"role=server", 1500, "role=server,rsize=14"},
		{"role=server,rsize=10", 1500, "role=server,rsize=10"},
		{"role=server", 9000, "role=server,bsize=9216,rsize=12"},
		{"", 65000, "bsize=65535,rsize=10"},
		{"role=client,bsize=16384", 9000, "role=client,bsize=16384,rsize=12"},
		{"role=client,rsize=8", 9000, "role=client,rsize=8,bsize=9216"},
	} {
		got, err := memifArgs(c.args, c.mtu)
		require.NoError(t, err)
		assert.Equal(t, c.want, got, "%q MTU %d", c.args, c.mtu)
	}
	_, err := memifArgs("bsize=4096", 9000)
	assert.ErrorContains(t, err, "cannot hold frames")
	_, err = memifArgs("", 65535)
	assert.ErrorContains(t, err, "at most 65517")
}
