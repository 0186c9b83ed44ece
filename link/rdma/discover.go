package rdma

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/Mellanox/rdmamap"
)

// Port is one port of an RDMA device and the network interface it carries,
// as sysfs describes them.
type Port struct {
	// Device is the RDMA device, e.g. "mlx5_0"; Port its 1-based port.
	Device string
	Port   int
	// Netdev is the network interface of the port ("" if sysfs names none),
	// Driver the kernel driver of its NIC ("mlx5_core"), and Module the
	// RDMA module that driver needs ("mlx5_ib"; "" when unknown).
	Netdev string
	Driver string
	Module string
	// LinkLayer is "Ethernet" (RoCE: raw packet QPs are possible) or
	// "InfiniBand"; State the port's state ("ACTIVE", "DOWN", ...).
	LinkLayer string
	State     string
	// MAC and MTU are the network interface's (nil and 0 without one).
	MAC net.HardwareAddr
	MTU int
	// CharDevices are the device's character devices (uverbs, umad, ...),
	// as rdmamap lists them.
	CharDevices []string
}

// RawPacket reports whether the port's driver is known to offer raw packet
// queue pairs (IBV_QPT_RAW_PACKET) on an Ethernet link layer. Other RDMA
// drivers (RoCE and iWARP NICs of other vendors, soft-RoCE) carry RDMA
// traffic only.
func (p Port) RawPacket() bool {
	return p.LinkLayer == "Ethernet" && rawPacketModules[p.Module]
}

// String describes the port in one line.
func (p Port) String() string {
	nd := p.Netdev
	if nd == "" {
		nd = "no netdev"
	}
	return fmt.Sprintf("%s port %d (%s, driver %s, %s, %s)", p.Device, p.Port, nd, orNone(p.Driver), orNone(p.LinkLayer), orNone(p.State))
}

func orNone(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

// rdmaModules maps the kernel drivers of RDMA-capable NICs (the driver of
// the network interface's parent device) to the module that gives them an
// RDMA device.
var rdmaModules = map[string]string{
	"mlx5_core": "mlx5_ib",
	"mlx4_core": "mlx4_ib",
	"mlx4_en":   "mlx4_ib",
	"mana":      "mana_ib",
	"bnxt_en":   "bnxt_re",
	"i40e":      "irdma",
	"ice":       "irdma",
	"qede":      "qedr",
	"cxgb4":     "iw_cxgb4",
	"hns3":      "hns_roce_hw_v2",
	"be2net":    "ocrdma",
	"ionic":     "ionic_rdma",
}

// rawPacketModules are the RDMA modules whose verbs providers implement raw
// packet queue pairs.
var rawPacketModules = map[string]bool{"mlx5_ib": true, "mlx4_ib": true, "mana_ib": true}

// Sysfs paths. rdmamap reads its own package variables (RdmaClassDir and
// others); the paths this package reads itself are derived from
// rdmamap.RdmaClassDir (/sys/class/infiniband), so that a test pointing
// rdmamap at a fake tree moves every lookup there.
func sysDir() string    { return filepath.Dir(filepath.Dir(rdmamap.RdmaClassDir)) }
func netDir() string    { return filepath.Join(sysDir(), "class", "net") }
func moduleDir() string { return filepath.Join(sysDir(), "module") }
func portDir(dev string, port int) string {
	return filepath.Join(rdmamap.RdmaClassDir, dev, rdmamap.RdmaPortsdir, strconv.Itoa(port))
}

// NoDeviceReason says why a network interface has no usable RDMA port.
type NoDeviceReason int

const (
	// ReasonNoNetdev: no network interface of that name.
	ReasonNoNetdev NoDeviceReason = iota + 1
	// ReasonVirtual: the interface has no parent device (veth, TAP,
	// bridge, loopback, ...).
	ReasonVirtual
	// ReasonDriverNotRDMA: its NIC's driver has no RDMA support.
	ReasonDriverNotRDMA
	// ReasonModuleNotLoaded: the driver's RDMA module is not loaded.
	ReasonModuleNotLoaded
	// ReasonNoRDMASubsystem: the kernel has no RDMA devices at all
	// (/sys/class/infiniband does not exist).
	ReasonNoRDMASubsystem
	// ReasonNotListed: RDMA devices exist but none carries the interface.
	ReasonNotListed
	// ReasonNotEthernet: the port found is not Ethernet (IPoIB): raw
	// Ethernet frames need a RoCE port.
	ReasonNotEthernet
	// ReasonNoSuchDevice: no RDMA device or port of that name.
	ReasonNoSuchDevice
)

// NoDeviceError explains why a network interface (or an RDMA device name)
// leads to no port the link can use. It matches link.ErrNotSupported.
type NoDeviceError struct {
	Netdev string // the interface asked for ("" when a device was)
	Device string // the RDMA device asked for or found
	Driver string // the interface's driver, when known
	Reason NoDeviceReason
	// Detail is the explanation, with what to check or do.
	Detail string
}

func (e *NoDeviceError) Error() string {
	what := "netdev " + e.Netdev
	switch {
	case e.Netdev == "" && e.Device == "":
		return "rdma: no RDMA port with raw packet support on this host: " + e.Detail
	case e.Netdev == "":
		what = "RDMA device " + e.Device
	case e.Driver != "":
		what += " (driver " + e.Driver + ")"
	}
	return fmt.Sprintf("rdma: %s: no usable RDMA port: %s", what, e.Detail)
}

// Is makes errors.Is(err, link.ErrNotSupported) hold.
func (e *NoDeviceError) Is(target error) bool { return isNotSupported(target) }

// LookupNetdev finds the RDMA device port that carries the network
// interface netdev, in the current network namespace's sysfs. When there is
// none the error is a *NoDeviceError saying why.
func LookupNetdev(netdev string) (Port, error) {
	nd := filepath.Join(netDir(), netdev)
	if netdev == "" || strings.ContainsRune(netdev, '/') || !exists(nd) {
		return Port{}, &NoDeviceError{Netdev: netdev, Reason: ReasonNoNetdev,
			Detail: fmt.Sprintf("no network interface of that name (%s does not exist; `ip -br link` lists them)", nd)}
	}
	driver := linkBase(filepath.Join(nd, "device", "driver"))
	if dev, port, ok := findByGID(netdev); ok {
		return describePort(dev, port, netdev)
	}
	if dev, port, ok := findByParent(nd); ok {
		return describePort(dev, port, netdev)
	}
	e := &NoDeviceError{Netdev: netdev, Driver: driver}
	e.Reason, e.Detail = explainMissing(netdev, driver)
	return Port{}, e
}

// findByGID looks for netdev in the GID tables of every RDMA port: a RoCE
// port lists the interface whose addresses its GIDs come from.
func findByGID(netdev string) (string, int, bool) {
	for _, dev := range rdmamap.GetRdmaDeviceList() {
		for _, p := range portNumbers(dev) {
			if slices.Contains(gidNetdevs(dev, p), netdev) {
				return dev, p, true
			}
		}
	}
	return "", 0, false
}

// findByParent looks for an RDMA device of the interface's parent device,
// a PCI function or an auxiliary device (mlx5 sub-functions): its GID table
// is empty while the port has no address at all. A device with one Ethernet
// port is that port.
func findByParent(nd string) (string, int, bool) {
	parent := linkBase(filepath.Join(nd, "device"))
	if parent == "" {
		return "", 0, false
	}
	devs := rdmamap.GetRdmaDevicesForPcidev(parent)
	if len(devs) == 0 {
		devs = rdmamap.GetRdmaDevicesForAuxdev(parent)
	}
	for _, dev := range devs {
		var eth []int
		for _, p := range portNumbers(dev) {
			if readLine(filepath.Join(portDir(dev, p), "link_layer")) == "Ethernet" {
				eth = append(eth, p)
			}
		}
		if len(eth) == 1 {
			return dev, eth[0], true
		}
	}
	return "", 0, false
}

// explainMissing says why an existing interface has no RDMA port.
func explainMissing(netdev, driver string) (NoDeviceReason, string) {
	noClass := ""
	if !exists(rdmamap.RdmaClassDir) {
		noClass = fmt.Sprintf("; this kernel has no RDMA devices at all (%s does not exist)", rdmamap.RdmaClassDir)
	}
	if readLine(filepath.Join(netDir(), netdev, "type")) == "32" {
		return ReasonNotEthernet, "it is an IPoIB interface; raw Ethernet frames need an Ethernet (RoCE) port" + noClass
	}
	if driver == "" {
		return ReasonVirtual, fmt.Sprintf("it is a virtual interface (no parent device: veth, TAP, bridge, ...); "+
			"the RDMA link needs an RDMA-capable NIC such as NVIDIA/Mellanox ConnectX-4 or later (mlx5)%s", noClass)
	}
	module, known := rdmaModules[driver]
	if !known {
		return ReasonDriverNotRDMA, fmt.Sprintf("driver %s has no RDMA support; raw packet QPs need an mlx5 (ConnectX-4 or later), "+
			"mlx4 or mana NIC%s", driver, noClass)
	}
	if !exists(filepath.Join(moduleDir(), module)) {
		return ReasonModuleNotLoaded, fmt.Sprintf("its RDMA module %s is not loaded (modprobe %s)%s", module, module, noClass)
	}
	if noClass != "" {
		return ReasonNoRDMASubsystem, fmt.Sprintf("module %s is loaded but %s does not exist: the RDMA core (ib_core, ib_uverbs) is missing",
			module, rdmamap.RdmaClassDir)
	}
	return ReasonNotListed, fmt.Sprintf("module %s is loaded, but no RDMA device lists %s in its GID table "+
		"(is RoCE disabled on the port, or the interface in another namespace? `rdma link show` lists the ports)", module, netdev)
}

// LookupDevice describes port of the RDMA device dev, with the network
// interface it carries: the reverse of LookupNetdev. Port 0 means the
// device's first port.
func LookupDevice(dev string, port int) (Port, error) {
	ports := portNumbers(dev)
	if len(ports) == 0 {
		detail := fmt.Sprintf("no such device in %s", rdmamap.RdmaClassDir)
		if !exists(rdmamap.RdmaClassDir) {
			detail = fmt.Sprintf("this kernel has no RDMA devices at all (%s does not exist)", rdmamap.RdmaClassDir)
		} else if devs := rdmamap.GetRdmaDeviceList(); len(devs) > 0 {
			detail += " (devices: " + strings.Join(devs, ", ") + ")"
		}
		return Port{}, &NoDeviceError{Device: dev, Reason: ReasonNoSuchDevice, Detail: detail}
	}
	if port == 0 {
		port = ports[0]
	}
	if !slices.Contains(ports, port) {
		return Port{}, &NoDeviceError{Device: dev, Reason: ReasonNoSuchDevice,
			Detail: fmt.Sprintf("it has no port %d (ports: %v)", port, ports)}
	}
	return describePort(dev, port, "")
}

// Candidates lists the ports of every RDMA device, in name and port order.
// Those whose RawPacket is true can carry the link.
func Candidates() []Port {
	devs := rdmamap.GetRdmaDeviceList()
	slices.Sort(devs)
	var out []Port
	for _, dev := range devs {
		for _, p := range portNumbers(dev) {
			if port, err := describePort(dev, p, ""); err == nil {
				out = append(out, port)
			}
		}
	}
	return out
}

// firstCandidate is the port a Config naming none uses: the first with
// raw packet support.
func firstCandidate() (Port, error) {
	all := Candidates()
	for _, p := range all {
		if p.RawPacket() {
			return p, nil
		}
	}
	detail := "no RDMA device has an Ethernet port"
	switch {
	case !exists(rdmamap.RdmaClassDir):
		detail = fmt.Sprintf("this kernel has no RDMA devices at all (%s does not exist)", rdmamap.RdmaClassDir)
	case len(all) > 0:
		var ports []string
		for _, p := range all {
			ports = append(ports, p.String())
		}
		detail = "no port's driver is known to offer raw packet QPs (ports: " + strings.Join(ports, "; ") + ")"
	}
	return Port{}, &NoDeviceError{Reason: ReasonNoSuchDevice, Detail: detail}
}

// describePort fills a Port from sysfs; netdev is the interface if known.
func describePort(dev string, port int, netdev string) (Port, error) {
	pd := portDir(dev, port)
	p := Port{
		Device:      dev,
		Port:        port,
		Netdev:      netdev,
		LinkLayer:   readLine(filepath.Join(pd, "link_layer")),
		State:       portState(readLine(filepath.Join(pd, "state"))),
		CharDevices: rdmamap.GetRdmaCharDevices(dev),
	}
	if p.Netdev == "" {
		p.Netdev = portNetdev(dev, port)
	}
	if p.Netdev != "" {
		nd := filepath.Join(netDir(), p.Netdev)
		p.Driver = linkBase(filepath.Join(nd, "device", "driver"))
		p.MAC, _ = net.ParseMAC(readLine(filepath.Join(nd, "address")))
		p.MTU, _ = strconv.Atoi(readLine(filepath.Join(nd, "mtu")))
	}
	if p.Driver == "" {
		p.Driver = linkBase(filepath.Join(rdmamap.RdmaClassDir, dev, "device", "driver"))
	}
	p.Module = rdmaModules[p.Driver]
	if p.LinkLayer != "" && p.LinkLayer != "Ethernet" {
		return p, &NoDeviceError{Netdev: netdev, Device: dev, Driver: p.Driver, Reason: ReasonNotEthernet,
			Detail: fmt.Sprintf("%s port %d has link layer %s; raw Ethernet frames need an Ethernet (RoCE) port", dev, port, p.LinkLayer)}
	}
	return p, nil
}

// portNetdev finds the interface of a port: the one its GID table names,
// else the only interface of the device's parent.
func portNetdev(dev string, port int) string {
	if nds := gidNetdevs(dev, port); len(nds) > 0 {
		return nds[0]
	}
	ents, err := os.ReadDir(filepath.Join(rdmamap.RdmaClassDir, dev, "device", "net"))
	if err == nil && len(ents) == 1 {
		return ents[0].Name()
	}
	return ""
}

// gidNetdevs lists the distinct interfaces of a port's GID table, in GID
// index order.
func gidNetdevs(dev string, port int) []string {
	dir := filepath.Join(portDir(dev, port), rdmamap.RdmaGidAttrDir, rdmamap.RdmaGidAttrNdevDir)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	idx := make([]int, 0, len(ents))
	for _, e := range ents {
		if i, err := strconv.Atoi(e.Name()); err == nil {
			idx = append(idx, i)
		}
	}
	slices.Sort(idx)
	var out []string
	for _, i := range idx {
		// Unused GID entries fail to read (EINVAL): skip them.
		if nd := readLine(filepath.Join(dir, strconv.Itoa(i))); nd != "" && !slices.Contains(out, nd) {
			out = append(out, nd)
		}
	}
	return out
}

// portNumbers lists a device's ports, ascending.
func portNumbers(dev string) []int {
	var ports []int
	for _, s := range rdmamap.GetPorts(dev) {
		if n, err := strconv.Atoi(s); err == nil {
			ports = append(ports, n)
		}
	}
	slices.Sort(ports)
	return ports
}

// portState turns sysfs's "4: ACTIVE" into "ACTIVE".
func portState(s string) string {
	if _, name, ok := strings.Cut(s, ": "); ok {
		return name
	}
	return s
}

// readLine returns a sysfs attribute without its newline; "" if it cannot
// be read.
func readLine(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// linkBase returns the last element of a symbolic link's target, "" if path
// is not a link.
func linkBase(path string) string {
	t, err := os.Readlink(path)
	if err != nil {
		return ""
	}
	return filepath.Base(t)
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil || !errors.Is(err, fs.ErrNotExist)
}
