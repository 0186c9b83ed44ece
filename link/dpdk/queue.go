//go:build dpdk && linux && cgo

package dpdk

// #include "shim.h"
import "C"

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/cpu"
	"golang.org/x/sys/unix"

	"github.com/polarnet/polarnet/internal/frame"
	"github.com/polarnet/polarnet/internal/rawsys"
	"github.com/polarnet/polarnet/link"
)

// queue is one RX/TX queue pair of a port.
//
// Receiving takes two cgo calls per burst that returns frames and one per
// empty poll: pn_rx_burst receives a burst and describes each frame's
// segments; Go copies them from the mbufs into the engine's buffers (the
// one copy), and pn_rx_release returns the mbufs to the pool before
// ReadBurst returns. Sending takes one cgo call per burst: Go copies the
// frames into mbufs the queue allocated ahead (its stash), and pn_tx_send
// links, flags and sends them, frees what the PMD refused and refills the
// stash.
type queue struct {
	link      *port
	idx       int
	port      C.uint16_t
	plan      *portPlan
	skipCsums bool

	// The poller holds rxMu (shared) around receives, the writer txMu
	// around sends; Close takes both exclusively to wait for them.
	rxMu sync.RWMutex
	rx   *C.struct_pn_rxq
	segs []C.struct_pn_seg // rx.segs, as a slice over C memory
	head int               // frames of the pending burst already handed over
	wait waitState

	_    cpu.CacheLinePad
	txMu sync.RWMutex
	tx   *C.struct_pn_txq
	room int // data bytes per mbuf
	// maxTx is the longest frame WriteBurst takes.
	maxTx int

	stats queueCounters
}

// waitState is WaitRead's: an epoll instance of the queue's own, parked on
// in the Go netpoller, holding an eventfd that Interrupt and Close write, a
// timerfd for sleep-based waits and the PMD's receive interrupt descriptor.
type waitState struct {
	epoll       *os.File
	conn        syscall.RawConn
	waitFn      func(fd uintptr) bool
	kickFd      int
	timerFd     int
	closed      bool  // closeWait ran: the descriptors are closed
	intrFd      int   // -1: no receive interrupts
	intrClear   bool  // intrFd is an eventfd: read it to re-arm
	intrToggle  bool  // the PMD wants rx_intr_enable/disable around waits
	bell        *bell // net_memif doorbell; nil: none
	interrupted atomic.Bool
	events      [4]unix.EpollEvent
	woke        uint8 // what the last wait saw: wokeIntr, wokeTimer
	err         error
	sleep       time.Duration // next sleep of a sleep-based wait
}

const (
	wokeIntr  = 1 << iota // the receive interrupt or the doorbell fired
	wokeTimer             // the sleep ended
)

// queueCounters are a queue's counters; Stats reads them concurrently.
type queueCounters struct {
	rxFrames, rxBursts, rxDropped, rxPartial atomic.Uint64
	txFrames, txBursts, txRingFull, txNoMbuf atomic.Uint64
	wakeups, interrupts, sleeps, doorbells   atomic.Uint64
}

func (c *queueCounters) snapshot() QueueStats {
	return QueueStats{
		RxFrames: c.rxFrames.Load(), RxBursts: c.rxBursts.Load(), RxDropped: c.rxDropped.Load(),
		RxPartialChecksum: c.rxPartial.Load(),
		TxFrames:          c.txFrames.Load(), TxBursts: c.txBursts.Load(),
		TxRingFull: c.txRingFull.Load(), TxNoMbuf: c.txNoMbuf.Load(),
		Wakeups: c.wakeups.Load(), Interrupts: c.interrupts.Load(), Sleeps: c.sleeps.Load(),
		Doorbells: c.doorbells.Load(),
	}
}

var (
	_ link.Queue      = (*queue)(nil)
	_ link.PolledPeer = (*queue)(nil)
)

// newQueue sets up queue pair idx of the started port l; with intr, it
// waits with the PMD's receive interrupts if it has them.
func newQueue(l *port, idx int, intr bool) (q *queue, err error) {
	q = &queue{
		link:      l,
		idx:       idx,
		port:      l.id,
		plan:      l.plan,
		skipCsums: l.cfg.SkipChecksums,
		maxTx:     l.plan.frameSize,
	}
	if l.plan.tso {
		q.maxTx = max(q.maxTx, l.plan.gsoMaxSize)
	}
	q.wait.kickFd, q.wait.timerFd, q.wait.intrFd = -1, -1, -1
	q.wait.sleep = l.cfg.PollInterval
	defer func() {
		if err != nil {
			q.closeWait()
			q.freeC()
		}
	}()
	q.rx = C.pn_rxq_new(l.id, C.uint16_t(idx), C.uint16_t(l.plan.maxRxSegs))
	q.tx = C.pn_txq_new(l.id, C.uint16_t(idx), l.pool, C.uint16_t(l.plan.txStash))
	if q.rx == nil || q.tx == nil {
		return nil, fmt.Errorf("dpdk: allocating queue %d: out of memory", idx)
	}
	q.segs = unsafe.Slice(q.rx.segs, C.PN_RX_BURST*int(q.rx.max_segs))
	q.room = int(q.tx.room)
	if err := q.setupWait(intr, l.bells); err != nil {
		return nil, fmt.Errorf("dpdk: setting up waits of queue %d: %w", idx, err)
	}
	return q, nil
}

func (q *queue) setupWait(intr bool, bells *bellSetup) error {
	w := &q.wait
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return os.NewSyscallError("epoll_create1", err)
	}
	// Non-blocking, so that os.NewFile registers it with the netpoller.
	if err := unix.SetNonblock(epfd, true); err != nil {
		unix.Close(epfd)
		return os.NewSyscallError("fcntl", err)
	}
	w.epoll = os.NewFile(uintptr(epfd), fmt.Sprintf("dpdk-wait-%d-%d", q.port, q.idx))
	if w.conn, err = w.epoll.SyscallConn(); err != nil {
		return err
	}
	if w.kickFd, err = unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC); err != nil {
		return os.NewSyscallError("eventfd", err)
	}
	if w.timerFd, err = unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC); err != nil {
		return os.NewSyscallError("timerfd_create", err)
	}
	for _, fd := range []int{w.kickFd, w.timerFd} {
		if err := epollAdd(epfd, fd); err != nil {
			return err
		}
	}
	if intr {
		if fd := int(C.pn_rx_intr_fd(q.port, C.uint16_t(q.idx))); fd >= 0 {
			// PMDs whose descriptor is always armed (net_tap's queue fd)
			// have no enable/disable.
			switch ret := C.pn_rx_intr_enable(q.port, C.uint16_t(q.idx)); {
			case ret == 0:
				w.intrToggle = true
				C.pn_rx_intr_disable(q.port, C.uint16_t(q.idx))
			case ret == -C.int(syscall.ENOTSUP):
			default:
				return rteError("enabling receive interrupts", ret)
			}
			if err := epollAdd(epfd, fd); err != nil {
				return err
			}
			w.intrFd, w.intrClear = fd, isEventfd(fd)
		}
	}
	if w.intrFd < 0 && bells != nil {
		b, err := newBell(bells.file, bells.paths, q.idx)
		if err != nil {
			return err
		}
		w.bell = b
		if err := epollAdd(epfd, b.fd); err != nil {
			return err
		}
	}
	w.waitFn = q.waitReady
	return nil
}

func epollAdd(epfd, fd int) error {
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(fd)}
	return os.NewSyscallError("epoll_ctl", unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, fd, &ev))
}

// isEventfd reports whether fd is an eventfd, whose counter a waiter must
// read to re-arm it (VFIO's interrupt descriptors are).
func isEventfd(fd int) bool {
	target, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd))
	return err == nil && target == "anon_inode:[eventfd]"
}

// closeWait closes the wait descriptors (not the PMD's). Callers hold both
// locks, or own q alone. The descriptors' numbers stay: waitReady may
// still read them (closing the epoll file waits for it to return, through
// a semaphore the race detector does not see), kick checks closed first.
func (q *queue) closeWait() {
	w := &q.wait
	if w.closed {
		return
	}
	w.closed = true
	if w.epoll != nil {
		w.epoll.Close()
	}
	for _, fd := range []int{w.kickFd, w.timerFd} {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
	if w.bell != nil {
		w.bell.close() // the pointer stays: readers check closed first
	}
}

// freeC frees the C halves of the queue, returning their mbufs to the pool.
func (q *queue) freeC() {
	if q.rx != nil {
		C.pn_rxq_free(q.rx)
		q.rx, q.segs = nil, nil
	}
	if q.tx != nil {
		C.pn_txq_free(q.tx)
		q.tx = nil
	}
}

// ReadBurst copies up to len(frames) received frames into the engine's
// buffers. Frames longer than a buffer are dropped and counted.
func (q *queue) ReadBurst(frames []link.RxFrame) (int, error) {
	q.rxMu.RLock()
	defer q.rxMu.RUnlock()
	if q.link.closed.Load() {
		return 0, link.ErrClosed
	}
	rx := q.rx
	if rx.n == 0 {
		if C.pn_rx_burst(rx) == 0 {
			return 0, nil
		}
		q.head = 0
		q.stats.rxBursts.Add(1)
	}
	return q.copyOut(frames), nil
}

// copyOut hands over frames of the pending burst and releases their mbufs.
func (q *queue) copyOut(frames []link.RxFrame) int {
	rx := q.rx
	pending, start, maxSegs := int(rx.n), q.head, int(rx.max_segs)
	out := 0
	for out < len(frames) && q.head < pending {
		i := q.head
		q.head++
		f := &frames[out]
		nsegs, length := int(rx.nb_segs[i]), int(rx.pkt_len[i])
		if nsegs == 0 || length > cap(f.Buf) {
			q.stats.rxDropped.Add(1)
			continue
		}
		buf := f.Buf[:cap(f.Buf)]
		off := 0
		for _, s := range q.segs[i*maxSegs : i*maxSegs+nsegs] {
			off += copy(buf[off:], unsafe.Slice((*byte)(s.addr), int(s.len)))
		}
		f.Len = off
		f.ChecksumValid = q.checksumValid(buf[:off], uint8(rx.l4_csum[i]))
		out++
	}
	C.pn_rx_release(rx, C.uint16_t(start), C.uint16_t(q.head-start))
	q.stats.rxFrames.Add(uint64(out))
	q.wait.sleep = q.link.cfg.PollInterval
	return out
}

// checksumValid decides RxFrame.ChecksumValid for a frame whose PMD
// reported l4 (0 unknown, 1 good, 2 bad, 3 none).
func (q *queue) checksumValid(f []byte, l4 uint8) bool {
	switch q.plan.rxChecksum {
	case rxChecksumTrusted:
		return true
	case rxChecksumPMD:
		return l4 == 1
	case rxChecksumLink:
		res, _, _ := frame.CheckRX(f)
		if res == frame.RxPartial {
			q.stats.rxPartial.Add(1)
		}
		return res == frame.RxGood || res == frame.RxPartial
	}
	return false
}

// WriteBurst copies frames into mbufs and sends them. It stops, with a nil
// error, where the PMD's ring is full or the mempool is empty; a frame it
// can never send (empty, too long, asking for offloads the link did not
// offer) is an error, after the frames before it are sent.
func (q *queue) WriteBurst(frames []link.TxFrame) (int, error) {
	q.txMu.RLock()
	defer q.txMu.RUnlock()
	if q.link.closed.Load() {
		return 0, link.ErrClosed
	}
	tx := q.tx
	sent, nf, used := 0, 0, 0
	// send sends the nf frames built so far; false when the PMD took fewer.
	send := func() bool {
		if nf == 0 {
			return true
		}
		n := int(C.pn_tx_send(tx, C.uint16_t(nf), C.uint16_t(used)))
		sent += n
		if b := q.wait.bell; b != nil && n > 0 && b.ring() {
			q.stats.doorbells.Add(1)
		}
		q.stats.txFrames.Add(uint64(n))
		q.stats.txBursts.Add(1)
		full := n < nf
		if full {
			q.stats.txRingFull.Add(uint64(nf - n))
		}
		nf, used = 0, 0
		return !full
	}
	for i := range frames {
		f := &frames[i]
		length := f.Len()
		if length < ethHdrLen || length > q.maxTx {
			send()
			return sent, fmt.Errorf("dpdk: %s: frame of %d bytes; the link sends %d to %d", q.link.info.Name, length, ethHdrLen, q.maxTx)
		}
		need := (length + q.room - 1) / q.room
		if nf == C.PN_TX_BURST || used+need > int(tx.stash_n) {
			if !send() {
				return sent, nil
			}
			if need > int(tx.stash_n) {
				C.pn_tx_refill(tx)
			}
			if need > int(tx.stash_n) {
				q.stats.txNoMbuf.Add(uint64(len(frames) - i))
				return sent, nil
			}
		}
		q.copyIn(f, used, length)
		hdr := unsafe.Slice((*byte)(tx.stash_addr[used]), min(q.room, length))
		meta, err := offloadMeta(&f.Offload, hdr, length, q.plan, q.skipCsums)
		if err != nil {
			send()
			return sent, fmt.Errorf("dpdk: %s: %w", q.link.info.Name, err)
		}
		md := &tx.meta[nf]
		md.len = C.uint32_t(length)
		md.nb_segs = C.uint16_t(need)
		md.ol_flags = C.uint64_t(meta.olFlags)
		md.l2_len, md.l3_len, md.l4_len = C.uint16_t(meta.l2), C.uint16_t(meta.l3), C.uint16_t(meta.l4)
		md.tso_segsz = C.uint16_t(meta.tsoSegsz)
		nf++
		used += need
	}
	send()
	return sent, nil
}

// copyIn copies frame f of length bytes into the stash mbufs from index m.
func (q *queue) copyIn(f *link.TxFrame, m, length int) {
	tx := q.tx
	dst := unsafe.Slice((*byte)(tx.stash_addr[m]), min(q.room, length))
	off := 0
	for _, s := range f.Segs {
		for len(s) > 0 {
			if off == len(dst) {
				m++
				length -= off
				dst, off = unsafe.Slice((*byte)(tx.stash_addr[m]), min(q.room, length)), 0
			}
			n := copy(dst[off:], s)
			off += n
			s = s[n:]
		}
	}
}

// WaitRead waits until the queue may hold frames, Interrupt is called or
// the link is closed. It parks the goroutine in the netpoller, on an epoll
// instance that holds the PMD's receive interrupt descriptor where the PMD
// has one (Setup.Wait is WaitInterrupt), else a timer: a sleep-based wait
// looks at the queue every PollInterval, doubling the interval up to
// PollIntervalMax while nothing arrives. Either way it first looks at the
// queue itself, so frames that arrived before the wait are never missed.
func (q *queue) WaitRead() error {
	w := &q.wait
	for {
		if w.interrupted.Swap(false) && !q.link.closed.Load() {
			q.stats.wakeups.Add(1)
			return nil
		}
		ready, err := q.prepareWait()
		if err != nil {
			return err
		}
		if ready {
			q.stats.wakeups.Add(1)
			return nil
		}
		w.woke, w.err = 0, nil
		// Close closes the epoll file under a parked Read (which then
		// fails), after waiting for a running callback.
		err = w.conn.Read(w.waitFn)
		q.finishWait()
		if err == nil {
			err = w.err
		}
		if err != nil {
			return q.waitError(err)
		}
		if w.woke&wokeIntr != 0 {
			q.stats.interrupts.Add(1)
		}
	}
}

// prepareWait gets ready to park, holding off Close: it marks a doorbell
// asleep, takes a last look at the queue (a burst kept for the next
// ReadBurst, with the receive interrupt enabled first), and arms the timer
// of a sleep-based wait. ready reports frames found by the look.
func (q *queue) prepareWait() (ready bool, err error) {
	q.rxMu.RLock()
	defer q.rxMu.RUnlock()
	if q.link.closed.Load() {
		return false, link.ErrClosed
	}
	w := &q.wait
	if w.bell != nil {
		w.bell.sleeping() // before the look: a send after it rings
	}
	intr := w.intrFd >= 0 && w.intrToggle
	if q.rx.n == 0 {
		if intr {
			C.pn_rx_intr_enable(q.port, C.uint16_t(q.idx))
		}
		if C.pn_rx_burst(q.rx) > 0 {
			q.head = 0
			q.stats.rxBursts.Add(1)
		}
	}
	if q.rx.n > 0 {
		if intr {
			C.pn_rx_intr_disable(q.port, C.uint16_t(q.idx))
		}
		if w.bell != nil {
			w.bell.awake()
		}
		return true, nil
	}
	if w.intrFd < 0 {
		// With a doorbell the timer only bounds the sleeps next to a peer
		// without one.
		sleep := w.sleep
		if w.bell != nil {
			sleep = q.link.cfg.PollIntervalMax
		}
		spec := unix.ItimerSpec{Value: unix.NsecToTimespec(int64(sleep))}
		if _, errno := rawsys.NoWait(unix.SYS_TIMERFD_SETTIME, uintptr(w.timerFd), 0, uintptr(unsafe.Pointer(&spec)), 0, 0, 0); errno != 0 {
			return false, q.waitError(os.NewSyscallError("timerfd_settime", errno))
		}
		w.sleep = min(2*w.sleep, q.link.cfg.PollIntervalMax)
		q.stats.sleeps.Add(1)
	}
	return false, nil
}

// finishWait undoes prepareWait's arming after a wait, unless the link was
// closed meanwhile.
func (q *queue) finishWait() {
	q.rxMu.RLock()
	defer q.rxMu.RUnlock()
	if q.link.closed.Load() {
		return
	}
	w := &q.wait
	if w.bell != nil {
		w.bell.awake()
	}
	if w.intrFd >= 0 && w.intrToggle {
		C.pn_rx_intr_disable(q.port, C.uint16_t(q.idx))
	}
}

// waitReady is WaitRead's netpoller callback: it collects what the queue's
// epoll instance holds, draining the eventfds and the timer, and reports
// whether anything fired.
func (q *queue) waitReady(fd uintptr) bool {
	w := &q.wait
	// What runs on every sleep is raw (rawsys): none of it waits.
	r, errno := rawsys.NoWait(unix.SYS_EPOLL_PWAIT, fd, uintptr(unsafe.Pointer(&w.events[0])), uintptr(len(w.events)), 0, 0, 0)
	if errno != 0 {
		w.err = os.NewSyscallError("epoll_pwait", errno)
		return true
	}
	n := int(r)
	var b [8]byte
	for _, ev := range w.events[:n] {
		switch int(ev.Fd) {
		case w.kickFd:
			rawsys.NoWait(unix.SYS_READ, uintptr(w.kickFd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)), 0, 0, 0)
		case w.timerFd:
			rawsys.NoWait(unix.SYS_READ, uintptr(w.timerFd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)), 0, 0, 0)
			w.woke |= wokeTimer
		case w.intrFd:
			if w.intrClear {
				unix.Read(w.intrFd, b[:])
			}
			w.woke |= wokeIntr
		default:
			if w.bell != nil && int(ev.Fd) == w.bell.fd {
				w.bell.drain()
				w.woke |= wokeIntr
			}
		}
	}
	return n > 0
}

// waitError maps an error of a wait to link.ErrClosed once the link is
// closed (which closes the epoll descriptor under a parked WaitRead).
func (q *queue) waitError(err error) error {
	if q.link.closed.Load() || errors.Is(err, os.ErrClosed) {
		return link.ErrClosed
	}
	return fmt.Errorf("dpdk: %s: waiting on queue %d: %w", q.link.info.Name, q.idx, err)
}

// PeerPolls reports that a net_memif queue's peer polls the shared rings
// (link.PolledPeer): a memif end is a process on this host, polarnet's or
// a poll-mode switch's.
func (q *queue) PeerPolls() bool { return q.link.setup.Driver == "net_memif" }

// Interrupt makes a WaitRead in progress, or the next one, return.
func (q *queue) Interrupt() {
	if q.wait.interrupted.Swap(true) {
		return
	}
	q.kick()
}

// kick wakes a parked WaitRead. It holds off closeWait, so that it never
// writes to a closed descriptor whose number was reused.
func (q *queue) kick() {
	q.rxMu.RLock()
	defer q.rxMu.RUnlock()
	one := [8]byte{1}
	if fd := q.wait.kickFd; fd >= 0 && !q.wait.closed {
		unix.Write(fd, one[:]) // EAGAIN: the counter is full, it is awake anyway
	}
}
