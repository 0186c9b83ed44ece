package doctor

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"unsafe"

	"github.com/Mellanox/rdmamap"
	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	pnlink "github.com/polarnet/polarnet/link"
	_ "github.com/polarnet/polarnet/link/afxdp" // registers the AF_XDP link for the env check
	"github.com/polarnet/polarnet/link/tap"
	"github.com/polarnet/polarnet/polarnet"
)

type devStat struct {
	char         bool
	major, minor uint32
}

func statDev(path string, st *devStat) error {
	var s unix.Stat_t
	if err := unix.Stat(path, &s); err != nil {
		return &os.PathError{Op: "stat", Path: path, Err: err}
	}
	st.char = s.Mode&unix.S_IFMT == unix.S_IFCHR
	st.major, st.minor = unix.Major(s.Rdev), unix.Minor(s.Rdev)
	return nil
}

// HostEnv is the Env of this host. probe enables the checks that create
// devices (a TAP, a veth pair) in a throwaway network namespace.
func HostEnv(probe bool) *Env {
	e := &Env{
		Euid: os.Geteuid(),
		Memlock: func() (uint64, error) {
			var lim unix.Rlimit
			if err := unix.Getrlimit(unix.RLIMIT_MEMLOCK, &lim); err != nil {
				return 0, err
			}
			if lim.Cur == unix.RLIM_INFINITY {
				return ^uint64(0), nil
			}
			return lim.Cur, nil
		},
		Run: func(name string, args ...string) (string, error) {
			out, err := exec.Command(name, args...).Output()
			return string(out), err
		},
		Iface:       ifaceInfo,
		RDMADevices: rdmamap.GetRdmaDeviceList,
		Getenv:      os.Getenv,
		CPUs:        runtime.GOMAXPROCS(0),
	}
	if probe {
		e.ProbeTAP = probeTAP
		e.ProbeXDP = probeXDP
		e.StartStack = polarnet.NewFromEnv
	}
	return e
}

// inThrowawayNetns runs fn on a locked OS thread moved into a new, unnamed
// network namespace. The thread is never unlocked: the runtime ends it with
// the goroutine, and the namespace, with whatever fn created in it, goes
// away with the thread.
func inThrowawayNetns(fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("creating a network namespace: %w", err)
			return
		}
		errc <- fn()
	}()
	return <-errc
}

func probeTAP() TAPProbe {
	if os.Geteuid() != 0 {
		return TAPProbe{Skipped: "needs root (to create a network namespace)"}
	}
	var p TAPProbe
	err := inThrowawayNetns(func() error {
		for _, queues := range []int{2, 1} {
			l, err := tap.New(tap.Config{Name: "pndoctor0", Queues: queues})
			if err != nil {
				if queues == 1 {
					return err
				}
				continue
			}
			info := l.Info()
			p.Queues = len(l.Queues())
			p.Detail = fmt.Sprintf("created a %d-queue TAP in a throwaway namespace: MTU %d", p.Queues, info.MTU)
			if info.Caps != 0 {
				p.Detail += ", virtio-net header with checksum and TSO offloads"
			}
			if p.Queues > 1 {
				p.Detail += ", steering eBPF attached"
			}
			// The filter that sheds floods is optional: a device that
			// refuses it still carries traffic.
			if sh, ok := l.Queues()[0].(pnlink.SYNShedder); ok && sh.ShedSYNs(false) == nil {
				p.Detail += ", flood filter attached"
			} else {
				p.Detail += ", no flood filter (floods are shed in the engine only)"
			}
			return l.Close()
		}
		return nil
	})
	p.Err = err
	return p
}

func probeXDP() XDPProbe {
	var p XDPProbe
	if os.Geteuid() != 0 {
		p.Skipped = "needs root (to create a network namespace and load BPF)"
		return p
	}
	p.Setup = inThrowawayNetns(func() error {
		// Two queues: a queue just unbound stays busy for a while, so each
		// AF_XDP bind gets a queue of its own.
		veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "pndoctor0", NumTxQueues: 2, NumRxQueues: 2}, PeerName: "pndoctor1"}
		if err := netlink.LinkAdd(veth); err != nil {
			return fmt.Errorf("veth: %w", err)
		}
		a, err := netlink.LinkByName("pndoctor0")
		if err != nil {
			return err
		}
		b, err := netlink.LinkByName("pndoctor1")
		if err != nil {
			return err
		}
		for _, l := range []netlink.Link{a, b} {
			if err := netlink.LinkSetUp(l); err != nil {
				return err
			}
		}
		ifindex := a.Attrs().Index
		p.AFXDPSocket = xskProbe(ifindex, 0, unix.XDP_COPY, true)
		prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
			Type:    ebpf.XDP,
			License: "GPL",
			Instructions: asm.Instructions{
				asm.Mov.Imm(asm.R0, 2), // XDP_PASS
				asm.Return(),
			},
		})
		if err != nil {
			p.ProgramLoad = err
			return nil
		}
		defer prog.Close()
		attach := func(flags link.XDPAttachFlags) error {
			l, err := link.AttachXDP(link.XDPOptions{Program: prog, Interface: ifindex, Flags: flags})
			if err != nil {
				return err
			}
			return l.Close()
		}
		p.Generic = attach(link.XDPGenericMode)
		p.Native = attach(link.XDPDriverMode)
		if p.AFXDPSocket == nil {
			p.AFXDPZeroCopy = xskProbe(ifindex, 0, unix.XDP_ZEROCOPY, false)
			p.AFXDPCopy = xskProbe(ifindex, 1, unix.XDP_COPY, false)
		}
		return nil
	})
	return p
}

// xskProbe opens an AF_XDP socket, registers a small UMEM and binds it to
// queue of ifindex with flags (XDP_COPY or XDP_ZEROCOPY); socketOnly
// stops after socket(2).
func xskProbe(ifindex, queue int, flags uint16, socketOnly bool) error {
	fd, err := unix.Socket(unix.AF_XDP, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if socketOnly {
		return nil
	}
	const frames, frameSize = 16, 4096
	mem, err := unix.Mmap(-1, 0, frames*frameSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return err
	}
	defer unix.Munmap(mem)
	reg := unix.XDPUmemReg{Addr: uint64(uintptr(unsafe.Pointer(&mem[0]))), Len: frames * frameSize, Size: frameSize}
	if _, _, errno := unix.Syscall6(unix.SYS_SETSOCKOPT, uintptr(fd), unix.SOL_XDP, unix.XDP_UMEM_REG,
		uintptr(unsafe.Pointer(&reg)), unsafe.Sizeof(reg), 0); errno != 0 {
		return fmt.Errorf("XDP_UMEM_REG: %w", errno)
	}
	for _, opt := range []int{unix.XDP_UMEM_FILL_RING, unix.XDP_UMEM_COMPLETION_RING, unix.XDP_RX_RING} {
		if err := unix.SetsockoptInt(fd, unix.SOL_XDP, opt, frames); err != nil {
			return fmt.Errorf("ring size: %w", err)
		}
	}
	if err := unix.Bind(fd, &unix.SockaddrXDP{Flags: flags, Ifindex: uint32(ifindex), QueueID: uint32(queue)}); err != nil {
		return fmt.Errorf("bind: %w", err)
	}
	return nil
}

func ifaceInfo(name string) (IfaceInfo, error) {
	l, err := netlink.LinkByName(name)
	if err != nil {
		return IfaceInfo{}, err
	}
	a := l.Attrs()
	info := IfaceInfo{Name: name, RxQueues: a.NumRxQueues}
	if a.Xdp != nil && a.Xdp.Attached {
		info.XDPAttached, info.XDPProgID = true, a.Xdp.ProgId
		info.XDPMode = map[uint32]string{1: "driver", 2: "generic", 3: "offload"}[a.Xdp.AttachMode]
	}
	if fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0); err == nil {
		if d, err := unix.IoctlGetEthtoolDrvinfo(fd, name); err == nil {
			info.Driver = unix.ByteSliceToString(d.Driver[:])
		}
		unix.Close(fd)
	}
	return info, nil
}
