package afxdp

import (
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/polarnet/polarnet/internal/rawsys"
	"github.com/polarnet/polarnet/link"
)

// txMetadataLen is the size of struct xsk_tx_metadata: the TX metadata the
// kernel reads in front of a frame that asks for checksum offload.
const txMetadataLen = 24

// ring is one of the four rings a socket shares with the kernel: a
// power-of-two array of descriptors with a producer and a consumer index,
// each written by one side only.
type ring struct {
	producer *uint32
	consumer *uint32
	flags    *uint32
	descs    unsafe.Pointer // [size]uint64 (fill, completion) or [size]unix.XDPDesc (RX, TX)
	mask     uint32
	mem      []byte // the mapping
}

func (r *ring) addr(i uint32) *uint64 {
	return (*uint64)(unsafe.Add(r.descs, uintptr(i&r.mask)*8))
}

func (r *ring) desc(i uint32) *unix.XDPDesc {
	return (*unix.XDPDesc)(unsafe.Add(r.descs, uintptr(i&r.mask)*unsafe.Sizeof(unix.XDPDesc{})))
}

// needWakeup reports whether the kernel asks to be kicked to process this
// ring (XDP_USE_NEED_WAKEUP).
func (r *ring) needWakeup() bool { return atomic.LoadUint32(r.flags)&unix.XDP_RING_NEED_WAKEUP != 0 }

// socket is one AF_XDP socket with its UMEM and rings, bound to one queue.
type socket struct {
	fd        int
	umem      []byte
	fill      ring
	comp      ring
	rx        ring
	tx        ring
	zeroCopy  bool
	txMeta    bool // the UMEM has room for TX metadata (checksum offload)
	frameSize int
	// multiBuffer: bound with XDP_USE_SG, so that a frame may span several
	// UMEM frames, a descriptor each.
	multiBuffer bool
}

// socketConfig is what openSocket needs of the link's settings.
type socketConfig struct {
	ifindex  int
	queue    int
	cfg      *Config
	noTxMeta bool // do not ask for TX metadata (tests, old kernels)
	// multiBuffer asks for frames that span several UMEM frames: the
	// interface's MTU does not fit one.
	multiBuffer bool
}

// openSocket creates an AF_XDP socket with its UMEM and rings, gives the
// kernel the RX frames and binds the socket to the queue.
func openSocket(sc socketConfig) (_ *socket, err error) {
	cfg := sc.cfg
	fd, err := unix.Socket(unix.AF_XDP, unix.SOCK_RAW|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
	if err != nil {
		return nil, socketError(err)
	}
	s := &socket{fd: fd, frameSize: cfg.FrameSize, multiBuffer: sc.multiBuffer}
	defer func() {
		if err != nil {
			s.close()
		}
	}()

	size := cfg.Frames * cfg.FrameSize
	s.umem, err = unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_POPULATE)
	if err != nil {
		return nil, fmt.Errorf("mapping %d bytes of UMEM: %w", size, err)
	}
	if err := s.registerUMEM(sc.noTxMeta); err != nil {
		return nil, err
	}
	for _, o := range []struct {
		opt  int
		name string
	}{
		{unix.XDP_UMEM_FILL_RING, "fill"},
		{unix.XDP_UMEM_COMPLETION_RING, "completion"},
		{unix.XDP_RX_RING, "RX"},
		{unix.XDP_TX_RING, "TX"},
	} {
		if err := unix.SetsockoptInt(fd, unix.SOL_XDP, o.opt, cfg.RingSize); err != nil {
			return nil, fmt.Errorf("sizing the %s ring: %w", o.name, err)
		}
	}
	var off unix.XDPMmapOffsets
	offLen := uint32(unsafe.Sizeof(off))
	if _, _, errno := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_XDP, unix.XDP_MMAP_OFFSETS,
		uintptr(unsafe.Pointer(&off)), uintptr(unsafe.Pointer(&offLen)), 0); errno != 0 {
		return nil, fmt.Errorf("reading the ring offsets: %w", errno)
	}
	if offLen != uint32(unsafe.Sizeof(off)) {
		return nil, fmt.Errorf("reading the ring offsets: the kernel has no ring flags (need Linux 5.4): %w", link.ErrNotSupported)
	}
	n := uint32(cfg.RingSize)
	for _, m := range []struct {
		r        *ring
		off      unix.XDPRingOffset
		pgoff    int64
		descSize uintptr
	}{
		{&s.fill, off.Fr, unix.XDP_UMEM_PGOFF_FILL_RING, 8},
		{&s.comp, off.Cr, unix.XDP_UMEM_PGOFF_COMPLETION_RING, 8},
		{&s.rx, off.Rx, unix.XDP_PGOFF_RX_RING, unsafe.Sizeof(unix.XDPDesc{})},
		{&s.tx, off.Tx, unix.XDP_PGOFF_TX_RING, unsafe.Sizeof(unix.XDPDesc{})},
	} {
		if err := mapRing(fd, m.r, m.off, m.pgoff, n, m.descSize); err != nil {
			return nil, err
		}
	}
	// The first RingSize frames are RX frames: the kernel owns them from
	// here on, in the fill ring, until they come back on the RX ring.
	for i := range n {
		*s.fill.addr(i) = uint64(i) * uint64(cfg.FrameSize)
	}
	atomic.StoreUint32(s.fill.producer, n)

	if err := s.bind(sc); err != nil {
		return nil, err
	}
	var opts struct{ Flags uint32 } // struct xdp_options
	optsLen := uint32(unsafe.Sizeof(opts))
	if _, _, errno := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_XDP, unix.XDP_OPTIONS,
		uintptr(unsafe.Pointer(&opts)), uintptr(unsafe.Pointer(&optsLen)), 0); errno == 0 {
		s.zeroCopy = opts.Flags&unix.XDP_OPTIONS_ZEROCOPY != 0
	}
	// In copy mode one sendto sends at most this many frames (32 unless
	// raised); a kernel that cannot raise it is fine, WriteBurst kicks again.
	unix.SetsockoptInt(fd, unix.SOL_XDP, unix.XDP_MAX_TX_SKB_BUDGET, cfg.RingSize)
	return s, nil
}

// registerUMEM registers the UMEM with room for TX metadata (checksum
// offload requests, Linux 6.11 and later), or without where the kernel
// does not know it.
func (s *socket) registerUMEM(noTxMeta bool) error {
	reg := unix.XDPUmemReg{
		Addr: uint64(uintptr(unsafe.Pointer(&s.umem[0]))),
		Len:  uint64(len(s.umem)),
		Size: uint32(s.frameSize),
	}
	if !noTxMeta {
		reg.Flags, reg.Tx_metadata_len = unix.XDP_UMEM_TX_METADATA_LEN, txMetadataLen
		if err := setsockoptUMEM(s.fd, &reg); err == nil {
			s.txMeta = true
			return nil
		} else if !errors.Is(err, unix.EINVAL) {
			return umemError(err)
		}
		reg.Flags, reg.Tx_metadata_len = 0, 0
	}
	if err := setsockoptUMEM(s.fd, &reg); err != nil {
		return umemError(err)
	}
	return nil
}

func setsockoptUMEM(fd int, reg *unix.XDPUmemReg) error {
	_, _, errno := unix.Syscall6(unix.SYS_SETSOCKOPT, uintptr(fd), unix.SOL_XDP, unix.XDP_UMEM_REG,
		uintptr(unsafe.Pointer(reg)), unsafe.Sizeof(*reg), 0)
	if errno != 0 {
		return errno
	}
	return nil
}

func umemError(err error) error {
	hint := ""
	if errors.Is(err, unix.ENOMEM) || errors.Is(err, unix.ENOBUFS) || errors.Is(err, unix.EPERM) {
		hint = " (the UMEM is locked memory: raise RLIMIT_MEMLOCK, lower Config.Frames, or run with CAP_IPC_LOCK)"
	}
	return fmt.Errorf("registering the UMEM: %w%s", err, hint)
}

// bind binds the socket to its queue, zero-copy first if allowed, and
// retries a queue the kernel still holds for a socket closed a moment ago.
func (s *socket) bind(sc socketConfig) error {
	flags := uint16(unix.XDP_USE_NEED_WAKEUP)
	if sc.multiBuffer {
		flags |= unix.XDP_USE_SG
	}
	zc := sc.cfg.ZeroCopy
	if zc == ZeroCopyOff {
		flags |= unix.XDP_COPY
	} else {
		flags |= unix.XDP_ZEROCOPY
	}
	deadline := time.Now().Add(max(sc.cfg.BusyTimeout, 0))
	for {
		err := unix.Bind(s.fd, &unix.SockaddrXDP{Flags: flags, Ifindex: uint32(sc.ifindex), QueueID: uint32(sc.queue)})
		switch {
		case err == nil:
			return nil
		case errors.Is(err, unix.EOPNOTSUPP) && flags&unix.XDP_ZEROCOPY != 0 && zc == ZeroCopyAuto:
			flags = flags&^unix.XDP_ZEROCOPY | unix.XDP_COPY
			continue
		case errors.Is(err, unix.EBUSY) && time.Now().Before(deadline):
			time.Sleep(20 * time.Millisecond)
			continue
		}
		return bindError(sc, flags, err)
	}
}

func bindError(sc socketConfig, flags uint16, err error) error {
	what := fmt.Sprintf("binding to queue %d", sc.queue)
	switch {
	case errors.Is(err, unix.EOPNOTSUPP) && flags&unix.XDP_ZEROCOPY != 0:
		return unsupported{fmt.Errorf("%s in zero-copy mode: %w (the driver has no zero-copy support; set ZeroCopy to auto or off)", what, err)}
	case errors.Is(err, unix.EBUSY):
		return fmt.Errorf("%s: %w (another AF_XDP socket holds the queue, still after %v)", what, err, max(sc.cfg.BusyTimeout, 0))
	case errors.Is(err, unix.EINVAL) && flags&unix.XDP_USE_SG != 0:
		return fmt.Errorf("%s: %w (the interface has fewer queues, or is not up; or the kernel has no multi-buffer AF_XDP, which frames larger than a UMEM frame need: Linux 6.6)", what, err)
	case errors.Is(err, unix.EINVAL):
		return fmt.Errorf("%s: %w (the interface has fewer queues, or is not up)", what, err)
	case errors.Is(err, unix.ENETDOWN):
		return fmt.Errorf("%s: %w (bring the interface up)", what, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

func mapRing(fd int, r *ring, off unix.XDPRingOffset, pgoff int64, n uint32, descSize uintptr) error {
	size := int(off.Desc) + int(n)*int(descSize)
	mem, err := unix.Mmap(fd, pgoff, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return fmt.Errorf("mapping a ring: %w", err)
	}
	base := unsafe.Pointer(&mem[0])
	*r = ring{
		producer: (*uint32)(unsafe.Add(base, off.Producer)),
		consumer: (*uint32)(unsafe.Add(base, off.Consumer)),
		flags:    (*uint32)(unsafe.Add(base, off.Flags)),
		descs:    unsafe.Add(base, off.Desc),
		mask:     n - 1,
		mem:      mem,
	}
	return nil
}

// kick asks the kernel to process the TX ring. In copy mode that is where
// frames are sent; in zero-copy mode it wakes the driver.
func (s *socket) kick() unix.Errno {
	_, errno := rawsys.NoWait(unix.SYS_SENDTO, uintptr(s.fd), 0, 0, unix.MSG_DONTWAIT, 0, 0)
	return errno
}

// wakeFill asks a zero-copy driver to look at the fill ring again.
func (s *socket) wakeFill() {
	rawsys.NoWait(unix.SYS_RECVFROM, uintptr(s.fd), 0, 0, unix.MSG_DONTWAIT, 0, 0)
}

// statistics returns the kernel's counters of the socket.
func (s *socket) statistics() (unix.XDPStatistics, error) {
	var st unix.XDPStatistics
	l := uint32(unsafe.Sizeof(st))
	if _, _, errno := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(s.fd), unix.SOL_XDP, unix.XDP_STATISTICS,
		uintptr(unsafe.Pointer(&st)), uintptr(unsafe.Pointer(&l)), 0); errno != 0 {
		return st, errno
	}
	return st, nil
}

// close unmaps the rings and the UMEM and closes the socket. Nothing may
// use them any more.
func (s *socket) close() error {
	var errs []error
	for _, r := range []*ring{&s.fill, &s.comp, &s.rx, &s.tx} {
		if r.mem != nil {
			errs = append(errs, unix.Munmap(r.mem))
			*r = ring{}
		}
	}
	if s.umem != nil {
		errs = append(errs, unix.Munmap(s.umem))
		s.umem = nil
	}
	if s.fd >= 0 {
		errs = append(errs, unix.Close(s.fd))
		s.fd = -1
	}
	return errors.Join(errs...)
}

// socketError explains a failure to create an AF_XDP socket.
func socketError(err error) error {
	switch {
	case errors.Is(err, unix.EAFNOSUPPORT):
		return unsupported{fmt.Errorf("creating an AF_XDP socket: %w (the kernel has no AF_XDP: CONFIG_XDP_SOCKETS)", err)}
	case errors.Is(err, unix.EPERM), errors.Is(err, unix.EACCES):
		return fmt.Errorf("creating an AF_XDP socket: %w (%s)", err, privHint)
	}
	return fmt.Errorf("creating an AF_XDP socket: %w", os.NewSyscallError("socket", err))
}

// privHint says what privileges the link needs.
const privHint = "need root, or CAP_NET_RAW, CAP_NET_ADMIN and CAP_BPF"

// unsupported marks an error as link.ErrNotSupported (the host lacks
// something) while keeping its message and its chain.
type unsupported struct{ error }

func (e unsupported) Unwrap() error      { return e.error }
func (unsupported) Is(target error) bool { return target == link.ErrNotSupported }
