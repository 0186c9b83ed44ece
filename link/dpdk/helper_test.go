//go:build dpdk && linux && cgo

package dpdk

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/polarnet/polarnet/internal/rrbench"
	"github.com/polarnet/polarnet/polarnet"
)

// The helper process: the test binary run again with helperEnv=server. It
// serves on a polarnet stack over net_memif (the far end of a p2p test or
// benchmark) or on the kernel's TCP, and exits when its stdin closes.
//
// Its environment:
//
//	PNH_LINK     memif or kernel
//	PNH_DEVICE   the memif device spec
//	PNH_ADDR     the stack's address with prefix (memif), or the address to
//	             listen on (kernel)
//	PNH_MTU      the link's MTU (memif)
//	PNH_SKIPCSUM 1 for Config.SkipChecksums (memif)
//	PNH_POLL     the poll mode (memif)
//	PNH_SPIN     the adaptive poll mode's spin budget (memif)
//
// It prints "READY echo=P rr=P sink=P" once it listens: echo sends back
// all it read once it reads EOF, and half-closes; rr answers every 4 KiB
// request with 64 bytes (rrbench.RR4K, rpcbench's 4k-write); sink reads
// and discards.

func runHelper(role string) int {
	switch role {
	case "server":
	case "eal":
		return ealCase(os.Getenv("PNH_EAL_CASE"))
	case "memif-close":
		if err := closeBothEnds(100); err != nil {
			fmt.Fprintln(os.Stderr, "helper:", err)
			return 1
		}
		return 0
	default:
		fmt.Fprintf(os.Stderr, "unknown helper role %q\n", role)
		return 2
	}
	if err := serve(); err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 1
	}
	return 0
}

func serve() error {
	listen := func(addr netip.Addr) (net.Listener, error) {
		return net.Listen("tcp", netip.AddrPortFrom(addr, 0).String())
	}
	var stack *polarnet.Stack
	switch os.Getenv("PNH_LINK") {
	case "memif":
		if err := InitEAL(testEAL()); err != nil {
			return err
		}
		mtu, _ := strconv.Atoi(os.Getenv("PNH_MTU"))
		poll, err := parsePoll(os.Getenv("PNH_POLL"))
		if err != nil {
			return err
		}
		l, err := New(Config{Device: os.Getenv("PNH_DEVICE"), MTU: mtu, SkipChecksums: os.Getenv("PNH_SKIPCSUM") == "1"})
		if err != nil {
			return err
		}
		pfx, err := netip.ParsePrefix(os.Getenv("PNH_ADDR"))
		if err != nil {
			l.Close()
			return err
		}
		spin, _ := time.ParseDuration(os.Getenv("PNH_SPIN"))
		if stack, err = polarnet.New(polarnet.Config{Link: l, Addrs: []netip.Prefix{pfx}, Poll: poll, SpinBudget: spin}); err != nil {
			return err
		}
		defer stack.Close()
		listen = func(addr netip.Addr) (net.Listener, error) {
			return stack.ListenTCP("tcp", netip.AddrPortFrom(addr, 0), 0, net.KeepAliveConfig{})
		}
	case "kernel":
	default:
		return fmt.Errorf("PNH_LINK=%q: want memif or kernel", os.Getenv("PNH_LINK"))
	}
	addr, err := netip.ParseAddr(strings.Split(os.Getenv("PNH_ADDR"), "/")[0])
	if err != nil {
		return err
	}
	servers := []struct {
		name  string
		serve func(net.Conn)
	}{
		{"echo", serveEcho},
		{"rr", rrbench.RR4K.Answer},
		{"sink", func(c net.Conn) { io.Copy(io.Discard, c) }},
	}
	var ready []string
	for _, s := range servers {
		ln, err := listen(addr)
		if err != nil {
			return err
		}
		defer ln.Close()
		go rrbench.Serve(ln, s.serve)
		_, port, _ := net.SplitHostPort(ln.Addr().String())
		ready = append(ready, s.name+"="+port)
	}
	fmt.Printf("READY %s\n", strings.Join(ready, " "))
	io.Copy(io.Discard, os.Stdin) // until the parent closes it
	return nil
}

func parsePoll(s string) (polarnet.PollMode, error) {
	switch s {
	case "", "adaptive":
		return polarnet.PollAdaptive, nil
	case "busy":
		return polarnet.PollBusy, nil
	case "blocking":
		return polarnet.PollBlocking, nil
	}
	return 0, fmt.Errorf("poll mode %q", s)
}

type closeWriter interface{ CloseWrite() error }

// serveEcho copies what it reads back as it arrives, one goroutine, as the
// plainest Go echo does (io.Copy), then half-closes.
func serveEcho(c net.Conn) {
	if _, err := io.Copy(c, c); err == nil {
		if cw, ok := c.(closeWriter); ok {
			cw.CloseWrite()
		}
	}
}

// helperProc is a running helper process.
type helperProc struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	ports map[string]int
}

// startHelper starts a helper with env (PNH_* settings), in namespace ns
// when ns is not empty, and waits until it is ready. Cleanup stops it.
func startHelper(t testing.TB, ns string, env ...string) *helperProc {
	t.Helper()
	exe, err := os.Executable()
	require.NoError(t, err)
	args := []string{exe, "-test.run=^$"}
	if cpu := os.Getenv(benchServerCPUEnv); cpu != "" {
		args = append([]string{"taskset", "-c", cpu}, args...)
	}
	if ns != "" {
		args = append([]string{"ip", "netns", "exec", ns}, args...)
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = append(append(os.Environ(), helperEnv+"=server"), env...)
	cmd.Stderr = &prefixWriter{prefix: "helper: ", w: os.Stderr}
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	h := &helperProc{cmd: cmd, stdin: stdin, ports: map[string]int{}}
	t.Cleanup(h.stop)

	line := make(chan string, 1)
	go func() {
		s := bufio.NewScanner(stdout)
		for s.Scan() {
			if strings.HasPrefix(s.Text(), "READY") {
				line <- s.Text()
				break
			}
		}
		io.Copy(io.Discard, stdout)
		close(line)
	}()
	select {
	case l, ok := <-line:
		require.True(t, ok, "helper exited before it was ready")
		for _, f := range strings.Fields(l)[1:] {
			k, v, _ := strings.Cut(f, "=")
			h.ports[k], _ = strconv.Atoi(v)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("helper not ready within 30s")
	}
	return h
}

// stop closes the helper's stdin and waits for it to exit, killing it
// after 10s.
func (h *helperProc) stop() {
	h.stdin.Close()
	done := make(chan error, 1)
	go func() { done <- h.cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		h.cmd.Process.Kill()
		<-done
	}
}

// cpu returns the CPU time the helper has used so far.
func (h *helperProc) cpu() (time.Duration, error) {
	return processCPU(h.cmd.Process.Pid)
}

// processCPU reads a process's user and system time from /proc (in clock
// ticks of 10ms).
func processCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// Fields after the command name, which is in parentheses.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, errors.New("unexpected /proc/pid/stat")
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, errors.New("short /proc/pid/stat")
	}
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * time.Second / 100, nil
}

// selfCPU returns this process's CPU time.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// prefixWriter writes lines to w with a prefix, so the helper's messages
// (EAL's among them) are told from the test process's.
type prefixWriter struct {
	prefix string
	w      io.Writer
	buf    []byte
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	p.buf = append(p.buf, b...)
	for {
		i := strings.IndexByte(string(p.buf), '\n')
		if i < 0 {
			return len(b), nil
		}
		fmt.Fprintf(p.w, "%s%s\n", p.prefix, p.buf[:i])
		p.buf = p.buf[i+1:]
	}
}
