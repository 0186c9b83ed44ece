package tap

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/polarnet/polarnet/link"
)

// tunPath is the TUN/TAP clone device.
const tunPath = "/dev/net/tun"

// Sizes the link advertises with offloads on.
const (
	// gsoMaxSize bounds the TCP frames the link hands to the kernel to
	// segment: an IPv4 packet cannot exceed 65535 bytes, and keeping the
	// whole frame under that bound suits IPv6 as well.
	gsoMaxSize = 65535
	// gsoRxFrameSize holds the largest frame the kernel can hand over with
	// TSO on (a coalesced or locally built TCP frame): an Ethernet header, a
	// VLAN tag the kernel may insert, a 40-byte IPv6 header and a 65535-byte
	// payload, the most an IP packet carries without jumbograms.
	gsoRxFrameSize = 14 + 4 + 40 + 65535
	// ethHdrLen is the Ethernet header the frames carry in front of the IP
	// packet.
	ethHdrLen = 14
)

// Link is a TAP device driven from user space: one queue pair per file
// descriptor attached to the device. It implements link.Link.
type Link struct {
	info    link.Info
	queues  []link.Queue
	steered bool // the steering program spreads flows over the queues
	// shed is the shedding program's state; nil when the device refused
	// the program (then the queues do not shed).
	shed   *shedder
	closed atomic.Bool
}

var (
	_ link.Link    = (*Link)(nil)
	_ link.Steerer = (*Link)(nil)
)

// New creates the TAP device cfg describes, or attaches to the existing
// device of that name, and opens its queues.
//
// New works in the network namespace of the calling thread. It configures
// the device's flags, offloads and MTU and nothing else: the kernel side
// stays as it was (a new device is down, without addresses), for the caller
// to set up with ip(8) or netlink. A queue keeps working when its device is
// moved to another namespace (`ip link set tapX netns NS`).
//
// Attaching changes the device's settings for every file descriptor open on
// it (virtio-net header, offloads, MTU), so a device should be driven by one
// Link at a time.
func New(cfg Config) (*Link, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	// TUNSETIFF takes a template name as a request to create a device.
	exists := false
	if !strings.Contains(cfg.Name, "%") {
		if exists, err = deviceExists(cfg.Name); err != nil {
			return nil, err
		}
	}

	var fds, waitFds []int
	defer func() {
		// Only reached with fds left on failure: on success they belong to
		// the queues. Closing them removes a non-persistent device we created.
		for _, fd := range append(fds, waitFds...) {
			unix.Close(fd)
		}
	}()

	// The first queue decides the device name and is where the device
	// settings are made, before the other queues can receive frames.
	fd, name, queues, err := attachFirst(cfg, exists)
	if err != nil {
		return nil, err
	}
	cfg.Queues = queues
	fds = append(fds, fd)
	if err := configure(fd, name, !cfg.DisableOffloads); err != nil {
		return nil, err
	}
	for range cfg.Queues - 1 {
		fd, err := attach(name, tunFlags(cfg, true))
		if err != nil {
			return nil, fmt.Errorf("tap: opening another queue of %s: %w", name, err)
		}
		fds = append(fds, fd)
	}
	if cfg.MTU, err = setMTU(name, cfg.MTU, exists); err != nil {
		return nil, err
	}
	steered := cfg.Queues > 1 && !cfg.DisableSteering
	if steered {
		if err := attachSteering(fd, name, cfg.Queues); err != nil {
			return nil, err
		}
	}
	// WaitRead parks on a duplicate of each queue's descriptor (see queue).
	for _, fd := range fds {
		wfd, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			return nil, fmt.Errorf("tap: duplicating a queue descriptor of %s: %w", name, err)
		}
		waitFds = append(waitFds, wfd)
	}
	if cfg.Persist && !exists {
		if err := unix.IoctlSetInt(fd, unix.TUNSETPERSIST, 1); err != nil {
			return nil, fmt.Errorf("tap: making %s persistent: %w", name, err)
		}
	}
	// Shedding is a defence, not a function: a device or kernel that
	// refuses the program still carries traffic.
	shed, _ := attachShedding(fd, name, cfg.Queues)
	l := &Link{steered: steered, shed: shed, info: link.Info{
		Name:        name,
		MAC:         cfg.MAC,
		MTU:         cfg.MTU,
		RxFrameSize: cfg.MTU + ethHdrLen,
	}}
	if !cfg.DisableOffloads {
		l.info.Caps = link.CapRXChecksum | link.CapTXChecksum | link.CapGSO
		l.info.GSOMaxSize = gsoMaxSize
		l.info.RxFrameSize = max(l.info.RxFrameSize, gsoRxFrameSize)
	}
	for i := range fds {
		l.queues = append(l.queues, newQueue(l, i, fds[i], waitFds[i]))
	}
	fds, waitFds = nil, nil
	return l, nil
}

// Info describes the link. MAC is the polarnet side's address, not the
// kernel-side device's.
func (l *Link) Info() link.Info {
	info := l.info
	info.MAC = append(net.HardwareAddr(nil), l.info.MAC...)
	return info
}

// Queues returns the Config.Queues queue pairs, one per file descriptor.
func (l *Link) Queues() []link.Queue { return l.queues }

// Close closes the queues' file descriptors, after waiting for bursts in
// progress; a pending WaitRead returns link.ErrClosed. The kernel removes the
// device once no descriptor is open on it, unless it is persistent. A second
// Close returns link.ErrClosed.
func (l *Link) Close() error {
	if l.closed.Swap(true) {
		return link.ErrClosed
	}
	var errs []error
	for _, q := range l.queues {
		if err := q.(*queue).close(); err != nil {
			errs = append(errs, fmt.Errorf("tap: closing %s: %w", l.info.Name, err))
		}
	}
	if l.shed != nil {
		l.shed.close()
	}
	return errors.Join(errs...)
}

// tunFlags returns the TUNSETIFF flags for cfg; multiQueue adds
// IFF_MULTI_QUEUE, which a device has from its creation or never.
func tunFlags(cfg Config, multiQueue bool) uint16 {
	flags := uint16(unix.IFF_TAP | unix.IFF_NO_PI)
	if !cfg.DisableOffloads {
		flags |= unix.IFF_VNET_HDR
	}
	if multiQueue {
		flags |= unix.IFF_MULTI_QUEUE
	}
	return flags
}

// attachFirst opens the first queue, creating the device unless it exists,
// and returns it with the device's actual name and the number of queues to
// open: Config.Queues, or its default (see Config.Queues).
func attachFirst(cfg Config, exists bool) (int, string, int, error) {
	queues := cfg.Queues
	if queues == 0 {
		queues = DefaultQueues()
	}
	multiQueue := queues > 1
	fd, name, err := attachNamed(cfg.Name, tunFlags(cfg, multiQueue))
	switch {
	case exists && !multiQueue && errors.Is(err, unix.EINVAL):
		// The device may have been created with IFF_MULTI_QUEUE, which the
		// kernel then insists on; a single queue works as well with it.
		fd, name, err = attachNamed(cfg.Name, tunFlags(cfg, true))
	case exists && cfg.Queues == 0 && multiQueue && errors.Is(err, unix.EINVAL):
		// Created without IFF_MULTI_QUEUE, the device takes one queue only,
		// which is then the default.
		queues = 1
		fd, name, err = attachNamed(cfg.Name, tunFlags(cfg, false))
	}
	if err != nil {
		return -1, "", 0, attachError(cfg, exists, err)
	}
	return fd, name, queues, nil
}

// attachError explains why the first queue could not be opened.
func attachError(cfg Config, exists bool, err error) error {
	what := "creating " + cfg.Name
	if exists {
		what = "attaching to " + cfg.Name
	}
	hint := ""
	switch {
	case errors.Is(err, unix.EPERM), errors.Is(err, unix.EACCES):
		hint = " (need root or CAP_NET_ADMIN)"
	case errors.As(err, new(*os.PathError)):
		// Opening /dev/net/tun failed: a missing node (ENOENT) or
		// driver (ENODEV, ENXIO), or something stranger.
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENODEV) || errors.Is(err, unix.ENXIO) {
			return unsupported{fmt.Errorf("tap: %s: %w (load the TUN/TAP driver: modprobe tun)", what, err)}
		}
	case exists && errors.Is(err, unix.EBUSY):
		hint = " (it has no multi-queue support and another file descriptor holds its only queue)"
	case exists && errors.Is(err, unix.EINVAL) && cfg.Queues > 1:
		hint = fmt.Sprintf(" (it is not a TAP device, or it was created without multi-queue support and takes 1 queue, not %d)", cfg.Queues)
	case exists && errors.Is(err, unix.EINVAL):
		hint = " (it is not a TAP device)"
	}
	return fmt.Errorf("tap: %s: %w%s", what, err, hint)
}

// attach opens another queue of the device name.
func attach(name string, flags uint16) (int, error) {
	fd, _, err := attachNamed(name, flags)
	return fd, err
}

// attachNamed opens /dev/net/tun and attaches it to the device name (a
// template or not) with flags, returning the descriptor and the device's name.
// The descriptor is non-blocking: the netpoller waits for it. A failure to
// open /dev/net/tun is an *os.PathError.
func attachNamed(name string, flags uint16) (int, string, error) {
	fd, err := unix.Open(tunPath, unix.O_RDWR|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, "", &os.PathError{Op: "open", Path: tunPath, Err: err}
	}
	ifr, err := unix.NewIfreq(name)
	if err == nil {
		ifr.SetUint16(flags)
		err = unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr)
	}
	if err != nil {
		unix.Close(fd)
		return -1, "", err
	}
	return fd, ifr.Name(), nil
}

// configure sets the device's virtio-net header and offloads through the
// queue fd. Offloads are set either way: an existing device may have been
// left with offloads on, which without a vnet header would hand over frames
// the link cannot complete.
func configure(fd int, name string, offloads bool) error {
	var tunOffloads int
	if offloads {
		if err := unix.IoctlSetPointerInt(fd, unix.TUNSETVNETHDRSZ, vnetHdrLen); err != nil {
			return fmt.Errorf("tap: setting the virtio-net header size of %s: %w", name, err)
		}
		if err := unix.IoctlSetPointerInt(fd, unix.TUNSETVNETLE, 1); err != nil {
			return fmt.Errorf("tap: setting the virtio-net header byte order of %s: %w", name, err)
		}
		// CSUM: checksum-partial frames both ways; TSO4/6: TCP frames up to
		// 64 KiB both ways, segmented by the kernel.
		tunOffloads = unix.TUN_F_CSUM | unix.TUN_F_TSO4 | unix.TUN_F_TSO6
	}
	if err := unix.IoctlSetInt(fd, unix.TUNSETOFFLOAD, tunOffloads); err != nil {
		err = fmt.Errorf("tap: setting the offloads of %s: %w", name, err)
		if offloads {
			err = unsupported{fmt.Errorf("%w (set Config.DisableOffloads)", err)}
		}
		return err
	}
	return nil
}

// deviceExists reports whether a device of that name exists in the calling
// thread's network namespace.
func deviceExists(name string) (bool, error) {
	ifr, err := unix.NewIfreq(name)
	if err == nil {
		err = ifreqIoctl(unix.SIOCGIFINDEX, ifr)
	}
	if errors.Is(err, unix.ENODEV) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("tap: looking up device %s: %w", name, err)
	}
	return true, nil
}

// setMTU sets the device's MTU, or with mtu 0 sets the default (1500) on a
// device New created and reads the MTU of one it attached to. It returns the
// MTU in force.
func setMTU(name string, mtu int, attached bool) (int, error) {
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		return 0, fmt.Errorf("tap: device name %q: %w", name, err)
	}
	if mtu == 0 && attached {
		if err := ifreqIoctl(unix.SIOCGIFMTU, ifr); err != nil {
			return 0, fmt.Errorf("tap: reading the MTU of %s: %w", name, err)
		}
		return int(ifr.Uint32()), nil
	}
	if mtu == 0 {
		mtu = 1500
	}
	ifr.SetUint32(uint32(mtu))
	if err := ifreqIoctl(unix.SIOCSIFMTU, ifr); err != nil {
		return 0, fmt.Errorf("tap: setting the MTU of %s to %d: %w", name, mtu, err)
	}
	return mtu, nil
}

// ifreqIoctl runs a device ioctl through a throwaway socket: device ioctls
// need a socket of the device's network namespace, not a TAP descriptor.
func ifreqIoctl(req uint, ifr *unix.Ifreq) error {
	s, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(s)
	return unix.IoctlIfreq(s, req, ifr)
}

// unsupported marks an error as link.ErrNotSupported (the host lacks
// something) while keeping its message and its chain.
type unsupported struct{ error }

func (e unsupported) Unwrap() error      { return e.error }
func (unsupported) Is(target error) bool { return target == link.ErrNotSupported }
