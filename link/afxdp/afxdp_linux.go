package afxdp

import (
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"github.com/cilium/ebpf"
	ebpflink "github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/polarnet/polarnet/link"
)

// programPrefix starts the name of every XDP program the link loads; the
// rest is the loading process's ID. A program of that name on an interface
// is polarnet's: New replaces it when its process is gone.
const programPrefix = "pnxdp_"

// Link is an AF_XDP link: one AF_XDP socket per queue pair on a network
// interface, fed by an XDP program of the link's own. It implements
// link.Link.
type Link struct {
	info    link.Info
	cfg     Config
	ifindex int
	queues  []link.Queue
	mode    Mode
	zc      bool
	txCsum  txChecksum
	driver  string
	// stale is the ID of a program of a previous run that New detached.
	stale ebpf.ProgramID

	prog    *ebpf.Program
	xsks    *ebpf.Map
	xdpLink ebpflink.Link // the attachment, when a BPF link holds it
	nlFlags uint32        // the attachment's mode, when netlink made it

	closed    atomic.Bool
	closeOnce sync.Once
	closeErr  error
}

var _ link.Link = (*Link)(nil)

// testHooks change how New works, for tests.
type testHooks struct {
	// netlinkAttach attaches the program through netlink, as on kernels
	// without BPF links for XDP, where a crashed process leaves it behind.
	netlinkAttach bool
	// noTxMetadata makes the link complete TX checksums in software.
	noTxMetadata bool
}

// New opens an AF_XDP link on cfg.Interface: it detaches a program a
// crashed earlier run left on the interface, binds one AF_XDP socket per
// queue and attaches the link's XDP program. It works in the network
// namespace of the calling thread (netns.Do, or a process started there).
//
// New needs CAP_NET_ADMIN, CAP_BPF and CAP_NET_RAW (root has them).
// Errors wrap the errno the kernel gave; a host or device that lacks
// something needed (AF_XDP, the XDP mode or zero-copy asked for) gives an
// error wrapping link.ErrNotSupported.
func New(cfg Config) (*Link, error) { return newLink(cfg, testHooks{}) }

func newLink(cfg Config, hooks testHooks) (_ *Link, err error) {
	cfg, err = cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	name := cfg.Interface
	dev, err := lookupDevice(name)
	if err != nil {
		return nil, err
	}
	if cfg.Queues == 0 {
		cfg.Queues = max(1, min(dev.rxQueues, runtime.GOMAXPROCS(0)))
	}
	switch {
	case cfg.MTU == 0:
		cfg.MTU = dev.mtu
	case cfg.MTU > dev.mtu:
		return nil, fmt.Errorf("afxdp: MTU %d is larger than %s's (%d); raise the interface's first", cfg.MTU, name, dev.mtu)
	}
	// A frame larger than a UMEM frame spans several (multi-buffer).
	chunkData := cfg.FrameSize - frameHeadroom
	descs := (dev.mtu + ethHdrLen + chunkData - 1) / chunkData
	if descs > min(maxFrameDescs, cfg.RingSize) {
		return nil, fmt.Errorf("afxdp: %s has MTU %d: frames of %d bytes would span %d UMEM frames of %d (%d usable), more than %d; lower the MTU: %w",
			name, dev.mtu, dev.mtu+ethHdrLen, descs, cfg.FrameSize, chunkData, min(maxFrameDescs, cfg.RingSize), link.ErrNotSupported)
	}
	multiBuffer := descs > 1
	l := &Link{
		cfg:     cfg,
		ifindex: dev.index,
		driver:  dev.driver,
		info: link.Info{
			Name:        name,
			MAC:         dev.mac,
			MTU:         cfg.MTU,
			RxFrameSize: dev.mtu + ethHdrLen,
		},
	}
	defer func() {
		if err != nil {
			l.release()
		}
	}()
	if l.stale, err = removeStaleProgram(name, dev.index); err != nil {
		return nil, err
	}

	// Sockets first: a queue still busy from an earlier run is retried
	// before the program starts taking frames from the kernel.
	l.txCsum = txChecksumSoftware
	for i := range cfg.Queues {
		s, err := openSocket(socketConfig{ifindex: dev.index, queue: i, cfg: &l.cfg, noTxMeta: hooks.noTxMetadata, multiBuffer: multiBuffer})
		if err != nil {
			return nil, fmt.Errorf("afxdp: %s: %w", name, err)
		}
		q, err := newQueue(l, i, s, l.info.RxFrameSize)
		if err != nil {
			s.close()
			return nil, fmt.Errorf("afxdp: %s: %w", name, err)
		}
		l.queues = append(l.queues, q)
		if i == 0 {
			l.zc = s.zeroCopy
			// Zero-copy drivers may ignore a checksum request they do not
			// implement; software is always right.
			if s.txMeta && !s.zeroCopy {
				l.txCsum = txChecksumMetadata
			}
		}
	}
	if cfg.DisableOffloads {
		l.txCsum = 0
	} else {
		l.info.Caps |= link.CapRXChecksum | link.CapTXChecksum
	}
	for _, pq := range l.queues {
		q := pq.(*queue)
		q.txCsum = l.txCsum
		q.rxMark = !cfg.DisableOffloads
		// veth frames come from the local kernel, which leaves the
		// checksums of its CHECKSUM_PARTIAL packets unfinished.
		q.rxPartial = dev.driver == "veth"
	}

	if err := l.loadProgram(max(cfg.Queues, dev.rxQueues), multiBuffer); err != nil {
		return nil, err
	}
	if err := l.attach(hooks.netlinkAttach); err != nil {
		return nil, err
	}
	return l, nil
}

// loadProgram creates the XSK map with the queues' sockets and loads the
// XDP program, declared able to see multi-buffer frames (of which it reads
// the first buffer's headers only) when the sockets take them.
func (l *Link) loadProgram(entries int, multiBuffer bool) error {
	var err error
	l.xsks, err = ebpf.NewMap(&ebpf.MapSpec{
		Name:       "pnxdp_xsks",
		Type:       ebpf.XSKMap,
		KeySize:    4,
		ValueSize:  4,
		MaxEntries: uint32(entries),
	})
	if err != nil {
		return bpfError("creating the XSK map", err)
	}
	for i, q := range l.queues {
		if err := l.xsks.Update(uint32(i), uint32(q.(*queue).sock.fd), ebpf.UpdateAny); err != nil {
			return bpfError(fmt.Sprintf("adding the socket of queue %d to the XSK map", i), err)
		}
	}
	insns, err := programInstructions(l.cfg.Filter, l.cfg.Addresses, redirectToQueue(l.xsks.FD()))
	if err != nil {
		return err
	}
	var flags uint32
	if multiBuffer {
		flags = unix.BPF_F_XDP_HAS_FRAGS
	}
	l.prog, err = ebpf.NewProgramWithOptions(&ebpf.ProgramSpec{
		Name:         programPrefix + strconv.Itoa(os.Getpid()),
		Type:         ebpf.XDP,
		Instructions: insns,
		License:      "Dual MIT/GPL",
		Flags:        flags,
	}, ebpf.ProgramOptions{})
	if err != nil {
		return bpfError("loading the XDP program", err)
	}
	return nil
}

// attach attaches the program in native mode, or generic mode, as the
// configured mode allows. A BPF link holds the attachment, so the kernel
// detaches the program when the process ends, however it ends; kernels
// without BPF links for XDP (before 5.9) get a netlink attachment, which a
// crash leaves behind for the next New to remove.
func (l *Link) attach(viaNetlink bool) error {
	modes := []Mode{ModeNative, ModeGeneric}
	switch l.cfg.Mode {
	case ModeNative:
		modes = modes[:1]
	case ModeGeneric:
		modes = modes[1:]
	}
	var errs []error
	for _, m := range modes {
		flags := ebpflink.XDPDriverMode
		nlFlags := uint32(unix.XDP_FLAGS_DRV_MODE)
		if m == ModeGeneric {
			flags, nlFlags = ebpflink.XDPGenericMode, unix.XDP_FLAGS_SKB_MODE
		}
		var err error
		if !viaNetlink {
			l.xdpLink, err = ebpflink.AttachXDP(ebpflink.XDPOptions{Program: l.prog, Interface: l.ifindex, Flags: flags})
			if errors.Is(err, ebpf.ErrNotSupported) {
				viaNetlink = true // no BPF links for XDP on this kernel
			}
		}
		if viaNetlink {
			err = setXDP(l.ifindex, l.prog.FD(), nlFlags|unix.XDP_FLAGS_UPDATE_IF_NOEXIST)
			if err == nil {
				l.nlFlags = nlFlags
			}
		}
		if err == nil {
			l.mode = m
			return nil
		}
		errs = append(errs, fmt.Errorf("%v mode: %w", m, err))
	}
	err := errors.Join(errs...)
	hint := ""
	switch {
	case errors.Is(err, unix.EPERM):
		hint = " (" + privHint + ")"
	case errors.Is(err, unix.EBUSY), errors.Is(err, unix.EEXIST):
		hint = " (the interface has another XDP program)"
	case errors.Is(err, unix.ERANGE):
		hint = " (native XDP on veth: the peer's MTU is too large)"
	}
	err = fmt.Errorf("afxdp: attaching the XDP program to %s: %w%s", l.info.Name, err, hint)
	if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EINVAL) && l.cfg.Mode == ModeNative {
		err = unsupported{err}
	}
	return err
}

// Info describes the link: the interface's name, MAC address and MTU.
func (l *Link) Info() link.Info {
	info := l.info
	info.MAC = append(net.HardwareAddr(nil), l.info.MAC...)
	return info
}

// Queues returns one queue pair per AF_XDP socket, queue i bound to the
// interface's queue i.
func (l *Link) Queues() []link.Queue { return l.queues }

// Mode returns the XDP mode the program runs in: ModeNative or ModeGeneric.
func (l *Link) Mode() Mode { return l.mode }

// ZeroCopy reports whether the sockets run in zero-copy mode (else copy mode).
func (l *Link) ZeroCopy() bool { return l.zc }

// Stats returns the counters of each queue.
func (l *Link) Stats() []QueueStats {
	out := make([]QueueStats, len(l.queues))
	for i, q := range l.queues {
		out[i] = q.(*queue).statistics()
	}
	return out
}

var _ link.Statser = (*Link)(nil)

// LinkStats implements link.Statser with each queue's Stats in the
// engine's terms (engineStats).
func (l *Link) LinkStats() []link.QueueStats {
	out := make([]link.QueueStats, len(l.queues))
	for i, st := range l.Stats() {
		out[i] = engineStats(i, st, l.zc)
	}
	return out
}

// engineStats puts queue i's Stats in the engine's terms: the kernel's RX
// ring full and fill ring empty are RxRingFull and RxNoBuffers; frames
// dropped for their size or an invalid descriptor (the link's or the
// kernel's count) are RxBadFrame; TX descriptors the kernel found invalid
// are TxDropped. In copy mode the kernel counts a frame it had no fill
// buffer for in rx_dropped too, so those are taken out of RxBadFrame; in
// zero-copy mode the driver, not the socket, meets the empty fill ring.
// Bytes and the UMEM (which the fill ring, not a pool, hands out) are not
// counted.
func engineStats(i int, st QueueStats, zeroCopy bool) link.QueueStats {
	kernelBad := st.KernelRxDropped
	if !zeroCopy {
		kernelBad -= min(kernelBad, st.KernelFillEmpty)
	}
	return link.QueueStats{
		Queue:       i,
		RxFrames:    st.RxFrames,
		TxFrames:    st.TxFrames,
		RxRingFull:  st.KernelRxRingFull,
		RxNoBuffers: st.KernelFillEmpty,
		RxBadFrame:  st.RxOversize + st.RxInvalid + kernelBad + st.KernelRxInvalid,
		TxDropped:   st.KernelTxInvalid,
	}
}

// String describes how the link runs, e.g. "veth0: native, copy, 1 queue,
// TX checksum metadata".
func (l *Link) String() string {
	zc := "copy"
	if l.zc {
		zc = "zero-copy"
	}
	return fmt.Sprintf("%s: %v, %s, %d queues, filter %v, TX checksum %v", l.info.Name, l.mode, zc, len(l.queues), l.cfg.Filter, l.txCsum)
}

// Close detaches the XDP program, then closes the sockets after waiting
// for bursts in progress; a parked WaitRead returns link.ErrClosed. A second
// Close returns link.ErrClosed.
func (l *Link) Close() error {
	if l.closed.Swap(true) {
		return link.ErrClosed
	}
	l.closeOnce.Do(func() { l.closeErr = l.release() })
	return l.closeErr
}

// release undoes what New did, in reverse.
func (l *Link) release() error {
	l.closed.Store(true)
	var errs []error
	if l.xdpLink != nil {
		if err := l.xdpLink.Close(); err != nil {
			errs = append(errs, fmt.Errorf("afxdp: detaching the XDP program from %s: %w", l.info.Name, err))
		}
	} else if l.nlFlags != 0 {
		if err := setXDP(l.ifindex, -1, l.nlFlags); err != nil && !errors.Is(err, unix.ENODEV) {
			errs = append(errs, fmt.Errorf("afxdp: detaching the XDP program from %s: %w", l.info.Name, err))
		}
	}
	for _, q := range l.queues {
		if err := q.(*queue).close(); err != nil {
			errs = append(errs, fmt.Errorf("afxdp: closing queue %d of %s: %w", q.(*queue).index, l.info.Name, err))
		}
	}
	if l.prog != nil {
		l.prog.Close()
	}
	if l.xsks != nil {
		l.xsks.Close()
	}
	return errors.Join(errs...)
}

// removeStaleProgram detaches an XDP program that an earlier run of
// polarnet attached to the interface through netlink and could not detach
// because it crashed, and returns its ID. A program a live process holds
// (through a BPF link, or a netlink attachment whose process still runs)
// or someone else's program is left alone: New fails with EBUSY.
func removeStaleProgram(name string, ifindex int) (ebpf.ProgramID, error) {
	progs, err := xdpPrograms(ifindex)
	if err != nil {
		return 0, fmt.Errorf("afxdp: %s: %w", name, err)
	}
	var stale ebpf.ProgramID
	for _, a := range progs {
		progName, pid := programOwner(ebpf.ProgramID(a.progID))
		if !strings.HasPrefix(progName, programPrefix) {
			return 0, fmt.Errorf("afxdp: %s already has an XDP program (%q, id %d); detach it first (ip link set dev %s xdp off): %w",
				name, progName, a.progID, name, unix.EBUSY)
		}
		if pid != os.Getpid() && processAlive(pid) {
			return 0, fmt.Errorf("afxdp: %s is in use by polarnet process %d (XDP program id %d): %w", name, pid, a.progID, unix.EBUSY)
		}
		switch err := setXDP(ifindex, -1, a.flags); {
		case errors.Is(err, unix.EBUSY):
			// A BPF link holds it: a live process, or a pinned link.
			return 0, fmt.Errorf("afxdp: %s is in use: a BPF link holds polarnet's XDP program (id %d): %w", name, a.progID, unix.EBUSY)
		case err != nil:
			return 0, fmt.Errorf("afxdp: %s: detaching the stale XDP program %d: %w", name, a.progID, err)
		}
		stale = ebpf.ProgramID(a.progID)
	}
	return stale, nil
}

// programOwner returns the name of program id and, for polarnet's, the ID
// of the process that loaded it.
func programOwner(id ebpf.ProgramID) (string, int) {
	p, err := ebpf.NewProgramFromID(id)
	if err != nil {
		return "", 0
	}
	defer p.Close()
	info, err := p.Info()
	if err != nil {
		return "", 0
	}
	pid, _ := strconv.Atoi(strings.TrimPrefix(info.Name, programPrefix))
	return info.Name, pid
}

func processAlive(pid int) bool {
	if pid <= 0 {
		return false
	}
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// bpfError explains a failed bpf(2) call.
func bpfError(what string, err error) error {
	hint := ""
	switch {
	case errors.Is(err, unix.EPERM), errors.Is(err, unix.EACCES):
		hint = " (" + privHint + ")"
	case errors.Is(err, ebpf.ErrNotSupported):
		return unsupported{fmt.Errorf("afxdp: %s: %w", what, err)}
	}
	return fmt.Errorf("afxdp: %s: %w%s", what, err, hint)
}

// device is what New learns about the interface.
type device struct {
	index    int
	mac      net.HardwareAddr
	mtu      int
	rxQueues int
	driver   string
}

// lookupDevice finds the interface name in the calling thread's namespace.
func lookupDevice(name string) (device, error) {
	s, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return device{}, fmt.Errorf("afxdp: %w", os.NewSyscallError("socket", err))
	}
	defer unix.Close(s)
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		return device{}, fmt.Errorf("afxdp: interface %q: %w", name, err)
	}
	if err := unix.IoctlIfreq(s, unix.SIOCGIFINDEX, ifr); err != nil {
		if errors.Is(err, unix.ENODEV) {
			return device{}, fmt.Errorf("afxdp: no interface %q in this network namespace: %w", name, err)
		}
		return device{}, fmt.Errorf("afxdp: looking up interface %q: %w", name, err)
	}
	dev := device{index: int(ifr.Uint32()), rxQueues: 1}
	ifi, err := net.InterfaceByIndex(dev.index)
	if err != nil {
		return device{}, fmt.Errorf("afxdp: interface %q: %w", name, err)
	}
	if len(ifi.HardwareAddr) != 6 {
		return device{}, fmt.Errorf("afxdp: %s is not an Ethernet interface: %w", name, link.ErrNotSupported)
	}
	dev.mac, dev.mtu = ifi.HardwareAddr, ifi.MTU
	if drv, err := unix.IoctlGetEthtoolDrvinfo(s, name); err == nil {
		dev.driver = unix.ByteSliceToString(drv.Driver[:])
	}
	if n := channels(s, name); n > 0 {
		dev.rxQueues = n
	}
	return dev, nil
}

// channels returns the interface's RX queue count (ethtool -l: RX and
// combined channels), or 0 where the driver does not say.
func channels(s int, name string) int {
	// Heap-allocated: the kernel writes it through a pointer inside ifr.
	ch := new(struct {
		cmd                                     uint32
		maxRx, maxTx, maxOther, maxCombined     uint32
		rxCount, txCount, otherCount, combCount uint32
	})
	ch.cmd = unix.ETHTOOL_GCHANNELS
	ifr := new(struct {
		name [unix.IFNAMSIZ]byte
		data unsafe.Pointer
		_    [16]byte
	})
	copy(ifr.name[:], name)
	ifr.data = unsafe.Pointer(ch)
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(s), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(ifr))); errno != 0 {
		return 0
	}
	return int(ch.rxCount + ch.combCount)
}

// ebpfProgramID converts a netlink program ID.
func ebpfProgramID(id uint32) ebpf.ProgramID { return ebpf.ProgramID(id) }
