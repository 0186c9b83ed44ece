package doctor

import (
	"bytes"
	"compress/gzip"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeRoot builds a filesystem root from path -> content.
func fakeRoot(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for p, c := range files {
		full := filepath.Join(root, p)
		require.NoError(t, os.MkdirAll(filepath.Dir(full), 0o755))
		require.NoError(t, os.WriteFile(full, []byte(c), 0o644))
	}
	return root
}

// fakeRun answers commands from a table; missing ones fail.
func fakeRun(out map[string]string) func(string, ...string) (string, error) {
	return func(name string, args ...string) (string, error) {
		key := strings.Join(append([]string{name}, args...), " ")
		if v, ok := out[key]; ok {
			return v, nil
		}
		return "", errors.New("exec: " + name + ": not found")
	}
}

const rootStatus = "Name:\tpolarnet\nCapEff:\t000001ffffffffff\n"

func find(t *testing.T, r Report, name string) Check {
	t.Helper()
	for _, c := range r.Checks {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no check %q in %+v", name, r.Checks)
	return Check{}
}

func runOne(t *testing.T, env *Env, link string) Report {
	t.Helper()
	reports, err := Run(env, link, Options{})
	require.NoError(t, err)
	require.Len(t, reports, 1)
	return reports[0]
}

func TestDPDKWithHugepagesAndLibraries(t *testing.T) {
	root := fakeRoot(t, map[string]string{
		"proc/self/status": rootStatus,
		"sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages":    "512\n",
		"sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages":  "500\n",
		"sys/kernel/mm/hugepages/hugepages-1048576kB/nr_hugepages": "0\n",
		"proc/mounts": "sysfs /sys sysfs rw 0 0\nnodev /dev/hugepages hugetlbfs rw,relatime,pagesize=2M 0 0\n",
		"sys/bus/pci/drivers/vfio-pci/0000:00:05.0/vendor": "0x8086",
		"sys/kernel/iommu_groups/0/type":                   "DMA",
	})
	env := &Env{Root: root, Run: fakeRun(map[string]string{"pkg-config --modversion libdpdk": "22.11.11\n"})}
	r := runOne(t, env, "dpdk")
	assert.True(t, r.Ready())
	assert.Equal(t, OK, find(t, r, "DPDK libraries").Status)
	assert.Contains(t, find(t, r, "DPDK libraries").Detail, "22.11.11")
	hp := find(t, r, "hugepages")
	assert.Equal(t, OK, hp.Status, hp.Detail)
	assert.Contains(t, hp.Detail, "512 x 2048kB (500 free)")
	assert.Contains(t, hp.Detail, "/dev/hugepages")
	assert.Equal(t, OK, find(t, r, "vfio-pci").Status)
	assert.Contains(t, find(t, r, "vfio-pci").Detail, "0000:00:05.0")
	assert.Equal(t, OK, find(t, r, "IOMMU").Status)
}

func TestDPDKWithoutHugepagesOrLibraries(t *testing.T) {
	root := fakeRoot(t, map[string]string{
		"proc/self/status": rootStatus,
		"sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages": "0\n",
		"proc/mounts": "sysfs /sys sysfs rw 0 0\n",
	})
	env := &Env{Root: root, Run: fakeRun(nil)}
	r := runOne(t, env, "dpdk")
	assert.False(t, r.Ready(), "no libraries: the link cannot run")
	libs := find(t, r, "DPDK libraries")
	assert.Equal(t, Fail, libs.Status)
	assert.Equal(t, "apt-get install -y libdpdk-dev dpdk-dev pkg-config", libs.Fix)
	hp := find(t, r, "hugepages")
	assert.Equal(t, Warn, hp.Status)
	assert.Equal(t, "none reserved, hugetlbfs not mounted", hp.Detail)
	assert.Contains(t, hp.Fix, "echo 512 > /sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages")
	assert.Contains(t, hp.Fix, "mount -t hugetlbfs nodev /dev/hugepages")
	assert.Equal(t, Warn, find(t, r, "vfio-pci").Status)
	assert.Equal(t, Warn, find(t, r, "IOMMU").Status)
}

func TestDPDKReservedButNotMounted(t *testing.T) {
	root := fakeRoot(t, map[string]string{
		"proc/self/status": rootStatus,
		"sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages":   "64\n",
		"sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages": "64\n",
		"proc/mounts": "sysfs /sys sysfs rw 0 0\n",
	})
	env := &Env{Root: root, Run: fakeRun(map[string]string{"ldconfig -p": "\tlibrte_eal.so.23 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/librte_eal.so.23\n"})}
	r := runOne(t, env, "dpdk")
	hp := find(t, r, "hugepages")
	assert.Equal(t, Warn, hp.Status)
	assert.Contains(t, hp.Detail, "reserved 64 x 2048kB (64 free), but hugetlbfs is not mounted")
	assert.Equal(t, "mkdir -p /dev/hugepages && mount -t hugetlbfs nodev /dev/hugepages\n(or run EAL without hugepages: --no-huge -m 256, slower)", hp.Fix)
	libs := find(t, r, "DPDK libraries")
	assert.Equal(t, Fail, libs.Status, "runtime libraries alone cannot build the cgo link")
	assert.Contains(t, libs.Detail, "no libdpdk.pc")
}

func TestRDMAWithoutDevices(t *testing.T) {
	env := &Env{Root: fakeRoot(t, map[string]string{"proc/self/status": rootStatus}), RDMADevices: func() []string { return nil }, Run: fakeRun(nil)}
	r := runOne(t, env, "rdma")
	assert.False(t, r.Ready())
	d := find(t, r, "RDMA devices")
	assert.Equal(t, Fail, d.Status)
	assert.Contains(t, d.Detail, "no RDMA device")
	assert.Contains(t, d.Detail, "ib_core")
	assert.Contains(t, d.Fix, "rdma link add rxe0 type rxe netdev")
	assert.Equal(t, Fail, find(t, r, "libibverbs").Status)
}

func TestRDMAWithDevice(t *testing.T) {
	env := &Env{
		Root: fakeRoot(t, map[string]string{
			"proc/self/status":                      rootStatus,
			"sys/class/infiniband/mlx5_0/node_type": "1: CA",
			"sys/module/ib_core/refcnt":             "3",
			"dev/infiniband/uverbs0":                "",
		}),
		RDMADevices: func() []string { return []string{"mlx5_0"} },
		Run:         fakeRun(map[string]string{"ldconfig -p": "\tlibibverbs.so.1 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libibverbs.so.1\n"}),
	}
	r := runOne(t, env, "rdma")
	assert.True(t, r.Ready(), "%+v", r.Checks)
	assert.Equal(t, "mlx5_0", find(t, r, "RDMA devices").Detail)
}

func TestPrivilegesWithoutCapabilities(t *testing.T) {
	env := &Env{Root: fakeRoot(t, map[string]string{"proc/self/status": "CapEff:\t0000000000000000\n"}), Euid: 1000}
	r := runOne(t, env, "tap")
	p := find(t, r, "privileges")
	assert.Equal(t, Fail, p.Status)
	assert.Equal(t, "uid 1000 lacks CAP_NET_ADMIN", p.Detail)
	assert.Equal(t, "run as root, or grant the binary its capabilities: setcap cap_net_admin+ep ./yourprogram", p.Fix)
	assert.Equal(t, Fail, find(t, r, "/dev/net/tun").Status, "the fake root has no /dev/net/tun")
	assert.False(t, r.Ready())
}

func TestMemlockAndCPU(t *testing.T) {
	env := &Env{
		Root: fakeRoot(t, map[string]string{
			"proc/self/status": "CapEff:\t0000000000003000\n", // NET_ADMIN, NET_RAW, no IPC_LOCK
			"sys/devices/system/cpu/cpu0/cpufreq/scaling_governor": "powersave\n",
			"sys/devices/system/cpu/cpu1/cpufreq/scaling_governor": "performance\n",
			"sys/devices/system/cpu/isolated":                      "1\n",
		}),
		Euid:    1000,
		Memlock: func() (uint64, error) { return 8 << 20, nil },
	}
	r := runOne(t, env, "afxdp")
	m := find(t, r, "memlock")
	assert.Equal(t, Fail, m.Status)
	assert.Equal(t, "RLIMIT_MEMLOCK 8 MiB is below the 16 MiB a 16 MiB UMEM per queue needs", m.Detail)
	g := find(t, r, "CPU governor")
	assert.Equal(t, Warn, g.Status)
	assert.Contains(t, g.Detail, "performance on 1, powersave on 1")
	assert.Equal(t, OK, find(t, r, "isolated cores").Status)
	assert.Contains(t, find(t, r, "privileges").Detail, "CAP_BPF or CAP_SYS_ADMIN")
}

// TestShards: doctor says what a shard per CPU takes on each link.
func TestShards(t *testing.T) {
	root := fakeRoot(t, map[string]string{"proc/self/status": rootStatus})
	env := &Env{Root: root, CPUs: 4, Run: fakeRun(nil), RDMADevices: func() []string { return nil },
		Iface: func(name string) (IfaceInfo, error) { return IfaceInfo{Name: name, RxQueues: 2}, nil }}
	shards := func(link string, opt Options) Check {
		reports, err := Run(env, link, opt)
		require.NoError(t, err)
		require.Len(t, reports, 1)
		c := find(t, reports[0], "shards")
		assert.Equal(t, Info, c.Status)
		return c
	}
	assert.Equal(t, "4 CPUs for this process: a TAP device gets 4 queues by default, a shard on each (POLARNET_QUEUES sets another number)",
		shards("tap", Options{}).Detail)
	assert.Equal(t, "4 CPUs for this process: a socket and shard on each of the interface's RX queues, up to 4 by default",
		shards("afxdp", Options{}).Detail)
	assert.Equal(t, "4 CPUs for this process: 2 shards on eth1, which has 2 RX queues (ethtool -L eth1 combined 4 for one per CPU)",
		shards("afxdp", Options{Iface: "eth1"}).Detail)
	assert.Equal(t, "4 CPUs for this process: 1 queue pair and shard unless POLARNET_QUEUES (Config.Queues) asks for up to 4",
		shards("dpdk", Options{}).Detail)

	env.CPUs = 0
	reports, err := Run(env, "tap", Options{})
	require.NoError(t, err)
	for _, c := range reports[0].Checks {
		assert.NotEqual(t, "shards", c.Name, "no CPU count, no shards check")
	}
}

func TestUnknownLink(t *testing.T) {
	_, err := Run(&Env{}, "ethernet", Options{})
	require.Error(t, err)
}

func TestPrint(t *testing.T) {
	r := Report{Link: "dpdk"}
	r.add("hugepages", Warn, "none reserved", "line one\nline two")
	var b bytes.Buffer
	r.Print(&b)
	assert.Equal(t, "polarnet doctor dpdk\n"+
		"  warn  hugepages        none reserved\n"+
		"        fix:             line one\n"+
		"                         line two\n"+
		"  => dpdk: ready\n", b.String())
}

// The cores suggested for isolation exist on the host: the upper half of
// the online CPUs, none on a single CPU.
func TestIsolateExample(t *testing.T) {
	for online, want := range map[string]string{
		"0-1\n":         "1",
		"0-3\n":         "2-3",
		"0-7\n":         "4-7",
		"0-2,4-6\n":     "4-6",
		"0,2,4,6\n":     "4,6",
		"0\n":           "",
		"garbage\n":     "2-3",
		"0-63\n":        "32-63",
		"0-1,8-9,12\n":  "9,12",
		"3-1\n":         "2-3",
		"0-1,3\n":       "3",
		" 0-5 \n":       "3-5",
		"0-2\n":         "2",
		"1-2\n":         "2",
		"0-1,4-5\n":     "4-5",
		"0,1,2,3,4,5\n": "3-5",
	} {
		env := &Env{Root: fakeRoot(t, map[string]string{"sys/devices/system/cpu/online": online})}
		assert.Equal(t, want, isolateExample(env), "online %q", online)
	}
	assert.Equal(t, "2-3", isolateExample(&Env{Root: t.TempDir()}), "unknown: the 4-CPU example")

	r := runOne(t, &Env{Root: fakeRoot(t, map[string]string{"proc/self/status": rootStatus, "sys/devices/system/cpu/online": "0-1\n"})}, "tap")
	assert.Equal(t, "none: fine for adaptive polling; for PollBusy, isolate cores with isolcpus=1 nohz_full=1 rcu_nocbs=1 on the kernel command line and set Config.CPUs",
		find(t, r, "isolated cores").Detail)
	r = runOne(t, &Env{Root: fakeRoot(t, map[string]string{"proc/self/status": rootStatus, "sys/devices/system/cpu/online": "0\n"})}, "tap")
	assert.Contains(t, find(t, r, "isolated cores").Detail, "one CPU online: nothing to isolate")
}

// Hugepages reserved in a mounted hugetlbfs are OK; a mount without any
// reserved is a warning whose fix reserves them, and the verdict still
// follows the libraries alone.
func TestDPDKMountedButNoneReserved(t *testing.T) {
	root := fakeRoot(t, map[string]string{
		"proc/self/status": rootStatus,
		"sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages":   "0\n",
		"sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages": "0\n",
		"proc/mounts": "nodev /dev/hugepages hugetlbfs rw,relatime,pagesize=2M 0 0\n",
	})
	env := &Env{Root: root, Run: fakeRun(map[string]string{"pkg-config --modversion libdpdk": "22.11.11\n"})}
	r := runOne(t, env, "dpdk")
	hp := find(t, r, "hugepages")
	assert.Equal(t, Warn, hp.Status)
	assert.Equal(t, "none reserved (hugetlbfs mounted on /dev/hugepages)", hp.Detail)
	assert.Equal(t, "echo 512 > /sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages\n(or run EAL without hugepages: --no-huge -m 256, slower)", hp.Fix)
	assert.True(t, r.Ready(), "libraries present: ready, hugepages or not (EAL runs with --no-huge)")
}

// Hugepages reserved and mounted but all in use: the DPDK link would refuse
// to start EAL (dpdk.ErrNoHugepages), so it is a warning, not OK.
func TestDPDKHugepagesAllInUse(t *testing.T) {
	root := fakeRoot(t, map[string]string{
		"proc/self/status": rootStatus,
		"sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages":   "512\n",
		"sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages": "0\n",
		"proc/mounts": "nodev /dev/hugepages hugetlbfs rw,relatime,pagesize=2M 0 0\n",
	})
	env := &Env{Root: root, Run: fakeRun(map[string]string{"pkg-config --modversion libdpdk": "22.11.11\n"})}
	hp := find(t, runOne(t, env, "dpdk"), "hugepages")
	assert.Equal(t, Warn, hp.Status)
	assert.Equal(t, "reserved 512 x 2048kB (0 free), but none is free: other programs hold them all", hp.Detail)
	assert.Contains(t, hp.Fix, "raise nr_hugepages")
	assert.Contains(t, hp.Fix, "--no-huge")
	assert.NotContains(t, hp.Fix, "mount -t", "hugetlbfs is mounted")
}

// A kernel built without InfiniBand (as this project's VMs are) gets a
// definite explanation, not a modprobe that cannot work.
func TestRDMAKernelWithoutInfiniBand(t *testing.T) {
	var cfg bytes.Buffer
	z := gzip.NewWriter(&cfg)
	_, err := z.Write([]byte("CONFIG_NET=y\n# CONFIG_MODULES is not set\n# CONFIG_INFINIBAND is not set\n"))
	require.NoError(t, err)
	require.NoError(t, z.Close())
	root := fakeRoot(t, map[string]string{"proc/self/status": rootStatus, "proc/config.gz": cfg.String()})
	r := runOne(t, &Env{Root: root, RDMADevices: func() []string { return nil }, Run: fakeRun(nil)}, "rdma")
	assert.False(t, r.Ready())
	d := find(t, r, "RDMA devices")
	assert.Equal(t, Fail, d.Status)
	assert.Equal(t, "no RDMA device: /sys/class/infiniband does not exist; this kernel is built without RDMA support (CONFIG_INFINIBAND is not set in /proc/config.gz): no driver can load here", d.Detail)
	assert.Contains(t, d.Fix, "boot a kernel built with CONFIG_INFINIBAND")
	assert.NotContains(t, d.Fix, "modprobe")
}
