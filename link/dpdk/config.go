package dpdk

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/polarnet/polarnet/internal/toeplitz"
)

// Config configures a DPDK link. Only Device is required; every zero field
// is a documented default.
type Config struct {
	// Device names the port. Either a virtual device the link creates at New
	// and removes at Close, written as EAL's --vdev takes it (driver name,
	// an instance suffix, then the driver's arguments):
	//
	//	net_af_packet0,iface=eth1
	//	net_tap0,iface=dtap0
	//	net_memif0,role=server,socket=/run/pn.sock,socket-abstract=no
	//
	// or the name of a device EAL probes, such as the PCI address of a NIC
	// bound to vfio-pci ("0000:03:00.0"), which must then be in
	// EALConfig.Allow. Required.
	Device string

	// Queues is the number of RX/TX queue pairs, one per shard. Default 1.
	// The port must offer at least as many (net_af_packet: its qpairs=
	// argument).
	Queues int

	// RxDescriptors and TxDescriptors size each queue's rings. Default 1024,
	// adjusted to the PMD's limits.
	RxDescriptors, TxDescriptors int

	// MTU is the largest IP packet of one frame. Default: the port's MTU.
	// New sets it on the port; net_memif, which carries frames of any length
	// as mbuf chains, takes any MTU up to 65535 without telling the PMD.
	MTU int

	// MAC is the link's Ethernet address. Default: the port's. A different
	// address is set on the port (a PMD that cannot is an error).
	MAC net.HardwareAddr

	// PoolSize is the number of mbufs of the link's mempool. Default:
	// PoolSizeFor(Queues, RxDescriptors, TxDescriptors). Smaller pools
	// work: when they run dry, frames are dropped and counted (QueueStats
	// TxNoMbuf, Stats.RxNoMbuf), never blocked on.
	PoolSize int

	// MbufDataRoom is the frame data one mbuf holds. Default: room for a
	// whole frame of the MTU (at least 2048 bytes) up to 9 KiB frames;
	// above that 2048, frames spanning chains of mbufs.
	MbufDataRoom int

	// DisableOffloads keeps the port's checksum and TSO offloads off even
	// where the PMD has them.
	DisableOffloads bool

	// SkipChecksums trusts every received frame's checksums and leaves the
	// checksums of sent frames partial (Linux CHECKSUM_PARTIAL), as the
	// in-memory pipe link does. Only for links whose frames never cross a
	// wire and whose peer sets it too: net_memif between two polarnet
	// processes.
	SkipChecksums bool

	// Promiscuous puts the port in promiscuous mode. The link always asks
	// for all-multicast, which IPv6 neighbour discovery needs.
	Promiscuous bool

	// RSSKey is the Toeplitz key the port hashes received flows with when
	// Queues > 1. Default: toeplitz.MicrosoftKey, repeated to the PMD's key
	// size.
	RSSKey []byte

	// Isolate puts the port in rte_flow isolated mode before configuring
	// it: with a bifurcated PMD (mlx5) the port then receives only what flow
	// rules send it, and the kernel's netdev on the same NIC keeps the rest.
	// The link creates the rules for IsolateAddrs (see README.md). A PMD
	// without rte_flow, or that rejects a rule, makes New fail.
	Isolate bool

	// IsolateAddrs are the addresses whose traffic the rules of Isolate
	// steer to the link: the polarnet stack's own addresses, which the
	// kernel must not also have. Required with Isolate.
	IsolateAddrs []netip.Addr

	// Wait selects how WaitRead waits for frames. Default WaitAuto.
	Wait WaitMode

	// PollInterval is the first sleep of a sleep-based wait; each sleep that
	// finds nothing doubles it, up to PollIntervalMax. Defaults 20µs and 1ms.
	PollInterval, PollIntervalMax time.Duration

	// LinkPollInterval is how often the link polls the port's link status.
	// Default 100ms.
	LinkPollInterval time.Duration

	// WaitUp makes New wait up to this long for the port's link to come up
	// (see Link.WaitUp), and fail if it does not: a net_memif client is
	// down until its server accepts it, and frames sent before are lost (a
	// SYN then waits a second for its retransmission). Zero: New does not
	// wait.
	WaitUp time.Duration

	// EAL initialises the Environment Abstraction Layer if nothing has in
	// this process yet; see InitEAL. The zero value accepts whatever EAL
	// was initialised with.
	EAL EALConfig
}

// WaitMode selects how a queue's WaitRead waits. DPDK ports are polled; a
// poller that sleeps needs either receive interrupts or a timer.
type WaitMode uint8

const (
	// WaitAuto uses receive interrupts where the PMD has them (net_tap, NICs
	// under vfio-pci with MSI-X), else sleeps.
	WaitAuto WaitMode = iota
	// WaitInterrupt requires receive interrupts: New fails without them.
	WaitInterrupt
	// WaitSleep polls the queue at PollInterval, backing off to
	// PollIntervalMax while nothing arrives.
	WaitSleep
)

func (m WaitMode) String() string {
	switch m {
	case WaitAuto:
		return "auto"
	case WaitInterrupt:
		return "interrupt"
	case WaitSleep:
		return "sleep"
	}
	return fmt.Sprintf("WaitMode(%d)", uint8(m))
}

// Defaults and limits.
const (
	defaultDescriptors      = 1024
	defaultPollInterval     = 20 * time.Microsecond
	defaultPollIntervalMax  = time.Millisecond
	defaultLinkPollInterval = 100 * time.Millisecond
	// maxQueues bounds Queues: RTE_MAX_QUEUES_PER_PORT in DPDK's default
	// build.
	maxQueues = 1024
	// maxMTU is the largest IP packet: its length field has 16 bits.
	maxMTU = 65535
	// mbufHeadroom is RTE_PKTMBUF_HEADROOM of DPDK's default build: room
	// in front of every mbuf's data that the data room size includes.
	mbufHeadroom = 128
	// minDataRoom is DPDK's default data room (RTE_MBUF_DEFAULT_DATAROOM).
	minDataRoom = 2048
	// maxWholeFrameRoom is the largest frame given an mbuf of its own by
	// default; jumbo frames above it travel as chains of minDataRoom mbufs.
	maxWholeFrameRoom = 9*1024 + 128
	// ethOverhead is what a frame carries on top of the MTU: an Ethernet
	// header and a VLAN tag the PMD may leave in place.
	ethOverhead = 14 + 4
	// rxBurst and txBurst are the most frames one PMD burst call moves.
	rxBurst = 32
	txBurst = 64
	// txStashMax bounds the mbufs a TX queue keeps allocated ahead.
	txStashMax = 256
)

// isVdev reports whether device names a virtual device for the link to
// create, as opposed to a device EAL probes (a PCI address).
func isVdev(device string) bool {
	name, _, _ := strings.Cut(device, ",")
	return strings.HasPrefix(name, "net_") || strings.HasPrefix(name, "eth_")
}

// splitDevice splits a device spec into its name and driver arguments.
func splitDevice(device string) (name, args string) {
	name, args, _ = strings.Cut(device, ",")
	return strings.TrimSpace(name), strings.TrimSpace(args)
}

// withDefaults returns c with zero fields replaced by their defaults, or an
// error naming the first field that cannot work. What depends on the port
// (MTU, MAC, data room) is settled in New.
func (c Config) withDefaults() (Config, error) {
	name, _ := splitDevice(c.Device)
	if name == "" {
		return c, fmt.Errorf("dpdk: Config.Device is required (a vdev such as net_af_packet0,iface=eth1, or a PCI address)")
	}
	switch {
	case c.Queues == 0:
		c.Queues = 1
	case c.Queues < 0 || c.Queues > maxQueues:
		return c, fmt.Errorf("dpdk: %d queues requested; want 1 to %d", c.Queues, maxQueues)
	}
	for _, d := range []*int{&c.RxDescriptors, &c.TxDescriptors} {
		switch {
		case *d == 0:
			*d = defaultDescriptors
		case *d < 0 || *d > 1<<15:
			return c, fmt.Errorf("dpdk: %d descriptors requested; want 1 to 32768", *d)
		}
	}
	if c.MTU < 0 || c.MTU > maxMTU || (c.MTU != 0 && c.MTU < 68) {
		return c, fmt.Errorf("dpdk: MTU %d outside 68..%d", c.MTU, maxMTU)
	}
	if c.MAC != nil {
		if len(c.MAC) != 6 || c.MAC[0]&1 != 0 {
			return c, fmt.Errorf("dpdk: MAC %v is not a unicast Ethernet address", c.MAC)
		}
		c.MAC = slices.Clone(c.MAC)
	}
	if c.PoolSize < 0 {
		return c, fmt.Errorf("dpdk: negative pool size %d", c.PoolSize)
	}
	if c.PoolSize == 0 {
		c.PoolSize = PoolSizeFor(c.Queues, c.RxDescriptors, c.TxDescriptors)
	}
	if c.MbufDataRoom < 0 || c.MbufDataRoom > 0xffff-mbufHeadroom || (c.MbufDataRoom != 0 && c.MbufDataRoom < 256) {
		return c, fmt.Errorf("dpdk: mbuf data room %d outside 256..%d", c.MbufDataRoom, 0xffff-mbufHeadroom)
	}
	if c.RSSKey != nil {
		if len(c.RSSKey) < 40 {
			return c, fmt.Errorf("dpdk: RSS key of %d bytes; Toeplitz keys have at least 40", len(c.RSSKey))
		}
		c.RSSKey = slices.Clone(c.RSSKey)
	}
	if c.Isolate && len(c.IsolateAddrs) == 0 {
		return c, fmt.Errorf("dpdk: Config.Isolate needs IsolateAddrs, the addresses whose traffic the link takes from the kernel")
	}
	for _, a := range c.IsolateAddrs {
		if !a.IsValid() || a.IsUnspecified() || a.IsMulticast() {
			return c, fmt.Errorf("dpdk: isolate address %v is not a unicast address", a)
		}
	}
	if c.Wait > WaitSleep {
		return c, fmt.Errorf("dpdk: unknown wait mode %v", c.Wait)
	}
	if c.PollInterval == 0 {
		c.PollInterval = defaultPollInterval
	}
	if c.PollIntervalMax == 0 {
		c.PollIntervalMax = max(defaultPollIntervalMax, c.PollInterval)
	}
	if c.PollInterval < 0 || c.PollIntervalMax < c.PollInterval {
		return c, fmt.Errorf("dpdk: poll interval %v..%v is not a range", c.PollInterval, c.PollIntervalMax)
	}
	if c.LinkPollInterval == 0 {
		c.LinkPollInterval = defaultLinkPollInterval
	}
	if c.LinkPollInterval < 0 {
		return c, fmt.Errorf("dpdk: negative link poll interval %v", c.LinkPollInterval)
	}
	if c.WaitUp < 0 {
		return c, fmt.Errorf("dpdk: negative WaitUp %v", c.WaitUp)
	}
	return c, nil
}

// rssKey returns the key to program into a port whose PMD takes keys of
// size bytes (0: unknown, then 40): the configured key, or the Microsoft
// key, repeated or cut to size.
func (c *Config) rssKey(size int) []byte {
	if size <= 0 {
		size = 40
	}
	src := c.RSSKey
	if src == nil {
		src = toeplitz.MicrosoftKey[:]
	}
	key := make([]byte, size)
	for i := range key {
		key[i] = src[i%len(src)]
	}
	return key
}

// PoolSizeFor returns the default mempool size for a link of queues queue
// pairs with rxd and txd descriptors each: every descriptor of every ring
// may hold an mbuf, plus a receive burst being copied out and the mbufs a
// TX queue allocates ahead, with half as much again as headroom, rounded up
// to a power of two minus one (the size DPDK's mempool rings fit best).
func PoolSizeFor(queues, rxd, txd int) int {
	perQueue := rxd + txd + rxBurst + txBurst
	n := queues * perQueue * 3 / 2
	size := 1
	for size-1 < n {
		size <<= 1
	}
	return size - 1
}

// dataRoom returns the mbuf data room for frames of up to frame bytes.
func (c *Config) dataRoom(frame int) int {
	if c.MbufDataRoom != 0 {
		return c.MbufDataRoom
	}
	if frame > maxWholeFrameRoom {
		return minDataRoom
	}
	return max(minDataRoom, (frame+63)&^63)
}

// txStash returns how many mbufs each TX queue allocates ahead: enough for
// a burst of frames of frameMbufs mbufs each, but never more than a quarter
// of the pool's share of one queue, so a small pool is left for receiving.
func txStash(poolSize, queues, frameMbufs int) int {
	want := min(txStashMax, max(txBurst, frameMbufs*8))
	return max(1, min(want, poolSize/(4*queues)))
}

// EALConfig is the Environment Abstraction Layer's configuration. EAL
// initialises once per process (InitEAL); its zero value runs on lcore 0
// with --no-pci, in memory (no runtime files, no secondary processes),
// with hugepages.
type EALConfig struct {
	// Lcores is EAL's core list (-l), e.g. "0" or "2-3". Default "0". The
	// link's pollers are goroutines, not EAL threads: lcores only decide
	// where EAL's own threads run. EAL pins the thread that initialises it
	// to the first lcore; InitEAL runs it on a thread of its own that ends
	// afterwards, so no goroutine inherits the pinning.
	Lcores string

	// MemoryMB is how much memory EAL reserves up front (-m), in MiB.
	// Default: with NoHuge 256, else none (EAL grows as needed).
	MemoryMB int

	// NoHuge runs EAL on ordinary pages (--no-huge): for hosts without
	// hugepages and for tests; slower, and only PMDs that need no DMA work
	// (the vdevs, not NICs). It implies --no-shconf.
	NoHuge bool

	// HugeDir is the hugetlbfs mount to use (--huge-dir). Default: EAL's
	// choice, or memfd-backed hugepages in memory.
	HugeDir string

	// FilePrefix keeps EAL's runtime files under /var/run/dpdk/FilePrefix,
	// where secondary processes and tools such as dpdk-proc-info find
	// them. Default: none, EAL runs --in-memory (with NoHuge, --no-shconf).
	// Two processes of one host need different prefixes.
	FilePrefix string

	// Allow lists the PCI devices EAL may probe (-a), e.g. "0000:03:00.0".
	// Empty: --no-pci, so EAL never touches the host's NICs (a VM's own
	// virtio NIC included).
	Allow []string

	// VDevs are virtual devices EAL creates at initialisation (--vdev).
	// Links create their own Config.Device; this is for devices shared
	// with other code.
	VDevs []string

	// Drivers are extra PMD shared objects or directories to load (-d).
	Drivers []string

	// LogLevel is passed as --log-level, e.g. "7", "*:debug" or
	// "pmd.net.memif:debug". Default "*:warning".
	LogLevel string

	// Extra arguments are appended as they are.
	Extra []string
}

// isZero reports whether c is the zero EALConfig.
func (c *EALConfig) isZero() bool {
	return c.Lcores == "" && c.MemoryMB == 0 && !c.NoHuge && c.HugeDir == "" && c.FilePrefix == "" &&
		len(c.Allow) == 0 && len(c.VDevs) == 0 && len(c.Drivers) == 0 && c.LogLevel == "" && len(c.Extra) == 0
}

// Args returns the EAL command line for c, program name first.
func (c *EALConfig) Args() ([]string, error) {
	args := []string{"polarnet"}
	lcores := c.Lcores
	if lcores == "" {
		lcores = "0"
	}
	if strings.ContainsAny(lcores, " \t") {
		return nil, fmt.Errorf("dpdk: lcore list %q contains spaces", lcores)
	}
	args = append(args, "-l", lcores)
	if c.MemoryMB < 0 {
		return nil, fmt.Errorf("dpdk: negative EAL memory %d", c.MemoryMB)
	}
	mem := c.MemoryMB
	if mem == 0 && c.NoHuge {
		mem = 256
	}
	if mem > 0 {
		args = append(args, "-m", strconv.Itoa(mem))
	}
	switch {
	case c.NoHuge:
		// --in-memory implies --legacy-mem's opposite and refuses
		// --no-huge; --no-shconf is what in-memory means without hugepages.
		args = append(args, "--no-huge")
		if c.FilePrefix == "" {
			args = append(args, "--no-shconf")
		}
	case c.FilePrefix == "":
		args = append(args, "--in-memory")
	}
	if c.HugeDir != "" {
		if c.NoHuge {
			return nil, fmt.Errorf("dpdk: EALConfig.HugeDir with NoHuge")
		}
		args = append(args, "--huge-dir", c.HugeDir)
	}
	if c.FilePrefix != "" {
		if strings.ContainsAny(c.FilePrefix, "/ \t") {
			return nil, fmt.Errorf("dpdk: file prefix %q contains '/' or spaces", c.FilePrefix)
		}
		args = append(args, "--file-prefix", c.FilePrefix)
	}
	if len(c.Allow) == 0 {
		args = append(args, "--no-pci")
	}
	for _, a := range c.Allow {
		args = append(args, "-a", a)
	}
	for _, v := range c.VDevs {
		args = append(args, "--vdev", v)
	}
	for _, d := range c.Drivers {
		args = append(args, "-d", d)
	}
	level := c.LogLevel
	if level == "" {
		level = "*:warning"
	}
	args = append(args, "--log-level", level, "--no-telemetry")
	return append(args, c.Extra...), nil
}
