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
	ns := netns.New(t)
	testenv.RequireCommand(t, "curl")
	gobin := testenv.RequireCommand(t, "go")
	dev := netns.UniqueName("pnt")
	l, err := tap.New(tap.Config{Name: dev, Persist: true})
	require.NoError(t, err)
	require.NoError(t, l.Close())
	require.NoError(t, ns.MoveLink(dev))
	require.NoError(t, ns.Configure(dev, 1500, e2eKernel))
	_, err = ns.Exec("ip", "addr", "add", e2eRouted.String(), "dev", "lo")
	require.NoError(t, err)
	echoOverTAP := kernelEcho(t, ns, netip.AddrPortFrom(e2eKernel.Addr(), 0))
	echoLoopback := kernelEcho(t, ns, netip.MustParseAddrPort("127.0.0.1:0"))
	echoRouted := kernelEcho(t, ns, netip.AddrPortFrom(e2eRouted.Addr(), 0))

	app := buildFixedApp(t, gobin)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "ip", "netns", "exec", ns.Name, app, "-listen", ":8080")
	cmd.Env = append(os.Environ(),
		"POLARNET_LINK=tap", "POLARNET_DEVICE="+dev, "POLARNET_ADDR="+e2eStack.String(),
		"POLARNET_GATEWAY="+e2eKernel.Addr().String(), "POLARNET_KERNEL_ROUTES=198.19.41.0/24",
		"POLARNET_FALLBACK=fail")
	var logs strings.Builder
	cmd.Stdout, cmd.Stderr = &logs, &logs
	require.NoError(t, cmd.Start())
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
		t.Logf("app's output:\n%s", logs.String())
	})

	get := func(url string) (string, error) {
		return ns.Exec("curl", "-sS", "--fail-with-body", "--max-time", "5", url)
	}
	require.Eventually(t, func() bool {
		select {
		case <-exited:
			return true
		default:
		}
		_, err := get("http://127.0.0.1:8080/")
		return err == nil
	}, 20*time.Second, 50*time.Millisecond, "the app serves on 127.0.0.1:8080")
	select {
	case <-exited:
		t.Fatalf("the app exited: %s", logs.String())
	default:
	}

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
	assert.NotContains(t, logs.String(), "panic")
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
