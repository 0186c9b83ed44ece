package afxdp

import (
	"fmt"
	"net/netip"
	"strings"
	"time"
)

// Defaults of the zero Config.
const (
	// DefaultFrameSize is the size of one UMEM frame: a page, the most the
	// kernel allows. One holds a frame of up to DefaultFrameSize-256 bytes
	// (the kernel keeps 256 bytes of headroom, XDP_PACKET_HEADROOM), an MTU
	// of up to 3826; larger frames span several (multi-buffer).
	DefaultFrameSize = 4096
	// DefaultRingSize is the number of descriptors of each of a queue's four
	// rings (fill, RX, TX, completion).
	DefaultRingSize = 2048
	// DefaultBusyTimeout bounds how long New retries binding a queue that a
	// socket just released (the kernel frees it in deferred work: EBUSY for
	// about 300 ms here).
	DefaultBusyTimeout = time.Second
)

// frameHeadroom is what the kernel reserves in front of a received frame
// (XDP_PACKET_HEADROOM); the link puts transmitted frames at the same offset,
// which leaves room for TX metadata in front of them.
const frameHeadroom = 256

// ethHdrLen is the Ethernet header in front of the IP packet.
const ethHdrLen = 14

// Mode is the XDP attach mode of the link's program.
type Mode uint8

const (
	// ModeAuto tries native mode and falls back to generic mode. The default.
	ModeAuto Mode = iota
	// ModeNative runs the program in the driver (XDP_FLAGS_DRV_MODE). Not
	// every driver has it: New fails with an error wrapping
	// link.ErrNotSupported where it does not.
	ModeNative
	// ModeGeneric runs the program on the kernel's socket buffers
	// (XDP_FLAGS_SKB_MODE), on any device: slower, and it receives what the
	// kernel's GRO built, which may not fit a frame (see the package doc).
	ModeGeneric
)

func (m Mode) String() string {
	switch m {
	case ModeAuto:
		return "auto"
	case ModeNative:
		return "native"
	case ModeGeneric:
		return "generic"
	}
	return fmt.Sprintf("Mode(%d)", uint8(m))
}

// ZeroCopy says whether the sockets share their frames with the driver.
type ZeroCopy uint8

const (
	// ZeroCopyAuto asks for zero-copy and falls back to copy mode when the
	// driver has no zero-copy support (veth never has it). The default.
	ZeroCopyAuto ZeroCopy = iota
	// ZeroCopyOff binds in copy mode.
	ZeroCopyOff
	// ZeroCopyRequire fails New, with an error wrapping
	// link.ErrNotSupported, where zero-copy is not available.
	ZeroCopyRequire
)

func (z ZeroCopy) String() string {
	switch z {
	case ZeroCopyAuto:
		return "auto"
	case ZeroCopyOff:
		return "off"
	case ZeroCopyRequire:
		return "require"
	}
	return fmt.Sprintf("ZeroCopy(%d)", uint8(z))
}

// Filter selects the frames the XDP program hands to the link; every other
// frame goes on to the kernel's own stack, so the host keeps its SSH, DNS
// and whatever else uses addresses other than the link's.
type Filter uint8

const (
	// FilterStack redirects what a polarnet stack with Config.Addresses
	// needs: IPv4 and IPv6 TCP, UDP and ICMP addressed to them, ARP
	// requests and replies for the IPv4 ones and IPv6 neighbour
	// solicitations for the IPv6 ones. The default.
	FilterStack Filter = iota
	// FilterTCP is FilterStack without UDP and ICMP (ICMPv6 neighbour
	// discovery still reaches the link): the kernel keeps everything but
	// TCP, including ping and UDP services on the link's addresses.
	FilterTCP
	// FilterAll redirects every frame the interface receives, for an
	// interface dedicated to polarnet (and for the link test suite, whose
	// frames are not IP). Config.Addresses is not needed.
	FilterAll
)

func (f Filter) String() string {
	switch f {
	case FilterStack:
		return "stack"
	case FilterTCP:
		return "tcp"
	case FilterAll:
		return "all"
	}
	return fmt.Sprintf("Filter(%d)", uint8(f))
}

// Config configures an AF_XDP link. Only Interface is required, and
// Addresses unless Filter is FilterAll; every other zero field is the
// default its comment gives.
type Config struct {
	// Interface is the network interface to attach to, in the network
	// namespace of the thread calling New. Required.
	Interface string

	// Queues is the number of queue pairs: one AF_XDP socket on each of
	// the interface's RX queues 0 to Queues-1. Default: the interface's
	// RX queue count (ethtool channels), at most GOMAXPROCS, at least 1.
	// Frames that arrive on a queue without a socket go to the kernel, so
	// set the device's channels (ethtool -L) to Queues.
	Queues int

	// Addresses are the addresses of the polarnet stack the link serves,
	// as given to polarnet.Config.Addrs (a prefix's address counts, its
	// length is ignored). The XDP program redirects traffic for them and
	// nothing else (see Filter). Required unless Filter is FilterAll.
	Addresses []netip.Prefix

	// MTU is the MTU the link reports, at most the interface's (which New
	// leaves as it is). Default: the interface's MTU.
	MTU int

	// Filter selects the frames redirected to the link. Default: FilterStack.
	Filter Filter

	// Mode is the XDP attach mode. Default: ModeAuto (native, else generic).
	Mode Mode

	// ZeroCopy selects zero-copy or copy mode. Default: ZeroCopyAuto.
	ZeroCopy ZeroCopy

	// FrameSize is the size of a UMEM frame, a power of two from 2048 to
	// the page size. Default: DefaultFrameSize. A frame of more than
	// FrameSize-256 bytes, Ethernet header included, spans several UMEM
	// frames (multi-buffer, Linux 6.6 and later), at most 16.
	FrameSize int

	// RingSize is the number of descriptors in each ring of a queue (fill,
	// RX, TX, completion), a power of two. Default: DefaultRingSize.
	RingSize int

	// Frames is the number of UMEM frames of each queue, at least
	// 2*RingSize: RingSize of them belong to RX (the fill and RX rings),
	// the rest to TX. Default: 2*RingSize. A queue's UMEM takes
	// Frames*FrameSize bytes of locked memory (16 MiB by default).
	Frames int

	// BusyTimeout bounds how long New retries a queue the kernel reports
	// busy (EBUSY) because a socket released it a moment ago, as after a
	// restart. Default: DefaultBusyTimeout. Negative: no retry.
	BusyTimeout time.Duration

	// DisableOffloads makes the link claim no checksum offload, so that the
	// engine computes every checksum it sends and verifies every one it
	// receives, and each frame is as it would be on a wire: a partial
	// checksum from the local kernel on veth is completed by the link
	// before the engine sees the frame.
	DisableOffloads bool
}

// withDefaults returns c with zero fields replaced by defaults (except
// Queues, which depends on the device), or an error naming a bad field.
func (c Config) withDefaults() (Config, error) {
	if c.Interface == "" {
		return c, fmt.Errorf("afxdp: Config.Interface is required")
	}
	if len(c.Interface) >= 16 || strings.ContainsAny(c.Interface, "/: \t\n") {
		return c, fmt.Errorf("afxdp: %q is not a valid interface name", c.Interface)
	}
	if c.Queues < 0 {
		return c, fmt.Errorf("afxdp: negative queue count %d", c.Queues)
	}
	if c.MTU < 0 {
		return c, fmt.Errorf("afxdp: negative MTU %d", c.MTU)
	}
	if c.Filter > FilterAll {
		return c, fmt.Errorf("afxdp: unknown filter %v", c.Filter)
	}
	if c.Mode > ModeGeneric {
		return c, fmt.Errorf("afxdp: unknown mode %v", c.Mode)
	}
	if c.ZeroCopy > ZeroCopyRequire {
		return c, fmt.Errorf("afxdp: unknown zero-copy setting %v", c.ZeroCopy)
	}
	addrs := c.Addresses
	c.Addresses = nil
	for _, p := range addrs {
		a := p.Addr().Unmap()
		if !a.IsValid() || a.Zone() != "" {
			return c, fmt.Errorf("afxdp: invalid address %v", p)
		}
		c.Addresses = append(c.Addresses, netip.PrefixFrom(a, a.BitLen()))
	}
	if len(c.Addresses) == 0 && c.Filter != FilterAll {
		return c, fmt.Errorf("afxdp: Config.Addresses is required with filter %v (the XDP program redirects traffic for them)", c.Filter)
	}
	if c.FrameSize == 0 {
		c.FrameSize = DefaultFrameSize
	}
	if c.FrameSize < 2048 || c.FrameSize&(c.FrameSize-1) != 0 {
		return c, fmt.Errorf("afxdp: frame size %d is not a power of two from 2048 up", c.FrameSize)
	}
	if c.RingSize == 0 {
		c.RingSize = DefaultRingSize
	}
	if c.RingSize < 8 || c.RingSize&(c.RingSize-1) != 0 {
		return c, fmt.Errorf("afxdp: ring size %d is not a power of two from 8 up", c.RingSize)
	}
	if c.Frames == 0 {
		c.Frames = 2 * c.RingSize
	}
	if c.Frames < 2*c.RingSize {
		return c, fmt.Errorf("afxdp: %d frames for rings of %d: need at least %d", c.Frames, c.RingSize, 2*c.RingSize)
	}
	if c.BusyTimeout == 0 {
		c.BusyTimeout = DefaultBusyTimeout
	}
	return c, nil
}
