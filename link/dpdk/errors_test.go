//go:build dpdk && linux && cgo

package dpdk

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/polarnet/polarnet/internal/netns"
	"github.com/polarnet/polarnet/internal/testenv"
	"github.com/polarnet/polarnet/link"
)

// ealResult is what the "eal" helper reports of one InitEAL call.
type ealResult struct {
	Err         string
	NoHugepages bool
	Unsupported bool
	EAL         bool
	Errno       int
}

func describe(err error) ealResult {
	r := ealResult{}
	if err == nil {
		return r
	}
	r.Err = err.Error()
	r.NoHugepages = errors.Is(err, ErrNoHugepages)
	r.Unsupported = errors.Is(err, link.ErrNotSupported)
	var e *EALError
	if errors.As(err, &e) {
		r.EAL, r.Errno = true, int(e.Errno)
	}
	return r
}

// ealCase runs InitEAL twice as PNH_EAL_CASE says, in a fresh process (EAL
// initialises once per process), and prints the results as JSON.
func ealCase(name string) int {
	var first, second EALConfig
	second = EALConfig{NoHuge: true, LogLevel: "*:error"}
	switch name {
	case "nohugepages":
		dir, _ := os.MkdirTemp("", "pnhuge")
		defer os.RemoveAll(dir)
		hugepagesDir = dir
	case "hugedir":
		dir, _ := os.MkdirTemp("", "pnhuge")
		defer os.RemoveAll(dir)
		first.HugeDir = dir
	case "badargs":
		first.Extra = []string{"--no-such-option"}
	case "badlcores":
		first.Lcores = "200"
	default:
		return 2
	}
	first.LogLevel = "*:error"
	out := []ealResult{describe(InitEAL(first)), describe(InitEAL(second))}
	// EAL prints its usage to stdout on bad arguments: mark the result.
	b, _ := json.Marshal(out)
	fmt.Printf("\nRESULT %s\n", b)
	return 0
}

func runEALCase(t *testing.T, name string) []ealResult {
	t.Helper()
	testenv.RequirePriv(t)
	exe, err := os.Executable()
	require.NoError(t, err)
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"=eal", "PNH_EAL_CASE="+name)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "the helper must exit cleanly, never crash; stderr: %s", stderr.String())
	_, result, ok := strings.Cut(string(out), "\nRESULT ")
	require.True(t, ok, "no result from the helper: %s", out)
	result, _, _ = strings.Cut(result, "\n")
	var res []ealResult
	require.NoError(t, json.Unmarshal([]byte(result), &res), result)
	require.Len(t, res, 2)
	return res
}

// TestNoHugepages: without free hugepages InitEAL fails before touching
// EAL, with an error saying what to do, so that the process can still
// initialise EAL without hugepages.
func TestNoHugepages(t *testing.T) {
	res := runEALCase(t, "nohugepages")
	assert.True(t, res[0].NoHugepages, res[0].Err)
	assert.True(t, res[0].Unsupported, res[0].Err)
	assert.Contains(t, res[0].Err, "nr_hugepages")
	assert.Contains(t, res[0].Err, "EALConfig.NoHuge")
	assert.Empty(t, res[1].Err, "EAL can start on ordinary pages after the check failed")

	res = runEALCase(t, "hugedir")
	assert.True(t, res[0].NoHugepages, res[0].Err)
	assert.Contains(t, res[0].Err, "not a hugetlbfs mount")
	assert.Empty(t, res[1].Err)
}

// TestEALFailure: rte_eal_init's failure is an *EALError with rte_errno,
// not a crash, and EAL is not tried again.
func TestEALFailure(t *testing.T) {
	for _, c := range []string{"badargs", "badlcores"} {
		t.Run(c, func(t *testing.T) {
			res := runEALCase(t, c)
			assert.True(t, res[0].EAL, res[0].Err)
			assert.Equal(t, int(syscall.EINVAL), res[0].Errno, res[0].Err)
			assert.Contains(t, res[0].Err, "EAL initialisation failed")
			assert.Equal(t, res[0], res[1], "a second InitEAL returns the first failure")
		})
	}
}

// TestEALReinit: EAL initialises once; other arguments are refused.
func TestEALReinit(t *testing.T) {
	requireEAL(t)
	assert.NoError(t, InitEAL(EALConfig{}), "a zero config takes the EAL running")
	assert.NoError(t, InitEAL(testEAL()), "the same config")
	err := InitEAL(EALConfig{Lcores: "1", NoHuge: true})
	assert.ErrorContains(t, err, "initialises once per process")
}

// TestPortNotFound: a device that is not there says so, and what to do.
func TestPortNotFound(t *testing.T) {
	requireEAL(t)
	for _, c := range []struct{ device, want string }{
		{"0000:99:00.0", "vfio-pci"},
		{"net_nosuchdriver0", "no such driver"},
		{"net_af_packet_nf0,iface=pn-no-such-if", "missing interface"},
	} {
		_, err := New(Config{Device: c.device})
		assert.ErrorIs(t, err, ErrPortNotFound, c.device)
		assert.ErrorContains(t, err, c.want, c.device)
	}
}

// TestTooFewQueues: more queues than the port has is an error naming both
// numbers, and the device the link created is removed again.
func TestTooFewQueues(t *testing.T) {
	v := newVeth(t, 1500)
	requireEAL(t)
	dev := afPacketDevice(v.A, "qpairs=1")
	_, err := New(Config{Device: dev, Queues: 4})
	require.ErrorIs(t, err, ErrTooFewQueues)
	assert.ErrorContains(t, err, "has 1 RX and 1 TX queues, Config.Queues is 4")
	assert.ErrorContains(t, err, "qpairs=N")
	// The vdev is gone: the same name can be created again.
	l, err := New(Config{Device: dev})
	require.NoError(t, err)
	assert.NoError(t, l.Close())
	assert.ErrorIs(t, l.Close(), net.ErrClosed)

	l = openLink(t, Config{Device: afPacketDevice(v.A, "qpairs=2"), Queues: 2})
	assert.Len(t, l.Queues(), 2)
	assert.False(t, l.Setup().Steering, "af_packet spreads with kernel fanout, which the link cannot predict")
	_, steers := l.(link.Steerer)
	assert.False(t, steers)
	assert.False(t, l.Queues()[0].(link.PolledPeer).PeerPolls(), "the kernel behind af_packet does not poll")
}

// TestIsolateUnsupported: isolated mode on a PMD without rte_flow is a
// clear error matching link.ErrNotSupported.
func TestIsolateUnsupported(t *testing.T) {
	v := newVeth(t, 1500)
	requireEAL(t)
	_, err := New(Config{Device: afPacketDevice(v.A, ""), Isolate: true, IsolateAddrs: []netip.Addr{stack4}})
	require.Error(t, err)
	assert.ErrorIs(t, err, link.ErrNotSupported)
	assert.ErrorContains(t, err, "isolated mode on")
	assert.ErrorContains(t, err, "mlx5")
	t.Log(err)
}

// TestIsolateTap: net_tap has rte_flow isolation when the kernel has the
// multiq qdisc (this one may not: the PMD then disables rte_flow and the
// link fails clearly). Where it works, the rules are created and listed.
func TestIsolateTap(t *testing.T) {
	requireEAL(t)
	ns := testenv.NewNS(t)
	iface := netns.UniqueName("pndi")
	var l Link
	err := ns.Do(func() (err error) {
		l, err = New(Config{
			Device:       vdevName("net_tap") + ",iface=" + iface,
			Isolate:      true,
			IsolateAddrs: []netip.Addr{stack4, stack6},
		})
		return err
	})
	if err != nil {
		t.Log(err)
		assert.ErrorContains(t, err, "isolated mode on")
		return
	}
	defer l.Close()
	s := l.Setup()
	assert.True(t, s.Isolated)
	assert.Len(t, s.FlowRules, 4)
}
