// Package listener is the drop-in replacement for net.Listen and
// net.ListenPacket, with a ListenConfig mirroring net.ListenConfig. It runs
// over a polarnet Stack when one is configured and over Go's net otherwise.
package listener

import (
	"context"
	"net"
	"net/netip"
	"syscall"
	"time"

	"github.com/polarnet/polarnet/internal/netaddr"
	// The pure-Go links register themselves for POLARNET_LINK (see package
	// link, Registration); the cgo links need the program's own import.
	_ "github.com/polarnet/polarnet/link/afxdp"
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
	// Backlog is the accept queue length per shard. Zero: 4096.
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

// Listen announces on address for network tcp, tcp4 or tcp6. The listener
// is a *polarnet.TCPListener on a stack, a *net.TCPListener otherwise.
func (lc *ListenConfig) Listen(ctx context.Context, network, address string) (net.Listener, error) {
	st, err := lc.stack(network)
	if err != nil || st == nil {
		if err != nil {
			return nil, err
		}
		return lc.kernel().Listen(ctx, network, address)
	}
	n, laddr, err := resolve(ctx, st, "tcp", network, address)
	if err != nil {
		return nil, err
	}
	ka, _ := netaddr.KeepAlive(lc.KeepAlive, lc.KeepAliveConfig)
	return st.ListenTCP(n.Name, laddr, lc.Backlog, ka)
}

// ListenPacket announces on address for network udp, udp4 or udp6. The conn
// is a *polarnet.UDPConn on a stack, a *net.UDPConn otherwise.
func (lc *ListenConfig) ListenPacket(ctx context.Context, network, address string) (net.PacketConn, error) {
	st, err := lc.stack(network)
	if err != nil || st == nil {
		if err != nil {
			return nil, err
		}
		return lc.kernel().ListenPacket(ctx, network, address)
	}
	n, laddr, err := resolve(ctx, st, "udp", network, address)
	if err != nil {
		return nil, err
	}
	return st.ListenUDP(n.Name, laddr)
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
