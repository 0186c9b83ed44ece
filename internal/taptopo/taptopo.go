// Package taptopo builds the topology most privileged tests use: a polarnet
// stack on a TAP device whose kernel side sits in a network namespace of its
// own, where kernel sockets play the peer.
//
//	polarnet stack (this process)      namespace NS (kernel TCP/IP)
//	198.18.0.2/24, fd00:198:18::2/64 ── TAP ── 198.18.0.1/24, fd00:198:18::1/64
//
// Addresses live inside the namespace and the stack, so parallel tests never
// collide and nothing reaches the host's own interfaces.
package taptopo

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/polarnet/polarnet/internal/netns"
	"github.com/polarnet/polarnet/internal/testenv"
	"github.com/polarnet/polarnet/link"
	"github.com/polarnet/polarnet/link/tap"
	"github.com/polarnet/polarnet/polarnet"
)

// Addresses of the two sides.
var (
	Kernel4 = netip.MustParseAddr("198.18.0.1")
	Kernel6 = netip.MustParseAddr("fd00:198:18::1")
	Stack4  = netip.MustParseAddr("198.18.0.2")
	Stack6  = netip.MustParseAddr("fd00:198:18::2")
)

// Options shape the topology; the zero value is MTU 1500, one queue,
// offloads on, the stack's defaults.
type Options struct {
	MTU             int
	Queues          int
	DisableOffloads bool
	DisableSteering bool
	// Config, if set, adjusts the stack's config before New.
	Config func(*polarnet.Config)
	// KernelAddrs and StackAddrs, if set, replace the sides' addresses
	// (KernelPrefixes and StackPrefixes), for tests with a subnet of their
	// own.
	KernelAddrs, StackAddrs []netip.Prefix
	// Wrap, if set, decorates the TAP link before the stack takes it
	// (impairment, capture); the stack owns what it returns.
	Wrap func(link.Link) link.Link
}

// Topology is a built topology; everything is torn down by t.Cleanup.
type Topology struct {
	NS     *netns.NS
	Stack  *polarnet.Stack
	Device string
	// TAP is the stack's link (under Options.Wrap's decorators).
	TAP *tap.Link
}

// Prefixes returns a side's addresses with the topology's prefix lengths
// (/24 and /64). IPv6 is left out below MTU 1280, where the kernel disables
// it on the interface.
func Prefixes(mtu int, v4, v6 netip.Addr) []netip.Prefix {
	out := []netip.Prefix{netip.PrefixFrom(v4, 24)}
	if mtu == 0 || mtu >= 1280 {
		out = append(out, netip.PrefixFrom(v6, 64))
	}
	return out
}

// KernelPrefixes and StackPrefixes are the two sides' addresses.
func KernelPrefixes(mtu int) []netip.Prefix { return Prefixes(mtu, Kernel4, Kernel6) }
func StackPrefixes(mtu int) []netip.Prefix  { return Prefixes(mtu, Stack4, Stack6) }

// PlugKernelSide moves TAP device dev into ns and gives it the kernel
// side's addresses.
func PlugKernelSide(ns *netns.NS, dev string, mtu int) error {
	return Plug(ns, dev, mtu, KernelPrefixes(0)...)
}

// Plug moves TAP device dev into ns, sets its MTU and gives it addrs (none:
// an interface without addresses, a bridge port say).
func Plug(ns *netns.NS, dev string, mtu int, addrs ...netip.Prefix) error {
	if err := ns.MoveLink(dev); err != nil {
		return err
	}
	return ns.Configure(dev, mtu, addrs...)
}

// New builds the topology, or skips/fails t as netns.New does without root.
func New(t testing.TB, opt Options) *Topology {
	t.Helper()
	ns := testenv.NewNS(t)
	link, err := tap.New(tap.Config{Name: netns.UniqueName("pnt"), MTU: opt.MTU, Queues: opt.Queues, DisableOffloads: opt.DisableOffloads, DisableSteering: opt.DisableSteering})
	require.NoError(t, err)
	kernelAddrs, stackAddrs := opt.KernelAddrs, opt.StackAddrs
	if kernelAddrs == nil {
		kernelAddrs = KernelPrefixes(0)
	}
	if stackAddrs == nil {
		stackAddrs = []netip.Prefix{netip.PrefixFrom(Stack4, 24), netip.PrefixFrom(Stack6, 64)}
	}
	if err := Plug(ns, link.Info().Name, link.Info().MTU, kernelAddrs...); err != nil {
		link.Close()
		require.NoError(t, err)
	}
	dev := link.Info().Name
	cfg := polarnet.Config{Link: link, Addrs: stackAddrs}
	if opt.Wrap != nil {
		cfg.Link = opt.Wrap(link)
	}
	if opt.Config != nil {
		opt.Config(&cfg)
	}
	st, err := polarnet.New(cfg)
	require.NoError(t, err)
	// Registered after netns.New, so it runs first: the stack's TAP fd must
	// be closed before the namespace is deleted.
	t.Cleanup(func() { st.Close() })
	return &Topology{NS: ns, Stack: st, Device: dev, TAP: link}
}
