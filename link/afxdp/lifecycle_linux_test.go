package afxdp

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Environment of the helper process that holds a link until it is killed.
const (
	helperEnv        = "AFXDP_TEST_HOLD_LINK"    // the interface
	helperNetlinkEnv = "AFXDP_TEST_HOLD_NETLINK" // attach through netlink
)

// TestHelperHoldLink is not a test: run as a child process by the tests
// below, it opens a link, says so on stdout and waits to be killed.
func TestHelperHoldLink(t *testing.T) {
	ifname := os.Getenv(helperEnv)
	if ifname == "" {
		t.Skip("helper process only")
	}
	l, err := newLink(Config{Interface: ifname, Filter: FilterAll}, testHooks{netlinkAttach: os.Getenv(helperNetlinkEnv) != ""})
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	fmt.Printf("ready %v\n", l)
	time.Sleep(time.Minute) // killed long before
	os.Exit(2)
}

// attachedPrograms returns the names of the XDP programs on ifname.
func attachedPrograms(t *testing.T, ifname string) []string {
	t.Helper()
	ifi, err := net.InterfaceByName(ifname)
	require.NoError(t, err)
	progs, err := xdpPrograms(ifi.Index)
	require.NoError(t, err)
	var names []string
	for _, p := range progs {
		name, _ := programOwner(ebpfProgramID(p.progID))
		names = append(names, name)
	}
	return names
}

// TestProgramGoneAfterClose: Close detaches the program, in both ways of
// attaching it.
func TestProgramGoneAfterClose(t *testing.T) {
	for _, netlink := range []bool{false, true} {
		t.Run(fmt.Sprintf("netlink=%v", netlink), func(t *testing.T) {
			v := newVeth(t, vethOptions{noIPv6: true})
			l, err := newLink(Config{Interface: v.local, Filter: FilterAll}, testHooks{netlinkAttach: netlink})
			require.NoError(t, err)
			names := attachedPrograms(t, v.local)
			require.Len(t, names, 1)
			assert.True(t, strings.HasPrefix(names[0], programPrefix), names[0])
			require.NoError(t, l.Close())
			assert.Empty(t, attachedPrograms(t, v.local), "XDP programs after Close")
		})
	}
}

// TestProgramGoneAfterKill kills a process that holds a link, then opens a
// link on the same interface: a BPF link's program is gone with the
// process; a netlink attachment stays behind until the next New detects and
// replaces it. Either way the new link works and leaves nothing after Close.
func TestProgramGoneAfterKill(t *testing.T) {
	for _, netlink := range []bool{false, true} {
		t.Run(fmt.Sprintf("netlink=%v", netlink), func(t *testing.T) {
			v := newVeth(t, vethOptions{noIPv6: true})
			cmd := exec.Command(os.Args[0], "-test.run=^TestHelperHoldLink$", "-test.v")
			cmd.Env = append(os.Environ(), helperEnv+"="+v.local)
			if netlink {
				cmd.Env = append(cmd.Env, helperNetlinkEnv+"=1")
			}
			stdout, err := cmd.StdoutPipe()
			require.NoError(t, err)
			require.NoError(t, cmd.Start())
			t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
			ready := make(chan string, 1)
			go func() {
				sc := bufio.NewScanner(stdout)
				for sc.Scan() {
					if line := sc.Text(); strings.HasPrefix(line, "ready") || strings.HasPrefix(line, "error") {
						ready <- line
						return
					}
				}
				ready <- "helper exited"
			}()
			select {
			case line := <-ready:
				require.True(t, strings.HasPrefix(line, "ready"), line)
			case <-time.After(20 * time.Second):
				t.Fatal("helper did not open its link")
			}
			names := attachedPrograms(t, v.local)
			require.Len(t, names, 1)
			assert.Equal(t, fmt.Sprintf("%s%d", programPrefix, cmd.Process.Pid), names[0])

			require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
			cmd.Wait()
			if netlink {
				assert.Equal(t, names, attachedPrograms(t, v.local), "a netlink attachment outlives its process")
			} else {
				assert.Empty(t, attachedPrograms(t, v.local), "a BPF link's program goes with its process")
			}

			start := time.Now()
			l, err := newLink(Config{Interface: v.local, Filter: FilterAll}, testHooks{})
			require.NoError(t, err)
			t.Logf("New after the kill took %v (stale program replaced: %v)", time.Since(start), l.stale != 0)
			assert.Equal(t, netlink, l.stale != 0, "stale program detected")
			names = attachedPrograms(t, v.local)
			require.Len(t, names, 1)
			assert.Equal(t, fmt.Sprintf("%s%d", programPrefix, os.Getpid()), names[0])
			require.NoError(t, l.Close())
			assert.Empty(t, attachedPrograms(t, v.local), "XDP programs after Close")
		})
	}
}
