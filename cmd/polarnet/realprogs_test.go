package main

import (
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/polarnet/polarnet/internal/testenv"
)

// The real programs: modules from the Go module proxy, at the versions
// this test was written against. A command module's own main is built as
// it is (a tool of the test's module); the others' are in
// testdata/realprogs.
var realModules = []struct {
	path, version, fix string
	command            bool
}{
	// An in-memory Redis server: its server package calls net.Listen.
	{"github.com/alicebob/miniredis/v2", "v2.40.0", "github.com/alicebob/miniredis/v2/...", false},
	// A Redis client library: its Dial builds a net.Dialer.
	{"github.com/gomodule/redigo", "v1.9.3", "github.com/gomodule/redigo/redis", false},
	// pprof, whose -http flag serves its web UI with net/http on a
	// listener from net.Listen.
	{"github.com/google/pprof", "v0.0.0-20261105003125-4bf881d7fb0b", "github.com/google/pprof/...", true},
}

// pprof's TAP topology, a namespace apart from e2eKernel's.
var (
	httpKernel = netip.MustParsePrefix("198.19.43.1/24")
	httpStack  = netip.MustParsePrefix("198.19.43.2/24")
)

// TestRealProgramsOverTAP fetches miniredis, redigo and pprof through the
// Go module proxy, rewrites their code with `polarnet fix` and nothing
// else, and runs a miniredis server, redigo's example client and pprof's
// web UI over TAP against kernel peers: kernel clients reach the servers
// across the TAP and on the loopback, and the client reaches a kernel
// miniredis across the TAP and on the loopback.
func TestRealProgramsOverTAP(t *testing.T) {
	ns, dev := tapNamespace(t, e2eKernel)
	gobin := testenv.RequireCommand(t, "go")
	bin := buildRealPrograms(t, gobin)

	ping := func(addr string) error {
		return ns.Do(func() error {
			got, err := respExchange(addr, "*1\r\n$4\r\nPING\r\n")
			if err == nil && got != "+PONG\r\n" {
				err = fmt.Errorf("PING answered %q", got)
			}
			return err
		})
	}
	t.Run("server", func(t *testing.T) {
		startInNS(t, ns, polarnetEnv(dev, e2eStack, e2eKernel), func() error { return ping("127.0.0.1:6379") },
			filepath.Join(bin, "mrserver"), ":6379")
		assert.NoError(t, ping(netip.AddrPortFrom(e2eStack.Addr(), 6379).String()), "across the TAP")
		assert.NoError(t, ping("[::1]:6379"), "on the IPv6 loopback")
	})
	t.Run("client", func(t *testing.T) {
		// The same server on the kernel: no POLARNET_* variables.
		startInNS(t, ns, os.Environ(), func() error { return ping("127.0.0.1:6380") },
			filepath.Join(bin, "mrserver"), ":6380")
		for _, addr := range []string{netip.AddrPortFrom(e2eKernel.Addr(), 6380).String(), "127.0.0.1:6380"} {
			cmd := exec.CommandContext(t.Context(), "ip", "netns", "exec", ns.Name, filepath.Join(bin, "rclient"), addr, "over "+addr)
			cmd.Env = polarnetEnv(dev, e2eStack, e2eKernel)
			out, err := cmd.CombinedOutput()
			assert.NoError(t, err, "%s", out)
			assert.Equal(t, "over "+addr+"\n", string(out))
		}
	})
	t.Run("http server", func(t *testing.T) {
		ns, dev := tapNamespace(t, httpKernel)
		testenv.RequireCommand(t, "curl")
		prof := filepath.Join(t.TempDir(), "goroutine.pb.gz")
		f, err := os.Create(prof)
		require.NoError(t, err)
		require.NoError(t, pprof.Lookup("goroutine").WriteTo(f, 0))
		require.NoError(t, f.Close())
		top := func(host string) (string, error) {
			return ns.Exec("curl", "-sS", "--fail-with-body", "--max-time", "5", "http://"+host+":8080/ui/top")
		}
		// 0.0.0.0: pprof listens on localhost when the host is empty.
		startInNS(t, ns, polarnetEnv(dev, httpStack, httpKernel), func() error {
			_, err := top("127.0.0.1")
			return err
		}, filepath.Join(bin, "pprof"), "-no_browser", "-http=0.0.0.0:8080", prof)
		for _, host := range []string{httpStack.Addr().String(), "127.0.0.1"} {
			page, err := top(host)
			if assert.NoError(t, err, host) {
				assert.Contains(t, page, " goroutine</title>", host) // the profile given
			}
		}
	})
}

// respExchange sends a RESP request to addr and returns the reply's
// first line.
func respExchange(addr, req string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, req); err != nil {
		return "", err
	}
	buf := make([]byte, 64)
	n, err := c.Read(buf)
	return string(buf[:n]), err
}

// buildRealPrograms lays out testdata/realprogs as a module whose real
// dependencies are writable copies of the modules the proxy serves, runs
// `polarnet fix` on their library code, and builds the commands into the
// directory it returns.
func buildRealPrograms(t *testing.T, gobin string) string {
	dir := t.TempDir()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	require.NoError(t, os.CopyFS(dir, os.DirFS(filepath.Join("testdata", "realprogs"))))
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.sum"), sum, 0o644))
	gomod := "module realprogs\n\ngo 1.26.3\n\nrequire github.com/polarnet/polarnet v0.0.0\n\nreplace github.com/polarnet/polarnet => " + root + "\n"
	var patterns []string
	for _, m := range realModules {
		src := goCmd(t, dir, gobin, "mod", "download", "-json", m.path+"@"+m.version)
		var info struct{ Dir string }
		require.NoError(t, json.Unmarshal([]byte(src), &info))
		local := filepath.Join(dir, "third_party", filepath.Base(strings.TrimSuffix(m.path, "/v2")))
		require.NoError(t, os.CopyFS(local, os.DirFS(info.Dir)))
		require.NoError(t, filepath.WalkDir(local, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			return os.Chmod(p, 0o755)
		}))
		gomod += fmt.Sprintf("require %s %s\nreplace %s => %s\n", m.path, m.version, m.path, local)
		if m.command {
			gomod += "tool " + m.path + "\n"
		}
		patterns = append(patterns, m.fix)
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte(gomod), 0o644))
	goCmd(t, dir, gobin, "mod", "tidy")

	t.Chdir(dir)
	var out, errb strings.Builder
	code := run(append([]string{"fix", "-test=false"}, patterns...), &out, &errb)
	t.Logf("polarnet fix:\n%s%s", out.String(), errb.String())
	require.Equal(t, 0, code)
	assert.Contains(t, out.String(), "third_party/miniredis/server/server.go:48:12: net.Listen → listener.Listen")
	assert.Contains(t, out.String(), "third_party/redigo/redis/conn.go:226:12: net.Dialer → dialer.Dialer")
	assert.Contains(t, out.String(), "third_party/pprof/internal/driver/webui.go:186:13: net.Listen → listener.Listen")
	assert.Contains(t, out.String(), "third_party/pprof/internal/transport/transport.go:126:15: http.Transport without a dial function")

	goCmd(t, dir, gobin, "build", "-o", filepath.Join(dir, "bin")+"/", "./...", "tool")
	return filepath.Join(dir, "bin")
}

// goCmd runs the go command in dir and returns its standard output.
func goCmd(t *testing.T, dir, gobin string, args ...string) string {
	cmd := exec.CommandContext(t.Context(), gobin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=-mod=mod")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "go %s: %s", strings.Join(args, " "), stderr.String())
	return string(out)
}
