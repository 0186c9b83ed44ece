//go:build dpdk && linux && cgo

package dpdk

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/polarnet/polarnet/internal/testenv"
	"github.com/polarnet/polarnet/internal/xfer"
	"github.com/polarnet/polarnet/link"
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
	assert.True(t, l.Queues()[0].(link.PolledPeer).PeerPolls(), "a memif peer polls")
}

// TestMemifCloseBothEnds closes the two ends of connected net_memif links
// in one process back to back, as a program that owns both ends does: the
// client's close sends a disconnect message that the server's end handles
// on EAL's interrupt thread while this thread closes the server. Both tear
// the connection down; unserialised, they free its regions twice and crash
// the process (DPDK 22.11), so the link closes memif ports on that thread.
// A helper process does it: every server closed leaves its listener
// registered with EAL (see the README's quirks), which this process's
// later tests need not inherit.
func TestMemifCloseBothEnds(t *testing.T) {
	testenv.RequirePriv(t)
	exe, err := os.Executable()
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"=memif-close")
	// A helper still running at the bound gets SIGQUIT, so that the Go
	// runtime prints every goroutine's stack before it exits.
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGQUIT) }
	cmd.WaitDelay = 10 * time.Second
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "the helper must exit cleanly, never crash: %s", out)
}

// closeBothEnds opens n connected net_memif pairs one after the other and
// closes each, client then server, at once (the helper role memif-close).
func closeBothEnds(n int) error {
	if err := InitEAL(testEAL()); err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "pnmemif")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	for i := range n {
		sock := filepath.Join(dir, fmt.Sprintf("memif%d.sock", i))
		srv, err := New(Config{Device: vdevName("net_memif") + ",role=server,socket-abstract=no,socket=" + sock})
		if err != nil {
			return err
		}
		cli, err := New(Config{Device: vdevName("net_memif") + ",role=client,socket-abstract=no,socket=" + sock, WaitUp: 10 * time.Second})
		if err != nil {
			return errors.Join(err, srv.Close())
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err = srv.WaitUp(ctx)
		cancel()
		if err := errors.Join(err, cli.Close(), srv.Close()); err != nil {
			return fmt.Errorf("pair %d: %w", i, err)
		}
	}
	return nil
}
