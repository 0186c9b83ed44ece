//go:build amd64

package polarnet_test

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"testing"
	"time"

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
// between must show it, none after.
func TestKeepWakeupsLocalRaisesTheRuntimeSpinningCount(t *testing.T) {
	if os.Getenv(spinningHelperEnv) != "" {
		time.Sleep(20 * time.Millisecond)
		fmt.Fprintln(os.Stderr, "HOLD")
		// Held only while running, as the engine holds it: a goroutine
		// that sleeps with the count raised may never be woken (its
		// timer's wake-up of an idle P is suppressed too).
		polarnet.KeepWakeupsLocal()
		for start := time.Now(); time.Since(start) < 100*time.Millisecond; {
		}
		polarnet.ReleaseWakeups()
		fmt.Fprintln(os.Stderr, "RELEASE")
		time.Sleep(100 * time.Millisecond)
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestKeepWakeupsLocalRaisesTheRuntimeSpinningCount$")
	cmd.Env = append(os.Environ(), spinningHelperEnv+"=1", "GODEBUG=schedtrace=5")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Run(), stderr.String())

	spinning := regexp.MustCompile(`^SCHED .* spinningthreads=(\d+)`)
	var held, heldRaised, after, afterRaised int
	phase := ""
	for sc := bufio.NewScanner(&stderr); sc.Scan(); {
		line := sc.Text()
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
		} else {
			after++
			if n >= 1 {
				afterRaised++
			}
		}
	}
	require.GreaterOrEqual(t, held, 5, "too few scheduler reports while held:\n%s", stderr.String())
	require.GreaterOrEqual(t, after, 5, "too few scheduler reports after:\n%s", stderr.String())
	assert.Equal(t, held, heldRaised, "reports while held that show no spinning M")
	assert.Less(t, afterRaised, after/2, "the count stays raised after release")
}
