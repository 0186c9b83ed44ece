package afxdp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/cpu"
	"golang.org/x/sys/unix"

	"github.com/polarnet/polarnet/internal/frame"
	"github.com/polarnet/polarnet/internal/rawsys"
	"github.com/polarnet/polarnet/link"
)

// maxKicks bounds the sendto calls of one WriteBurst: in copy mode each
// sends up to the socket's TX budget, so a full ring takes a few.
const maxKicks = 64

// maxFrameDescs bounds the UMEM frames (descriptors) one multi-buffer frame
// spans: the kernel builds a sent frame as a socket buffer of at most
// MAX_SKB_FRAGS+1 parts (MAX_SKB_FRAGS is 17 unless configured otherwise).
const maxFrameDescs = 16

// txChecksum says how a queue completes checksum-partial frames.
type txChecksum uint8

const (
	// txChecksumMetadata asks the kernel through TX metadata: in copy mode
	// the frame becomes a CHECKSUM_PARTIAL socket buffer, which the device
	// completes (veth hands it to its peer as it is, which trusts it).
	txChecksumMetadata txChecksum = iota + 1
	// txChecksumSoftware completes the checksum while the frame is in UMEM.
	txChecksumSoftware
)

func (c txChecksum) String() string {
	switch c {
	case txChecksumMetadata:
		return "metadata"
	case txChecksumSoftware:
		return "software"
	}
	return "none"
}

// queue is one queue pair of a Link: an AF_XDP socket bound to one of the
// interface's RX queues (and the TX queue of the same number).
type queue struct {
	link  *Link
	index int
	sock  *socket

	// mu is held shared by every call that touches the rings or the UMEM
	// and exclusively by close, which unmaps them: nothing can fault on a
	// mapping that is gone.
	mu     sync.RWMutex
	closed bool // under mu

	// WaitRead parks on waitFile, a duplicate of the socket's descriptor
	// registered with the netpoller; Interrupt expires its read deadline.
	waitFile    *os.File
	wait        syscall.RawConn
	interrupted atomic.Bool
	waitFn      func(fd uintptr) bool
	polled      bool
	pollFd      [1]unix.PollFd

	frameMask uint64 // FrameSize-1: a descriptor's address less its offset
	rxMax     int    // the largest frame handed to the engine
	// rxMark marks frames whose checksum the link verified ChecksumValid
	// (the link claims CapRXChecksum); without it the link completes
	// partial checksums in the frame and leaves verifying to the engine.
	rxMark bool
	// rxPartial accepts frames whose checksum field holds the
	// pseudo-header sum only, as the local kernel sends them on veth.
	rxPartial bool

	// The poller owns the fields above, the writer those below.
	_      cpu.CacheLinePad
	free   []uint64 // TX frames not in use
	txCsum txChecksum
	copyTX bool // copy mode: frames are sent by sendto, never by themselves
	// chunkData is the room for a frame's bytes in one UMEM frame; with
	// multiBuffer a larger frame spans several.
	chunkData   int
	multiBuffer bool
	pieces      [maxFrameDescs][]byte // a frame's parts in UMEM, during WriteBurst

	stats queueCounters
}

// queueCounters are the link's own counters of a queue.
type queueCounters struct {
	rxFrames, rxOversize, rxInvalid  atomic.Uint64
	rxChecksumPartial, rxChecksumBad atomic.Uint64
	txFrames, txRingFull, txKicks    atomic.Uint64
	fillWakeups                      atomic.Uint64
}

var _ link.Queue = (*queue)(nil)

func newQueue(l *Link, index int, s *socket, rxMax int) (*queue, error) {
	waitFd, err := unix.FcntlInt(uintptr(s.fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("duplicating the socket of queue %d: %w", index, err)
	}
	// Non-blocking (the socket is), so os.NewFile registers it with the
	// netpoller.
	q := &queue{
		link:        l,
		index:       index,
		sock:        s,
		waitFile:    os.NewFile(uintptr(waitFd), fmt.Sprintf("afxdp:%s:%d", l.info.Name, index)),
		frameMask:   uint64(s.frameSize - 1),
		chunkData:   s.frameSize - frameHeadroom,
		multiBuffer: s.multiBuffer,
		rxMax:       rxMax,
		copyTX:      !s.zeroCopy,
	}
	q.wait, err = q.waitFile.SyscallConn()
	if err != nil {
		q.waitFile.Close()
		return nil, err
	}
	q.waitFn = q.waitReady
	txFrames := len(s.umem)/s.frameSize - int(s.fill.mask+1)
	q.free = make([]uint64, 0, txFrames)
	for i := txFrames - 1; i >= 0; i-- {
		q.free = append(q.free, uint64(int(s.fill.mask+1)+i)*uint64(s.frameSize))
	}
	return q, nil
}

// ReadBurst copies received frames into the engine's buffers and gives
// their UMEM frames straight back to the kernel (the fill ring), in one
// pass over the RX ring. Frames larger than the link's RxFrameSize are
// dropped and counted.
func (q *queue) ReadBurst(frames []link.RxFrame) (int, error) {
	q.mu.RLock()
	defer q.mu.RUnlock()
	if q.closed {
		return 0, link.ErrClosed
	}
	s := q.sock
	if q.copyTX {
		q.kickPending()
	}
	cons := *s.rx.consumer // written by us only
	avail := atomic.LoadUint32(s.rx.producer) - cons
	if avail == 0 || len(frames) == 0 {
		return 0, nil
	}
	fillProd := *s.fill.producer
	out := 0
	var i uint32 // descriptors consumed
	for i < avail && out < len(frames) {
		// A frame is one descriptor or, with multi-buffer, several, all
		// but the last marked XDP_PKT_CONTD.
		end := i
		for end < avail && s.rx.desc(cons+end).Options&unix.XDP_PKT_CONTD != 0 {
			end++
		}
		if end == avail {
			break // the kernel publishes a frame's descriptors together
		}
		f := &frames[out]
		length, ok := 0, true
		for ; i <= end; i++ {
			d := s.rx.desc(cons + i)
			addr, l := d.Addr, int(d.Len)
			// The fill ring has room: RX frames are exactly as many as
			// its slots.
			*s.fill.addr(fillProd + i) = addr &^ q.frameMask
			switch {
			case !ok:
			case addr+uint64(l) > uint64(len(s.umem)):
				q.stats.rxInvalid.Add(1)
				ok = false
			case length+l > q.rxMax || length+l > cap(f.Buf):
				q.stats.rxOversize.Add(1)
				ok = false
			default:
				length += copy(f.Buf[length:cap(f.Buf)], s.umem[addr:addr+uint64(l)])
			}
		}
		if !ok {
			continue
		}
		buf := f.Buf[:length:cap(f.Buf)]
		f.Len = length
		f.ChecksumValid = false
		switch res, field, complete := frame.CheckRX(buf); res {
		case frame.RxGood:
			f.ChecksumValid = q.rxMark
		case frame.RxPartial:
			if !q.rxPartial {
				q.stats.rxChecksumBad.Add(1)
				break
			}
			q.stats.rxChecksumPartial.Add(1)
			if q.rxMark {
				f.ChecksumValid = true
			} else {
				binary.BigEndian.PutUint16(buf[field:], complete)
			}
		case frame.RxBad:
			q.stats.rxChecksumBad.Add(1)
		}
		out++
	}
	atomic.StoreUint32(s.rx.consumer, cons+i)
	atomic.StoreUint32(s.fill.producer, fillProd+i)
	if s.fill.needWakeup() {
		q.stats.fillWakeups.Add(1)
		s.wakeFill()
	}
	q.stats.rxFrames.Add(uint64(out))
	return out, nil
}

// kickPending sends what a WriteBurst left in the TX ring, as when the
// kernel's budget or its completion ring stopped a kick: in copy mode
// nothing else would send it.
func (q *queue) kickPending() {
	s := q.sock
	if atomic.LoadUint32(s.tx.producer) != atomic.LoadUint32(s.tx.consumer) {
		q.stats.txKicks.Add(1)
		s.kick()
	}
}

// WriteBurst copies frames into free TX frames of the UMEM, completing or
// delegating their checksums, puts them on the TX ring and kicks the
// kernel if it asks to be. Frames that find no room are not accepted.
func (q *queue) WriteBurst(frames []link.TxFrame) (int, error) {
	q.mu.RLock()
	defer q.mu.RUnlock()
	if q.closed {
		return 0, link.ErrClosed
	}
	s := q.sock
	q.reclaim()
	prod := *s.tx.producer // written by us only
	room := q.txRoom(prod)
	n := 0
	var err error
	for ; n < len(frames); n++ {
		f := &frames[n]
		length := f.Len()
		descs := (length + q.chunkData - 1) / q.chunkData
		if err = q.checkFrame(f, length, descs); err != nil {
			break
		}
		if room < descs || len(q.free) < descs {
			if q.reclaim(); q.txRoom(prod) < descs || len(q.free) < descs {
				q.stats.txRingFull.Add(uint64(len(frames) - n))
				break
			}
			room = q.txRoom(prod)
		}
		room -= descs
		// The frame's UMEM frames, the last free ones, filled in order.
		pieces := q.pieces[:descs]
		for k := range pieces {
			data := q.free[len(q.free)-1-k] + frameHeadroom
			pieces[k] = s.umem[data : data+uint64(min(q.chunkData, length-k*q.chunkData))]
		}
		k, off := 0, 0
		for _, seg := range f.Segs {
			for len(seg) > 0 {
				if off == len(pieces[k]) {
					k, off = k+1, 0
				}
				c := copy(pieces[k][off:], seg)
				off += c
				seg = seg[c:]
			}
		}
		var options uint32
		if f.Offload.NeedsChecksum {
			start, offset := int(f.Offload.ChecksumStart), int(f.Offload.ChecksumOffset)
			if q.txCsum == txChecksumMetadata {
				// The kernel reads it in front of the first descriptor's data.
				data := q.free[len(q.free)-1] + frameHeadroom
				meta := s.umem[data-txMetadataLen : data]
				clear(meta)
				binary.NativeEndian.PutUint64(meta, unix.XDP_TXMD_FLAGS_CHECKSUM)
				binary.NativeEndian.PutUint16(meta[8:], uint16(start))
				binary.NativeEndian.PutUint16(meta[10:], uint16(offset))
				options = unix.XDP_TX_METADATA
			} else {
				completeChecksum(pieces, start, offset)
			}
		}
		for k := range pieces {
			d := s.tx.desc(prod)
			*d = unix.XDPDesc{Addr: q.free[len(q.free)-1] + frameHeadroom, Len: uint32(len(pieces[k])), Options: options}
			if k < len(pieces)-1 {
				d.Options |= unix.XDP_PKT_CONTD
			}
			options = 0 // metadata goes with the first descriptor only
			prod++
			q.free = q.free[:len(q.free)-1]
		}
	}
	if n > 0 {
		atomic.StoreUint32(s.tx.producer, prod)
		q.stats.txFrames.Add(uint64(n))
		q.kickTX(prod)
	}
	return n, err
}

// txRoom returns the free descriptors of the TX ring after prod.
func (q *queue) txRoom(prod uint32) int {
	s := q.sock
	return int(s.tx.mask + 1 - (prod - atomic.LoadUint32(s.tx.consumer)))
}

// checkFrame rejects what the link cannot send: frame f of length bytes,
// which takes descs UMEM frames.
func (q *queue) checkFrame(f *link.TxFrame, length, descs int) error {
	o := &f.Offload
	switch {
	case length == 0:
		return fmt.Errorf("afxdp: %s: empty frame", q.link.info.Name)
	case descs > 1 && !q.multiBuffer:
		return fmt.Errorf("afxdp: %s: a frame of %d bytes does not fit a UMEM frame (%d bytes)", q.link.info.Name, length, q.chunkData)
	case descs > maxFrameDescs:
		return fmt.Errorf("afxdp: %s: a frame of %d bytes takes more than %d UMEM frames", q.link.info.Name, length, maxFrameDescs)
	case o.GSO != link.GSONone:
		return fmt.Errorf("afxdp: %s: a frame asks for segmentation: %w", q.link.info.Name, link.ErrNotSupported)
	case o.NeedsChecksum && (q.txCsum == 0 || int(o.ChecksumStart)+int(o.ChecksumOffset)+2 > min(length, q.chunkData)):
		// The field must lie in the first UMEM frame, where the kernel
		// looks for it too.
		return fmt.Errorf("afxdp: %s: bad checksum offload request (start %d, offset %d, frame %d bytes)", q.link.info.Name, o.ChecksumStart, o.ChecksumOffset, length)
	}
	return nil
}

// kickTX makes the kernel send the TX ring up to prod. In copy mode each
// sendto sends up to the socket's budget of frames and then reports EAGAIN;
// a kick that makes no progress leaves the rest for the next burst's kick
// (ReadBurst's kickPending covers an idle writer).
func (q *queue) kickTX(prod uint32) {
	s := q.sock
	if !q.copyTX && !s.tx.needWakeup() {
		return
	}
	last := atomic.LoadUint32(s.tx.consumer)
	for range maxKicks {
		q.stats.txKicks.Add(1)
		errno := s.kick()
		cons := atomic.LoadUint32(s.tx.consumer)
		if cons == prod {
			return
		}
		if errno != 0 && errno != unix.EAGAIN && errno != unix.EBUSY && errno != unix.ENOBUFS {
			return // the device is down: the frames wait in the ring
		}
		if cons == last {
			// No progress: completions may be what the kernel waits for.
			if q.reclaim() == 0 {
				return
			}
		}
		last = cons
	}
}

// reclaim takes the frames the kernel has sent back from the completion
// ring and returns how many.
func (q *queue) reclaim() int {
	s := q.sock
	cons := *s.comp.consumer
	prod := atomic.LoadUint32(s.comp.producer)
	for i := cons; i != prod; i++ {
		q.free = append(q.free, *s.comp.addr(i)&^q.frameMask)
	}
	atomic.StoreUint32(s.comp.consumer, prod)
	return int(prod - cons)
}

// WaitRead parks the goroutine in the netpoller until the RX ring has
// frames, Interrupt is called or the link is closed.
func (q *queue) WaitRead() error {
	for {
		if q.link.closed.Load() {
			return link.ErrClosed
		}
		if q.interrupted.Swap(false) {
			return nil
		}
		q.polled = false
		err := q.wait.Read(q.waitFn)
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			if err != nil {
				if q.link.closed.Load() || errors.Is(err, os.ErrClosed) {
					return link.ErrClosed
				}
				return fmt.Errorf("afxdp: waiting for %s queue %d: %w", q.link.info.Name, q.index, err)
			}
			return nil
		}
		// Interrupt's deadline. Clear it before looking at the flag again,
		// so that an Interrupt racing with this sets it after the clear.
		q.waitFile.SetReadDeadline(time.Time{})
	}
}

// waitReady is WaitRead's callback. The netpoller is edge-triggered and
// forgets readiness it saw before the wait, so the first call asks the
// socket with a non-blocking poll (in copy mode that also sends what waits
// in the TX ring), the second, after the wait, reports the wake-up.
func (q *queue) waitReady(fd uintptr) bool {
	if q.polled {
		return true
	}
	q.polled = true
	q.pollFd[0] = unix.PollFd{Fd: int32(fd), Events: unix.POLLIN}
	n, errno := rawsys.PollNow(q.pollFd[:])
	return errno != 0 || (n > 0 && q.pollFd[0].Revents&(unix.POLLIN|unix.POLLERR|unix.POLLHUP) != 0)
}

// Interrupt makes a WaitRead in progress, or the next one, return.
func (q *queue) Interrupt() {
	if q.interrupted.Swap(true) {
		return
	}
	// Fails only once the link is closed, when WaitRead returns anyway.
	q.waitFile.SetReadDeadline(time.Now())
}

// close waits for bursts in progress, then releases the socket, its rings
// and UMEM. A parked WaitRead returns once waitFile is closed.
func (q *queue) close() error {
	err := q.waitFile.Close()
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return nil
	}
	q.closed = true
	return errors.Join(err, q.sock.close())
}

// QueueStats are the counters of one queue: the link's own and the
// kernel's (XDP_STATISTICS).
type QueueStats struct {
	RxFrames uint64
	// RxOversize counts frames larger than the link's RxFrameSize, dropped.
	RxOversize uint64
	// RxInvalid counts RX descriptors outside the UMEM, dropped.
	RxInvalid uint64
	// RxChecksumPartial counts frames accepted with a partial checksum
	// from the local kernel; RxChecksumBad those left for the engine to
	// verify (and drop) because their checksum is wrong.
	RxChecksumPartial, RxChecksumBad uint64
	TxFrames                         uint64
	// TxRingFull counts frames WriteBurst did not accept for want of room.
	TxRingFull uint64
	// TxKicks counts sendto calls; FillWakeups recvfrom calls made because
	// the driver asked to be woken for the fill ring.
	TxKicks, FillWakeups uint64
	// The kernel's counters.
	KernelRxDropped, KernelRxInvalid, KernelTxInvalid    uint64
	KernelRxRingFull, KernelFillEmpty, KernelTxRingEmpty uint64
}

func (q *queue) statistics() QueueStats {
	st := QueueStats{
		RxFrames:          q.stats.rxFrames.Load(),
		RxOversize:        q.stats.rxOversize.Load(),
		RxInvalid:         q.stats.rxInvalid.Load(),
		RxChecksumPartial: q.stats.rxChecksumPartial.Load(),
		RxChecksumBad:     q.stats.rxChecksumBad.Load(),
		TxFrames:          q.stats.txFrames.Load(),
		TxRingFull:        q.stats.txRingFull.Load(),
		TxKicks:           q.stats.txKicks.Load(),
		FillWakeups:       q.stats.fillWakeups.Load(),
	}
	q.mu.RLock()
	defer q.mu.RUnlock()
	if q.closed {
		return st
	}
	if k, err := q.sock.statistics(); err == nil {
		st.KernelRxDropped, st.KernelRxInvalid, st.KernelTxInvalid = k.Rx_dropped, k.Rx_invalid_descs, k.Tx_invalid_descs
		st.KernelRxRingFull, st.KernelFillEmpty, st.KernelTxRingEmpty = k.Rx_ring_full, k.Rx_fill_ring_empty_descs, k.Tx_ring_empty_descs
	}
	return st
}
