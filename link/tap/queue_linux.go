package tap

import (
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/cpu"
	"golang.org/x/sys/unix"

	"github.com/polarnet/polarnet/internal/rawsys"
	"github.com/polarnet/polarnet/link"
)

// queue is one queue pair of a Link: a non-blocking descriptor attached to
// the TAP device. TAP takes one syscall per frame each way; a burst makes
// them back to back under one reference to the descriptor.
type queue struct {
	link  *Link
	index int  // the queue's number on the device
	vnet  bool // frames are preceded by a virtio-net header

	// file owns the descriptor. Bursts run their syscalls inside
	// file.SyscallConn's Read and Write, which hold a reference to it: Close
	// then waits for them, and the descriptor number cannot be reused under
	// a burst.
	file *os.File
	io   syscall.RawConn

	// waitFile owns a duplicate of the descriptor that only WaitRead parks
	// on. Interrupt sets a read deadline on it, which on file would make
	// ReadBurst fail as well.
	waitFile    *os.File
	wait        syscall.RawConn
	interrupted atomic.Bool

	rx rxState
	// The poller writes rx, another goroutine may write tx.
	_  cpu.CacheLinePad
	tx txState
}

// rxState is ReadBurst's and WaitRead's, used by the poller only. Its
// callbacks are bound once, so that passing them to the RawConn, an
// interface, does not allocate per call.
type rxState struct {
	readFn func(fd uintptr) bool
	waitFn func(fd uintptr) bool

	frames    []link.RxFrame // the burst being filled
	n         int            // frames filled
	err       error
	frameSize int // link.Info.RxFrameSize
	hdr       [vnetHdrLen]byte
	iov       [2]unix.Iovec // header, frame
	polled    bool          // waitFn has made its non-blocking check
	pollFd    [1]unix.PollFd

	// arrived is the device's count of frames its filter program let into
	// this queue's ring, in memory the kernel writes (nil without it); seen
	// is that count as of what the queue has read. A burst then reads what
	// is queued without the read that finds the ring empty, and a poll of
	// an empty queue makes no syscall, where a spinning poller made several
	// per frame (docs/benchmarks.md).
	arrived *uint64
	seen    uint64
	// verify makes the next burst read until the ring is empty and count
	// again from there. The count runs ahead of the ring when the kernel
	// drops a frame after the program (a full ring) or has not yet queued
	// it, and behind after a recount that overtook such a frame, which
	// would then wait in the ring: so a burst after a wake-up that the
	// count does not explain, and one in every 256 polls of an empty
	// queue, read until the ring is empty.
	verify bool
	empty  uint8 // polls the count found empty, modulo 256
}

// txState is WriteBurst's, used by one goroutine at a time.
type txState struct {
	writeFn func(fd uintptr) bool

	frames []link.TxFrame // the burst being written
	n      int            // frames written
	err    error
	hdr    [vnetHdrLen]byte
	iov    []unix.Iovec // header and segments of one frame, reused
}

var _ link.Queue = (*queue)(nil)

// newQueue wraps a queue descriptor fd and its duplicate waitFd, which it
// takes ownership of.
func newQueue(l *Link, index, fd, waitFd int) *queue {
	name := fmt.Sprintf("%s (%s queue %d)", tunPath, l.info.Name, index)
	q := &queue{
		link:     l,
		index:    index,
		vnet:     l.info.Caps != 0,
		file:     os.NewFile(uintptr(fd), name),
		waitFile: os.NewFile(uintptr(waitFd), name),
	}
	// SyscallConn fails only for a nil *os.File.
	q.io, _ = q.file.SyscallConn()
	q.wait, _ = q.waitFile.SyscallConn()
	q.rx.readFn = q.readFrames
	q.rx.waitFn = q.waitReady
	q.rx.frameSize = l.info.RxFrameSize
	q.rx.arrived = l.shed.arrived(index)
	q.rx.verify = true // frames may have been queued before the count began
	q.rx.iov[0].Base = &q.rx.hdr[0]
	q.rx.iov[0].SetLen(vnetHdrLen)
	q.tx.writeFn = q.writeFrames
	return q
}

// ReadBurst reads frames until none is pending or frames is full. Frames
// larger than link.Info.RxFrameSize, which the kernel truncates, are dropped.
func (q *queue) ReadBurst(frames []link.RxFrame) (int, error) {
	r := &q.rx
	r.frames, r.n, r.err = frames, 0, nil
	err := q.io.Read(r.readFn)
	r.frames = nil // do not keep the engine's buffers reachable
	if err != nil {
		return 0, q.fileError("reading from", err)
	}
	return r.n, r.err
}

// readFrames is ReadBurst's body, run with the descriptor held (which also
// keeps the count's mapping, unmapped after the descriptors are closed).
func (q *queue) readFrames(fd uintptr) bool {
	r := &q.rx
	iov, hdrLen := r.iov[:], vnetHdrLen
	if !q.vnet {
		iov, hdrLen = r.iov[1:], 0
	}
	want := len(r.frames)
	if r.arrived != nil && !r.verify {
		// Unsigned: a count behind seen reads as plenty, and the burst
		// reads until the ring is empty.
		queued := atomic.LoadUint64(r.arrived) - r.seen
		if queued == 0 {
			r.empty++
			if r.empty != 0 {
				return true
			}
		} else if queued < uint64(want) {
			want = int(queued)
		}
	}
	r.verify = false
	for r.n < want {
		f := &r.frames[r.n]
		if cap(f.Buf) < r.frameSize {
			r.err = fmt.Errorf("tap: %s: receive buffer of %d bytes, the link needs %d", q.link.info.Name, cap(f.Buf), r.frameSize)
			break
		}
		buf := f.Buf[:cap(f.Buf)]
		r.iov[1].Base = &buf[0]
		r.iov[1].SetLen(len(buf))
		var counted uint64
		if r.arrived != nil {
			counted = atomic.LoadUint64(r.arrived)
		}
		n, errno := iovecSyscall(unix.SYS_READV, fd, iov)
		if errno == unix.EAGAIN {
			// Every frame counted before the read was read or dropped.
			r.seen = counted
			break
		}
		if errno != 0 {
			r.err = q.ioError("reading from", errno)
			break
		}
		r.seen++
		n -= hdrLen
		if n < 0 || n > len(buf) {
			continue // did not fit: readv returns the untruncated length
		}
		f.Len = n
		f.ChecksumValid = false
		if q.vnet {
			h := decodeVnetHdr(r.hdr[:])
			f.ChecksumValid = h.checksumValid()
		}
		r.n++
	}
	return true
}

// WriteBurst writes frames, one writev each, until the kernel refuses one.
// Frames refused because the device's queue is full (EAGAIN) are reported
// as not accepted with a nil error: the engine tries them again. Any other
// refusal is an error, among them EIO while the device's kernel side is
// down (moving the device to another namespace takes it down): no retry
// would get through, so the engine drops the frames, as a NIC drops frames
// while its link is down, and TCP retransmits them once it is up.
func (q *queue) WriteBurst(frames []link.TxFrame) (int, error) {
	t := &q.tx
	t.frames, t.n, t.err = frames, 0, nil
	err := q.io.Write(t.writeFn)
	t.frames = nil
	clear(t.iov[:cap(t.iov)]) // do not keep the engine's buffers reachable
	if err != nil {
		return 0, q.fileError("writing to", err)
	}
	return t.n, t.err
}

// writeFrames is WriteBurst's body, run with the descriptor held.
func (q *queue) writeFrames(fd uintptr) bool {
	t := &q.tx
	for i := range t.frames {
		f := &t.frames[i]
		iov := append(t.iov[:0], unix.Iovec{}) // [0]: the virtio-net header
		frameLen := 0
		for _, s := range f.Segs {
			if len(s) > 0 {
				iov = append(iov, iovec(s))
				frameLen += len(s)
			}
		}
		t.iov = iov
		switch {
		case frameLen == 0:
			t.err = fmt.Errorf("tap: %s: empty frame", q.link.info.Name)
		case q.vnet:
			var h vnetHdr
			if h, t.err = txVnetHdr(&f.Offload, frameLen); t.err == nil {
				h.encode(t.hdr[:])
				iov[0] = iovec(t.hdr[:])
			}
		case f.Offload != (link.TxOffload{}):
			t.err = fmt.Errorf("tap: %s: a frame asks for offloads, which are disabled: %w", q.link.info.Name, link.ErrNotSupported)
		default:
			iov = iov[1:]
		}
		if t.err != nil {
			break
		}
		_, errno := iovecSyscall(unix.SYS_WRITEV, fd, iov)
		if errno == unix.EAGAIN {
			break // the engine keeps the rest for its next flush
		}
		if errno != 0 {
			t.err = q.ioError("writing to", errno)
			break
		}
		t.n++
	}
	return true
}

// WaitRead parks the goroutine in the netpoller until the descriptor is
// readable, Interrupt is called or the link is closed.
func (q *queue) WaitRead() error {
	for {
		if q.link.closed.Load() {
			return link.ErrClosed
		}
		if q.interrupted.Swap(false) {
			return nil
		}
		q.rx.polled = false
		err := q.wait.Read(q.rx.waitFn)
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			if err != nil {
				return q.fileError("waiting for", err)
			}
			return nil
		}
		// Interrupt's deadline. Clear it before looking at the flag again,
		// so that an Interrupt racing with this sets it after the clear.
		q.waitFile.SetReadDeadline(time.Time{})
	}
}

// waitReady is WaitRead's callback. Before waiting, RawConn.Read forgets
// readiness the netpoller saw earlier, so a frame that arrived since the
// last ReadBurst would not wake it: the first call checks the count, then
// with a non-blocking poll; the second (after the wait) reports the
// wake-up. Readiness the count does not explain is a frame it missed (see
// rxState.verify).
func (q *queue) waitReady(fd uintptr) bool {
	r := &q.rx
	if !r.polled {
		r.polled = true
		if r.arrived != nil && atomic.LoadUint64(r.arrived) != r.seen {
			return true
		}
		r.pollFd[0] = unix.PollFd{Fd: int32(fd), Events: unix.POLLIN}
		n, errno := rawsys.PollNow(r.pollFd[:])
		if n == 0 && errno == 0 { // on error, let the caller read and find out
			return false
		}
	}
	r.verify = r.verify || r.arrived != nil && atomic.LoadUint64(r.arrived) == r.seen
	return true
}

// Interrupt makes a WaitRead in progress, or the next one, return. Calls
// after the first that a WaitRead has not consumed yet cost one atomic swap.
func (q *queue) Interrupt() {
	if q.interrupted.Swap(true) {
		return
	}
	// Fails only once the link is closed, when WaitRead returns anyway.
	q.waitFile.SetReadDeadline(time.Now())
}

// close closes both descriptors, waiting for bursts in progress.
func (q *queue) close() error {
	return errors.Join(q.waitFile.Close(), q.file.Close())
}

// fileError maps an error of the os.File machinery to the error queue
// operations return. That machinery fails once the file is closed, or once
// the netpoller has seen EPOLLERR, which TAP reports when its device is
// deleted: the device's own errno then says so.
func (q *queue) fileError(op string, err error) error {
	if q.link.closed.Load() {
		return link.ErrClosed
	}
	var errno error
	ctlErr := q.io.Control(func(fd uintptr) {
		ifr, _ := unix.NewIfreq("")
		errno = unix.IoctlIfreq(int(fd), unix.TUNGETIFF, ifr)
	})
	if e, ok := errno.(unix.Errno); ok && ctlErr == nil {
		return q.ioError(op, e)
	}
	return fmt.Errorf("tap: %s %s: %w", op, q.link.info.Name, err)
}

// ioError describes a failed read or write.
func (q *queue) ioError(op string, errno unix.Errno) error {
	hint := ""
	switch errno {
	case unix.EBADFD:
		hint = " (the device was deleted)"
	case unix.EIO:
		hint = " (the device is down)"
	}
	return fmt.Errorf("tap: %s %s: %w%s", op, q.link.info.Name, errno, hint)
}

// iovec describes b, which must not be empty.
func iovec(b []byte) unix.Iovec {
	v := unix.Iovec{Base: &b[0]}
	v.SetLen(len(b))
	return v
}

// iovecSyscall runs readv or writev on a non-blocking descriptor (so it
// never blocks).
func iovecSyscall(trap, fd uintptr, iov []unix.Iovec) (int, unix.Errno) {
	n, errno := rawsys.NoWait(trap, fd, uintptr(unsafe.Pointer(&iov[0])), uintptr(len(iov)), 0, 0, 0)
	return int(n), errno
}
