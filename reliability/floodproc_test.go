package reliability

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/polarnet/polarnet/internal/netns"
	"github.com/polarnet/polarnet/link/linktest"
)

// A flood of spoofed segments comes from another host. A flooder goroutine
// in the test's own process would take one of its Ps for as long as the
// flood lasts (a sender that never blocks runs 10 ms between preemptions),
// a share of the Go scheduler no remote sender has; a kernel stack under
// test gives up nothing to it, since the kernel does its TCP work outside
// the Ps. So the flood tests run the flooder in a process of their own,
// which competes with them for the CPUs only, as another host's traffic
// generator on the same machine would.

// flooderEnv carries a floodOrder to the flooder process.
const flooderEnv = "POLARNET_TEST_FLOODER"

// floodOrder tells the flooder process what to send and where: segments
// with Flags from spoofed sources (spoofedSegments) to Dst at DstMAC, on
// Device, at most Rate a second (0: as fast as the socket takes them).
type floodOrder struct {
	Device string
	Flags  uint8
	Rate   int
	Seed   uint64
	DstMAC string
	Dst    string
}

// floodReport is what the flooder process prints when stopped.
type floodReport struct {
	Sent int64
	Rate float64
	Err  string
}

// flooderReady is the line the flooder process prints once it floods.
const flooderReady = "flooding"

// TestFlooderProcess is the flooder process of startFloodProcess: it
// floods as its order says until its standard input closes, then prints a
// floodReport.
func TestFlooderProcess(t *testing.T) {
	order := os.Getenv(flooderEnv)
	if order == "" {
		t.Skip("the flooder process of the flood tests, which start it")
	}
	var o floodOrder
	require.NoError(t, json.Unmarshal([]byte(order), &o))
	mac, err := net.ParseMAC(o.DstMAC)
	require.NoError(t, err)
	q, err := linktest.OpenPacketSocket(o.Device)
	require.NoError(t, err)
	defer q.Close()
	f := startFlood(q, 1<<30, o.Rate, spoofedSegments(o.Flags, o.Seed, mac, netip.MustParseAddrPort(o.Dst)))
	fmt.Println(flooderReady)
	io.Copy(io.Discard, os.Stdin)
	var r floodReport
	var ferr error
	r.Sent, r.Rate, ferr = f.stop()
	if ferr != nil {
		r.Err = ferr.Error()
	}
	out, err := json.Marshal(r)
	require.NoError(t, err)
	fmt.Println(string(out))
}

// floodProcess is a running flooder process.
type floodProcess struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Scanner
}

// startFloodProcess starts a flooder process in ns that floods as o says,
// and returns once it floods. It is killed when t ends if not stopped.
func startFloodProcess(t *testing.T, ns *netns.NS, o floodOrder) *floodProcess {
	t.Helper()
	order, err := json.Marshal(o)
	require.NoError(t, err)
	cmd := exec.Command("ip", "netns", "exec", ns.Name, os.Args[0], "-test.run=^TestFlooderProcess$")
	cmd.Env = append(os.Environ(), flooderEnv+"="+string(order))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	f := &floodProcess{cmd: cmd, stdin: stdin, out: bufio.NewScanner(stdout)}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	ready := false
	for !ready && f.out.Scan() {
		ready = f.out.Text() == flooderReady
	}
	require.True(t, ready, "the flooder process did not start flooding (%v)", f.out.Err())
	return f
}

// stop stops the flood and returns the frames sent, their rate and the
// flooder's error.
func (f *floodProcess) stop() (sent int64, rate float64, err error) {
	f.stdin.Close()
	var r floodReport
	found := false
	for f.out.Scan() {
		if line := f.out.Text(); strings.HasPrefix(line, "{") {
			err = json.Unmarshal([]byte(line), &r)
			found = err == nil
		}
	}
	if werr := f.cmd.Wait(); werr != nil && err == nil {
		err = fmt.Errorf("flooder process: %w", werr)
	}
	switch {
	case err != nil:
	case !found:
		err = fmt.Errorf("flooder process: no report")
	case r.Err != "":
		err = fmt.Errorf("flooder process: %s", r.Err)
	}
	return r.Sent, r.Rate, err
}
