// Package listener is the drop-in replacement for net.Listen and
// net.ListenPacket, with a ListenConfig mirroring net.ListenConfig. It runs
// over a polarnet Stack when one is configured and over Go's net otherwise;
// with a stack, loopback and wildcard listens also use Go's net (see
// ListenConfig.Listen), so local clients keep reaching the program.
package listener

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strconv"
	"syscall"
	"time"

	"github.com/polarnet/polarnet/internal/netaddr"
	// Every link registers itself for POLARNET_LINK (see package link,
	// Registration); DPDK and RDMA are real in builds with their tag.
	_ "github.com/polarnet/polarnet/link/afxdp"
	_ "github.com/polarnet/polarnet/link/dpdk"
	_ "github.com/polarnet/polarnet/link/rdma"
	_ "github.com/polarnet/polarnet/link/tap"
	"github.com/polarnet/polarnet/polarnet"
)

// ListenConfig mirrors net.ListenConfig. Its zero value listens on the
// default stack (polarnet.Default), or with Go's net when there is none.
type ListenConfig struct {
	// KeepAlive is the keep-alive period of accepted TCP conns: zero means
	// 15s, negative disables keep-alive unless KeepAliveConfig.Enable is set.
	KeepAlive time.Duration
	// KeepAliveConfig, when Enable is true, configures keep-alive in full.
	KeepAliveConfig net.KeepAliveConfig
	// Backlog is listen(2)'s backlog: Backlog+1 connections queue for
	// Accept, over all shards, as Linux queues them. Zero: 4096.
	Backlog int
	// Control is called on the kernel path only, as net.ListenConfig calls
	// it: a polarnet listener has no file descriptor to hand it.
	Control func(network, address string, c syscall.RawConn) error
	// Stack is the stack to listen on. Nil: polarnet.Default().
	Stack *polarnet.Stack

	mptcp *bool // SetMultipathTCP's choice; nil: Go's default
}

// MultipathTCP reports whether MPTCP will be used, as
// net.ListenConfig.MultipathTCP: never on a stack (gVisor has no MPTCP).
func (lc *ListenConfig) MultipathTCP() bool {
	if st, _ := lc.stack("tcp"); st != nil {
		return false
	}
	return lc.kernel().MultipathTCP()
}

// SetMultipathTCP asks Go's net for MPTCP on the kernel path; a stack has
// no MPTCP and ignores it.
func (lc *ListenConfig) SetMultipathTCP(use bool) { lc.mptcp = &use }

// Listen announces on the local network address through the default stack.
func Listen(network, address string) (net.Listener, error) {
	var lc ListenConfig
	return lc.Listen(context.Background(), network, address)
}

// ListenPacket announces on the local packet address through the default stack.
func ListenPacket(network, address string) (net.PacketConn, error) {
	var lc ListenConfig
	return lc.ListenPacket(context.Background(), network, address)
}

// Listen announces on address for network tcp, tcp4 or tcp6. Without a
// stack the listener is a *net.TCPListener. With one, the kernel interop
// policy applies: an address of the stack gets a *polarnet.TCPListener;
// localhost, loopback and any other address the stack does not have are
// listened on with Go's net; a wildcard address (":8080") listens on the
// stack and, as polarnet.Config.KernelListen says, on the kernel's loopback
// (the default) or all its addresses, with one listener whose Accept
// returns the connections of both. Whatever the path, the listener is a
// polarnet.AnyTCPListener and its conns are polarnet.AnyTCPConn: assert
// those, not *net.TCPListener or *net.TCPConn.
func (lc *ListenConfig) Listen(ctx context.Context, network, address string) (net.Listener, error) {
	st, err := lc.stack(network)
	if err != nil {
		return nil, err
	}
	if st == nil || netaddr.IsLocalhost(address) {
		return lc.kernel().Listen(ctx, network, address)
	}
	n, laddr, err := resolve(ctx, st, "tcp", network, address)
	if err != nil {
		return nil, err
	}
	wildcard := laddr.Addr().IsUnspecified()
	if !wildcard && !owns(st, laddr.Addr()) {
		return lc.kernel().Listen(ctx, network, address)
	}
	if wildcard && st.KernelListen() != polarnet.KernelListenNone {
		l, err := lc.listenBoth(ctx, st, n, laddr)
		return l, withAddr(err, listenErrAddr(n, address, laddr))
	}
	ka, _ := netaddr.KeepAlive(lc.KeepAlive, lc.KeepAliveConfig)
	l, err := st.ListenTCP(n.Name, laddr, lc.Backlog, ka)
	if err != nil {
		return nil, withAddr(err, listenErrAddr(n, address, laddr))
	}
	return l, nil
}

// listenBoth listens on the stack and on the kernel addresses
// KernelListen names, all on one port. For port 0 it retries a few times
// when the kernel has the stack's pick in use.
func (lc *ListenConfig) listenBoth(ctx context.Context, st *polarnet.Stack, n netaddr.Network, laddr netip.AddrPort) (net.Listener, error) {
	ka, _ := netaddr.KeepAlive(lc.KeepAlive, lc.KeepAliveConfig)
	for retries := ephemeralRetries; ; retries-- {
		sl, err := st.ListenTCP(n.Name, laddr, lc.Backlog, ka)
		if err != nil {
			return nil, err
		}
		port := uint16(sl.Addr().(*net.TCPAddr).Port)
		kls, err := lc.listenKernel(ctx, n, st.KernelListen(), port)
		if err == nil {
			return newMerged(n.Name, st, sl, kls...), nil
		}
		sl.Close()
		if laddr.Port() != 0 || retries == 0 || !errors.Is(err, syscall.EADDRINUSE) {
			return nil, err
		}
	}
}

// ephemeralRetries bounds listenBoth's further attempts at a port free on
// the stack and in the kernel.
const ephemeralRetries = 8

// listenKernel opens the kernel listeners of a wildcard listen on port:
// the wildcard itself for KernelListenAll, else the loopback addresses of
// the network's families. Without an IPv6 loopback in the kernel, "tcp"
// listens on 127.0.0.1 alone.
func (lc *ListenConfig) listenKernel(ctx context.Context, n netaddr.Network, mode polarnet.KernelListenMode, port uint16) ([]net.Listener, error) {
	var hosts []netip.Addr
	switch {
	case mode == polarnet.KernelListenAll:
		hosts = []netip.Addr{{}}
	case n.Family == '4':
		hosts = []netip.Addr{netip.MustParseAddr("127.0.0.1")}
	case n.Family == '6':
		hosts = []netip.Addr{netip.IPv6Loopback()}
	default:
		hosts = []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.IPv6Loopback()}
	}
	var out []net.Listener
	for _, h := range hosts {
		host := ""
		if h.IsValid() {
			host = h.String()
		}
		l, err := lc.kernel().Listen(ctx, n.Name, net.JoinHostPort(host, strconv.Itoa(int(port))))
		if err != nil {
			if n.Family == 0 && h.Is6() && errors.Is(err, syscall.EADDRNOTAVAIL) {
				continue
			}
			for _, l := range out {
				l.Close()
			}
			return nil, err
		}
		out = append(out, l)
	}
	return out, nil
}

// owns reports whether a is one of the stack's addresses.
func owns(st *polarnet.Stack, a netip.Addr) bool {
	for _, p := range st.Addrs() {
		if p.Addr() == a {
			return true
		}
	}
	return false
}

// listenErrAddr is the address Go's net names in a listen error: the port
// alone when the host is empty (":9000", not "[::]:9000"), and 0.0.0.0 for
// "::" on a network of both families (net resolves "::" to it as well, and
// names the IPv4 address it found first).
func listenErrAddr(n netaddr.Network, address string, laddr netip.AddrPort) net.Addr {
	host, _, _ := net.SplitHostPort(address)
	switch {
	case host == "":
		laddr = netip.AddrPortFrom(netip.Addr{}, laddr.Port())
	case n.Family == 0 && laddr.Addr() == netip.IPv6Unspecified():
		laddr = netip.AddrPortFrom(netip.IPv4Unspecified(), laddr.Port())
	}
	if n.Proto == "udp" {
		return net.UDPAddrFromAddrPort(laddr)
	}
	return net.TCPAddrFromAddrPort(laddr)
}

// withAddr reports a *net.OpError as one about addr, so that the parts of
// a merged listen fail as one listener would; other errors pass unchanged.
func withAddr(err error, addr net.Addr) error {
	op, ok := err.(*net.OpError)
	if !ok {
		return err
	}
	e := *op
	e.Addr = addr
	return &e
}

// ListenPacket announces on address for network udp, udp4 or udp6. The conn
// is a *polarnet.UDPConn on a stack's address or its wildcard, a
// *net.UDPConn otherwise (no stack; localhost, loopback or another address
// the stack does not have). A wildcard listen is the stack's alone.
func (lc *ListenConfig) ListenPacket(ctx context.Context, network, address string) (net.PacketConn, error) {
	st, err := lc.stack(network)
	if err != nil {
		return nil, err
	}
	if st == nil || netaddr.IsLocalhost(address) {
		return lc.kernel().ListenPacket(ctx, network, address)
	}
	n, laddr, err := resolve(ctx, st, "udp", network, address)
	if err != nil {
		return nil, err
	}
	if !laddr.Addr().IsUnspecified() && !owns(st, laddr.Addr()) {
		return lc.kernel().ListenPacket(ctx, network, address)
	}
	c, err := st.ListenUDP(n.Name, laddr)
	if err != nil {
		return nil, withAddr(err, listenErrAddr(n, address, laddr))
	}
	return c, nil
}

func (lc *ListenConfig) stack(network string) (*polarnet.Stack, error) {
	if lc.Stack != nil {
		return lc.Stack, nil
	}
	st, err := polarnet.Default()
	if err != nil {
		return nil, &net.OpError{Op: "listen", Net: network, Err: err}
	}
	return st, nil
}

// resolve parses network and address; an empty host is the wildcard
// address. A network of the other protocol (udp for Listen) fails as in
// net: once the address is resolved, with "unexpected address type".
func resolve(ctx context.Context, st *polarnet.Stack, proto, network, address string) (netaddr.Network, netip.AddrPort, error) {
	n, err := netaddr.ParseNetwork(network)
	if err != nil {
		return n, netip.AddrPort{}, &net.OpError{Op: "listen", Net: network, Err: err}
	}
	wildcard := []netip.Addr{netip.IPv6Unspecified()}
	if n.Family == '4' {
		wildcard = []netip.Addr{netip.IPv4Unspecified()}
	}
	addrs, err := netaddr.Resolve(ctx, st.Resolver(), n, address, wildcard)
	if err != nil {
		return n, netip.AddrPort{}, &net.OpError{Op: "listen", Net: network, Err: err}
	}
	if n.Proto != proto {
		var la net.Addr = net.UDPAddrFromAddrPort(addrs[0])
		if n.Proto == "tcp" {
			la = net.TCPAddrFromAddrPort(addrs[0])
		}
		return n, netip.AddrPort{}, &net.OpError{Op: "listen", Net: network, Addr: la, Err: &net.AddrError{Err: "unexpected address type", Addr: address}}
	}
	return n, addrs[0], nil
}

func (lc *ListenConfig) kernel() *net.ListenConfig {
	k := &net.ListenConfig{KeepAlive: lc.KeepAlive, KeepAliveConfig: lc.KeepAliveConfig, Control: lc.Control}
	if lc.mptcp != nil {
		k.SetMultipathTCP(*lc.mptcp)
	}
	return k
}
