package linktest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/polarnet/polarnet/link"
)

// packetRcvBuf is the receive buffer PacketSocketLink asks for: enough for a
// suite burst of jumbo frames while the reader catches up.
const packetRcvBuf = 4 << 20

// PacketSocketLink is a single-queue link.Link over an AF_PACKET socket
// bound to one network interface. It plays the far end of a real device in
// link tests: the kernel-side interface of a TAP, or the peer of a veth.
//
// It sees every frame the interface receives, whatever its destination
// address (veth and TAP filter nothing), but not the frames it sends itself. It claims no offloads: a
// frame the local kernel sent with a partial checksum (a veth peer with TX
// checksum offload on) reaches it unfinished, and the local kernel's GSO
// frames larger than RxFrameSize are dropped. It is a test peer, not a link
// for the engine's traffic.
//
// The socket is non-blocking and registered with the Go netpoller, so
// WaitRead parks its goroutine there; Interrupt wakes it by expiring a read
// deadline.
type PacketSocketLink struct {
	info  link.Info
	file  *os.File
	conn  syscall.RawConn
	queue []link.Queue

	closeOnce sync.Once
	closed    atomic.Bool
	closeErr  error
}

var (
	_ link.Link  = (*PacketSocketLink)(nil)
	_ link.Queue = (*PacketSocketLink)(nil)
)

// OpenPacketSocket opens a PacketSocketLink on the interface ifname of the
// calling thread's network namespace (call it from netns.NS.Do for another
// namespace). It needs CAP_NET_RAW.
func OpenPacketSocket(ifname string) (*PacketSocketLink, error) {
	ifi, err := net.InterfaceByName(ifname)
	if err != nil {
		return nil, fmt.Errorf("linktest: packet socket on %s: %w", ifname, err)
	}
	if len(ifi.HardwareAddr) != 6 {
		return nil, fmt.Errorf("linktest: packet socket on %s: not an Ethernet interface", ifname)
	}
	// Protocol 0: the socket receives nothing until bound, so no frame of
	// another interface slips in before bind.
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("linktest: packet socket on %s: %w", ifname, os.NewSyscallError("socket", err))
	}
	if err := setupPacketSocket(fd, ifi.Index); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("linktest: packet socket on %s: %w", ifname, err)
	}
	// A non-blocking descriptor given to os.NewFile joins the netpoller.
	file := os.NewFile(uintptr(fd), "packet:"+ifname)
	conn, err := file.SyscallConn()
	if err != nil {
		file.Close()
		return nil, fmt.Errorf("linktest: packet socket on %s: %w", ifname, err)
	}
	l := &PacketSocketLink{
		info: link.Info{
			Name:        ifname,
			MAC:         ifi.HardwareAddr,
			MTU:         ifi.MTU,
			RxFrameSize: ifi.MTU + ethHeaderLen,
		},
		file: file,
		conn: conn,
	}
	l.queue = []link.Queue{l}
	return l, nil
}

func setupPacketSocket(fd, ifindex int) error {
	// Without this the socket would also receive its own frames back.
	if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_IGNORE_OUTGOING, 1); err != nil {
		return os.NewSyscallError("setsockopt PACKET_IGNORE_OUTGOING", err)
	}
	// SO_RCVBUFFORCE passes net.core.rmem_max but needs CAP_NET_ADMIN;
	// the capped SO_RCVBUF is the fallback.
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, packetRcvBuf); err != nil {
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, packetRcvBuf); err != nil {
			return os.NewSyscallError("setsockopt SO_RCVBUF", err)
		}
	}
	sa := &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: ifindex}
	if err := unix.Bind(fd, sa); err != nil {
		return os.NewSyscallError("bind", err)
	}
	return nil
}

// htons converts v to network byte order, as sockaddr_ll wants it.
func htons(v uint16) uint16 {
	var b [2]byte
	binary.BigEndian.PutUint16(b[:], v)
	return binary.NativeEndian.Uint16(b[:])
}

// Info implements link.Link.
func (l *PacketSocketLink) Info() link.Info { return l.info }

// Queues implements link.Link: the link is its own only queue.
func (l *PacketSocketLink) Queues() []link.Queue { return l.queue }

// Close implements link.Link. Closing again returns the first result.
func (l *PacketSocketLink) Close() error {
	l.closeOnce.Do(func() {
		l.closed.Store(true)
		// Wakes a WaitRead parked in the netpoller; the descriptor is
		// released once no call is using it.
		l.closeErr = l.file.Close()
	})
	return l.closeErr
}

// ReadBurst implements link.Queue. Frames larger than RxFrameSize are
// dropped rather than truncated.
func (l *PacketSocketLink) ReadBurst(frames []link.RxFrame) (int, error) {
	if l.closed.Load() {
		return 0, link.ErrClosed
	}
	n := 0
	var recvErr error
	err := l.conn.Control(func(fd uintptr) {
		for n < len(frames) {
			f := &frames[n]
			// MSG_TRUNC makes recvfrom return the frame's real length.
			m, _, err := unix.Recvfrom(int(fd), f.Buf[:cap(f.Buf)], unix.MSG_TRUNC)
			switch {
			case err == unix.EINTR:
				continue
			case err == unix.EAGAIN:
				return
			case err != nil:
				recvErr = os.NewSyscallError("recvfrom", err)
				return
			case m > cap(f.Buf):
				continue
			}
			f.Len, f.ChecksumValid = m, false
			n++
		}
	})
	return n, l.opError("read", errors.Join(err, recvErr))
}

// WriteBurst implements link.Queue. A full socket buffer is the
// contract's full ring: the frames not yet written are returned to the
// caller as not accepted.
func (l *PacketSocketLink) WriteBurst(frames []link.TxFrame) (int, error) {
	if l.closed.Load() {
		return 0, link.ErrClosed
	}
	n := 0
	var sendErr error
	err := l.conn.Control(func(fd uintptr) {
		for n < len(frames) {
			_, err := unix.Writev(int(fd), frames[n].Segs)
			switch {
			case err == unix.EINTR:
				continue
			case err == unix.EAGAIN || err == unix.ENOBUFS:
				return
			case err != nil:
				sendErr = os.NewSyscallError("writev", err)
				return
			}
			n++
		}
	})
	return n, l.opError("write", errors.Join(err, sendErr))
}

// WaitRead implements link.Queue.
func (l *PacketSocketLink) WaitRead() error {
	if l.closed.Load() {
		return link.ErrClosed
	}
	// The netpoller is edge-triggered and ReadBurst may have left frames
	// queued, so the callback asks the socket itself before parking.
	err := l.conn.Read(func(fd uintptr) bool { return readable(int(fd)) })
	if errors.Is(err, os.ErrDeadlineExceeded) && !l.closed.Load() {
		// Interrupt expired the deadline; clear it so that the next
		// WaitRead parks again.
		err = l.file.SetReadDeadline(time.Time{})
	}
	return l.opError("wait", err)
}

// Interrupt implements link.Queue. A deadline in the past wakes a
// parked WaitRead, or makes the next one return at once.
func (l *PacketSocketLink) Interrupt() {
	// Fails only once the link is closed, when WaitRead returns anyway.
	_ = l.file.SetReadDeadline(time.Unix(0, 1))
}

// opError maps errors of a closed link to link.ErrClosed and names
// the link in the others.
func (l *PacketSocketLink) opError(op string, err error) error {
	switch {
	case err == nil:
		return nil
	case l.closed.Load():
		return link.ErrClosed
	default:
		return fmt.Errorf("linktest: %s %s: %w", op, l.info.Name, err)
	}
}

// readable reports whether a frame is queued on the socket fd, or whether
// asking failed: then the caller's next read reports the error.
func readable(fd int) bool {
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	n, err := unix.Poll(fds, 0)
	return err != nil || n > 0
}
