package polarnet

import (
	"io"
	"net"
	"net/netip"
	"time"
)

// AnyTCPConn is the method set that *net.TCPConn and *TCPConn share. A
// program that asserts c.(*net.TCPConn) to call SetLinger, CloseWrite or
// SetNoDelay panics (or, with the comma-ok form, skips the call) when
// c came from polarnet; asserting c.(AnyTCPConn) works with the conns of
// both paths. File and SyscallConn, which need a file descriptor, are left
// out.
type AnyTCPConn interface {
	net.Conn
	io.ReaderFrom
	io.WriterTo
	CloseRead() error
	CloseWrite() error
	SetLinger(sec int) error
	SetNoDelay(noDelay bool) error
	SetKeepAlive(keepalive bool) error
	SetKeepAlivePeriod(d time.Duration) error
	SetKeepAliveConfig(cfg net.KeepAliveConfig) error
	SetReadBuffer(bytes int) error
	SetWriteBuffer(bytes int) error
	MultipathTCP() (bool, error)
}

// AnyTCPListener is the method set that *net.TCPListener and TCPListener
// share, and the listener of a wildcard listen that merges the stack's
// and the kernel's. AcceptTCP is left out: each returns its own conn type
// (use Accept and AnyTCPConn).
type AnyTCPListener interface {
	net.Listener
	SetDeadline(t time.Time) error
}

// AnyUDPConn is the method set that *net.UDPConn and *UDPConn share.
type AnyUDPConn interface {
	net.Conn
	ReadFrom(b []byte) (int, net.Addr, error)
	WriteTo(b []byte, addr net.Addr) (int, error)
	ReadFromUDP(b []byte) (int, *net.UDPAddr, error)
	ReadFromUDPAddrPort(b []byte) (int, netip.AddrPort, error)
	ReadMsgUDP(b, oob []byte) (n, oobn, flags int, addr *net.UDPAddr, err error)
	ReadMsgUDPAddrPort(b, oob []byte) (n, oobn, flags int, addr netip.AddrPort, err error)
	WriteToUDP(b []byte, addr *net.UDPAddr) (int, error)
	WriteToUDPAddrPort(b []byte, addr netip.AddrPort) (int, error)
	WriteMsgUDP(b, oob []byte, addr *net.UDPAddr) (n, oobn int, err error)
	WriteMsgUDPAddrPort(b, oob []byte, addr netip.AddrPort) (n, oobn int, err error)
	SetReadBuffer(bytes int) error
	SetWriteBuffer(bytes int) error
}

var (
	_ AnyTCPConn     = (*net.TCPConn)(nil)
	_ AnyTCPConn     = (*TCPConn)(nil)
	_ AnyTCPListener = (*net.TCPListener)(nil)
	_ AnyTCPListener = (*TCPListener)(nil)
	_ AnyUDPConn     = (*net.UDPConn)(nil)
	_ AnyUDPConn     = (*UDPConn)(nil)
	_ net.PacketConn = AnyUDPConn(nil)
)
