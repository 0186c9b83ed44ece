//go:build dpdk && linux && cgo

package dpdk

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/polarnet/polarnet/internal/netns"
	"github.com/polarnet/polarnet/internal/testenv"
)

// helperEnv makes the test binary run a helper process (see helper_test.go)
// instead of the tests.
const helperEnv = "POLARNET_DPDK_HELPER"

func TestMain(m *testing.M) {
	if role := os.Getenv(helperEnv); role != "" {
		os.Exit(runHelper(role))
	}
	os.Exit(m.Run())
}

// Addresses of the tests' topologies: a subnet of 198.18.0.0/15 no other
// suite uses (the conformance suite's defaults are 198.18.0.0/24,
// reliability's 198.18.100.0/24), so captures and logs tell them apart.
var (
	kernel4 = netip.MustParseAddr("198.18.16.1")
	kernel6 = netip.MustParseAddr("fd00:198:18:16::1")
	stack4  = netip.MustParseAddr("198.18.16.2")
	stack6  = netip.MustParseAddr("fd00:198:18:16::2")
)

// testEAL is the EAL configuration of test processes: in memory, on
// hugepages when enough are free, else on ordinary pages.
func testEAL() EALConfig {
	c := EALConfig{LogLevel: "*:error"}
	if free, err := freeHugepageBytes(); err != nil || free < 256<<20 {
		c.NoHuge, c.MemoryMB = true, 512
	}
	return c
}

var (
	ealOnce sync.Once
	ealErr  error
)

// requireEAL skips or fails t without root, and initialises EAL once per
// test process.
func requireEAL(t testing.TB) {
	t.Helper()
	testenv.RequirePriv(t)
	ealOnce.Do(func() { ealErr = InitEAL(testEAL()) })
	require.NoError(t, ealErr)
}

// vdevIDs numbers the tests' virtual devices: a name must be unique while
// its device exists.
var vdevIDs atomic.Uint64

func vdevName(driver string) string { return fmt.Sprintf("%s%d", driver, vdevIDs.Add(1)) }

// openLink opens a link and closes it at cleanup.
func openLink(t testing.TB, cfg Config) Link {
	t.Helper()
	requireEAL(t)
	l, err := New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	return l
}

// vethTopo is a veth pair: end A in this namespace, where net_af_packet
// drives it (no addresses, IPv6 off, so the kernel here stays quiet), and
// end B in namespace NS with the kernel peer's addresses.
type vethTopo struct {
	A, B string
	NS   *netns.NS
}

// newVeth builds a vethTopo of the given MTU.
func newVeth(t testing.TB, mtu int) *vethTopo {
	t.Helper()
	testenv.RequirePriv(t)
	ns := testenv.NewNS(t)
	v := &vethTopo{A: netns.UniqueName("pnda"), B: netns.UniqueName("pndb"), NS: ns}
	testenv.Veth(t, v.A, v.B)
	writeSysctl(t, "net/ipv6/conf/"+v.A+"/disable_ipv6", "1")
	require.NoError(t, ns.MoveLink(v.B))
	require.NoError(t, ns.Configure(v.B, mtu, netip.PrefixFrom(kernel4, 24), netip.PrefixFrom(kernel6, 64)))
	out, err := ns.Exec("ip", "link", "set", "dev", v.B, "gso_max_segs", "1")
	require.NoError(t, err, out)
	if mtu != 1500 {
		out, err := exec.Command("ip", "link", "set", "dev", v.A, "mtu", fmt.Sprint(mtu)).CombinedOutput()
		require.NoError(t, err, string(out))
	}
	return v
}

func writeSysctl(t testing.TB, key, value string) {
	t.Helper()
	require.NoError(t, os.WriteFile("/proc/sys/"+key, []byte(value), 0))
}

// afPacketDevice is the device spec of net_af_packet on ifname.
func afPacketDevice(ifname string, args string) string {
	d := vdevName("net_af_packet") + ",iface=" + ifname
	if args != "" {
		d += "," + args
	}
	return d
}

// waitUp waits for l's link to be up.
func waitUp(t testing.TB, l Link) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, l.WaitUp(ctx))
}

// tapTopo is a net_tap link whose kernel-side device lives in namespace NS.
type tapTopo struct {
	NS    *netns.NS
	Iface string
	Link  Link
}

// newTapTopo creates a net_tap device inside a fresh namespace (with IPv6
// off unless ipv6, so that no router solicitation reaches the link suite)
// and opens a link on it; the link is closed at cleanup, before the
// namespace goes.
func newTapTopo(t testing.TB, cfg Config, ipv6 bool) *tapTopo {
	t.Helper()
	requireEAL(t)
	ns := testenv.NewNS(t)
	require.NoError(t, ns.Do(func() error {
		if ipv6 {
			return nil
		}
		for _, k := range []string{"all", "default"} {
			if err := os.WriteFile("/proc/sys/net/ipv6/conf/"+k+"/disable_ipv6", []byte("1"), 0); err != nil {
				return err
			}
		}
		return nil
	}))
	tt := &tapTopo{NS: ns, Iface: netns.UniqueName("pndt")}
	if cfg.Device == "" {
		cfg.Device = vdevName("net_tap") + ",iface=" + tt.Iface
	}
	require.NoError(t, ns.Do(func() (err error) {
		tt.Link, err = New(cfg)
		return err
	}))
	t.Cleanup(func() { tt.Link.Close() })
	out, err := ns.Exec("ip", "link", "set", "dev", tt.Iface, "txqueuelen", "4096", "up")
	require.NoError(t, err, out)
	return tt
}
