//go:build amd64

package polarnet_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/polarnet/polarnet/polarnet"
)

const spinningHelperEnv = "POLARNET_TEST_SPINNING_HELPER"

// keepWakeupsLocal adds to the word gVisor's sync package takes for the
// runtime's count of spinning Ms, at an offset in runtime.sched that gVisor's
// assembly hard-codes. A Go release that moved the field would make every
// local wake-up write somewhere else in the scheduler. The runtime reports
// the count itself (GODEBUG=schedtrace: spinningthreads), so an idle child
// process holds the count raised between two markers: every report in
// between must show it, few after. The phases last until the parent has
// read enough reports (it writes a byte to end the hold and closes stdin to
// end the child), not for a set time: a child starved of CPU reports less.
func TestKeepWakeupsLocalRaisesTheRuntimeSpinningCount(t *testing.T) {
	if os.Getenv(spinningHelperEnv) != "" {
		spinningHelper()
		return
	}
	const reports = 10 // a phase's reports, at 5ms each
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestKeepWakeupsLocalRaisesTheRuntimeSpinningCount$")
	cmd.Env = append(os.Environ(), spinningHelperEnv+"=1", "GODEBUG=schedtrace=5")
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())

	spinning := regexp.MustCompile(`^SCHED .* spinningthreads=(\d+)`)
	var held, heldRaised, after, afterRaised int
	var log strings.Builder
	phase := ""
	for sc := bufio.NewScanner(stderr); sc.Scan(); {
		line := sc.Text()
		fmt.Fprintln(&log, line)
		switch line {
		case "HOLD", "RELEASE":
			phase = line
			continue
		}
		m := spinning.FindStringSubmatch(line)
		if m == nil || phase == "" {
			continue
		}
		n, _ := strconv.Atoi(m[1])
		if phase == "HOLD" {
			held++
			if n >= 1 {
				heldRaised++
			}
			if held == reports {
				_, err := stdin.Write([]byte{1})
				require.NoError(t, err)
			}
		} else {
			after++
			if n >= 1 {
				afterRaised++
			}
			if after == reports {
				require.NoError(t, stdin.Close())
			}
		}
	}
	require.NoError(t, cmd.Wait(), log.String())
	require.GreaterOrEqual(t, held, reports, "too few scheduler reports while held:\n%s", log.String())
	require.GreaterOrEqual(t, after, reports, "too few scheduler reports after:\n%s", log.String())
	assert.Equal(t, held, heldRaised, "reports while held that show no spinning M")
	assert.Less(t, afterRaised, after/2, "the count stays raised after release")
}

// spinningHelper is the child: it raises the count while it computes, until
// a byte arrives on stdin (read without blocking, nor entering the
// scheduler), then sleeps in a read of stdin until the parent closes it.
// The markers bracket the count raised: HOLD once raised, RELEASE before it
// is lowered, so that no report between a marker and the change it marks
// falls in the phase that must show the count raised.
func spinningHelper() {
	time.Sleep(20 * time.Millisecond)
	if err := syscall.SetNonblock(0, true); err != nil {
		panic(err)
	}
	// Held only while running, as the engine holds it: a goroutine that
	// sleeps with the count raised may never be woken (its timer's wake-up
	// of an idle P is suppressed too).
	polarnet.KeepWakeupsLocal()
	fmt.Fprintln(os.Stderr, "HOLD")
	var b [1]byte
	for {
		n, _, _ := syscall.RawSyscall(syscall.SYS_READ, 0, uintptr(unsafe.Pointer(&b[0])), 1)
		if int(n) == 1 {
			break
		}
	}
	fmt.Fprintln(os.Stderr, "RELEASE")
	polarnet.ReleaseWakeups()
	if err := syscall.SetNonblock(0, false); err != nil {
		panic(err)
	}
	_, _ = io.Copy(io.Discard, os.Stdin)
}
