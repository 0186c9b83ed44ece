package polarnet

import (
	"fmt"
	"net/netip"
)

// KernelListenMode says where else than on the stack a wildcard listen of
// the listener package accepts connections: on the kernel's loopback (the
// default), on every kernel address, or nowhere else.
type KernelListenMode uint8

const (
	// KernelListenLoopback also accepts on 127.0.0.1 and ::1 through Go's
	// net, so local clients (health checks, sidecars, curl) reach a server
	// that listens on ":port". The default.
	KernelListenLoopback KernelListenMode = iota
	// KernelListenAll also accepts on every kernel address (the wildcard).
	KernelListenAll
	// KernelListenNone accepts on the stack only.
	KernelListenNone
)

func (m KernelListenMode) String() string {
	switch m {
	case KernelListenLoopback:
		return "loopback"
	case KernelListenAll:
		return "all"
	case KernelListenNone:
		return "none"
	}
	return fmt.Sprintf("KernelListenMode(%d)", uint8(m))
}

// ViaKernel reports whether dialer sends traffic to a through Go's net
// rather than through the stack. Loopback always goes to the kernel, the
// unspecified address (the stack itself) never. Otherwise the longest
// prefix that holds a, among the stack's own prefixes and
// Config.KernelRoutes, decides, a tie going to the kernel; with no match, a
// destination behind the stack's gateway stays on the stack, and one the
// stack cannot route goes to the kernel unless KernelRoutes is set (a list
// names every prefix the kernel gets).
func (s *Stack) ViaKernel(a netip.Addr) bool {
	a = a.Unmap()
	switch {
	case a.IsLoopback():
		return true
	case a.IsUnspecified():
		return false
	}
	best, kernel := -1, false
	for _, p := range s.cfg.Addrs {
		if p.Contains(a) && p.Bits() > best {
			best, kernel = p.Bits(), false
		}
	}
	for _, p := range s.cfg.KernelRoutes {
		if p.Contains(a) && p.Bits() >= best {
			best, kernel = p.Bits(), true
		}
	}
	if best >= 0 {
		return kernel
	}
	gw := s.cfg.Gateway6
	if a.Is4() {
		gw = s.cfg.Gateway4
	}
	return !gw.IsValid() && len(s.cfg.KernelRoutes) == 0
}

// CountKernelConn records, for Stats, a conn that dialer or listener
// opened through Go's net on the stack's behalf: a dial, or (accepted) an
// accept of a wildcard listen's kernel part.
func (s *Stack) CountKernelConn(accepted bool) {
	if accepted {
		s.kernelAccepts.Add(1)
	} else {
		s.kernelDials.Add(1)
	}
}

// KernelListen returns Config.KernelListen.
func (s *Stack) KernelListen() KernelListenMode { return s.cfg.KernelListen }
