package polarnet

import (
	"io"
	"net"
	"os"
	"sync"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/waiter"
)

// TCPConn is a TCP connection on a polarnet Stack. It has the method set of
// *net.TCPConn that makes sense without a file descriptor, and returns the
// same errors in the same shapes.
//
// Each conn registers one waiter for its lifetime, so a blocking Read or
// Write allocates nothing.
type TCPConn struct {
	sock
}

var _ net.Conn = (*TCPConn)(nil)

func newTCPConn(ep tcpip.Endpoint, wq *waiter.Queue, network string, sh *shard) *TCPConn {
	c := &TCPConn{}
	c.init(ep, wq, network, waiter.EventHUp)
	// The stack-wide count was reserved by the dial or accept.
	sh.conns.Add(1)
	c.onClose = func() {
		sh.conns.Add(-1)
		sh.owner.releaseConn()
	}
	if a, err := ep.GetLocalAddress(); err == nil {
		c.laddr = tcpAddr(a)
	}
	if a, err := ep.GetRemoteAddress(); err == nil {
		c.raddr = tcpAddr(a)
	}
	if a := sh.owner.allowed; a != nil && c.laddr != nil && c.raddr != nil {
		a.made(sh.clock.now(), c.laddr.(*net.TCPAddr).AddrPort(), c.raddr.(*net.TCPAddr).AddrPort())
	}
	// Go's net turns Nagle's algorithm off on every TCP conn.
	ep.SocketOptions().SetDelayOption(false)
	if sh.owner.cfg.TCP.CongestionControl == "" {
		chooseCongestion(ep)
	}
	return c
}

// LocalAddr returns the local address, a *net.TCPAddr.
func (c *TCPConn) LocalAddr() net.Addr { return c.laddr }

// RemoteAddr returns the remote address, a *net.TCPAddr.
func (c *TCPConn) RemoteAddr() net.Addr { return c.raddr }

// Read reads data from the connection. It returns io.EOF after the peer's
// FIN (or after CloseRead).
func (c *TCPConn) Read(b []byte) (int, error) {
	c.readMu.Lock()
	defer c.readMu.Unlock()
	if c.isClosed() {
		return 0, c.opErr("read", net.ErrClosed)
	}
	if len(b) == 0 {
		return 0, nil
	}
	expired := c.readDeadline.done()
	for {
		if isClosed(expired) {
			return 0, c.opErr("read", os.ErrDeadlineExceeded)
		}
		c.readBuf = b
		res, err := c.ep.Read(&c.readBuf, tcpip.ReadOptions{})
		c.readBuf = nil
		if err == nil {
			return res.Count, nil
		}
		switch err.(type) {
		case *tcpip.ErrWouldBlock:
		case *tcpip.ErrClosedForReceive:
			return 0, io.EOF
		default:
			return 0, c.readErr(err)
		}
		if err := c.waitRead(); err != nil {
			return 0, err
		}
	}
}

func (c *TCPConn) readErr(err tcpip.Error) error {
	if c.isClosed() {
		return c.opErr("read", net.ErrClosed)
	}
	return c.opErr("read", syscallErr("read", err))
}

// Write writes data to the connection. Concurrent Writes never interleave:
// each one's bytes go out contiguously.
func (c *TCPConn) Write(b []byte) (int, error) {
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	return c.write(b)
}

func (c *TCPConn) write(b []byte) (int, error) {
	if c.isClosed() {
		return 0, c.opErr("write", net.ErrClosed)
	}
	expired := c.writeDeadline.done()
	n := 0
	for {
		if isClosed(expired) {
			return n, c.opErr("write", os.ErrDeadlineExceeded)
		}
		c.writeBuf.Reset(b[n:])
		m, err := c.ep.Write(&c.writeBuf, tcpip.WriteOptions{})
		n += int(m)
		if err == nil {
			if n == len(b) {
				return n, nil
			}
			continue
		}
		if _, ok := err.(*tcpip.ErrWouldBlock); !ok {
			if c.isClosed() {
				return n, c.opErr("write", net.ErrClosed)
			}
			return n, c.opErr("write", syscallErr("write", err))
		}
		if err := c.waitWrite(); err != nil {
			return n, err
		}
	}
}

// CloseRead shuts down the reading side of the connection.
func (c *TCPConn) CloseRead() error { return c.shutdown(tcpip.ShutdownRead) }

// CloseWrite shuts down the writing side of the connection: the peer reads
// EOF once it has read everything sent before.
func (c *TCPConn) CloseWrite() error { return c.shutdown(tcpip.ShutdownWrite) }

func (c *TCPConn) shutdown(how tcpip.ShutdownFlags) error {
	if c.isClosed() {
		return c.opErr("close", net.ErrClosed)
	}
	if err := c.ep.Shutdown(how); err != nil {
		return c.opErr("close", syscallErr("shutdown", err))
	}
	return nil
}

// SetNoDelay controls Nagle's algorithm; true (the default, as in Go) sends
// data as soon as possible.
func (c *TCPConn) SetNoDelay(noDelay bool) error {
	return c.setOpt(func(o *tcpip.SocketOptions) { o.SetDelayOption(!noDelay) })
}

// SetKeepAlive turns TCP keep-alive probes on or off.
func (c *TCPConn) SetKeepAlive(keepalive bool) error {
	return c.setOpt(func(o *tcpip.SocketOptions) { o.SetKeepAlive(keepalive) })
}

// SetKeepAlivePeriod sets the idle time before the first probe and the
// interval between probes, as Go's net does.
func (c *TCPConn) SetKeepAlivePeriod(d time.Duration) error {
	if c.isClosed() {
		return c.opErr("set", net.ErrClosed)
	}
	return c.setKeepAliveTimes(d, d, 0)
}

// SetKeepAliveConfig configures keep-alive like (*net.TCPConn).SetKeepAliveConfig:
// zero fields take the defaults (15s, 15s, 9), negative ones are left as they are.
func (c *TCPConn) SetKeepAliveConfig(cfg net.KeepAliveConfig) error {
	if c.isClosed() {
		return c.opErr("set", net.ErrClosed)
	}
	if err := c.SetKeepAlive(cfg.Enable); err != nil || !cfg.Enable {
		return err
	}
	idle, interval, count := cfg.Idle, cfg.Interval, cfg.Count
	if idle == 0 {
		idle = defaultKAIdle
	}
	if interval == 0 {
		interval = defaultKAInterval
	}
	if count == 0 {
		count = defaultKACount
	}
	return c.setKeepAliveTimes(idle, interval, count)
}

// setKeepAliveTimes sets the positive values it is given.
func (c *TCPConn) setKeepAliveTimes(idle, interval time.Duration, count int) error {
	// The kernel counts in whole seconds; so does Go's net when it rounds up.
	round := func(d time.Duration) time.Duration { return (d + time.Second - 1) / time.Second * time.Second }
	if idle > 0 {
		opt := tcpip.KeepaliveIdleOption(round(idle))
		if err := c.ep.SetSockOpt(&opt); err != nil {
			return c.opErr("set", syscallErr("setsockopt", err))
		}
	}
	if interval > 0 {
		opt := tcpip.KeepaliveIntervalOption(round(interval))
		if err := c.ep.SetSockOpt(&opt); err != nil {
			return c.opErr("set", syscallErr("setsockopt", err))
		}
	}
	if count > 0 {
		if err := c.ep.SetSockOptInt(tcpip.KeepaliveCountOption, count); err != nil {
			return c.opErr("set", syscallErr("setsockopt", err))
		}
	}
	return nil
}

// SetLinger sets what Close does with unsent data: sec < 0 (the default)
// sends it in the background; sec == 0 discards it and resets the
// connection; sec > 0 is kept for compatibility and behaves like sec < 0
// except that the FIN_WAIT_2 state is bounded by sec.
func (c *TCPConn) SetLinger(sec int) error {
	return c.setOpt(func(o *tcpip.SocketOptions) {
		o.SetLinger(tcpip.LingerOption{Enabled: sec >= 0, Timeout: time.Duration(max(sec, 0)) * time.Second})
	})
}

// MultipathTCP reports whether the connection uses MPTCP, as
// net.TCPConn.MultipathTCP: never, gVisor has no MPTCP.
func (c *TCPConn) MultipathTCP() (bool, error) { return false, nil }

// copyBufPool holds the buffers ReadFrom copies through, so applications that
// io.Copy into a conn allocate nothing per call.
var copyBufPool = sync.Pool{New: func() any { b := make([]byte, 64<<10); return &b }}

// ReadFrom implements io.ReaderFrom: it copies r into the connection through
// a pooled buffer, holding the write lock so nothing interleaves.
func (c *TCPConn) ReadFrom(r io.Reader) (int64, error) {
	bp := copyBufPool.Get().(*[]byte)
	defer copyBufPool.Put(bp)
	buf := *bp
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	var total int64
	for {
		n, rerr := r.Read(buf)
		if n > 0 {
			m, werr := c.write(buf[:n])
			total += int64(m)
			if werr != nil {
				return total, werr
			}
		}
		if rerr == io.EOF {
			return total, nil
		}
		if rerr != nil {
			return total, rerr
		}
	}
}

// WriteTo implements io.WriterTo: it copies the connection into w through a
// pooled buffer until EOF. (gVisor holds the endpoint's lock while it writes
// into a reader's io.Writer, so handing it w directly would stall the
// connection behind a slow w, and deadlock when w writes to this conn.)
func (c *TCPConn) WriteTo(w io.Writer) (int64, error) {
	bp := copyBufPool.Get().(*[]byte)
	defer copyBufPool.Put(bp)
	buf := *bp
	var total int64
	for {
		n, rerr := c.Read(buf)
		if n > 0 {
			m, werr := w.Write(buf[:n])
			total += int64(m)
			if werr != nil {
				return total, werr
			}
			if m < n {
				return total, io.ErrShortWrite
			}
		}
		if rerr == io.EOF {
			return total, nil
		}
		if rerr != nil {
			return total, rerr
		}
	}
}

func tcpAddr(a tcpip.FullAddress) *net.TCPAddr {
	ap := addrPort(a)
	return net.TCPAddrFromAddrPort(ap)
}
