package rdma

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/Mellanox/rdmamap"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/polarnet/polarnet/link"
)

// TestDiscoveryRealSysfs looks up every interface of this host. Where the
// host has no RDMA device (the CI machines: no InfiniBand in the kernel),
// each lookup must fail with an explanation; where it has, the ports found
// must describe themselves.
func TestDiscoveryRealSysfs(t *testing.T) {
	ents, err := os.ReadDir("/sys/class/net")
	require.NoError(t, err)
	hasRDMA := len(rdmamap.GetRdmaDeviceList()) > 0
	for _, e := range ents {
		port, err := LookupNetdev(e.Name())
		if err == nil {
			require.True(t, hasRDMA, "%s: found %v on a host without RDMA devices", e.Name(), port)
			t.Logf("%s: %v (raw packet: %t)", e.Name(), port, port.RawPacket())
			continue
		}
		var nd *NoDeviceError
		require.ErrorAs(t, err, &nd, e.Name())
		assert.ErrorIs(t, err, link.ErrNotSupported)
		assert.NotEmpty(t, nd.Detail)
		t.Logf("%v", err)
		if !hasRDMA && nd.Reason != ReasonVirtual && nd.Reason != ReasonNotEthernet && nd.Reason != ReasonNoNetdev { // interfaces of other tests come and go
			assert.Contains(t, err.Error(), "/sys/class/infiniband does not exist", "%s: the missing RDMA subsystem is named", e.Name())
		}
	}
	_, err = LookupNetdev("lo")
	requireReason(t, err, ReasonVirtual)
	_, err = LookupNetdev("pn-no-such-if")
	requireReason(t, err, ReasonNoNetdev)
	_, err = LookupNetdev("../lo")
	requireReason(t, err, ReasonNoNetdev)
	if !hasRDMA {
		assert.Empty(t, Candidates())
		_, err = LookupDevice("mlx5_0", 1)
		requireReason(t, err, ReasonNoSuchDevice)
		assert.ErrorContains(t, err, "this kernel has no RDMA devices at all")
	}
}

func requireReason(t *testing.T, err error, want NoDeviceReason) *NoDeviceError {
	t.Helper()
	var nd *NoDeviceError
	require.True(t, errors.As(err, &nd), "want a *NoDeviceError, got %v", err)
	require.Equal(t, want, nd.Reason, "%v", err)
	return nd
}

// fakeSysfs builds a sysfs tree under a temporary directory and points
// rdmamap (and so this package) at it until the test ends. Entries of
// /sys/class/* are symbolic links into /sys/devices, as in the kernel's.
type fakeSysfs struct {
	t    *testing.T
	root string
}

func newFakeSysfs(t *testing.T, withRDMA bool) *fakeSysfs {
	root := t.TempDir()
	vars := []*string{&rdmamap.RdmaClassDir, &rdmamap.RdmaIbUcmDir, &rdmamap.RdmaUmadDir, &rdmamap.RdmaUverbsDir, &rdmamap.PciDevDir, &rdmamap.AuxDevDir}
	saved := make([]string, len(vars))
	for i, v := range vars {
		saved[i] = *v
		*v = filepath.Join(root, (*v)[len("/sys/"):])
	}
	t.Cleanup(func() {
		for i, v := range vars {
			*v = saved[i]
		}
	})
	s := &fakeSysfs{t, root}
	s.mkdir("class/net")
	s.mkdir("module")
	s.mkdir("bus/pci/devices")
	if withRDMA {
		s.mkdir("class/infiniband")
		s.mkdir("class/infiniband_verbs")
	}
	return s
}

func (s *fakeSysfs) path(rel string) string { return filepath.Join(s.root, rel) }

func (s *fakeSysfs) mkdir(rel string) { require.NoError(s.t, os.MkdirAll(s.path(rel), 0o755)) }

func (s *fakeSysfs) write(rel, content string) {
	s.mkdir(filepath.Dir(rel))
	require.NoError(s.t, os.WriteFile(s.path(rel), []byte(content+"\n"), 0o644))
}

func (s *fakeSysfs) link(rel, target string) {
	s.mkdir(filepath.Dir(rel))
	require.NoError(s.t, os.Symlink(s.path(target), s.path(rel)))
}

// nic adds a PCI function with driver and network interface netdev.
func (s *fakeSysfs) nic(pci, driver, netdev, mac string) {
	dev := "devices/pci0000:00/" + pci
	s.mkdir(dev)
	s.mkdir("bus/pci/drivers/" + driver)
	s.link(dev+"/driver", "bus/pci/drivers/"+driver)
	s.link("bus/pci/devices/"+pci, dev)
	s.netdev(netdev, dev, mac)
}

// netdev adds a network interface, of parent device dev ("" for a virtual
// one).
func (s *fakeSysfs) netdev(name, dev, mac string) {
	nd := "devices/virtual/net/" + name
	if dev != "" {
		nd = dev + "/net/" + name
		s.link(nd+"/device", dev)
	}
	s.write(nd+"/address", mac)
	s.write(nd+"/mtu", "9000")
	s.write(nd+"/type", "1")
	s.link("class/net/"+name, nd)
}

// rdmaDev adds RDMA device name on PCI function pci with one port per
// netdev ("" leaves a port's GID table empty) and a uverbs device.
func (s *fakeSysfs) rdmaDev(name, pci, linkLayer string, uverbs string, netdevs ...string) {
	dev := "devices/pci0000:00/" + pci + "/infiniband/" + name
	s.link(dev+"/device", "devices/pci0000:00/"+pci)
	for i, nd := range netdevs {
		port := dev + "/ports/" + string(rune('1'+i))
		s.write(port+"/link_layer", linkLayer)
		s.write(port+"/state", "4: ACTIVE")
		s.mkdir(port + "/gid_attrs/ndevs")
		if nd != "" {
			s.write(port+"/gid_attrs/ndevs/0", nd)
			s.write(port+"/gid_attrs/ndevs/1", nd)
		}
	}
	s.link("class/infiniband/"+name, dev)
	s.write("devices/virtual/infiniband_verbs/"+uverbs+"/ibdev", name)
	s.link("class/infiniband_verbs/"+uverbs, "devices/virtual/infiniband_verbs/"+uverbs)
}

func TestDiscoveryFakeSysfs(t *testing.T) {
	s := newFakeSysfs(t, true)
	s.nic("0000:05:00.0", "mlx5_core", "enp5s0f0np0", "0c:42:a1:00:00:01")
	s.nic("0000:05:00.1", "mlx5_core", "enp5s0f1np1", "0c:42:a1:00:00:02")
	s.nic("0000:06:00.0", "mlx5_core", "ib0", "80:00:00:00:00:00")
	s.nic("0000:07:00.0", "bnxt_en", "eno1", "00:10:18:00:00:01")
	s.nic("0000:08:00.0", "virtio_net", "eth0", "02:fc:00:00:00:01")
	s.mkdir("module/mlx5_ib")
	s.mkdir("module/bnxt_re")
	s.rdmaDev("mlx5_0", "0000:05:00.0", "Ethernet", "uverbs0", "enp5s0f0np0")
	s.rdmaDev("mlx5_1", "0000:05:00.1", "Ethernet", "uverbs1", "") // no GID yet: found by its PCI function
	s.rdmaDev("mlx5_2", "0000:06:00.0", "InfiniBand", "uverbs2", "ib0")
	s.netdev("veth0", "", "02:00:00:00:00:09")

	p, err := LookupNetdev("enp5s0f0np0")
	require.NoError(t, err)
	assert.Equal(t, "mlx5_0", p.Device)
	assert.Equal(t, 1, p.Port)
	assert.Equal(t, "mlx5_core", p.Driver)
	assert.Equal(t, "mlx5_ib", p.Module)
	assert.Equal(t, "Ethernet", p.LinkLayer)
	assert.Equal(t, "ACTIVE", p.State)
	assert.Equal(t, "0c:42:a1:00:00:01", p.MAC.String())
	assert.Equal(t, 9000, p.MTU)
	assert.Contains(t, p.CharDevices, "/dev/infiniband/uverbs0")
	assert.True(t, p.RawPacket())

	p, err = LookupNetdev("enp5s0f1np1")
	require.NoError(t, err, "found through its PCI function")
	assert.Equal(t, "mlx5_1", p.Device)

	// The reverse.
	p, err = LookupDevice("mlx5_0", 0)
	require.NoError(t, err)
	assert.Equal(t, "enp5s0f0np0", p.Netdev)
	p, err = LookupDevice("mlx5_1", 1)
	require.NoError(t, err)
	assert.Equal(t, "enp5s0f1np1", p.Netdev, "the only interface of the device's parent")
	_, err = LookupDevice("mlx5_0", 2)
	requireReason(t, err, ReasonNoSuchDevice)
	_, err = LookupDevice("mlx5_9", 0)
	nd := requireReason(t, err, ReasonNoSuchDevice)
	assert.Contains(t, nd.Detail, "devices: ")

	p, err = firstCandidate()
	require.NoError(t, err)
	assert.Equal(t, "mlx5_0", p.Device, "the default port")

	c := Candidates()
	require.Len(t, c, 2, "the InfiniBand port is no candidate")
	assert.Equal(t, "mlx5_0", c[0].Device)
	assert.Equal(t, "mlx5_1", c[1].Device)

	_, err = LookupNetdev("ib0")
	requireReason(t, err, ReasonNotEthernet)
	_, err = LookupNetdev("eth0")
	nd = requireReason(t, err, ReasonDriverNotRDMA)
	assert.Equal(t, "virtio_net", nd.Driver)
	_, err = LookupNetdev("veth0")
	requireReason(t, err, ReasonVirtual)
	_, err = LookupNetdev("eno1")
	nd = requireReason(t, err, ReasonNotListed)
	assert.Contains(t, nd.Detail, "bnxt_re is loaded")
	assert.ErrorIs(t, err, link.ErrNotSupported)
}

func TestDiscoveryFakeSysfsWithoutRDMA(t *testing.T) {
	s := newFakeSysfs(t, false)
	s.nic("0000:05:00.0", "mlx5_core", "enp5s0f0np0", "0c:42:a1:00:00:01")
	s.nic("0000:08:00.0", "virtio_net", "eth0", "02:fc:00:00:00:01")
	_, err := LookupNetdev("enp5s0f0np0")
	nd := requireReason(t, err, ReasonModuleNotLoaded)
	assert.Contains(t, nd.Detail, "modprobe mlx5_ib")
	assert.Contains(t, err.Error(), "no RDMA devices at all")

	s.mkdir("module/mlx5_ib")
	_, err = LookupNetdev("enp5s0f0np0")
	requireReason(t, err, ReasonNoRDMASubsystem)

	_, err = LookupNetdev("eth0")
	requireReason(t, err, ReasonDriverNotRDMA)
	assert.Contains(t, err.Error(), "driver virtio_net has no RDMA support")
	assert.Empty(t, Candidates())
	_, err = firstCandidate()
	assert.ErrorContains(t, err, "no RDMA port with raw packet support on this host: this kernel has no RDMA devices at all")
	assert.ErrorIs(t, err, link.ErrNotSupported)
}
