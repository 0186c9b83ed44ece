package testenv

import (
	"bufio"
	"errors"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/polarnet/polarnet/internal/netns"
)

// cleanupWait bounds how long the kernel may take to destroy the interfaces
// of a deleted namespace (it does so asynchronously).
const cleanupWait = 5 * time.Second

func TestUniqueName(t *testing.T) {
	a, b := netns.UniqueName("pnv"), netns.UniqueName("pnv")
	assert.NotEqual(t, a, b)
	for _, name := range []string{a, b, netns.UniqueName("123456789"), netns.UniqueName("")} {
		assert.LessOrEqual(t, len(name), unix.IFNAMSIZ-1, name)
	}
	assert.True(t, strings.HasPrefix(a, "pnv"))
	assert.Panics(t, func() { netns.UniqueName("1234567890") })
}

func TestNewCleansUp(t *testing.T) {
	requirePriv(t)
	var ns *netns.NS
	t.Run("create", func(t *testing.T) {
		ns = NewNS(t)
		assert.LessOrEqual(t, len(ns.Name), unix.IFNAMSIZ-1)
		assert.Contains(t, namespaces(t), ns.Name)
		out, err := ns.Exec("ip", "-o", "link", "show", "dev", "lo")
		require.NoError(t, err)
		assert.Contains(t, out, "UP")
	})
	require.NotNil(t, ns)
	assert.NotContains(t, namespaces(t), ns.Name)
}

// TestCleanupOnAbort shows that namespaces, veth pairs and processes left in
// a namespace are removed when a test stops midway: SkipNow ends the test
// goroutine the way FailNow does.
func TestCleanupOnAbort(t *testing.T) {
	requirePriv(t)
	var (
		ns   *netns.NS
		a, b = netns.UniqueName("pnt"), netns.UniqueName("pnt")
		cmd  *exec.Cmd
	)
	t.Run("abort", func(t *testing.T) {
		ns = NewNS(t)
		Veth(t, a, b)
		require.NoError(t, ns.MoveLink(b))
		// ip netns exec execs the command, so cmd.Process is sleep.
		cmd = exec.Command("ip", "netns", "exec", ns.Name, "sleep", "60")
		require.NoError(t, cmd.Start())
		t.SkipNow()
	})
	require.NotNil(t, cmd)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		assert.Error(t, err, "sleep should have been killed")
	case <-time.After(cleanupWait):
		_ = cmd.Process.Kill()
		t.Error("process left in the namespace was not killed")
	}
	assert.NotContains(t, namespaces(t), ns.Name)
	assertNoLink(t, a)
	assertNoLink(t, b)
}

// TestVethTCP connects two namespaces with a veth pair and opens a kernel TCP
// connection across it with sockets made by Do.
func TestVethTCP(t *testing.T) {
	requirePriv(t)
	var (
		ns1, ns2 *netns.NS
		a, b     = netns.UniqueName("pnt"), netns.UniqueName("pnt")
	)
	t.Run("connect", func(t *testing.T) {
		ns1, ns2 = NewNS(t), NewNS(t)
		Veth(t, a, b)
		_, err := net.InterfaceByName(a)
		require.NoError(t, err, "Veth creates the pair in the current namespace")
		require.NoError(t, ns1.MoveLink(a))
		require.NoError(t, ns2.MoveLink(b))
		_, err = ns1.Exec("ip", "addr", "add", "198.18.0.1/30", "dev", a)
		require.NoError(t, err)
		_, err = ns2.Exec("ip", "addr", "add", "198.18.0.2/30", "dev", b)
		require.NoError(t, err)

		var ln net.Listener
		require.NoError(t, ns1.Do(func() error {
			if _, err := net.InterfaceByName(a); err != nil {
				return err
			}
			var err error
			ln, err = net.Listen("tcp4", "198.18.0.1:0")
			return err
		}))
		t.Cleanup(func() { ln.Close() })
		_, err = net.InterfaceByName(a)
		require.Error(t, err, "the caller's namespace is unchanged after Do")

		accepted := make(chan string, 1)
		go func() {
			c, err := ln.Accept()
			if err != nil {
				accepted <- err.Error()
				return
			}
			defer c.Close()
			line, _ := bufio.NewReader(c).ReadString('\n')
			accepted <- line
		}()

		var c net.Conn
		require.NoError(t, ns2.Do(func() error {
			var err error
			c, err = net.DialTimeout("tcp4", ln.Addr().String(), cleanupWait)
			return err
		}))
		t.Cleanup(func() { c.Close() })
		_, err = c.Write([]byte("hello across\n"))
		require.NoError(t, err)
		select {
		case line := <-accepted:
			assert.Equal(t, "hello across\n", line)
		case <-time.After(cleanupWait):
			t.Fatal("no connection accepted")
		}
	})
	require.NotNil(t, ns2)
	assert.NotContains(t, namespaces(t), ns1.Name)
	assert.NotContains(t, namespaces(t), ns2.Name)
	assertNoLink(t, a)
	assertNoLink(t, b)
}

func TestDoReturnsError(t *testing.T) {
	ns := NewNS(t)
	want := errors.New("from fn")
	assert.ErrorIs(t, ns.Do(func() error { return want }), want)

	gone := &netns.NS{Name: "pn-nonexistent"}
	assert.Error(t, gone.Do(func() error { return nil }))
}

func TestExecReportsOutput(t *testing.T) {
	ns := NewNS(t)
	_, err := ns.Exec("ip", "link", "show", "dev", "pn-missing")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "pn-missing")
}

// requirePriv skips (or fails) tests that check, after a subtest, what the
// subtest left behind: the subtest alone would skip, leaving nothing to check.
func requirePriv(t *testing.T) {
	t.Helper()
	RequirePriv(t)
	RequireCommand(t, "ip")
}

// namespaces lists the named network namespaces.
func namespaces(t *testing.T) []string {
	t.Helper()
	out, err := exec.Command("ip", "netns", "list").Output()
	require.NoError(t, err)
	var names []string
	for line := range strings.Lines(string(out)) {
		if f := strings.Fields(line); len(f) > 0 {
			names = append(names, f[0])
		}
	}
	return names
}

// assertNoLink checks that no interface called name is left in the current
// namespace, waiting for the kernel's asynchronous namespace teardown.
func assertNoLink(t *testing.T, name string) {
	t.Helper()
	assert.Eventually(t, func() bool {
		_, err := net.InterfaceByName(name)
		return err != nil
	}, cleanupWait, 10*time.Millisecond, "interface %s left behind", name)
}
