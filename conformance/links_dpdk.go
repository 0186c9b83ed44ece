//go:build dpdk && linux

package conformance

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/polarnet/polarnet/internal/netns"
	"github.com/polarnet/polarnet/link"
	"github.com/polarnet/polarnet/link/dpdk"
)

// The DPDK kind (-link=dpdk, in test binaries built with -tags dpdk):
// polarnet drives the host end of a veth pair (newHostVeth) with DPDK's
// net_af_packet PMD, and the other end is the kernel interface in the
// scenario's namespace.
//
//	this process: polarnet ── net_af_packet ── veth end A (host namespace:
//	no addresses, IPv6 and forwarding off)  ══ veth ══  veth end B
//	(namespace ns: the kernel peer, or a bridge port)
//
// End B keeps the kernel's offloads, as production peers have them:
// checksum offload on (the link accepts the checksum-partial frames a local
// veth peer sends), TSO on but gso_max_segs 1, so that TCP segments are
// cut before the wire as a NIC would cut them (the PMD does not use
// PACKET_VNET_HDR, so a 64 KiB GSO frame could not reach it whole). When
// AttachOptions.Offloads is off (relays, impairment, frame-size checks)
// B's TX checksum offload is turned off too, so every frame on the veth is
// a wire frame with complete checksums.
//
// EAL initialises once per process: the first Attach starts it for the
// whole suite, in memory, --no-pci, on 256 MiB of hugepages when that much
// is free, else on ordinary pages (--no-huge -m 512).
func init() { Register(dpdkKind{}) }

type dpdkKind struct{}

func (dpdkKind) Name() string { return "dpdk" }

var (
	dpdkEALOnce sync.Once
	dpdkEALErr  error
	dpdkEALDesc string
	// dpdkVdevs numbers the vdevs: a name must be unique while its
	// device exists.
	dpdkVdevs atomic.Uint64
)

// dpdkEAL initialises EAL once for the whole suite.
func dpdkEAL() error {
	dpdkEALOnce.Do(func() {
		cfg := dpdk.EALConfig{MemoryMB: 256, LogLevel: "*:error"}
		dpdkEALErr = dpdk.InitEAL(cfg)
		if errors.Is(dpdkEALErr, dpdk.ErrNoHugepages) {
			// The check failed before EAL was touched: EAL can still
			// start on ordinary pages.
			cfg = dpdk.EALConfig{NoHuge: true, MemoryMB: 512, LogLevel: "*:error"}
			dpdkEALErr = dpdk.InitEAL(cfg)
		}
		if dpdkEALErr == nil {
			args, _ := cfg.Args()
			dpdkEALDesc = strings.Join(args[1:], " ")
			fmt.Printf("conformance: DPDK EAL initialised with %s\n", dpdkEALDesc)
		}
	})
	return dpdkEALErr
}

func (dpdkKind) Attach(ns *netns.NS, opt AttachOptions) (link link.Link, dev string, err error) {
	if err := dpdkEAL(); err != nil {
		return nil, "", fmt.Errorf("conformance: DPDK: %w", err)
	}
	mtu := cmp.Or(opt.MTU, 1500)
	peerMTU := cmp.Or(opt.PeerMTU, mtu)
	queues := max(opt.Queues, 1)
	// One veth queue: the PMD's queue pairs are packet sockets in a fanout
	// group, not the veth's queues.
	host, peer, err := newHostVeth(ns, "pnd", 1, mtu, peerMTU, opt.Addrs)
	if err != nil {
		return nil, "", err
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, deleteVeth(host))
		}
	}()
	if out, err := ns.Exec("ip", "link", "set", "dev", peer, "gso_max_segs", "1"); err != nil {
		return nil, "", fmt.Errorf("conformance: %s gso_max_segs: %w: %s", peer, err, out)
	}
	// veth hands each frame to the receiving end on the sending CPU's
	// backlog, so two frames of one flow sent from two CPUs (a delayed ACK
	// from a timer, then a FIN from the closing thread) may arrive swapped,
	// which a wire never does: the peer in TIME_WAIT answers the stale ACK,
	// the closed server resets, the reset ends TIME_WAIT early and a port
	// is reused. RPS over all CPUs keeps each flow on one CPU's backlog,
	// in order, both ways.
	rps := dpdkRPSMask()
	if err := os.WriteFile("/sys/class/net/"+host+"/queues/rx-0/rps_cpus", []byte(rps), 0); err != nil {
		return nil, "", fmt.Errorf("conformance: %s rps_cpus: %w", host, err)
	}
	if out, err := ns.Exec("sh", "-c", "echo "+rps+" > /sys/class/net/"+peer+"/queues/rx-0/rps_cpus"); err != nil {
		return nil, "", fmt.Errorf("conformance: %s rps_cpus: %w: %s", peer, err, out)
	}
	if !opt.Offloads {
		if err := ns.Do(func() error { return dpdkTxChecksumOff(peer) }); err != nil {
			return nil, "", fmt.Errorf("conformance: turning %s's TX checksum offload off: %w", peer, err)
		}
	}

	// framecnt sizes the kernel's RX and TX rings of each queue pair: 512
	// slots, the PMD's default, overflow while a poller sleeps. The link
	// chooses the slot size (framesz) for the MTU: 2 KiB, or whole pages
	// for jumbo frames, of which fewer do.
	framecnt := 4096
	if mtu > 1500 {
		framecnt = 1024
	}
	cfg := dpdk.Config{
		Device: fmt.Sprintf("net_af_packet%d,iface=%s,qpairs=%d,framecnt=%d",
			dpdkVdevs.Add(1), host, queues, framecnt),
		Queues:          queues,
		MTU:             mtu,
		DisableOffloads: !opt.Offloads,
	}
	if mtu > 1500 {
		// The PMD copies a frame into one mbuf as large as a slot: fewer
		// of them (its rings are the kernel's, whatever the descriptors).
		cfg.RxDescriptors, cfg.TxDescriptors = 512, 512
	}
	l, err := dpdk.New(cfg)
	if err != nil {
		return nil, "", err
	}
	return &vethLink{Link: l, host: host}, peer, nil
}

// dpdkTxChecksumOff turns an interface's TX checksum offload off (ethtool
// -K DEV tx off; ethtool is not installed here), in the calling thread's
// namespace.
func dpdkTxChecksumOff(dev string) error {
	s, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(s)
	// Heap-allocated: the kernel reads it through a pointer inside ifr.
	v := new(struct{ cmd, data uint32 })
	v.cmd = unix.ETHTOOL_STXCSUM
	ifr := new(struct {
		name [unix.IFNAMSIZ]byte
		data unsafe.Pointer
		_    [16]byte
	})
	copy(ifr.name[:], dev)
	ifr.data = unsafe.Pointer(v)
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(s), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(ifr))); errno != 0 {
		return errno
	}
	return nil
}

// dpdkRPSMask is the rps_cpus mask of every CPU this process may use (at
// most 32, a mask word's worth, which is all this suite needs).
func dpdkRPSMask() string {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil || set.Count() == 0 {
		return "1"
	}
	mask := uint32(0)
	for cpu := range 32 {
		if set.IsSet(cpu) {
			mask |= 1 << cpu
		}
	}
	if mask == 0 {
		mask = 1
	}
	return strconv.FormatUint(uint64(mask), 16)
}
