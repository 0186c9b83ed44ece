package polarnet

import (
	"net"
	"net/netip"
	"os"
	"syscall"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/transport/udp"
	"gvisor.dev/gvisor/pkg/waiter"
)

// UDPConn is a UDP socket on a polarnet Stack: a net.Conn when dialed, and a
// net.PacketConn either way, with *net.UDPConn's error shapes.
type UDPConn struct {
	sock
}

var (
	_ net.Conn       = (*UDPConn)(nil)
	_ net.PacketConn = (*UDPConn)(nil)
)

// DialUDP returns a UDP socket connected to raddr. laddr may be zero.
func (s *Stack) DialUDP(network string, laddr, raddr netip.AddrPort) (*UDPConn, error) {
	raddr, laddr = s.local(unmap(raddr)), unmap(laddr)
	var src net.Addr
	if laddr.IsValid() {
		src = net.UDPAddrFromAddrPort(laddr)
	}
	c, err := s.newUDP(network, netProto(raddr.Addr()), false, laddr, &raddr)
	if err != nil {
		return nil, opError("dial", network, src, net.UDPAddrFromAddrPort(raddr), err)
	}
	return c, nil
}

// ListenUDP returns an unconnected UDP socket bound to laddr; an unspecified
// address with network "udp" receives IPv4 and IPv6.
func (s *Stack) ListenUDP(network string, laddr netip.AddrPort) (*UDPConn, error) {
	laddr = unmap(laddr)
	proto, dualStack := listenProto(network, laddr.Addr())
	c, err := s.newUDP(network, proto, dualStack, laddr, nil)
	if err != nil {
		return nil, opError("listen", network, nil, net.UDPAddrFromAddrPort(laddr), err)
	}
	return c, nil
}

func (s *Stack) newUDP(network string, proto tcpip.NetworkProtocolNumber, dualStack bool, laddr netip.AddrPort, raddr *netip.AddrPort) (*UDPConn, error) {
	if s.isClosed() {
		return nil, net.ErrClosed
	}
	wq := new(waiter.Queue)
	ep, terr := s.shards[udpShard].stack.NewEndpoint(udp.ProtocolNumber, proto, wq)
	if terr != nil {
		return nil, syscallErr("socket", terr)
	}
	if proto == netProto(netip.IPv6Unspecified()) {
		ep.SocketOptions().SetV6Only(!dualStack)
	}
	if laddr.IsValid() || raddr == nil {
		if terr := ep.Bind(fullAddr(laddr)); terr != nil {
			ep.Close()
			return nil, syscallErr("bind", terr)
		}
	}
	c := &UDPConn{}
	if raddr != nil {
		if terr := ep.Connect(fullAddr(*raddr)); terr != nil {
			ep.Close()
			return nil, syscallErr("connect", terr)
		}
		c.raddr = net.UDPAddrFromAddrPort(*raddr)
	}
	a, _ := ep.GetLocalAddress()
	c.laddr = net.UDPAddrFromAddrPort(boundAddr(a, proto))
	c.init(ep, wq, network, 0)
	return c, nil
}

// LocalAddr returns the local address as a *net.UDPAddr.
func (c *UDPConn) LocalAddr() net.Addr { return c.laddr }

// RemoteAddr returns the connected peer's address, or nil.
func (c *UDPConn) RemoteAddr() net.Addr { return c.raddr }

// opErrTo is opErr for a datagram sent to addr (nil: the connected peer).
func (c *UDPConn) opErrTo(op string, addr net.Addr, err error) error {
	if addr == nil {
		addr = c.raddr
	}
	return opError(op, c.network, c.laddr, addr, err)
}

// Read reads one datagram; a datagram longer than b is truncated.
func (c *UDPConn) Read(b []byte) (int, error) {
	n, _, err := c.readFrom(b, false)
	return n, err
}

// ReadFrom reads one datagram and returns its sender.
func (c *UDPConn) ReadFrom(b []byte) (int, net.Addr, error) {
	n, ap, err := c.readFrom(b, true)
	if err != nil {
		return n, nil, err
	}
	return n, net.UDPAddrFromAddrPort(ap), nil
}

// ReadFromUDP reads one datagram and returns its sender.
func (c *UDPConn) ReadFromUDP(b []byte) (int, *net.UDPAddr, error) {
	n, ap, err := c.readFrom(b, true)
	if err != nil {
		return n, nil, err
	}
	return n, net.UDPAddrFromAddrPort(ap), nil
}

// ReadFromUDPAddrPort reads one datagram and returns its sender.
func (c *UDPConn) ReadFromUDPAddrPort(b []byte) (int, netip.AddrPort, error) {
	return c.readFrom(b, true)
}

// ReadMsgUDP is ReadFromUDP for callers of net.UDPConn.ReadMsgUDP: a stack
// delivers no control messages, so oobn and flags are always 0.
func (c *UDPConn) ReadMsgUDP(b, oob []byte) (n, oobn, flags int, addr *net.UDPAddr, err error) {
	n, addr, err = c.ReadFromUDP(b)
	return n, 0, 0, addr, err
}

// ReadMsgUDPAddrPort is ReadMsgUDP returning a netip.AddrPort.
func (c *UDPConn) ReadMsgUDPAddrPort(b, oob []byte) (n, oobn, flags int, addr netip.AddrPort, err error) {
	n, addr, err = c.readFrom(b, true)
	return n, 0, 0, addr, err
}

func (c *UDPConn) readFrom(b []byte, needAddr bool) (int, netip.AddrPort, error) {
	c.readMu.Lock()
	defer c.readMu.Unlock()
	if c.isClosed() {
		return 0, netip.AddrPort{}, c.opErr("read", net.ErrClosed)
	}
	expired := c.readDeadline.done()
	for {
		if isClosed(expired) {
			return 0, netip.AddrPort{}, c.opErr("read", os.ErrDeadlineExceeded)
		}
		c.readBuf = b
		res, terr := c.ep.Read(&c.readBuf, tcpip.ReadOptions{NeedRemoteAddr: needAddr})
		c.readBuf = nil
		switch terr.(type) {
		case nil:
			return res.Count, addrPort(res.RemoteAddr), nil
		case *tcpip.ErrBadBuffer:
			// A datagram into an empty buffer: consumed, as with the kernel.
			return 0, addrPort(res.RemoteAddr), nil
		case *tcpip.ErrWouldBlock:
		default:
			if c.isClosed() {
				return 0, netip.AddrPort{}, c.opErr("read", net.ErrClosed)
			}
			return 0, netip.AddrPort{}, c.opErr("read", syscallErr("recvfrom", terr))
		}
		if err := c.waitRead(); err != nil {
			return 0, netip.AddrPort{}, err
		}
	}
}

// Write sends b as one datagram to the connected peer.
func (c *UDPConn) Write(b []byte) (int, error) {
	return c.writeTo(b, nil)
}

// WriteTo sends b as one datagram to addr, a *net.UDPAddr.
func (c *UDPConn) WriteTo(b []byte, addr net.Addr) (int, error) {
	ua, ok := addr.(*net.UDPAddr)
	if !ok || ua == nil {
		return 0, c.opErrTo("write", addr, syscallErr("sendto", &tcpip.ErrBadAddress{}))
	}
	return c.WriteToUDPAddrPort(b, ua.AddrPort())
}

// WriteToUDP sends b as one datagram to addr.
func (c *UDPConn) WriteToUDP(b []byte, addr *net.UDPAddr) (int, error) {
	if addr == nil {
		return 0, c.opErrTo("write", nil, syscallErr("sendto", &tcpip.ErrBadAddress{}))
	}
	return c.WriteToUDPAddrPort(b, addr.AddrPort())
}

// WriteToUDPAddrPort sends b as one datagram to addr.
func (c *UDPConn) WriteToUDPAddrPort(b []byte, addr netip.AddrPort) (int, error) {
	if c.raddr != nil {
		return 0, c.opErrTo("write", net.UDPAddrFromAddrPort(addr), net.ErrWriteToConnected)
	}
	to := fullAddr(unmap(addr))
	return c.writeTo(b, &to)
}

// WriteMsgUDP sends b to addr, or to the connected peer when addr is nil,
// as net.UDPConn.WriteMsgUDP does. Control messages cannot be sent through
// a stack: a non-empty oob fails with EOPNOTSUPP and sends nothing.
func (c *UDPConn) WriteMsgUDP(b, oob []byte, addr *net.UDPAddr) (n, oobn int, err error) {
	var ap netip.AddrPort
	if addr != nil {
		ap = addr.AddrPort()
	}
	return c.WriteMsgUDPAddrPort(b, oob, ap)
}

// WriteMsgUDPAddrPort is WriteMsgUDP with a netip.AddrPort; the zero
// AddrPort means the connected peer.
func (c *UDPConn) WriteMsgUDPAddrPort(b, oob []byte, addr netip.AddrPort) (n, oobn int, err error) {
	if len(oob) > 0 {
		var dst net.Addr
		if addr.IsValid() {
			dst = net.UDPAddrFromAddrPort(addr)
		}
		return 0, 0, c.opErrTo("write", dst, os.NewSyscallError("sendmsg", syscall.EOPNOTSUPP))
	}
	if !addr.IsValid() {
		n, err = c.Write(b)
	} else {
		n, err = c.WriteToUDPAddrPort(b, addr)
	}
	return n, 0, err
}

func (c *UDPConn) writeTo(b []byte, to *tcpip.FullAddress) (int, error) {
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	var dst net.Addr
	if to != nil {
		dst = net.UDPAddrFromAddrPort(addrPort(*to))
	}
	if c.isClosed() {
		return 0, c.opErrTo("write", dst, net.ErrClosed)
	}
	expired := c.writeDeadline.done()
	for {
		if isClosed(expired) {
			return 0, c.opErrTo("write", dst, os.ErrDeadlineExceeded)
		}
		c.writeBuf.Reset(b)
		n, terr := c.ep.Write(&c.writeBuf, tcpip.WriteOptions{To: to})
		switch terr.(type) {
		case nil:
			return int(n), nil
		case *tcpip.ErrWouldBlock:
		default:
			return 0, c.opErrTo("write", dst, syscallErr("sendto", terr))
		}
		if err := c.waitWrite(); err != nil {
			return 0, c.opErrTo("write", dst, net.ErrClosed)
		}
	}
}
