package afxdp

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/polarnet/polarnet/internal/netns"
	"github.com/polarnet/polarnet/internal/testenv"
)

// Addresses of the veth topology: the polarnet side stays in this process's
// namespace, the kernel peer sits in a namespace of its own.
var (
	kernel4 = netip.MustParseAddr("198.18.0.1")
	kernel6 = netip.MustParseAddr("fd00:198:18::1")
	stack4  = netip.MustParseAddr("198.18.0.2")
	stack6  = netip.MustParseAddr("fd00:198:18::2")
)

// vethOptions shape a veth pair.
type vethOptions struct {
	queues int // RX and TX queues of each end; 0: the kernel's default
	mtu    int // 0: 1500
	// noIPv6 turns IPv6 off in the peer's namespace and on the local end,
	// so that no router solicitation or the like crosses the pair.
	noIPv6 bool
}

// veth is a veth pair: local in this namespace, peer in ns.
type veth struct {
	ns          *netns.NS
	local, peer string
	peerMAC     net.HardwareAddr
}

// newVeth creates a veth pair, moves one end into a fresh namespace and
// brings both up; t's cleanup removes everything.
func newVeth(t testing.TB, opt vethOptions) *veth {
	t.Helper()
	ns := testenv.NewNS(t)
	v := &veth{ns: ns, local: netns.UniqueName("pnx"), peer: netns.UniqueName("pnx")}
	args := []string{"link", "add", "dev", v.local}
	if opt.queues > 0 {
		q := fmt.Sprint(opt.queues)
		args = append(args, "numtxqueues", q, "numrxqueues", q, "type", "veth", "peer", "name", v.peer, "numtxqueues", q, "numrxqueues", q)
	} else {
		args = append(args, "type", "veth", "peer", "name", v.peer)
	}
	run(t, "ip", args...)
	t.Cleanup(func() {
		if _, err := net.InterfaceByName(v.local); err == nil {
			exec.Command("ip", "link", "del", "dev", v.local).Run()
		}
	})
	mtu := opt.mtu
	if mtu == 0 {
		mtu = 1500
	}
	if opt.noIPv6 {
		require.NoError(t, ns.Do(func() error {
			for _, k := range []string{"all", "default"} {
				if err := os.WriteFile("/proc/sys/net/ipv6/conf/"+k+"/disable_ipv6", []byte("1"), 0); err != nil {
					return err
				}
			}
			return nil
		}))
		require.NoError(t, os.WriteFile("/proc/sys/net/ipv6/conf/"+v.local+"/disable_ipv6", []byte("1"), 0))
	}
	run(t, "ip", "link", "set", "dev", v.local, "mtu", fmt.Sprint(mtu))
	run(t, "ip", "link", "set", "dev", v.peer, "mtu", fmt.Sprint(mtu))
	require.NoError(t, ns.MoveLink(v.peer))
	run(t, "ip", "link", "set", "dev", v.local, "up")
	v.waitUp(t)
	require.NoError(t, ns.Do(func() error {
		ifi, err := net.InterfaceByName(v.peer)
		if err == nil {
			v.peerMAC = ifi.HardwareAddr
		}
		return err
	}))
	return v
}

// waitUp waits until the kernel has processed both ends' carrier change
// (linkwatch, which runs up to a second late): until then a device's
// queueing discipline is the no-op one, and it drops every frame sent.
func (v *veth) waitUp(t testing.TB) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		local, err := os.ReadFile("/sys/class/net/" + v.local + "/operstate")
		require.NoError(t, err)
		peer, err := v.ns.Exec("ip", "-o", "link", "show", "dev", v.peer)
		require.NoError(t, err)
		if strings.TrimSpace(string(local)) == "up" && strings.Contains(peer, "state UP") {
			return
		}
		require.True(t, time.Now().Before(deadline), "veth %s/%s not up: %s / %s", v.local, v.peer, local, peer)
	}
}

// addKernelAddrs gives the peer the kernel side's addresses.
func (v *veth) addKernelAddrs(t testing.TB) {
	t.Helper()
	require.NoError(t, v.ns.Configure(v.peer, v.mtu(t), netip.PrefixFrom(kernel4, 24), netip.PrefixFrom(kernel6, 64)))
}

func (v *veth) mtu(t testing.TB) int {
	ifi, err := net.InterfaceByName(v.local)
	require.NoError(t, err)
	return ifi.MTU
}

// offloads returns the peer's ethtool features that matter here, for the
// log: CI machines may have no ethtool, and the tests that keep the peer's
// offloads on check their effect (partial checksums) instead.
func (v *veth) offloads(t testing.TB) string {
	if _, err := exec.LookPath("ethtool"); err != nil {
		return "unknown (no ethtool)"
	}
	out, err := v.ns.Exec("ethtool", "-k", v.peer)
	require.NoError(t, err)
	var on []string
	for _, l := range strings.Split(out, "\n") {
		for _, f := range []string{"tx-checksumming:", "tcp-segmentation-offload:", "generic-segmentation-offload:"} {
			if strings.HasPrefix(l, f) {
				on = append(on, strings.TrimSpace(l))
			}
		}
	}
	return strings.Join(on, ", ")
}

func run(t testing.TB, name string, args ...string) {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	require.NoError(t, err, "%s %s: %s", name, strings.Join(args, " "), out)
}

// openLink opens a link on the local end with t's cleanup closing it.
func openLink(t testing.TB, cfg Config, hooks testHooks) *Link {
	t.Helper()
	l, err := newLink(cfg, hooks)
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	return l
}
