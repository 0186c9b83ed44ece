//go:build dpdk && linux && cgo

package dpdk

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/polarnet/polarnet/internal/xfer"
	"github.com/polarnet/polarnet/polarnet"
)

// memifPair starts a helper process serving on a polarnet stack over
// net_memif (the memif server, kernel4) and returns it with a stack in
// this process over the other end (the memif client, stack4): two
// processes, shared memory between them, no kernel on the data path.
func memifPair(t testing.TB, mtu int, skipCsum bool, poll polarnet.PollMode) (*helperProc, *polarnet.Stack, Link) {
	return memifPairSpin(t, mtu, skipCsum, poll, 0)
}

// memifPairSpin is memifPair with a spin budget for adaptive polling on
// both ends (zero: the engine's default).
func memifPairSpin(t testing.TB, mtu int, skipCsum bool, poll polarnet.PollMode, spin time.Duration) (*helperProc, *polarnet.Stack, Link) {
	t.Helper()
	requireEAL(t)
	// Not t.TempDir: its name holds the subtest's, whose commas and '='
	// would break the device arguments.
	dir, err := os.MkdirTemp("", "pnmemif")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "memif.sock")
	skip := "0"
	if skipCsum {
		skip = "1"
	}
	h := startHelper(t, "",
		"PNH_LINK=memif",
		"PNH_DEVICE=net_memif0,role=server,socket-abstract=no,socket="+sock,
		"PNH_ADDR="+netip.PrefixFrom(kernel4, 24).String(),
		fmt.Sprintf("PNH_MTU=%d", mtu),
		"PNH_SKIPCSUM="+skip,
		"PNH_POLL="+poll.String(),
		"PNH_SPIN="+spin.String(),
	)
	l := openLink(t, Config{
		Device:        vdevName("net_memif") + ",role=client,socket-abstract=no,socket=" + sock,
		MTU:           mtu,
		SkipChecksums: skipCsum,
	})
	waitUp(t, l)
	var st *polarnet.Stack
	st, err = polarnet.New(polarnet.Config{Link: l, Addrs: []netip.Prefix{netip.PrefixFrom(stack4, 24)}, Poll: poll, SpinBudget: spin})
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	return h, st, l
}

// TestMemifP2P sends byte-exact streams through a TCP echo served by
// another process over net_memif.
func TestMemifP2P(t *testing.T) {
	for _, c := range []struct {
		mtu  int
		skip bool
	}{{1500, false}, {9000, false}, {65000, true}} {
		t.Run(fmt.Sprintf("mtu=%d,skipcsum=%v", c.mtu, c.skip), func(t *testing.T) {
			h, st, l := memifPair(t, c.mtu, c.skip, polarnet.PollAdaptive)
			for _, size := range []int64{1, 64 << 10, 32 << 20} {
				conn, err := st.DialTCP(t.Context(), "tcp", netip.AddrPort{}, netip.AddrPortFrom(kernel4, uint16(h.ports["echo"])))
				require.NoError(t, err)
				conn.SetDeadline(time.Now().Add(time.Minute)) // bounds a stalled transfer
				assert.NoError(t, xfer.Send(conn, conn, size, 7), "%d bytes", size)
				conn.Close()
			}
			stats := st.Stats().Total
			assert.Zero(t, stats.RxChecksum)
			t.Logf("link setup %+v", l.Setup())
			t.Logf("link stats %+v", l.Stats())
		})
	}
}

// TestMemifWaitUp: a net_memif client without its server fails clearly
// (the PMD connects when the port starts), and removes the device it
// created; with a server and Config.WaitUp, New returns a link that is up.
func TestMemifWaitUp(t *testing.T) {
	requireEAL(t)
	dir, err := os.MkdirTemp("", "pnmemif")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "memif.sock")
	dev := vdevName("net_memif") + ",role=client,socket-abstract=no,socket=" + sock
	_, err = New(Config{Device: dev, WaitUp: 300 * time.Millisecond})
	require.Error(t, err)
	assert.ErrorContains(t, err, "its server (role=server, the same socket) must be running first")

	srv := openLink(t, Config{Device: vdevName("net_memif") + ",role=server,socket-abstract=no,socket=" + sock})
	l, err := New(Config{Device: dev, WaitUp: 10 * time.Second})
	require.NoError(t, err, "the same device again: the failed New removed it")
	t.Cleanup(func() { l.Close() })
	assert.True(t, l.Status().Up, "New waited for the link")
	waitUp(t, srv)
}
