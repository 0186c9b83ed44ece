package afxdp

import (
	"encoding/binary"
	"fmt"
	"os"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A few rtnetlink requests: which XDP programs an interface has, and
// attaching or detaching one the way ip(8) does (which a crashed run of an
// older kernel's fallback leaves behind, unlike a BPF link).

// xdpAttachment is an XDP program attached to an interface.
type xdpAttachment struct {
	progID uint32
	flags  uint32 // XDP_FLAGS_DRV_MODE, _SKB_MODE or _HW_MODE
}

// Values of IFLA_XDP_ATTACHED.
const (
	xdpAttachedNone  = 0
	xdpAttachedDrv   = 1
	xdpAttachedSkb   = 2
	xdpAttachedHw    = 3
	xdpAttachedMulti = 4
)

// xdpPrograms returns the XDP programs attached to interface ifindex.
func xdpPrograms(ifindex int) ([]xdpAttachment, error) {
	msgs, err := netlinkRequest(unix.RTM_GETLINK, 0, ifindex, nil)
	if err != nil {
		return nil, fmt.Errorf("querying the XDP programs of interface %d: %w", ifindex, err)
	}
	for _, m := range msgs {
		if m.Header.Type != unix.RTM_NEWLINK || len(m.Data) < unix.SizeofIfInfomsg {
			continue
		}
		ifi := (*unix.IfInfomsg)(unsafe.Pointer(&m.Data[0]))
		if int(ifi.Index) != ifindex {
			continue
		}
		for attr, v := range attrs(m.Data[unix.SizeofIfInfomsg:]) {
			if attr&^unix.NLA_F_NESTED == unix.IFLA_XDP {
				return parseXDPAttr(v), nil
			}
		}
		return nil, nil
	}
	return nil, fmt.Errorf("querying the XDP programs of interface %d: no answer", ifindex)
}

// parseXDPAttr decodes the nested IFLA_XDP attribute.
func parseXDPAttr(b []byte) []xdpAttachment {
	var attached uint8
	var progID, drvID, skbID, hwID uint32
	for attr, v := range attrs(b) {
		switch attr {
		case unix.IFLA_XDP_ATTACHED:
			if len(v) >= 1 {
				attached = v[0]
			}
		case unix.IFLA_XDP_PROG_ID, unix.IFLA_XDP_DRV_PROG_ID, unix.IFLA_XDP_SKB_PROG_ID, unix.IFLA_XDP_HW_PROG_ID:
			if len(v) < 4 {
				continue
			}
			id := binary.NativeEndian.Uint32(v)
			switch attr {
			case unix.IFLA_XDP_PROG_ID:
				progID = id
			case unix.IFLA_XDP_DRV_PROG_ID:
				drvID = id
			case unix.IFLA_XDP_SKB_PROG_ID:
				skbID = id
			case unix.IFLA_XDP_HW_PROG_ID:
				hwID = id
			}
		}
	}
	var out []xdpAttachment
	switch attached {
	case xdpAttachedDrv:
		out = append(out, xdpAttachment{progID, unix.XDP_FLAGS_DRV_MODE})
	case xdpAttachedSkb:
		out = append(out, xdpAttachment{progID, unix.XDP_FLAGS_SKB_MODE})
	case xdpAttachedHw:
		out = append(out, xdpAttachment{progID, unix.XDP_FLAGS_HW_MODE})
	case xdpAttachedMulti:
		for _, a := range []xdpAttachment{{drvID, unix.XDP_FLAGS_DRV_MODE}, {skbID, unix.XDP_FLAGS_SKB_MODE}, {hwID, unix.XDP_FLAGS_HW_MODE}} {
			if a.progID != 0 {
				out = append(out, a)
			}
		}
	}
	return out
}

// setXDP attaches the program progFD to interface ifindex in the mode of
// flags, or with progFD -1 detaches the program of that mode, as
// `ip link set dev X xdp...` does. A program a BPF link holds cannot be
// detached so: the kernel answers EBUSY.
func setXDP(ifindex int, progFD int, flags uint32) error {
	var fd, fl [4]byte
	binary.NativeEndian.PutUint32(fd[:], uint32(int32(progFD)))
	binary.NativeEndian.PutUint32(fl[:], flags)
	nested := appendAttr(nil, unix.IFLA_XDP_FD, fd[:])
	nested = appendAttr(nested, unix.IFLA_XDP_FLAGS, fl[:])
	_, err := netlinkRequest(unix.RTM_SETLINK, unix.NLM_F_ACK, ifindex, appendAttr(nil, unix.IFLA_XDP|unix.NLA_F_NESTED, nested))
	return err
}

// netlinkRequest sends an rtnetlink link request about ifindex with the
// attributes attrData and returns the answers up to the acknowledgement or
// the end of a dump. An error answer is returned as its errno.
func netlinkRequest(typ uint16, flags uint16, ifindex int, attrData []byte) ([]syscall.NetlinkMessage, error) {
	s, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
	if err != nil {
		return nil, os.NewSyscallError("socket", err)
	}
	defer unix.Close(s)
	if err := unix.Bind(s, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return nil, os.NewSyscallError("bind", err)
	}
	const seq = 1
	msg := make([]byte, unix.SizeofNlMsghdr+unix.SizeofIfInfomsg, unix.SizeofNlMsghdr+unix.SizeofIfInfomsg+len(attrData))
	msg = append(msg, attrData...)
	h := (*unix.NlMsghdr)(unsafe.Pointer(&msg[0]))
	*h = unix.NlMsghdr{Len: uint32(len(msg)), Type: typ, Flags: unix.NLM_F_REQUEST | flags, Seq: seq}
	ifi := (*unix.IfInfomsg)(unsafe.Pointer(&msg[unix.SizeofNlMsghdr]))
	*ifi = unix.IfInfomsg{Family: unix.AF_UNSPEC, Index: int32(ifindex)}
	if err := unix.Sendto(s, msg, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return nil, os.NewSyscallError("sendto", err)
	}
	var out []syscall.NetlinkMessage
	buf := make([]byte, 64<<10)
	for range 64 { // an answer is a message or two; bound the loop all the same
		n, _, err := unix.Recvfrom(s, buf, 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, os.NewSyscallError("recvfrom", err)
		}
		msgs, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			return nil, err
		}
		for _, m := range msgs {
			if m.Header.Seq != seq {
				continue
			}
			switch m.Header.Type {
			case unix.NLMSG_ERROR:
				if len(m.Data) < 4 {
					return nil, fmt.Errorf("short netlink error message")
				}
				if errno := -int32(binary.NativeEndian.Uint32(m.Data)); errno != 0 {
					return nil, unix.Errno(errno)
				}
				return out, nil // the acknowledgement
			case unix.NLMSG_DONE:
				return out, nil
			}
			out = append(out, m)
			if flags&unix.NLM_F_ACK == 0 && m.Header.Flags&unix.NLM_F_MULTI == 0 {
				return out, nil
			}
		}
	}
	return nil, fmt.Errorf("netlink: no end to the answer")
}

// attrs iterates over the netlink attributes in b.
func attrs(b []byte) func(yield func(uint16, []byte) bool) {
	return func(yield func(uint16, []byte) bool) {
		for len(b) >= unix.SizeofRtAttr {
			l := int(binary.NativeEndian.Uint16(b))
			typ := binary.NativeEndian.Uint16(b[2:])
			if l < unix.SizeofRtAttr || l > len(b) {
				return
			}
			if !yield(typ, b[unix.SizeofRtAttr:l]) {
				return
			}
			b = b[min(align4(l), len(b)):]
		}
	}
}

// appendAttr appends a netlink attribute to b.
func appendAttr(b []byte, typ uint16, v []byte) []byte {
	l := unix.SizeofRtAttr + len(v)
	b = binary.NativeEndian.AppendUint16(b, uint16(l))
	b = binary.NativeEndian.AppendUint16(b, typ)
	b = append(b, v...)
	for range align4(l) - l {
		b = append(b, 0)
	}
	return b
}

func align4(n int) int { return (n + 3) &^ 3 }
