package afxdp

import (
	"errors"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/polarnet/polarnet/internal/testenv"
	"github.com/polarnet/polarnet/link"
)

const helperOpenEnv = "AFXDP_TEST_OPEN" // the interface

// TestHelperOpen is not a test: run as a child process, it opens a link
// and prints the error.
func TestHelperOpen(t *testing.T) {
	ifname := os.Getenv(helperOpenEnv)
	if ifname == "" {
		t.Skip("helper process only")
	}
	l, err := New(Config{Interface: ifname, Filter: FilterAll})
	if err == nil {
		l.Close()
		os.Stdout.WriteString("opened\n")
		os.Exit(0)
	}
	os.Stdout.WriteString("error: " + err.Error() + "\n")
	if errors.Is(err, unix.EPERM) {
		os.Exit(3)
	}
	os.Exit(4)
}

func TestErrors(t *testing.T) {
	v := newVeth(t, vethOptions{noIPv6: true})

	t.Run("interface missing", func(t *testing.T) {
		_, err := New(Config{Interface: "pnxmissing0", Filter: FilterAll})
		require.Error(t, err)
		assert.ErrorIs(t, err, unix.ENODEV)
		assert.Contains(t, err.Error(), `no interface "pnxmissing0"`)
	})
	t.Run("native XDP not supported", func(t *testing.T) {
		// A bridge has no native XDP.
		ns := testenv.NewNS(t)
		_, err := ns.Exec("ip", "link", "add", "pnxbr0", "type", "bridge")
		require.NoError(t, err)
		_, err = ns.Exec("ip", "link", "set", "pnxbr0", "up")
		require.NoError(t, err)
		require.NoError(t, ns.Do(func() error {
			_, err = New(Config{Interface: "pnxbr0", Filter: FilterAll, Mode: ModeNative})
			return nil
		}))
		require.Error(t, err)
		assert.ErrorIs(t, err, link.ErrNotSupported)
		assert.ErrorIs(t, err, unix.EOPNOTSUPP)
		t.Log(err)
	})
	t.Run("zero-copy not supported", func(t *testing.T) {
		_, err := New(Config{Interface: v.local, Filter: FilterAll, ZeroCopy: ZeroCopyRequire})
		require.Error(t, err)
		assert.ErrorIs(t, err, link.ErrNotSupported)
		assert.ErrorIs(t, err, unix.EOPNOTSUPP)
		t.Log(err)
	})
	t.Run("queue busy", func(t *testing.T) {
		l := openLink(t, Config{Interface: v.local, Filter: FilterAll}, testHooks{})
		_, err := New(Config{Interface: v.local, Filter: FilterAll})
		require.Error(t, err)
		assert.ErrorIs(t, err, unix.EBUSY)
		t.Log(err)
		// The same with the program out of the way: the socket's queue.
		require.NoError(t, l.xdpLink.Close())
		l.xdpLink = nil
		_, err = New(Config{Interface: v.local, Filter: FilterAll, BusyTimeout: -1})
		require.Error(t, err)
		assert.ErrorIs(t, err, unix.EBUSY)
		t.Log(err)
	})
	t.Run("MTU too large", func(t *testing.T) {
		// Frames of 65014 bytes would span 17 UMEM frames.
		w := newVeth(t, vethOptions{mtu: 65000, noIPv6: true})
		_, err := New(Config{Interface: w.local, Filter: FilterAll})
		assert.ErrorIs(t, err, link.ErrNotSupported)
		t.Log(err)
	})
	t.Run("not root", func(t *testing.T) {
		// A copy of the test binary that user nobody can run.
		dir, err := os.MkdirTemp("", "afxdp-test")
		require.NoError(t, err)
		t.Cleanup(func() { os.RemoveAll(dir) })
		require.NoError(t, os.Chmod(dir, 0o755))
		bin := filepath.Join(dir, "afxdp.test")
		copyFile(t, os.Args[0], bin)
		cmd := exec.Command(bin, "-test.run=^TestHelperOpen$")
		cmd.Env = append(os.Environ(), helperOpenEnv+"="+v.local)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		require.ErrorAs(t, err, &exit, string(out))
		assert.Equal(t, 3, exit.ExitCode(), "the error wraps EPERM: %s", out)
		assert.Contains(t, string(out), "need root, or CAP_NET_RAW, CAP_NET_ADMIN and CAP_BPF")
		t.Log(strings.TrimSpace(string(out)))
	})
}

func copyFile(t *testing.T, from, to string) {
	in, err := os.Open(from)
	require.NoError(t, err)
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY, 0o755)
	require.NoError(t, err)
	_, err = io.Copy(out, in)
	require.NoError(t, err)
	require.NoError(t, out.Close())
}

func TestConfigErrors(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{}, "Interface is required"},
		{Config{Interface: "a/b"}, "not a valid interface name"},
		{Config{Interface: "eth0"}, "Addresses is required"},
		{Config{Interface: "eth0", Filter: FilterAll, FrameSize: 3000}, "not a power of two"},
		{Config{Interface: "eth0", Filter: FilterAll, RingSize: 100}, "not a power of two"},
		{Config{Interface: "eth0", Filter: FilterAll, RingSize: 64, Frames: 100}, "need at least 128"},
		{Config{Interface: "eth0", Addresses: []netip.Prefix{{}}}, "invalid address"},
	} {
		_, err := c.cfg.withDefaults()
		assert.ErrorContains(t, err, c.want, "%+v", c.cfg)
	}
	cfg, err := Config{Interface: "eth0", Addresses: []netip.Prefix{netip.MustParsePrefix("::ffff:198.18.0.2/120")}}.withDefaults()
	require.NoError(t, err)
	assert.Equal(t, []netip.Prefix{netip.MustParsePrefix("198.18.0.2/32")}, cfg.Addresses)
	assert.Equal(t, DefaultFrameSize, cfg.FrameSize)
	assert.Equal(t, DefaultRingSize, cfg.RingSize)
	assert.Equal(t, 2*DefaultRingSize, cfg.Frames)
	assert.Equal(t, DefaultBusyTimeout, cfg.BusyTimeout)
}
