package tap

import (
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/polarnet/polarnet/link"
)

var _ link.Statser = (*Link)(nil)

// LinkStats implements link.Statser with the kernel's counters of
// the TAP device, read over rtnetlink in whichever network namespace the
// device is now (TUNGETDEVNETNS). The kernel keeps them for the device,
// not per queue, so there is one QueueStats, with Queue -1. From the
// link's side of the device:
//
//   - RxFrames, RxBytes: frames the kernel queued to the link's descriptors
//     (the device's tx_packets, tx_bytes);
//   - RxRingFull: frames the kernel dropped on their way to the link
//     (tx_dropped, less RxShed), almost always because a queue's ring,
//     txqueuelen frames long, was full: the poller fell behind;
//   - RxShed: connection requests and stray segments the shedding program
//     dropped (the
//     kernel counts them in tx_dropped too);
//   - TxFrames, TxBytes: frames the link wrote (rx_packets, rx_bytes);
//   - TxDropped: frames the link wrote that the kernel dropped
//     (rx_dropped, and rx_frame_errors for malformed ones).
//
// It returns nil once the link is closed or when the counters cannot be
// read (the namespace is not reachable without CAP_SYS_ADMIN).
func (l *Link) LinkStats() []link.QueueStats {
	if l.closed.Load() || len(l.queues) == 0 {
		return nil
	}
	q := l.queues[0].(*queue)
	var st kernelStats
	var err error
	ctlErr := q.io.Control(func(fd uintptr) { st, err = deviceStats(int(fd)) })
	if ctlErr != nil || err != nil {
		return nil
	}
	var shed uint64
	if l.shed != nil {
		for q := range l.shed.queues {
			shed += l.shed.dropped(q, shedSYNs|shedStrays)
		}
	}
	return []link.QueueStats{{
		Queue:      -1,
		RxFrames:   st[statTxPackets],
		RxBytes:    st[statTxBytes],
		RxRingFull: st[statTxDropped] - min(shed, st[statTxDropped]),
		RxShed:     shed,
		TxFrames:   st[statRxPackets],
		TxBytes:    st[statRxBytes],
		TxDropped:  st[statRxDropped] + st[statRxFrameErrors],
	}}
}

// kernelStats is the start of struct rtnl_link_stats64 (the kernel's view:
// rx is what the device received, i.e. what the link wrote).
type kernelStats [kernelStatsLen]uint64

const (
	statRxPackets     = 0
	statTxPackets     = 1
	statRxBytes       = 2
	statTxBytes       = 3
	statRxDropped     = 6
	statTxDropped     = 7
	statRxFrameErrors = 13
	kernelStatsLen    = 14
)

// deviceStats reads the counters of the TAP device that queue descriptor fd
// is attached to.
func deviceStats(fd int) (kernelStats, error) {
	ifr, err := unix.NewIfreq("")
	if err != nil {
		return kernelStats{}, err
	}
	if err := unix.IoctlIfreq(fd, unix.TUNGETIFF, ifr); err != nil {
		return kernelStats{}, fmt.Errorf("tap: TUNGETIFF: %w", err)
	}
	name := ifr.Name()
	nsfd, err := unix.IoctlRetInt(fd, unix.TUNGETDEVNETNS)
	if err != nil {
		return kernelStats{}, fmt.Errorf("tap: TUNGETDEVNETNS: %w", err)
	}
	defer unix.Close(nsfd)
	sock, err := routeSocketIn(nsfd)
	if err != nil {
		return kernelStats{}, err
	}
	defer unix.Close(sock)
	return linkStats64(sock, name)
}

// routeSocketIn opens an rtnetlink socket in the network namespace nsfd: a
// socket stays in the namespace it was created in, so only its creation
// needs a thread switched there, and only when that is not ours.
func routeSocketIn(nsfd int) (int, error) {
	open := func() (int, error) {
		return unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
	}
	var target, self unix.Stat_t
	if err := unix.Fstat(nsfd, &target); err != nil {
		return -1, err
	}
	if err := unix.Stat("/proc/thread-self/ns/net", &self); err == nil && self.Ino == target.Ino && self.Dev == target.Dev {
		return open()
	}
	type result struct {
		fd  int
		err error
	}
	done := make(chan result, 1)
	go func() {
		// A thread of our own: if switching back fails it stays locked
		// and the runtime ends it with the goroutine.
		runtime.LockOSThread()
		orig, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			done <- result{-1, err}
			return
		}
		defer unix.Close(orig)
		if err := unix.Setns(nsfd, unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			done <- result{-1, fmt.Errorf("tap: entering the device's namespace: %w", err)}
			return
		}
		fd, err := open()
		if serr := unix.Setns(orig, unix.CLONE_NEWNET); serr != nil {
			if fd >= 0 {
				unix.Close(fd)
			}
			done <- result{-1, errors.Join(err, serr)}
			return
		}
		runtime.UnlockOSThread()
		done <- result{fd, err}
	}()
	r := <-done
	return r.fd, r.err
}

// linkStats64 asks rtnetlink socket sock for device name's IFLA_STATS64.
func linkStats64(sock int, name string) (kernelStats, error) {
	var st kernelStats
	attr := make([]byte, unix.SizeofRtAttr+((len(name)+1+3)&^3))
	binary.NativeEndian.PutUint16(attr[0:], uint16(unix.SizeofRtAttr+len(name)+1))
	binary.NativeEndian.PutUint16(attr[2:], unix.IFLA_IFNAME)
	copy(attr[unix.SizeofRtAttr:], name)
	hdr := unix.NlMsghdr{
		Len:   uint32(unix.SizeofNlMsghdr + unix.SizeofIfInfomsg + len(attr)),
		Type:  unix.RTM_GETLINK,
		Flags: unix.NLM_F_REQUEST,
		Seq:   1,
	}
	req := make([]byte, 0, hdr.Len)
	req = append(req, unsafe.Slice((*byte)(unsafe.Pointer(&hdr)), unix.SizeofNlMsghdr)...)
	info := unix.IfInfomsg{Family: unix.AF_UNSPEC}
	req = append(req, unsafe.Slice((*byte)(unsafe.Pointer(&info)), unix.SizeofIfInfomsg)...)
	req = append(req, attr...)
	if err := unix.Sendto(sock, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return st, fmt.Errorf("tap: RTM_GETLINK %s: %w", name, err)
	}
	buf := make([]byte, 16<<10)
	n, _, err := unix.Recvfrom(sock, buf, 0)
	if err != nil {
		return st, fmt.Errorf("tap: RTM_GETLINK %s: %w", name, err)
	}
	msgs, err := syscall.ParseNetlinkMessage(buf[:n])
	if err != nil || len(msgs) == 0 {
		return st, fmt.Errorf("tap: RTM_GETLINK %s: unreadable reply: %v", name, err)
	}
	m := &msgs[0]
	if m.Header.Type == syscall.NLMSG_ERROR {
		if len(m.Data) >= 4 {
			if e := int32(binary.NativeEndian.Uint32(m.Data)); e < 0 {
				return st, fmt.Errorf("tap: RTM_GETLINK %s: %w", name, unix.Errno(-e))
			}
		}
		return st, fmt.Errorf("tap: RTM_GETLINK %s: error reply", name)
	}
	attrs, err := syscall.ParseNetlinkRouteAttr(m)
	if err != nil {
		return st, fmt.Errorf("tap: RTM_GETLINK %s: %w", name, err)
	}
	for _, a := range attrs {
		if a.Attr.Type == unix.IFLA_STATS64 && len(a.Value) >= 8*kernelStatsLen {
			for i := range st {
				st[i] = binary.NativeEndian.Uint64(a.Value[8*i:])
			}
			return st, nil
		}
	}
	return st, fmt.Errorf("tap: RTM_GETLINK %s: no IFLA_STATS64", name)
}
