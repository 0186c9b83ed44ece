package conformance

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/polarnet/polarnet/internal/frame"
	"github.com/polarnet/polarnet/internal/netns"
)

// ioTimeout bounds every blocking operation of a scenario that is not
// itself the thing measured.
const ioTimeout = 10 * time.Second

// connect opens a TCP connection from tp.Client to tp.Server and registers
// cleanups that close both ends.
func connect(t *T, tp *Topology, ctx context.Context, v6 bool, do DialOptions, lo ListenOptions) (client, server TCPConn) {
	t.Helper()
	ln, err := tp.Server.Listen(v6, lo)
	require.NoError(t, err, "listen")
	defer ln.Close()
	c, s, err := dialAccept(ctx, tp.Client, ln, do)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close(); s.Close() })
	return c, s
}

// dialAccept dials ln from client and accepts the connection.
func dialAccept(ctx context.Context, client Host, ln Listener, do DialOptions) (c, s TCPConn, err error) {
	type accepted struct {
		c   net.Conn
		err error
	}
	ch := make(chan accepted, 1)
	ln.SetDeadline(time.Now().Add(ioTimeout))
	go func() {
		c, err := ln.Accept()
		ch <- accepted{c, err}
	}()
	dctx, cancel := context.WithTimeout(ctx, ioTimeout)
	defer cancel()
	c, err = client.Dial(dctx, addrOf(ln), do)
	a := <-ch
	if err != nil || a.err != nil {
		if c != nil {
			c.Close()
		}
		if a.c != nil {
			a.c.Close()
		}
		return nil, nil, fmt.Errorf("dial: %v; accept: %v", err, a.err)
	}
	return c, a.c.(TCPConn), nil
}

// addrOf returns a listener's address.
func addrOf(ln net.Listener) netip.AddrPort {
	ap := ln.Addr().(*net.TCPAddr).AddrPort()
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}

// setDeadline bounds every operation on conns to d from now.
func setDeadline(d time.Duration, conns ...net.Conn) {
	for _, c := range conns {
		c.SetDeadline(time.Now().Add(d))
	}
}

// classify names an error the way the scenarios compare them: the errno or
// condition, not the message (which names addresses and ports).
func classify(err error) string {
	var errno syscall.Errno
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, io.EOF):
		return "EOF"
	case errors.Is(err, os.ErrDeadlineExceeded):
		return "deadline exceeded"
	case errors.Is(err, context.DeadlineExceeded):
		return "dial timeout"
	case errors.Is(err, net.ErrClosed):
		return "closed"
	case errors.As(err, &errno):
		return unix.ErrnoName(errno)
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return "timeout"
	}
	return "other error: " + err.Error()
}

// waitFor polls cond every few milliseconds until it holds or timeout
// passes, and reports whether it held.
func waitFor(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// seg is a captured TCP segment.
type seg struct {
	at         time.Time
	fromClient bool
	ip         frame.Packet
	tcp        frame.TCP
	len        int // the frame's length
}

func (s *seg) String() string {
	dir := "s→c"
	if s.fromClient {
		dir = "c→s"
	}
	return fmt.Sprintf("%s %s:%d→%s:%d flags=%#x seq=%d ack=%d win=%d len=%d", dir, s.ip.Src, s.tcp.SrcPort, s.ip.Dst, s.tcp.DstPort, s.tcp.Flags, s.tcp.Seq, s.tcp.Ack, s.tcp.Window, s.tcp.PayloadLen)
}

// segments returns the TCP segments captured so far, in capture order.
func segments(tp *Topology) []seg {
	var out []seg
	for _, p := range tp.Capture.Packets() {
		ip, ok := frame.ParseTruncated(p.Data)
		if !ok || ip.Proto != frame.ProtoTCP {
			continue
		}
		tcp, ok := frame.ParseTCP(p.Data, ip)
		if !ok {
			continue
		}
		out = append(out, seg{at: p.Time, fromClient: tp.FromClient(&p), ip: ip, tcp: tcp, len: p.Len})
	}
	return out
}

// flowSegments keeps the segments of the connection between the two
// ports (either order).
func flowSegments(all []seg, a, b uint16) []seg {
	var out []seg
	for _, s := range all {
		if (s.tcp.SrcPort == a && s.tcp.DstPort == b) || (s.tcp.SrcPort == b && s.tcp.DstPort == a) {
			out = append(out, s)
		}
	}
	return out
}

// portsOf returns a conn's local and remote ports.
func portsOf(c net.Conn) (local, remote uint16) {
	return uint16(c.LocalAddr().(*net.TCPAddr).Port), uint16(c.RemoteAddr().(*net.TCPAddr).Port)
}

// yesNo renders a boolean fact.
func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// rawSocket is a raw IP socket in a namespace, for injecting packets the
// kernel's own TCP would never send (spoofed SYNs, forged RSTs).
type rawSocket struct {
	fd int
	v6 bool
}

// openRaw opens a raw socket (IP header included) in ns.
func openRaw(ns *netns.NS, v6 bool) (*rawSocket, error) {
	r := &rawSocket{fd: -1, v6: v6}
	err := ns.Do(func() (err error) {
		family := unix.AF_INET
		if v6 {
			family = unix.AF_INET6
		}
		r.fd, err = unix.Socket(family, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_RAW)
		return os.NewSyscallError("socket", err)
	})
	if err != nil {
		return nil, err
	}
	return r, nil
}

// send sends an IP packet (an Ethernet frame's IP part) to dst.
func (r *rawSocket) send(pkt []byte, dst netip.Addr) error {
	var sa unix.Sockaddr = &unix.SockaddrInet4{Addr: dst.As4()}
	if r.v6 {
		sa = &unix.SockaddrInet6{Addr: dst.As16()}
	}
	for range 100 {
		err := unix.Sendto(r.fd, pkt, 0, sa)
		if err != unix.ENOBUFS && err != unix.EAGAIN && err != unix.EINTR {
			return os.NewSyscallError("sendto", err)
		}
		time.Sleep(100 * time.Microsecond)
	}
	return fmt.Errorf("sendto: the socket stayed full")
}

func (r *rawSocket) close() { unix.Close(r.fd) }

// netstat reads a counter of /proc/net/netstat or /proc/net/snmp (such as
// "TcpExt" "SyncookiesSent") in ns.
func netstat(ns *netns.NS, group, name string) (int64, error) {
	var val int64 = -1
	err := ns.Do(func() error {
		// thread-self: /proc/net shows the namespace of the process's
		// main thread, not of this one.
		for _, file := range []string{"/proc/thread-self/net/netstat", "/proc/thread-self/net/snmp"} {
			f, err := os.Open(file)
			if err != nil {
				return err
			}
			sc := bufio.NewScanner(f)
			var header []string
			for sc.Scan() {
				fields := strings.Fields(sc.Text())
				if len(fields) == 0 || fields[0] != group+":" {
					continue
				}
				if header == nil {
					header = fields
					continue
				}
				for i, h := range header {
					if h == name && i < len(fields) {
						val, _ = strconv.ParseInt(fields[i], 10, 64)
					}
				}
				header = nil
			}
			f.Close()
			if val >= 0 {
				return nil
			}
		}
		return fmt.Errorf("no counter %s %s", group, name)
	})
	return val, err
}

// neighbour returns the link-layer address ns's neighbour table holds for
// addr ("" when there is none or it is not resolved).
func neighbour(ns *netns.NS, addr netip.Addr) string {
	out, err := ns.Exec("ip", "neigh", "show", addr.String())
	if err != nil {
		return ""
	}
	f := strings.Fields(out)
	for i := range f {
		if f[i] == "lladdr" && i+1 < len(f) {
			return f[i+1]
		}
	}
	return ""
}
