package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/polarnet/polarnet/internal/netns"
	"github.com/polarnet/polarnet/internal/testenv"
	"github.com/polarnet/polarnet/link/tap"
)

// The e2e topology: one namespace is the program's host. Its kernel has
// 198.19.40.1 on a TAP whose other end is the program's polarnet stack
// (198.19.40.2), and 198.19.41.1 on lo, a prefix POLARNET_KERNEL_ROUTES
// gives to the kernel although the stack's gateway could reach it.
var (
	e2eKernel = netip.MustParsePrefix("198.19.40.1/24")
	e2eStack  = netip.MustParsePrefix("198.19.40.2/24")
	e2eRouted = netip.MustParsePrefix("198.19.41.1/32")
)

// TestFixedProgramRunsOverTAP rewrites testdata/app, a net/http service
// written against Go's net, with `polarnet fix` and nothing else, builds
// it and runs it over TAP with the POLARNET_* variables. It serves on :8080
// both the kernel side of the TAP (through the stack) and curl on its
// host's loopback (through the kernel), dials a kernel echo server over
// the TAP, one on 127.0.0.1 and one on a POLARNET_KERNEL_ROUTES prefix, and
// its *net.TCPConn assertions, rewritten, hold for conns of both paths.
func TestFixedProgramRunsOverTAP(t *testing.T) {
	ns, dev := tapNamespace(t, e2eKernel)
	testenv.RequireCommand(t, "curl")
	gobin := testenv.RequireCommand(t, "go")
	_, err := ns.Exec("ip", "addr", "add", e2eRouted.String(), "dev", "lo")
	require.NoError(t, err)
	echoOverTAP := kernelEcho(t, ns, netip.AddrPortFrom(e2eKernel.Addr(), 0))
	echoLoopback := kernelEcho(t, ns, netip.MustParseAddrPort("127.0.0.1:0"))
	echoRouted := kernelEcho(t, ns, netip.AddrPortFrom(e2eRouted.Addr(), 0))

	app := buildFixedApp(t, gobin)
	get := func(url string) (string, error) {
		return ns.Exec("curl", "-sS", "--fail-with-body", "--max-time", "5", url)
	}
	startInNS(t, ns, polarnetEnv(dev, e2eStack, e2eKernel, "POLARNET_KERNEL_ROUTES=198.19.41.0/24"), func() error {
		_, err := get("http://127.0.0.1:8080/")
		return err
	}, app, "-listen", ":8080")

	for url, want := range map[string]string{
		"http://127.0.0.1:8080/":   "served on 127.0.0.1:8080\n",
		"http://198.19.40.2:8080/": "served on 198.19.40.2:8080\n",
		// Through the stack, over the TAP: the stack's address is the source.
		"http://127.0.0.1:8080/?dial=" + echoOverTAP.String(): fmt.Sprintf("ping from %v via %v:", echoOverTAP, e2eStack.Addr()),
		// Loopback: the kernel's, from the kernel's loopback.
		"http://198.19.40.2:8080/?dial=" + echoLoopback.String(): fmt.Sprintf("ping from %v via 127.0.0.1:", echoLoopback),
		// A POLARNET_KERNEL_ROUTES prefix: the kernel's, not the stack's
		// source address, though the gateway would have taken it too.
		"http://198.19.40.2:8080/?dial=" + echoRouted.String(): fmt.Sprintf("ping from %v via %v:", echoRouted, e2eRouted.Addr()),
	} {
		got, err := get(url)
		if assert.NoError(t, err, url) {
			assert.True(t, strings.HasPrefix(got, want), "%s: got %q, want %q...", url, got, want)
		}
	}
}

// tapNamespace makes an e2e topology's namespace with a persistent TAP in
// it, whose kernel side has kernel (e2eKernel in most tests); a program in
// the namespace attaches to it by name. It returns the namespace and the
// device's name.
func tapNamespace(t *testing.T, kernel netip.Prefix) (*netns.NS, string) {
	ns := testenv.NewNS(t)
	dev := netns.UniqueName("pnt")
	l, err := tap.New(tap.Config{Name: dev, Persist: true})
	require.NoError(t, err)
	require.NoError(t, l.Close())
	require.NoError(t, ns.MoveLink(dev))
	require.NoError(t, ns.Configure(dev, 1500, kernel))
	return ns, dev
}

// polarnetEnv is the environment that puts a program on the stack side of
// tapNamespace's TAP, at stack, with the kernel side as its gateway.
func polarnetEnv(dev string, stack, kernel netip.Prefix, extra ...string) []string {
	return append(append(os.Environ(),
		"POLARNET_LINK=tap", "POLARNET_DEVICE="+dev, "POLARNET_ADDR="+stack.String(),
		"POLARNET_GATEWAY="+kernel.Addr().String(), "POLARNET_FALLBACK=fail"), extra...)
}

// startInNS runs a program in ns with env until the test ends, and waits
// (20s at most) until ready succeeds. When the test ends it logs the
// program's output, which must hold no panic.
func startInNS(t *testing.T, ns *netns.NS, env []string, ready func() error, bin string, args ...string) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", ns.Name, bin}, args...)...)
	cmd.Env = env
	logs := new(strings.Builder)
	cmd.Stdout, cmd.Stderr = logs, logs
	require.NoError(t, cmd.Start())
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cancel()
		<-exited
		t.Logf("%s's output:\n%s", filepath.Base(bin), logs)
		assert.NotContains(t, logs.String(), "panic")
	})
	var lastErr error
	ok := assert.Eventually(t, func() bool {
		select {
		case <-exited:
			return true
		default:
		}
		lastErr = ready()
		return lastErr == nil
	}, 20*time.Second, 50*time.Millisecond)
	select {
	case <-exited:
		t.Fatalf("%s exited", filepath.Base(bin))
	default:
	}
	require.True(t, ok, "%s never became ready: %v", filepath.Base(bin), lastErr)
}

// buildFixedApp copies testdata/app into a module of its own that requires
// this one, runs `polarnet fix` on it, checks that the fix changed only
// what the tool reported, and builds it.
func buildFixedApp(t *testing.T, gobin string) string {
	src, err := os.ReadFile(filepath.Join("testdata", "app", "main.go"))
	require.NoError(t, err)
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	require.NoError(t, err)
	dir := t.TempDir()
	gomod := fmt.Sprintf("module app\n\ngo 1.26.3\n\nrequire github.com/polarnet/polarnet v0.0.0\n\nreplace github.com/polarnet/polarnet => %s\n", root)
	for name, data := range map[string][]byte{"go.mod": []byte(gomod), "go.sum": sum, "main.go": src} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), data, 0o644))
	}
	t.Chdir(dir)
	var out, errb strings.Builder
	require.Equal(t, 0, run([]string{"fix", "."}, &out, &errb), "%s%s", out.String(), errb.String())
	t.Logf("polarnet fix:\n%s", out.String())
	assert.Equal(t, 4, strings.Count(out.String(), " → "), "rewrites reported")

	bin := filepath.Join(dir, "app")
	build := exec.Command(gobin, "build", "-mod=mod", "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	outb, err := build.CombinedOutput()
	require.NoError(t, err, "%s", outb)
	return bin
}

// kernelEcho serves, from a kernel socket in ns on addr, conns that get
// each line they send back; it returns the address it listens on.
func kernelEcho(t *testing.T, ns *netns.NS, addr netip.AddrPort) netip.AddrPort {
	var ln net.Listener
	require.NoError(t, ns.Do(func() (err error) {
		ln, err = net.Listen("tcp", addr.String())
		return err
	}))
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				c.SetDeadline(time.Now().Add(10 * time.Second))
				line, err := bufio.NewReader(c).ReadString('\n')
				if err == nil {
					c.Write([]byte(line))
				}
			}()
		}
	}()
	return ln.Addr().(*net.TCPAddr).AddrPort()
}
