//go:build rdma && linux && cgo

package rdma_test

import (
	"errors"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/polarnet/polarnet/dialer"
	"github.com/polarnet/polarnet/link"
	"github.com/polarnet/polarnet/link/rdma"
	"github.com/polarnet/polarnet/listener"
	"github.com/polarnet/polarnet/polarnet"
)

// envFallbackChild marks the child process of TestDialerFallbackPolicy; its
// value is the policy the child expects ("kernel" or "fail").
const envFallbackChild = "POLARNET_RDMA_TEST_FALLBACK_CHILD"

// TestDialerFallbackPolicy is the fallback policy as a program sees it:
// an unchanged binary (this test binary, which imports the rdma link) run
// with POLARNET_LINK=rdma where the link cannot open. dialer.Dial and
// listener.Listen then use the kernel's TCP/IP and the reason is logged
// once (the default), or every dial and listen fails with the reason
// (POLARNET_FALLBACK=fail). polarnet.Default reads the environment once per
// process, so each case runs in a child process.
func TestDialerFallbackPolicy(t *testing.T) {
	if policy := os.Getenv(envFallbackChild); policy != "" {
		fallbackChild(t, policy)
		return
	}
	devices := []string{"pn-no-such-if"}
	if !rdma.HostHasVerbs() {
		// No device named: the link looks for any RDMA port, and on this
		// host (no InfiniBand in the kernel) there is none.
		devices = append(devices, "")
	}
	for _, dev := range devices {
		for _, policy := range []string{"kernel", "fail"} {
			name := "device=" + dev + ",fallback=" + policy
			t.Run(name, func(t *testing.T) {
				cmd := exec.Command(os.Args[0], "-test.run=^TestDialerFallbackPolicy$", "-test.v", "-test.count=1")
				cmd.Env = append(os.Environ(),
					envFallbackChild+"="+policy,
					polarnet.EnvLink+"=rdma",
					polarnet.EnvDevice+"="+dev,
					link.EnvAddr+"="+rdma.HWStack.String(),
				)
				if policy == "fail" {
					cmd.Env = append(cmd.Env, polarnet.EnvFallback+"=fail")
				} else {
					cmd.Env = append(cmd.Env, polarnet.EnvFallback+"=")
				}
				out, err := cmd.CombinedOutput()
				t.Logf("child (%s):\n%s", name, out)
				require.NoError(t, err, "the child's checks failed")
				text := string(out)
				if policy == "kernel" {
					assert.Equal(t, 1, strings.Count(text, "so dials and listens use the kernel's TCP/IP"), "logged once for a dial and a listen")
					assert.Contains(t, text, "link=rdma")
				}
				if dev == "" {
					assert.Contains(t, text, "ibv_get_device_list failed with ENOSYS", "the error says why")
				} else {
					assert.Contains(t, text, dev, "the error names the interface")
				}
			})
		}
	}
}

// fallbackChild runs in the child: a kernel listener on loopback, then
// dialer.Dial and listener.Listen through the default stack.
func fallbackChild(t *testing.T, policy string) {
	kln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer kln.Close()
	go func() {
		for {
			c, err := kln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()

	st, defErr := polarnet.Default()
	assert.Nil(t, st, "no polarnet stack: the link cannot open here")
	c, dialErr := dialer.Dial("tcp", kln.Addr().String())
	ln, listenErr := listener.Listen("tcp", "127.0.0.1:0")
	switch policy {
	case "kernel":
		require.NoError(t, defErr)
		require.NoError(t, dialErr)
		defer c.Close()
		assert.IsType(t, &net.TCPConn{}, c, "Go's net dialed")
		require.NoError(t, listenErr)
		defer ln.Close()
		assert.IsType(t, &net.TCPListener{}, ln, "Go's net listens")
	case "fail":
		require.Error(t, defErr)
		t.Logf("polarnet.Default: %v", defErr)
		for _, e := range []struct {
			op  string
			err error
		}{{"dial", dialErr}, {"listen", listenErr}} {
			var oe *net.OpError
			require.True(t, errors.As(e.err, &oe), "%s: %v is a *net.OpError", e.op, e.err)
			assert.Equal(t, e.op, oe.Op)
			assert.ErrorIs(t, e.err, link.ErrNotSupported)
			t.Logf("%s error: %v", e.op, e.err)
		}
		assert.Nil(t, c)
		assert.Nil(t, ln)
	default:
		t.Fatalf("unknown policy %q", policy)
	}
}
