package polarnet

import (
	"fmt"
	"log/slog"
	"net/netip"
	"runtime"
	"time"

	"github.com/polarnet/polarnet/link"
)

// Config configures a Stack. The zero value of every field is a documented
// default; only Link and at least one address are required.
type Config struct {
	// Link is the device the stack runs on. Required. The stack owns it from
	// New on and closes it in Close (also when New fails).
	Link link.Link

	// Addrs are the stack's IPv4 and IPv6 addresses with their prefix
	// length, e.g. 198.18.0.2/24 and fd00:198:18::2/64. At least one.
	Addrs []netip.Prefix

	// Gateway4 and Gateway6 are default gateways; zero means on-link
	// destinations only.
	Gateway4, Gateway6 netip.Addr

	// DNS lists name servers queried through the stack. Zero: the system
	// resolver, through the kernel.
	DNS []netip.AddrPort

	// KernelRoutes are the destinations, beyond loopback, that dialer
	// sends through Go's net instead of the stack (see Stack.ViaKernel).
	// Zero: whatever the stack cannot route (outside its prefixes, with no
	// gateway of the family) goes to the kernel.
	KernelRoutes []netip.Prefix

	// KernelListen says where else a wildcard listen of the listener
	// package accepts connections. Zero: KernelListenLoopback.
	KernelListen KernelListenMode

	// MTU overrides the link's MTU (it may only lower it). Zero: the link's.
	MTU int

	// Poll selects how pollers wait for frames. Zero: PollAdaptive.
	Poll PollMode

	// SpinBudget is how long an adaptive poller keeps polling an empty
	// queue before it sleeps. Zero: 50µs. Ignored by the other modes.
	// While its sleeps end within 8 times SpinBudget, a poller doubles its
	// spin, up to that much, so that a peer that answers after a wake-up of
	// its own is met by a spin rather than by another wake-up; a longer
	// sleep brings it back to SpinBudget.
	// At most GOMAXPROCS-1 adaptive pollers of the process spin at once
	// (none when GOMAXPROCS is 1), so that spinning never holds every P
	// and the Go netpoller, which kernel sockets wait in, keeps a P to run
	// on; the others sleep as soon as their queue is empty.
	SpinBudget time.Duration

	// CPUs pins pollers: poller i runs on a locked OS thread bound to
	// CPUs[i % len(CPUs)]. Meant for PollBusy on isolated cores. Zero: the
	// Go scheduler places pollers like any goroutine.
	CPUs []int

	// TCP tunes the TCP protocol.
	TCP TCPConfig

	// ACK configures the ACK filter of the TX queue.
	ACK ACKConfig

	// DisableGRO turns off receive coalescing. Zero: on — each poller
	// merges the in-order TCP segments of a flow that arrive in one RX
	// burst (gVisor's stack/gro) before gVisor's TCP sees them, so a
	// message that crossed the link as several segments is processed and
	// acknowledged once: at MTU 1500 a 4 KiB request reaches TCP as one
	// segment instead of three, and bulk receive costs less CPU. A
	// segment alone of its flow in a burst, with nothing to merge, goes
	// around it.
	DisableGRO bool

	// MaxConns caps the open TCP connections of the stack. A dial beyond it
	// fails with EMFILE, and Accept returns EMFILE (a temporary error) while
	// new connections wait in the listen backlog, as with a process out of
	// file descriptors. Zero: 1,048,576.
	MaxConns int

	// Logger receives the stack's logs (link and poll errors, bursts of
	// drops), rate-limited per shard and kind of event. Zero: slog.Default().
	Logger *slog.Logger
}

// ACKConfig configures the ACK filter: on by default, it drops a pure ACK
// when a later segment of the same flow in the same TX batch acknowledges as
// much (never a duplicate ACK, one with SACK blocks, one opening a zero
// window, or one with SYN, FIN or RST), and holds a pure ACK up to Delay
// for a segment that can carry it: a delayed ACK, which gVisor lacks. As
// RFC 5681 asks of a receiver, an ACK that would acknowledge two full-sized
// segments or more waits 20µs at most, so a bulk sender still hears of
// every second segment at once; so does one on a flow that has sent no data
// since its last full wait, as nothing is likely to carry it.
type ACKConfig struct {
	// DisableFilter sends every ACK gVisor makes.
	DisableFilter bool
	// Delay is how long a pure ACK may wait. Zero: 1ms; negative: ACKs are
	// only coalesced within a batch, never held.
	Delay time.Duration
}

// PollMode says what a shard's poller does when its RX queue is empty.
type PollMode uint8

const (
	// PollAdaptive polls for SpinBudget, then sleeps in the Go netpoller
	// until the queue has frames: low latency under load, near-zero CPU
	// when idle. Fewer than GOMAXPROCS pollers spin at once (see
	// Config.SpinBudget). The default.
	PollAdaptive PollMode = iota
	// PollBusy never sleeps: the poller keeps one core busy (yielding to
	// other goroutines between polls). For dedicated cores, as with DPDK.
	PollBusy
	// PollBlocking sleeps as soon as the queue is empty. For processes
	// whose latency-critical traffic is on kernel sockets, whose wake-ups
	// a spinning poller delays (see docs/benchmarks.md).
	PollBlocking
)

func (m PollMode) String() string {
	switch m {
	case PollAdaptive:
		return "adaptive"
	case PollBusy:
		return "busy"
	case PollBlocking:
		return "blocking"
	}
	return fmt.Sprintf("PollMode(%d)", uint8(m))
}

// TCPConfig tunes TCP. Zero values are the defaults given per field.
type TCPConfig struct {
	// CongestionControl is "cubic" or "reno" for every connection. Zero
	// chooses per connection: CUBIC if its handshake's round trip took
	// more than 5 ms, Reno otherwise, because gVisor's CUBIC cannot see
	// round trips under 1 ms and regrows its window after a loss too slowly
	// on them (congestion.go).
	CongestionControl string

	// SendBuffer and ReceiveBuffer are the per-connection buffer ranges
	// (receive buffers auto-tune within theirs). Zero fields take
	// 4 KiB min, 1 MiB default, 4 MiB max for sending and
	// 4 KiB, 1 MiB, 8 MiB for receiving.
	SendBuffer, ReceiveBuffer BufferRange

	// Recovery selects loss recovery. Zero: RecoveryRACK.
	Recovery LossRecovery

	// MinRTO is the minimum retransmission timeout. Zero: 200ms.
	MinRTO time.Duration

	// MinRecoveryTimer is the shortest delay of gVisor's tail-loss probe
	// (2 SRTT, no floor in gVisor) and of the engine's second send of a
	// retransmission nothing followed; RACK's reordering timer, armed only
	// once a SACK shows a loss or reordering, gets at most 1ms of it
	// (a kernel tick). At microsecond round trips, unfloored,
	// queueing delay fires the probe and the sender retransmits what was
	// never lost; 50ms keeps such retransmits rare while the conformance
	// suite's loss scenarios pass (figures: docs/benchmarks.md). A probe
	// leaves no sooner than this after the flow's last segment out: the
	// TX queue holds back a probe gVisor sends sooner (gVisor moves a
	// pending timer's deadline without re-arming it). A flow that saw SACK
	// blocks in the last second gets at most 5ms, no less than two of its
	// round trips (docs/design.md, Loss recovery).
	// Zero: 50ms; negative: no floor.
	MinRecoveryTimer time.Duration

	// KeepAlive is applied to connections that enable keep-alive without
	// their own settings. Zero fields take Go's net defaults: 15s idle,
	// 15s interval, 9 probes.
	KeepAlive KeepAliveDefaults
}

// BufferRange is a minimum, default and maximum buffer size in bytes.
type BufferRange struct {
	Min, Default, Max int
}

// KeepAliveDefaults are the keep-alive timings used when a connection
// enables keep-alive without choosing them.
type KeepAliveDefaults struct {
	Idle, Interval time.Duration
	Count          int
}

// LossRecovery selects the TCP loss-recovery algorithm.
type LossRecovery uint8

const (
	// RecoveryRACK is RACK-TLP (RFC 8985) with a static reordering window,
	// the default. Measured in the conformance suite's loss scenarios, it
	// repairs like the kernel, where gVisor's SACK recovery without RACK
	// left most holes to the 200ms RTO.
	RecoveryRACK LossRecovery = iota
	// RecoverySACK is gVisor's SACK-based recovery (RFC 6675) without RACK.
	RecoverySACK
)

const (
	defaultSpinBudget = 50 * time.Microsecond
	defaultMinRTO     = 200 * time.Millisecond
	defaultMinRecov   = 50 * time.Millisecond
	defaultMaxConns   = 1 << 20
	defaultKAIdle     = 15 * time.Second
	defaultKAInterval = 15 * time.Second
	defaultKACount    = 9
)

var (
	defaultSendBuffer    = BufferRange{Min: 4 << 10, Default: 1 << 20, Max: 4 << 20}
	defaultReceiveBuffer = BufferRange{Min: 4 << 10, Default: 1 << 20, Max: 8 << 20}
)

// withDefaults returns cfg with zero fields replaced by their defaults, or an
// error naming the first invalid field.
func (cfg Config) withDefaults() (Config, error) {
	if cfg.Link == nil {
		return cfg, fmt.Errorf("polarnet: Config.Link is required")
	}
	if len(cfg.Addrs) == 0 {
		return cfg, fmt.Errorf("polarnet: Config.Addrs needs at least one address")
	}
	if err := cfg.checkAddrs(); err != nil {
		return cfg, err
	}
	for _, p := range cfg.KernelRoutes {
		if !p.IsValid() || p.Addr().Zone() != "" {
			return cfg, fmt.Errorf("polarnet: invalid kernel route %v", p)
		}
	}
	if cfg.KernelListen > KernelListenNone {
		return cfg, fmt.Errorf("polarnet: unknown kernel listen mode %v", cfg.KernelListen)
	}
	info := cfg.Link.Info()
	switch {
	case cfg.MTU > info.MTU:
		return cfg, fmt.Errorf("polarnet: MTU %d is more than link %q carries (%d)", cfg.MTU, info.Name, info.MTU)
	case cfg.MTU == 0:
		cfg.MTU = info.MTU
	}
	if cfg.MTU < minMTU4 {
		return cfg, fmt.Errorf("polarnet: MTU %d on link %q is below IPv4's minimum of %d", cfg.MTU, info.Name, minMTU4)
	}
	for _, p := range cfg.Addrs {
		if p.Addr().Is6() && cfg.MTU < minMTU6 {
			return cfg, fmt.Errorf("polarnet: MTU %d on link %q is below IPv6's minimum of %d, which address %v needs", cfg.MTU, info.Name, minMTU6, p)
		}
	}
	if cfg.Poll > PollBlocking {
		return cfg, fmt.Errorf("polarnet: unknown poll mode %v", cfg.Poll)
	}
	for _, cpu := range cfg.CPUs {
		if cpu < 0 || cpu >= runtime.NumCPU() {
			return cfg, fmt.Errorf("polarnet: CPU %d outside 0..%d", cpu, runtime.NumCPU()-1)
		}
	}
	switch {
	case cfg.MaxConns == 0:
		cfg.MaxConns = defaultMaxConns
	case cfg.MaxConns < 0:
		return cfg, fmt.Errorf("polarnet: negative MaxConns %d", cfg.MaxConns)
	}
	if cfg.ACK.Delay == 0 {
		cfg.ACK.Delay = ackDelayDefault
	}
	if cfg.SpinBudget == 0 {
		cfg.SpinBudget = defaultSpinBudget
	}
	t := &cfg.TCP
	switch t.CongestionControl {
	case "", ccCubic, ccReno:
	default:
		return cfg, fmt.Errorf("polarnet: unknown congestion control %q (cubic or reno)", t.CongestionControl)
	}
	var err error
	if t.SendBuffer, err = t.SendBuffer.withDefaults(defaultSendBuffer); err != nil {
		return cfg, fmt.Errorf("polarnet: send buffer: %w", err)
	}
	if t.ReceiveBuffer, err = t.ReceiveBuffer.withDefaults(defaultReceiveBuffer); err != nil {
		return cfg, fmt.Errorf("polarnet: receive buffer: %w", err)
	}
	if t.Recovery > RecoverySACK {
		return cfg, fmt.Errorf("polarnet: unknown loss recovery %d", t.Recovery)
	}
	if t.MinRTO == 0 {
		t.MinRTO = defaultMinRTO
	}
	if t.MinRecoveryTimer == 0 {
		t.MinRecoveryTimer = defaultMinRecov
	}
	if t.KeepAlive.Idle == 0 {
		t.KeepAlive.Idle = defaultKAIdle
	}
	if t.KeepAlive.Interval == 0 {
		t.KeepAlive.Interval = defaultKAInterval
	}
	if t.KeepAlive.Count == 0 {
		t.KeepAlive.Count = defaultKACount
	}
	return cfg, nil
}

// The smallest MTUs IPv4 (RFC 791: every host accepts a 576-byte datagram)
// and IPv6 (RFC 8200) work with.
const (
	minMTU4 = 576
	minMTU6 = 1280
)

// checkAddrs reports the first address that cannot work: an invalid one, a
// host address that is its IPv4 subnet's network or broadcast address, a
// gateway of the wrong family, the stack's own, or off the link (outside
// every prefix of its family; an IPv6 link-local gateway, as routers
// advertise, is on every link).
func (cfg *Config) checkAddrs() error {
	for _, p := range cfg.Addrs {
		switch {
		case !p.IsValid() || p.Addr().Zone() != "":
			return fmt.Errorf("polarnet: invalid address %v", p)
		case !p.Addr().Is4() || p.Bits() >= 31:
		case p.Addr() == p.Masked().Addr():
			return fmt.Errorf("polarnet: address %v is the network address of %v: give the stack a host address inside it", p, p.Masked())
		case p.Addr() == lastAddr(p):
			return fmt.Errorf("polarnet: address %v is the broadcast address of %v: give the stack a host address inside it", p, p.Masked())
		}
	}
	for _, gw := range []netip.Addr{cfg.Gateway4, cfg.Gateway6} {
		if !gw.IsValid() {
			continue
		}
		if (gw == cfg.Gateway4) != gw.Is4() {
			return fmt.Errorf("polarnet: gateway %v has the wrong address family", gw)
		}
		var same []netip.Prefix
		onLink := gw.IsLinkLocalUnicast()
		for _, p := range cfg.Addrs {
			if p.Addr() == gw {
				return fmt.Errorf("polarnet: gateway %v is the stack's own address", gw)
			}
			if p.Addr().Is4() == gw.Is4() {
				same = append(same, p)
				onLink = onLink || p.Contains(gw)
			}
		}
		if !onLink {
			return fmt.Errorf("polarnet: gateway %v is outside every prefix of the stack (%v): a gateway must be on the link", gw, same)
		}
	}
	return nil
}

func (r BufferRange) withDefaults(def BufferRange) (BufferRange, error) {
	if r.Min == 0 {
		r.Min = def.Min
	}
	if r.Default == 0 {
		r.Default = max(def.Default, r.Min)
	}
	if r.Max == 0 {
		r.Max = max(def.Max, r.Default)
	}
	if r.Min <= 0 || r.Min > r.Default || r.Default > r.Max {
		return r, fmt.Errorf("need 0 < min <= default <= max, have %d/%d/%d", r.Min, r.Default, r.Max)
	}
	return r, nil
}
