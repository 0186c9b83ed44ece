package rdma

import (
	"bytes"
	"fmt"
	"net"
	"net/netip"
	"slices"

	"github.com/polarnet/polarnet/internal/toeplitz"
)

// Defaults and limits.
const (
	// DefaultRing is the default number of receive and of send buffers
	// (and work requests) per queue.
	DefaultRing = 512
	minRing     = 16
	maxRing     = 1 << 15
	maxQueues   = 64
	// minRSSTable is the smallest indirection table the link programs: a
	// table much longer than the queue count spreads evenly when the count
	// is not a power of two.
	minRSSTable = 128
	ethHdrLen   = 14
	vlanTagLen  = 4
)

// Config configures an RDMA link. The zero value opens the first port with
// raw packet support on the host, with one queue; Addrs is required unless
// MAC is set (see Addrs).
type Config struct {
	// Netdev is the network interface whose RDMA port the link drives,
	// e.g. "enp5s0f0np0"; Device (e.g. "mlx5_0") and Port name the port
	// directly instead. With neither, the first port LookupNetdev would
	// accept is used.
	Netdev string
	Device string
	// Port is the device's 1-based port; zero is the first.
	Port int

	// Queues is the number of queue pairs (shards); zero means 1. More than
	// one spreads received flows with RSS where the device supports it;
	// otherwise queue 0 receives everything and the engine hands frames to
	// their owners in software.
	Queues int

	// MTU is the largest IP packet of a frame; zero means the interface's
	// MTU (1500 without one). The interface's MTU must allow it: the NIC
	// drops longer frames.
	MTU int

	// MAC is the link's Ethernet address; nil means the interface's own,
	// shared with the kernel. A MAC of its own makes every frame to it the
	// link's; on SR-IOV virtual functions and some switches the NIC then
	// needs to be told about it (`bridge fdb add MAC dev NETDEV self`).
	MAC net.HardwareAddr

	// Addrs are the stack's IP addresses (polarnet.Config.Addrs without the
	// prefix lengths). When the link shares the interface's MAC, flow rules
	// steer only frames to these addresses to the link, so at least one is
	// required and none may be an address of the kernel's. IPv6 addresses
	// also get their neighbour solicitations copied to the link.
	Addrs []netip.Addr

	// RxRing and TxRing are the receive and send buffers per queue; zero
	// means DefaultRing. Each buffer holds one frame.
	RxRing, TxRing int

	// RSSKey is the 40-byte Toeplitz key; nil means
	// toeplitz.MicrosoftKey. DisableRSS makes queue 0 receive everything
	// even when the device could spread flows.
	RSSKey     []byte
	DisableRSS bool
}

// check validates what can be validated before looking at the host.
func (c Config) check() (Config, error) {
	if c.Queues == 0 {
		c.Queues = 1
	}
	if c.RxRing == 0 {
		c.RxRing = DefaultRing
	}
	if c.TxRing == 0 {
		c.TxRing = DefaultRing
	}
	if c.RSSKey == nil {
		c.RSSKey = toeplitz.MicrosoftKey[:]
	}
	switch {
	case c.Queues < 0 || c.Queues > maxQueues:
		return c, fmt.Errorf("rdma: %d queues; the link takes 1 to %d", c.Queues, maxQueues)
	case c.RxRing < minRing || c.RxRing > maxRing || c.TxRing < minRing || c.TxRing > maxRing:
		return c, fmt.Errorf("rdma: rings of %d receive and %d send buffers; each must be %d to %d", c.RxRing, c.TxRing, minRing, maxRing)
	case c.MTU < 0 || c.MTU > 9216:
		return c, fmt.Errorf("rdma: MTU %d; the link takes 68 to 9216 (zero: the interface's)", c.MTU)
	case c.Port < 0:
		return c, fmt.Errorf("rdma: port %d", c.Port)
	case len(c.RSSKey) != len(toeplitz.MicrosoftKey):
		return c, fmt.Errorf("rdma: RSS key of %d bytes; verbs devices take %d", len(c.RSSKey), len(toeplitz.MicrosoftKey))
	case c.MAC != nil && (len(c.MAC) != 6 || c.MAC[0]&1 != 0):
		return c, fmt.Errorf("rdma: MAC %v is not a unicast Ethernet address", c.MAC)
	}
	for _, a := range c.Addrs {
		if !a.IsValid() || a.IsUnspecified() || a.IsMulticast() {
			return c, fmt.Errorf("rdma: %v is not a unicast address", a)
		}
	}
	c.MAC = slices.Clone(c.MAC)
	c.Addrs = slices.Clone(c.Addrs)
	c.RSSKey = slices.Clone(c.RSSKey)
	for i, a := range c.Addrs {
		c.Addrs[i] = a.Unmap()
	}
	return c, nil
}

// plan fits a checked config to the port and the device: the buffers, the
// spread and the flow rules.
func (c Config) plan(port Port, caps deviceCaps) (*setupPlan, error) {
	mac := c.MAC
	if mac == nil {
		mac = port.MAC
	}
	if len(mac) != 6 {
		return nil, fmt.Errorf("rdma: %s has no Ethernet address; set Config.MAC", port)
	}
	if bytes.Equal(mac, port.MAC) && len(c.Addrs) == 0 {
		return nil, fmt.Errorf("rdma: the link shares %s's MAC with the kernel, so it needs its addresses (Config.Addrs, "+
			"POLARNET_ADDR) to steer only its own traffic; or give it a MAC of its own", orNone(port.Netdev))
	}
	mtu := mtuOf(c, port)
	if mtu < 68 {
		return nil, fmt.Errorf("rdma: MTU %d is below IPv4's minimum", mtu)
	}
	if port.MTU != 0 && mtu > port.MTU {
		return nil, fmt.Errorf("rdma: MTU %d is above %s's %d: the NIC would drop the frames; raise the interface's MTU first",
			mtu, port.Netdev, port.MTU)
	}
	p := &setupPlan{
		port:      max(port.Port, 1),
		queues:    c.Queues,
		rxDepth:   c.RxRing,
		txDepth:   c.TxRing,
		frameSize: roundUp(mtu+ethHdrLen+vlanTagLen, 64),
		mac:       mac,
	}
	if caps.maxQueueDepth > 0 && max(p.rxDepth, p.txDepth) > caps.maxQueueDepth {
		return nil, fmt.Errorf("rdma: rings of %d and %d buffers; %s takes at most %d work requests per queue",
			p.rxDepth, p.txDepth, port.Device, caps.maxQueueDepth)
	}
	if caps.maxCQE > 0 && max(p.rxDepth, p.txDepth) > caps.maxCQE {
		return nil, fmt.Errorf("rdma: rings of %d and %d buffers; %s's completion queues hold at most %d entries",
			p.rxDepth, p.txDepth, port.Device, caps.maxCQE)
	}
	// One queue needs no spread; a device without RSS (or DisableRSS)
	// leaves queue 0 to receive everything, and the engine steers in
	// software.
	if c.Queues > 1 && caps.rss && !c.DisableRSS {
		if caps.maxWQs > 0 && c.Queues > caps.maxWQs {
			return nil, fmt.Errorf("rdma: %d queues; %s has at most %d receive work queues", c.Queues, port.Device, caps.maxWQs)
		}
		p.rss = planRSS(c.RSSKey, c.Queues, caps.maxRSSTable)
	}
	p.flows = planFlows(mac, port.MAC, c.Addrs)
	return p, nil
}

// planRSS lays out the indirection table: a power of two long, at least
// minRSSTable (when the device allows) and at least queues, entry i
// naming queue i mod queues.
func planRSS(key []byte, queues, maxTable int) *rssPlan {
	n := 1
	for n < max(queues, minRSSTable) {
		n <<= 1
	}
	for maxTable > 0 && n > maxTable && n/2 >= queues {
		n >>= 1
	}
	r := &rssPlan{key: slices.Clone(key), table: make([]int, n)}
	for i := range r.table {
		r.table[i] = i % queues
	}
	return r
}

func roundUp(n, to int) int { return (n + to - 1) / to * to }
