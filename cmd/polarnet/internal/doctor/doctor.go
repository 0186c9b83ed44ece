// Package doctor checks a host for what each polarnet link needs and says
// how to fix what is missing. Every input comes through Env, so tests run
// the checks against fake filesystem roots and commands.
package doctor

import (
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/polarnet/polarnet/link/tap"
	"github.com/polarnet/polarnet/polarnet"
)

// Links are the link kinds doctor knows, in the order "all" checks them.
var Links = []string{"tap", "afxdp", "dpdk", "rdma"}

// Status is a check's verdict.
type Status uint8

const (
	OK   Status = iota // ready
	Info               // worth knowing, changes nothing
	Warn               // runs, but slower or only in part
	Fail               // the link cannot run until fixed
)

func (s Status) String() string {
	return [...]string{"ok", "info", "warn", "FAIL"}[s]
}

// Check is one finding.
type Check struct {
	Name   string
	Status Status
	Detail string
	// Fix is the exact remedy, for Warn and Fail.
	Fix string
}

// Report is what doctor found for one link.
type Report struct {
	Link   string
	Checks []Check
}

// Ready reports whether the link can run: no check failed.
func (r *Report) Ready() bool {
	for _, c := range r.Checks {
		if c.Status == Fail {
			return false
		}
	}
	return true
}

func (r *Report) add(name string, st Status, detail, fix string) {
	r.Checks = append(r.Checks, Check{Name: name, Status: st, Detail: detail, Fix: fix})
}

// Print writes the report for a person to read.
func (r *Report) Print(w io.Writer) {
	fmt.Fprintf(w, "polarnet doctor %s\n", r.Link)
	for _, c := range r.Checks {
		fmt.Fprintf(w, "  %-4s  %-16s %s\n", c.Status, c.Name, c.Detail)
		if c.Fix != "" && c.Status >= Warn {
			for i, line := range strings.Split(c.Fix, "\n") {
				label := "fix:"
				if i > 0 {
					label = ""
				}
				fmt.Fprintf(w, "        %-16s %s\n", label, line)
			}
		}
	}
	verdict := "ready"
	if !r.Ready() {
		verdict = "NOT ready"
	}
	fmt.Fprintf(w, "  => %s: %s\n", r.Link, verdict)
}

// TAPProbe is what creating a TAP device showed.
type TAPProbe struct {
	Err     error // nil: a TAP device was created
	Queues  int   // queues it opened
	Detail  string
	Skipped string // why it was not tried
}

// XDPProbe is what attaching XDP programs and binding AF_XDP sockets to a
// veth pair in a throwaway namespace showed. A nil error means it worked.
type XDPProbe struct {
	Skipped                      string
	Setup                        error // creating the namespace and veth pair
	Generic, Native              error // attaching an XDP_PASS program
	AFXDPCopy, AFXDPZeroCopy     error // binding an AF_XDP socket to queue 0
	AFXDPSocket                  error // socket(AF_XDP)
	ProgramLoad                  error // loading the program
	NativeDetail, ZeroCopyDetail string
}

// IfaceInfo describes a network interface for the AF_XDP checks.
type IfaceInfo struct {
	Name        string
	Driver      string
	RxQueues    int
	XDPAttached bool
	XDPProgID   uint32
	XDPMode     string
}

// Env is everything the checks read from the host.
type Env struct {
	// Root is where /proc, /sys and /dev are read from; "" means "/".
	Root string
	// Euid is the effective user id.
	Euid int
	// Memlock returns RLIMIT_MEMLOCK (soft limit; ^0 for unlimited).
	Memlock func() (uint64, error)
	// Run runs a command and returns its standard output.
	Run func(name string, args ...string) (string, error)
	// ProbeTAP tries to create a TAP device; nil skips the probe.
	ProbeTAP func() TAPProbe
	// ProbeXDP tries XDP and AF_XDP on a veth pair; nil skips the probe.
	ProbeXDP func() XDPProbe
	// Iface describes an interface for -iface; nil: not available.
	Iface func(name string) (IfaceInfo, error)
	// RDMADevices lists RDMA devices (rdmamap.GetRdmaDeviceList on a host).
	RDMADevices func() []string
	// Getenv reads the POLARNET_* variables; nil: none is set.
	Getenv func(string) string
	// StartStack builds a stack from variables (polarnet.NewFromEnv on a
	// host); nil skips starting one.
	StartStack func(getenv func(string) string) (*polarnet.Stack, error)
	// CPUs is how many CPUs the process may run on (runtime.GOMAXPROCS on
	// a host); 0: unknown, and the shards check is skipped.
	CPUs int
}

func (e *Env) path(p string) string {
	if e.Root == "" {
		return p
	}
	return filepath.Join(e.Root, p)
}

func (e *Env) read(p string) (string, error) {
	b, err := os.ReadFile(e.path(p))
	return strings.TrimSpace(string(b)), err
}

func (e *Env) run(name string, args ...string) (string, error) {
	if e.Run == nil {
		return "", exec.ErrNotFound
	}
	return e.Run(name, args...)
}

// Options are doctor's command-line choices.
type Options struct {
	// Iface is a network interface to check for AF_XDP.
	Iface string
}

// Run checks the given link ("all" for every one) and returns a report per
// link; "env" checks the POLARNET_* variables instead.
func Run(env *Env, link string, opt Options) ([]Report, error) {
	var links []string
	switch link {
	case "", "all":
		links = Links
	case "tap", "afxdp", "dpdk", "rdma":
		links = []string{link}
	case "env":
		r := Report{Link: "env"}
		checkEnvironment(env, &r)
		return []Report{r}, nil
	default:
		return nil, fmt.Errorf("doctor: unknown link %q (tap, afxdp, dpdk, rdma, all or env)", link)
	}
	var out []Report
	for _, l := range links {
		r := Report{Link: l}
		switch l {
		case "tap":
			checkTAP(env, &r)
		case "afxdp":
			checkAFXDP(env, &r, opt)
		case "dpdk":
			checkDPDK(env, &r)
		case "rdma":
			checkRDMA(env, &r)
		}
		checkShards(env, &r, l, opt)
		checkCPU(env, &r)
		out = append(out, r)
	}
	return out, nil
}

// Capabilities (linux/capability.h).
const (
	capNetAdmin = 12
	capNetRaw   = 13
	capIPCLock  = 14
	capSysAdmin = 21
	capBPF      = 39
)

var capNames = map[int]string{capNetAdmin: "CAP_NET_ADMIN", capNetRaw: "CAP_NET_RAW", capIPCLock: "CAP_IPC_LOCK", capSysAdmin: "CAP_SYS_ADMIN", capBPF: "CAP_BPF"}

// capEff returns the effective capability set from /proc/self/status.
func (e *Env) capEff() (uint64, error) {
	s, err := e.read("/proc/self/status")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(s, "\n") {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			return strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		}
	}
	return 0, errors.New("no CapEff in /proc/self/status")
}

func (e *Env) hasCap(c int) bool {
	caps, err := e.capEff()
	return err == nil && caps&(1<<c) != 0
}

// checkPrivileges needs each of caps; any is a list of which one suffices.
func checkPrivileges(e *Env, r *Report, caps []int, oneOf []int) {
	var missing []string
	for _, c := range caps {
		if !e.hasCap(c) {
			missing = append(missing, capNames[c])
		}
	}
	if len(oneOf) > 0 {
		found := false
		var names []string
		for _, c := range oneOf {
			found = found || e.hasCap(c)
			names = append(names, capNames[c])
		}
		if !found {
			missing = append(missing, strings.Join(names, " or "))
		}
	}
	who := fmt.Sprintf("uid %d", e.Euid)
	if e.Euid == 0 {
		who = "root (uid 0)"
	}
	if len(missing) == 0 {
		r.add("privileges", OK, who+" with the capabilities needed", "")
		return
	}
	var want []string
	for _, c := range append(caps, oneOf...) {
		want = append(want, strings.ToLower(capNames[c]))
	}
	r.add("privileges", Fail, fmt.Sprintf("%s lacks %s", who, strings.Join(missing, ", ")),
		fmt.Sprintf("run as root, or grant the binary its capabilities: setcap %s+ep ./yourprogram", strings.Join(want, ",")))
}

// checkMemlock: AF_XDP UMEM, RDMA memory regions and VFIO DMA mappings
// count against RLIMIT_MEMLOCK unless the process has CAP_IPC_LOCK.
func checkMemlock(e *Env, r *Report, need uint64, what string) {
	if e.Memlock == nil {
		return
	}
	lim, err := e.Memlock()
	if err != nil {
		r.add("memlock", Warn, "cannot read RLIMIT_MEMLOCK: "+err.Error(), "")
		return
	}
	limStr := "unlimited"
	if lim != ^uint64(0) {
		limStr = fmtBytes(lim)
	}
	switch {
	case lim == ^uint64(0) || lim >= need:
		r.add("memlock", OK, fmt.Sprintf("RLIMIT_MEMLOCK %s, enough for %s", limStr, what), "")
	case e.hasCap(capIPCLock):
		r.add("memlock", OK, fmt.Sprintf("RLIMIT_MEMLOCK %s, but CAP_IPC_LOCK lifts it for %s", limStr, what), "")
	default:
		r.add("memlock", Fail, fmt.Sprintf("RLIMIT_MEMLOCK %s is below the %s %s needs", limStr, fmtBytes(need), what),
			"ulimit -l unlimited (shell), LimitMEMLOCK=infinity (systemd unit), or --ulimit memlock=-1 (containers)")
	}
}

func fmtBytes(n uint64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", n>>30)
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}

func checkTAP(e *Env, r *Report) {
	checkPrivileges(e, r, []int{capNetAdmin}, nil)
	var st devStat
	err := statDev(e.path("/dev/net/tun"), &st)
	switch {
	case errors.Is(err, os.ErrNotExist):
		r.add("/dev/net/tun", Fail, "missing", "modprobe tun   # or, if the driver is built in:\nmkdir -p /dev/net && mknod /dev/net/tun c 10 200 && chmod 0666 /dev/net/tun")
	case err != nil:
		r.add("/dev/net/tun", Fail, err.Error(), "mkdir -p /dev/net && mknod /dev/net/tun c 10 200 && chmod 0666 /dev/net/tun")
	case !st.char || st.major != 10 || st.minor != 200:
		r.add("/dev/net/tun", Fail, fmt.Sprintf("not the TUN/TAP character device 10:200 (char %v, %d:%d)", st.char, st.major, st.minor),
			"rm /dev/net/tun && mknod /dev/net/tun c 10 200 && chmod 0666 /dev/net/tun")
	default:
		r.add("/dev/net/tun", OK, "character device 10:200", "")
	}
	if e.ProbeTAP == nil {
		return
	}
	p := e.ProbeTAP()
	switch {
	case p.Skipped != "":
		r.add("TAP device", Info, "not tried: "+p.Skipped, "")
	case p.Err != nil:
		r.add("TAP device", Fail, "creating one failed: "+p.Err.Error(), "see the checks above; in a container, pass --device /dev/net/tun --cap-add NET_ADMIN")
	default:
		r.add("TAP device", OK, p.Detail, "")
	}
}

func checkAFXDP(e *Env, r *Report, opt Options) {
	checkPrivileges(e, r, []int{capNetAdmin, capNetRaw}, []int{capBPF, capSysAdmin})
	// A UMEM of 4096 frames of 4 KiB per queue, as the link's default.
	checkMemlock(e, r, 16<<20, "a 16 MiB UMEM per queue")
	if v, err := e.read("/proc/sys/net/core/bpf_jit_enable"); err == nil {
		if v == "0" {
			r.add("BPF JIT", Warn, "off: XDP programs run interpreted", "sysctl -w net.core.bpf_jit_enable=1")
		} else {
			r.add("BPF JIT", OK, "on", "")
		}
	}
	if e.ProbeXDP != nil {
		p := e.ProbeXDP()
		switch {
		case p.Skipped != "":
			r.add("XDP probe", Info, "not tried: "+p.Skipped, "")
		case p.Setup != nil:
			r.add("XDP probe", Warn, "could not build the throwaway veth pair: "+p.Setup.Error(), "")
		default:
			probeChecks(r, p)
		}
	}
	if opt.Iface != "" {
		checkIface(e, r, opt.Iface)
	}
}

func probeChecks(r *Report, p XDPProbe) {
	if p.AFXDPSocket != nil {
		r.add("AF_XDP sockets", Fail, "socket(AF_XDP): "+p.AFXDPSocket.Error(),
			"use a kernel built with CONFIG_XDP_SOCKETS=y (Linux 4.18 or later)")
	} else {
		r.add("AF_XDP sockets", OK, "socket(AF_XDP) works", "")
	}
	if p.ProgramLoad != nil {
		r.add("XDP program", Fail, "loading an XDP_PASS program: "+p.ProgramLoad.Error(),
			"run as root (CAP_BPF + CAP_NET_ADMIN) on a kernel with CONFIG_BPF_SYSCALL=y and CONFIG_XDP_SOCKETS=y")
		return
	}
	report := func(name string, err error, ok, failStatus Status, fix string) {
		if err == nil {
			r.add(name, ok, "works on a veth pair in a throwaway namespace", "")
		} else {
			r.add(name, failStatus, err.Error(), fix)
		}
	}
	report("XDP generic", p.Generic, OK, Fail, "use a kernel with CONFIG_BPF_SYSCALL=y (generic XDP works on any device)")
	report("XDP native", p.Native, OK, Warn, "native XDP needs driver support (veth has it since Linux 4.19)")
	report("AF_XDP copy", p.AFXDPCopy, OK, Fail, "use a kernel with CONFIG_XDP_SOCKETS=y")
	if p.AFXDPZeroCopy == nil {
		r.add("AF_XDP zerocopy", OK, "works on veth", "")
	} else {
		r.add("AF_XDP zerocopy", Info, "not on veth ("+p.AFXDPZeroCopy.Error()+"): copy mode is used; zero-copy needs a NIC driver with AF_XDP zero-copy (mlx5, i40e, ice, ixgbe, igc)", "")
	}
}

// Drivers with native XDP and AF_XDP zero-copy support in mainline Linux
// (by driver; the kernel version decides the details).
var (
	nativeXDPDrivers = map[string]bool{"mlx5_core": true, "mlx4_en": true, "i40e": true, "ice": true, "ixgbe": true, "ixgbevf": true, "igb": true, "igc": true, "bnxt_en": true, "ena": true, "virtio_net": true, "veth": true, "tun": true, "nfp": true, "qede": true, "hv_netvsc": true, "stmmac": true, "netdevsim": true, "mvneta": true, "mvpp2": true, "enetc": true, "fec": true, "cpsw": true, "gve": true, "idpf": true}
	zeroCopyDrivers  = map[string]bool{"mlx5_core": true, "i40e": true, "ice": true, "ixgbe": true, "igc": true, "igb": true, "stmmac": true, "gve": true, "virtio_net": true, "idpf": true, "enetc": true}
)

func checkIface(e *Env, r *Report, name string) {
	if e.Iface == nil {
		r.add("interface", Info, "cannot query interfaces here", "")
		return
	}
	info, err := e.Iface(name)
	if err != nil {
		r.add("interface", Fail, fmt.Sprintf("%s: %v", name, err), "ip link show   # lists the interfaces; pass one with -iface")
		return
	}
	r.add("interface", OK, fmt.Sprintf("%s: driver %s, %d RX queues", name, orUnknown(info.Driver), info.RxQueues), "")
	switch {
	case nativeXDPDrivers[info.Driver]:
		r.add("native XDP", OK, fmt.Sprintf("driver %s supports native (driver-mode) XDP", info.Driver), "")
	default:
		r.add("native XDP", Warn, fmt.Sprintf("driver %s is not known to support native XDP: generic (skb) mode, slower, is used", orUnknown(info.Driver)), "use a NIC whose driver has native XDP (mlx5_core, i40e, ice, ixgbe, bnxt_en, ena, virtio_net)")
	}
	if zeroCopyDrivers[info.Driver] {
		r.add("AF_XDP zerocopy", OK, fmt.Sprintf("driver %s supports AF_XDP zero-copy", info.Driver), "")
	} else {
		r.add("AF_XDP zerocopy", Info, fmt.Sprintf("driver %s: copy mode (no AF_XDP zero-copy known)", orUnknown(info.Driver)), "")
	}
	if info.XDPAttached {
		r.add("XDP attached", Warn, fmt.Sprintf("%s already runs XDP program %d (%s mode): polarnet's program cannot attach beside it", name, info.XDPProgID, info.XDPMode),
			fmt.Sprintf("ip link set dev %s xdp off   # if nothing else needs it", name))
	} else {
		r.add("XDP attached", OK, "no XDP program on "+name, "")
	}
}

func orUnknown(s string) string {
	if s == "" {
		return "(unknown)"
	}
	return s
}

func checkDPDK(e *Env, r *Report) {
	if e.Euid == 0 {
		r.add("privileges", OK, "root (uid 0)", "")
	} else {
		r.add("privileges", Warn, fmt.Sprintf("uid %d: EAL needs root for hugepages, VFIO and raw sockets", e.Euid), "run as root")
	}
	if v, err := e.run("pkg-config", "--modversion", "libdpdk"); err == nil && strings.TrimSpace(v) != "" {
		r.add("DPDK libraries", OK, "libdpdk "+strings.TrimSpace(v)+" (pkg-config)", "")
	} else if out, err := e.run("ldconfig", "-p"); err == nil && strings.Contains(out, "librte_eal.so") {
		r.add("DPDK libraries", Fail, "runtime libraries present (ldconfig) but no libdpdk.pc: the link cannot be built",
			"apt-get install -y libdpdk-dev dpdk-dev pkg-config")
	} else {
		r.add("DPDK libraries", Fail, "libdpdk not found (pkg-config libdpdk, ldconfig -p)",
			"apt-get install -y libdpdk-dev dpdk-dev pkg-config")
	}
	r.add("build", Info, "the DPDK link is compiled in with cgo and -tags dpdk", "")
	checkHugepages(e, r)
	checkMemlock(e, r, 256<<20, "VFIO DMA mappings of a 256 MiB pool")
	checkVFIO(e, r)
	checkIOMMU(e, r)
}

func checkHugepages(e *Env, r *Report) {
	dirs, _ := filepath.Glob(e.path("/sys/kernel/mm/hugepages/hugepages-*"))
	var reserved []string
	total, totalFree := 0, 0
	for _, d := range dirs {
		n, _ := os.ReadFile(filepath.Join(d, "nr_hugepages"))
		free, _ := os.ReadFile(filepath.Join(d, "free_hugepages"))
		nr, _ := strconv.Atoi(strings.TrimSpace(string(n)))
		if nr > 0 {
			size := strings.TrimPrefix(filepath.Base(d), "hugepages-")
			reserved = append(reserved, fmt.Sprintf("%d x %s (%s free)", nr, size, strings.TrimSpace(string(free))))
			total += nr
			f, _ := strconv.Atoi(strings.TrimSpace(string(free)))
			totalFree += f
		}
	}
	mounts, _ := e.read("/proc/mounts")
	var hugefs []string
	for _, line := range strings.Split(mounts, "\n") {
		f := strings.Fields(line)
		if len(f) >= 3 && f[2] == "hugetlbfs" {
			hugefs = append(hugefs, f[1])
		}
	}
	const reserve = "echo 512 > /sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages"
	const mount = "mkdir -p /dev/hugepages && mount -t hugetlbfs nodev /dev/hugepages"
	const noHuge = "(or run EAL without hugepages: --no-huge -m 256, slower)"
	switch {
	case total == 0 && len(hugefs) == 0:
		r.add("hugepages", Warn, "none reserved, hugetlbfs not mounted", reserve+"\n"+mount+"\n"+noHuge)
	case total == 0:
		r.add("hugepages", Warn, "none reserved (hugetlbfs mounted on "+strings.Join(hugefs, ", ")+")", reserve+"\n"+noHuge)
	case totalFree == 0:
		// The DPDK link refuses to start EAL then (dpdk.ErrNoHugepages).
		fix := "reserve more: raise nr_hugepages above the pages in use (grep Huge /proc/meminfo)"
		if len(hugefs) == 0 {
			fix += "\n" + mount
		}
		r.add("hugepages", Warn, "reserved "+strings.Join(reserved, ", ")+", but none is free: other programs hold them all", fix+"\n"+noHuge)
	case len(hugefs) == 0:
		r.add("hugepages", Warn, "reserved "+strings.Join(reserved, ", ")+", but hugetlbfs is not mounted", mount+"\n"+noHuge)
	default:
		r.add("hugepages", OK, "reserved "+strings.Join(reserved, ", ")+"; hugetlbfs on "+strings.Join(hugefs, ", "), "")
	}
}

var pciAddr = regexp.MustCompile(`^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$`)

func checkVFIO(e *Env, r *Report) {
	entries, _ := os.ReadDir(e.path("/sys/bus/pci/drivers/vfio-pci"))
	var bound []string
	for _, en := range entries {
		if pciAddr.MatchString(en.Name()) {
			bound = append(bound, en.Name())
		}
	}
	if len(bound) > 0 {
		r.add("vfio-pci", OK, "bound: "+strings.Join(bound, ", "), "")
		return
	}
	nics := netPCIDevices(e)
	fix := "modprobe vfio-pci && dpdk-devbind.py --bind=vfio-pci <PCI address>   # takes the NIC away from the kernel"
	if len(nics) > 0 {
		fix = fmt.Sprintf("modprobe vfio-pci && dpdk-devbind.py --bind=vfio-pci %s   # takes %s away from the kernel", nics[0].pci, nics[0].name)
	}
	detail := "no NIC bound to vfio-pci: only virtual devices (net_af_packet, net_tap, net_memif) can run"
	if len(nics) > 0 {
		var ds []string
		for _, n := range nics {
			ds = append(ds, fmt.Sprintf("%s %s (%s)", n.name, n.pci, n.driver))
		}
		detail += "; NICs: " + strings.Join(ds, ", ")
	}
	r.add("vfio-pci", Warn, detail, fix)
}

type pciNIC struct{ name, pci, driver string }

// netPCIDevices lists network interfaces backed by PCI devices.
func netPCIDevices(e *Env) []pciNIC {
	entries, _ := os.ReadDir(e.path("/sys/class/net"))
	var out []pciNIC
	for _, en := range entries {
		dev, err := filepath.EvalSymlinks(e.path(filepath.Join("/sys/class/net", en.Name(), "device")))
		if err != nil || !pciAddr.MatchString(filepath.Base(dev)) {
			continue
		}
		drv, _ := filepath.EvalSymlinks(filepath.Join(dev, "driver"))
		out = append(out, pciNIC{name: en.Name(), pci: filepath.Base(dev), driver: filepath.Base(drv)})
	}
	return out
}

func checkIOMMU(e *Env, r *Report) {
	groups, _ := os.ReadDir(e.path("/sys/kernel/iommu_groups"))
	if len(groups) > 0 {
		r.add("IOMMU", OK, fmt.Sprintf("%d IOMMU groups", len(groups)), "")
		return
	}
	if v, err := e.read("/sys/module/vfio/parameters/enable_unsafe_noiommu_mode"); err == nil && (v == "Y" || v == "1") {
		r.add("IOMMU", Warn, "none; vfio runs in unsafe no-IOMMU mode (no DMA isolation)", "")
		return
	}
	r.add("IOMMU", Warn, "no IOMMU groups: vfio-pci cannot bind a NIC safely",
		"add intel_iommu=on iommu=pt (or amd_iommu=on) to the kernel command line and reboot\n(or, without an IOMMU: echo 1 > /sys/module/vfio/parameters/enable_unsafe_noiommu_mode)")
}

func checkRDMA(e *Env, r *Report) {
	checkPrivileges(e, r, []int{capNetRaw}, nil)
	var devs []string
	if e.RDMADevices != nil {
		devs = e.RDMADevices()
	}
	sort.Strings(devs)
	if len(devs) > 0 {
		r.add("RDMA devices", OK, strings.Join(devs, ", "), "")
	} else {
		why := "/sys/class/infiniband does not exist"
		if _, err := os.Stat(e.path("/sys/class/infiniband")); err == nil {
			why = "/sys/class/infiniband is empty"
		}
		fix := "on a host with an RDMA NIC, load its driver: modprobe mlx5_ib (Mellanox/NVIDIA), irdma (Intel), bnxt_re (Broadcom)\nfor software RoCE over an Ethernet NIC: modprobe rdma_rxe && rdma link add rxe0 type rxe netdev eth0"
		switch _, err := os.Stat(e.path("/sys/module/ib_core")); {
		case err == nil:
		case strings.Contains(e.kernelConfig(), "# CONFIG_INFINIBAND is not set"):
			why += "; this kernel is built without RDMA support (CONFIG_INFINIBAND is not set in /proc/config.gz): no driver can load here"
			fix = "boot a kernel built with CONFIG_INFINIBAND and the RDMA NIC's driver (CONFIG_MLX5_INFINIBAND, CONFIG_INFINIBAND_IRDMA, ...) or CONFIG_RDMA_RXE for software RoCE; on this kernel the RDMA link cannot run"
		default:
			why += "; the RDMA core (ib_core) is not loaded: this kernel has no RDMA support, or no RDMA NIC's driver is loaded"
		}
		r.add("RDMA devices", Fail, "no RDMA device: "+why, fix)
	}
	uverbs, _ := filepath.Glob(e.path("/dev/infiniband/uverbs*"))
	if len(devs) > 0 && len(uverbs) == 0 {
		r.add("/dev/infiniband", Fail, "no uverbs character devices", "modprobe ib_uverbs")
	} else if len(uverbs) > 0 {
		r.add("/dev/infiniband", OK, fmt.Sprintf("%d uverbs devices", len(uverbs)), "")
	}
	if out, err := e.run("ldconfig", "-p"); err == nil && strings.Contains(out, "libibverbs.so.1") {
		r.add("libibverbs", OK, "installed", "")
	} else {
		r.add("libibverbs", Fail, "libibverbs.so.1 not found (ldconfig -p)", "apt-get install -y libibverbs-dev rdma-core")
	}
	r.add("build", Info, "the RDMA link is compiled in with cgo and -tags rdma", "")
	checkMemlock(e, r, 64<<20, "registered memory regions")
}

// kernelConfig returns the running kernel's build configuration from
// /proc/config.gz, "" where the kernel does not expose it.
func (e *Env) kernelConfig() string {
	f, err := os.Open(e.path("/proc/config.gz"))
	if err != nil {
		return ""
	}
	defer f.Close()
	z, err := gzip.NewReader(f)
	if err != nil {
		return ""
	}
	b, _ := io.ReadAll(io.LimitReader(z, 4<<20))
	return string(b)
}

// checkShards says how many shards (queue pairs, pollers) the link gives a
// process on this host by default, and how to get one per CPU where the
// default does not.
func checkShards(e *Env, r *Report, link string, opt Options) {
	n := e.CPUs
	if n <= 0 {
		return
	}
	cpus := fmt.Sprintf("%d CPUs for this process", n)
	if n == 1 {
		cpus = "1 CPU for this process"
	}
	var detail string
	switch link {
	case "tap":
		detail = fmt.Sprintf("%s: a TAP device gets %d queues by default, a shard on each (POLARNET_QUEUES sets another number)", cpus, min(n, tap.MaxQueues))
	case "afxdp":
		detail = fmt.Sprintf("%s: a socket and shard on each of the interface's RX queues, up to %d by default", cpus, n)
		if opt.Iface != "" && e.Iface != nil {
			if info, err := e.Iface(opt.Iface); err == nil && info.RxQueues > 0 {
				detail = fmt.Sprintf("%s: %d shards on %s, which has %d RX queues", cpus, min(n, info.RxQueues), opt.Iface, info.RxQueues)
				if info.RxQueues < n {
					detail += fmt.Sprintf(" (ethtool -L %s combined %d for one per CPU)", opt.Iface, n)
				}
			}
		}
	case "dpdk", "rdma":
		detail = fmt.Sprintf("%s: 1 queue pair and shard unless POLARNET_QUEUES (Config.Queues) asks for up to %d", cpus, n)
	}
	r.add("shards", Info, detail, "")
}

// checkCPU reports the CPU frequency governor and isolated cores, which
// matter for busy polling.
func checkCPU(e *Env, r *Report) {
	govs, _ := filepath.Glob(e.path("/sys/devices/system/cpu/cpu[0-9]*/cpufreq/scaling_governor"))
	count := map[string]int{}
	for _, g := range govs {
		v, _ := os.ReadFile(g)
		count[strings.TrimSpace(string(v))]++
	}
	switch {
	case len(govs) == 0:
		r.add("CPU governor", Info, "no cpufreq (a VM, or a fixed clock): nothing to set", "")
	case count["performance"] == len(govs):
		r.add("CPU governor", OK, fmt.Sprintf("performance on all %d CPUs", len(govs)), "")
	default:
		var parts []string
		for g, n := range count {
			parts = append(parts, fmt.Sprintf("%s on %d", g, n))
		}
		sort.Strings(parts)
		r.add("CPU governor", Warn, strings.Join(parts, ", ")+": clocks drop between bursts, adding latency to polling",
			"cpupower frequency-set -g performance   # or: echo performance | tee /sys/devices/system/cpu/cpu*/cpufreq/scaling_governor")
	}
	iso, _ := e.read("/sys/devices/system/cpu/isolated")
	if iso != "" {
		nohz, _ := e.read("/sys/devices/system/cpu/nohz_full")
		detail := "isolated: " + iso
		if nohz != "" && nohz != "(null)" {
			detail += "; nohz_full: " + nohz
		}
		r.add("isolated cores", OK, detail+" (give them to Config.CPUs with PollBusy)", "")
	} else if cpus := isolateExample(e); cpus != "" {
		r.add("isolated cores", Info, fmt.Sprintf("none: fine for adaptive polling; for PollBusy, isolate cores with isolcpus=%s nohz_full=%s rcu_nocbs=%s on the kernel command line and set Config.CPUs", cpus, cpus, cpus), "")
	} else {
		r.add("isolated cores", Info, "none, and one CPU online: nothing to isolate for PollBusy; adaptive polling is the mode for this host", "")
	}
}

// isolateExample suggests CPUs to isolate for busy polling: the upper half
// of the online ones ("2-3" of 0-3, "1" of 0-1), leaving the rest to the
// kernel and other programs; "" with fewer than two online (or unknown,
// then "2-3" as of a 4-CPU host).
func isolateExample(e *Env) string {
	online, err := e.read("/sys/devices/system/cpu/online")
	if err != nil {
		return "2-3"
	}
	var cpus []int
	for _, part := range strings.Split(strings.TrimSpace(online), ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, errA := strconv.Atoi(lo)
		b, errB := a, errA
		if isRange {
			b, errB = strconv.Atoi(hi)
		}
		if errA != nil || errB != nil || b < a {
			return "2-3"
		}
		for c := a; c <= b; c++ {
			cpus = append(cpus, c)
		}
	}
	if len(cpus) < 2 {
		return ""
	}
	top := cpus[len(cpus)-len(cpus)/2:]
	first, last := top[0], top[len(top)-1]
	switch {
	case first == last:
		return strconv.Itoa(first)
	case last-first == len(top)-1:
		return fmt.Sprintf("%d-%d", first, last)
	}
	parts := make([]string, len(top))
	for i, c := range top {
		parts[i] = strconv.Itoa(c)
	}
	return strings.Join(parts, ",")
}
