package conformance

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/polarnet/polarnet/dialer"
	"github.com/polarnet/polarnet/internal/netns"
	"github.com/polarnet/polarnet/listener"
	"github.com/polarnet/polarnet/polarnet"
)

// TCPConn is what scenarios need of a TCP connection: the methods
// *net.TCPConn and *polarnet.TCPConn share.
type TCPConn = polarnet.AnyTCPConn

// Listener is a TCP listener with an accept deadline.
type Listener = polarnet.AnyTCPListener

// DialOptions shape a dial.
type DialOptions struct {
	// Timeout bounds the dial (zero: none beyond the context's).
	Timeout time.Duration
	// KeepAlive configures keep-alive; keep-alive is off unless Enable.
	KeepAlive net.KeepAliveConfig
}

// ListenOptions shape a listener.
type ListenOptions struct {
	// Backlog is the accept queue length (zero: the system's default).
	Backlog int
	// KeepAlive configures keep-alive of accepted conns; off unless Enable.
	KeepAlive net.KeepAliveConfig
}

// Host is one end of a scenario: a kernel in a namespace or a polarnet
// stack. Scenarios are written against Host and run unchanged on both.
type Host interface {
	// Kind is "kernel" or "polarnet".
	Kind() string
	// Addr returns the host's IPv4 or IPv6 address.
	Addr(v6 bool) netip.Addr
	// MAC returns the Ethernet address the host's frames come from.
	MAC() net.HardwareAddr
	// NS returns the kernel's namespace, nil for a polarnet stack.
	NS() *netns.NS
	// Stack returns the polarnet stack, nil for a kernel.
	Stack() *polarnet.Stack
	// Listen listens on the host's address (IPv6 if v6) on a free port.
	Listen(v6 bool, o ListenOptions) (Listener, error)
	// Dial connects to raddr.
	Dial(ctx context.Context, raddr netip.AddrPort, o DialOptions) (TCPConn, error)
	// ListenUDP opens a UDP socket on the host's address, a free port.
	ListenUDP(v6 bool) (*UDPSocket, error)
}

// UDPSocket is an unconnected UDP socket of either kind.
type UDPSocket struct {
	net.PacketConn
	// Port is the bound port.
	Port uint16
}

func keepAlive(cfg net.KeepAliveConfig) (time.Duration, net.KeepAliveConfig) {
	if !cfg.Enable {
		return -1, net.KeepAliveConfig{}
	}
	return 0, cfg
}

// kernelHost is the kernel's TCP/IP in a namespace; every socket is opened
// on a thread switched into it.
type kernelHost struct {
	ns    *netns.NS
	dev   string
	mac   net.HardwareAddr
	addr4 netip.Addr
	addr6 netip.Addr
}

func newKernelHost(ns *netns.NS, dev string, addrs []netip.Prefix) (*kernelHost, error) {
	h := &kernelHost{ns: ns, dev: dev}
	for _, p := range addrs {
		if p.Addr().Is4() {
			h.addr4 = p.Addr()
		} else {
			h.addr6 = p.Addr()
		}
	}
	err := ns.Do(func() error {
		ifi, err := net.InterfaceByName(dev)
		if err == nil {
			h.mac = ifi.HardwareAddr
		}
		return err
	})
	return h, err
}

func (h *kernelHost) Kind() string           { return "kernel" }
func (h *kernelHost) MAC() net.HardwareAddr  { return h.mac }
func (h *kernelHost) NS() *netns.NS          { return h.ns }
func (h *kernelHost) Stack() *polarnet.Stack { return nil }

func (h *kernelHost) Addr(v6 bool) netip.Addr {
	if v6 {
		return h.addr6
	}
	return h.addr4
}

func (h *kernelHost) Listen(v6 bool, o ListenOptions) (Listener, error) {
	laddr := netip.AddrPortFrom(h.Addr(v6), 0)
	var ln net.Listener
	err := h.ns.Do(func() (err error) {
		if o.Backlog > 0 {
			ln, err = listenBacklog(laddr, o.Backlog)
			return err
		}
		ka, kac := keepAlive(o.KeepAlive)
		lc := net.ListenConfig{KeepAlive: ka, KeepAliveConfig: kac}
		ln, err = lc.Listen(context.Background(), "tcp", laddr.String())
		return err
	})
	if err != nil {
		return nil, err
	}
	return ln.(*net.TCPListener), nil
}

// listenBacklog listens with an explicit backlog, which Go's net does not
// offer (it always asks for somaxconn).
func listenBacklog(laddr netip.AddrPort, backlog int) (net.Listener, error) {
	family := unix.AF_INET
	var sa unix.Sockaddr = &unix.SockaddrInet4{Addr: laddr.Addr().As4()}
	if laddr.Addr().Is6() {
		family = unix.AF_INET6
		sa = &unix.SockaddrInet6{Addr: laddr.Addr().As16()}
	}
	fd, err := unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, os.NewSyscallError("socket", err)
	}
	f := os.NewFile(uintptr(fd), "listener")
	defer f.Close() // FileListener dups it
	if err := unix.Bind(fd, sa); err != nil {
		return nil, os.NewSyscallError("bind", err)
	}
	if err := unix.Listen(fd, backlog); err != nil {
		return nil, os.NewSyscallError("listen", err)
	}
	return net.FileListener(f)
}

func (h *kernelHost) Dial(ctx context.Context, raddr netip.AddrPort, o DialOptions) (TCPConn, error) {
	ka, kac := keepAlive(o.KeepAlive)
	d := net.Dialer{Timeout: o.Timeout, KeepAlive: ka, KeepAliveConfig: kac}
	var c net.Conn
	err := h.ns.Do(func() (err error) {
		c, err = d.DialContext(ctx, "tcp", raddr.String())
		return err
	})
	if err != nil {
		return nil, err
	}
	return c.(*net.TCPConn), nil
}

func (h *kernelHost) ListenUDP(v6 bool) (*UDPSocket, error) {
	var pc net.PacketConn
	err := h.ns.Do(func() (err error) {
		pc, err = net.ListenPacket("udp", netip.AddrPortFrom(h.Addr(v6), 0).String())
		return err
	})
	if err != nil {
		return nil, err
	}
	return &UDPSocket{PacketConn: pc, Port: uint16(pc.LocalAddr().(*net.UDPAddr).Port)}, nil
}

// stackHost is a polarnet stack, used through the drop-in API (dialer and
// listener), as applications use it.
type stackHost struct {
	st  *polarnet.Stack
	mac net.HardwareAddr
}

func (h *stackHost) Kind() string           { return "polarnet" }
func (h *stackHost) MAC() net.HardwareAddr  { return h.mac }
func (h *stackHost) NS() *netns.NS          { return nil }
func (h *stackHost) Stack() *polarnet.Stack { return h.st }

func (h *stackHost) Addr(v6 bool) netip.Addr {
	for _, p := range h.st.Addrs() {
		if p.Addr().Is6() == v6 {
			return p.Addr()
		}
	}
	return netip.Addr{}
}

func (h *stackHost) Listen(v6 bool, o ListenOptions) (Listener, error) {
	ka, kac := keepAlive(o.KeepAlive)
	lc := listener.ListenConfig{Stack: h.st, Backlog: o.Backlog, KeepAlive: ka, KeepAliveConfig: kac}
	ln, err := lc.Listen(context.Background(), "tcp", netip.AddrPortFrom(h.Addr(v6), 0).String())
	if err != nil {
		return nil, err
	}
	return ln.(*polarnet.TCPListener), nil
}

func (h *stackHost) Dial(ctx context.Context, raddr netip.AddrPort, o DialOptions) (TCPConn, error) {
	ka, kac := keepAlive(o.KeepAlive)
	d := dialer.Dialer{Stack: h.st, Timeout: o.Timeout, KeepAlive: ka, KeepAliveConfig: kac}
	c, err := d.DialContext(ctx, "tcp", raddr.String())
	if err != nil {
		return nil, err
	}
	tc, ok := c.(*polarnet.TCPConn)
	if !ok {
		c.Close()
		return nil, fmt.Errorf("conformance: dialer returned a %T, not a polarnet conn", c)
	}
	return tc, nil
}

func (h *stackHost) ListenUDP(v6 bool) (*UDPSocket, error) {
	lc := listener.ListenConfig{Stack: h.st}
	pc, err := lc.ListenPacket(context.Background(), "udp", netip.AddrPortFrom(h.Addr(v6), 0).String())
	if err != nil {
		return nil, err
	}
	return &UDPSocket{PacketConn: pc, Port: uint16(pc.LocalAddr().(*net.UDPAddr).Port)}, nil
}
