// Package netaddr parses networks and resolves addresses the way Go's net
// does, for dialer and listener, so both report the same errors as net.
package netaddr

import (
	"context"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"
)

// Network is a parsed network name such as "tcp4".
type Network struct {
	Name   string // as given
	Proto  string // "tcp" or "udp"
	Family byte   // 0 (either), '4' or '6'
}

// ParseNetwork accepts tcp, tcp4, tcp6, udp, udp4 and udp6; for anything
// else it returns net.UnknownNetworkError, as net.Dial does.
func ParseNetwork(network string) (Network, error) {
	switch network {
	case "tcp", "udp":
		return Network{Name: network, Proto: network}, nil
	case "tcp4", "tcp6", "udp4", "udp6":
		return Network{Name: network, Proto: network[:3], Family: network[3]}, nil
	}
	return Network{}, net.UnknownNetworkError(network)
}

// Accepts reports whether a belongs to the network's address family.
func (n Network) Accepts(a netip.Addr) bool {
	switch n.Family {
	case '4':
		return a.Is4() || a.Is4In6()
	case '6':
		return a.Is6() && !a.Is4In6()
	}
	return true
}

// Resolve turns "host:port" into the addresses to try, in order. An empty
// host becomes emptyHost (the local system for a dial, the wildcard for a
// listen), filtered by the network's family.
func Resolve(ctx context.Context, r *net.Resolver, n Network, address string, emptyHost []netip.Addr) ([]netip.AddrPort, error) {
	host, portStr, err := net.SplitHostPort(address)
	if err != nil {
		return nil, err
	}
	port, err := lookupPort(ctx, r, n.Proto, portStr)
	if err != nil {
		return nil, err
	}
	var ips []netip.Addr
	switch {
	case host == "":
		ips = emptyHost
	default:
		if ip, err := netip.ParseAddr(host); err == nil {
			ips = []netip.Addr{ip.WithZone("")}
		} else if ips, err = r.LookupNetIP(ctx, ipNetwork(n), host); err != nil {
			return nil, err
		}
	}
	var out []netip.AddrPort
	for _, ip := range ips {
		if n.Accepts(ip) {
			out = append(out, netip.AddrPortFrom(ip.Unmap(), port))
		}
	}
	if len(out) == 0 {
		return nil, &net.AddrError{Err: "no suitable address found", Addr: host}
	}
	return out, nil
}

// IsLocalhost reports whether address ("host:port") names the host
// localhost, which Go's net resolves from /etc/hosts to the loopback
// addresses: a name no stack's DNS server should be asked about.
func IsLocalhost(address string) bool {
	host, _, err := net.SplitHostPort(address)
	return err == nil && strings.EqualFold(strings.TrimSuffix(host, "."), "localhost")
}

func lookupPort(ctx context.Context, r *net.Resolver, proto, s string) (uint16, error) {
	if n, err := strconv.ParseUint(s, 10, 16); err == nil {
		return uint16(n), nil
	}
	p, err := r.LookupPort(ctx, proto, s)
	if err != nil {
		return 0, err
	}
	return uint16(p), nil
}

func ipNetwork(n Network) string {
	if n.Family == 0 {
		return "ip"
	}
	return "ip" + string(n.Family)
}

// AddrPortOf converts a *net.TCPAddr or *net.UDPAddr matching proto; ok is
// false for any other type, which net reports as a mismatched address.
func AddrPortOf(a net.Addr, proto string) (ap netip.AddrPort, ok bool) {
	switch a := a.(type) {
	case *net.TCPAddr:
		if proto == "tcp" && a != nil {
			return a.AddrPort(), true
		}
	case *net.UDPAddr:
		if proto == "udp" && a != nil {
			return a.AddrPort(), true
		}
	}
	return netip.AddrPort{}, false
}

// KeepAlive applies the rules net.Dialer and net.ListenConfig share for
// KeepAlive and KeepAliveConfig: ok is false when keep-alive stays off.
func KeepAlive(period time.Duration, cfg net.KeepAliveConfig) (_ net.KeepAliveConfig, ok bool) {
	if !cfg.Enable {
		if period < 0 {
			return cfg, false
		}
		cfg.Enable = true
	}
	if period > 0 {
		if cfg.Idle == 0 {
			cfg.Idle = period
		}
		if cfg.Interval == 0 {
			cfg.Interval = period
		}
	}
	return cfg, true
}
