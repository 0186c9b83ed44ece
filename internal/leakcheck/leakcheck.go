// Package leakcheck asserts that a test left no goroutines or file
// descriptors behind.
package leakcheck

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

// Snapshot records the goroutines and open fds at the start of a test.
type Snapshot struct {
	goroutines int
	fds        int
}

// Take records the current counts. It first starts the runtime's network
// poller (the first timer does), whose two fds stay open for good and are
// no test's leak.
func Take() Snapshot {
	time.Sleep(time.Nanosecond)
	return Snapshot{goroutines: runtime.NumGoroutine(), fds: countFDs()}
}

// Check fails t if, within a few seconds, the counts have not come back to
// the snapshot's. Goroutines that end asynchronously (timers, the runtime)
// get that long to finish.
func (s Snapshot) Check(t testing.TB) {
	t.Helper()
	if err := s.settle(); err != nil {
		t.Error(err)
	}
}

// Main runs a package's tests (m.Run) and returns their exit code, or 1 if
// they passed but left goroutines or fds behind between them: a leak no
// single test checks for, which every later test would run beside. A
// package's TestMain calls os.Exit(leakcheck.Main(m)). A fuzzing run
// (-test.fuzz) is not checked: its coordinator keeps a signal handler.
func Main(m *testing.M) int {
	flag.Parse()
	if f := flag.Lookup("test.fuzz"); f != nil && f.Value.String() != "" {
		return m.Run()
	}
	s := Take()
	code := m.Run()
	if err := s.settle(); code == 0 && err != nil {
		fmt.Fprintf(os.Stderr, "leakcheck: the package's tests %v\n", err)
		return 1
	}
	return code
}

// settle waits a few seconds for the counts to come back to the snapshot's
// and describes what is left if they do not.
func (s Snapshot) settle() error {
	deadline := time.Now().Add(5 * time.Second)
	for {
		g, f := runtime.NumGoroutine(), countFDs()
		if g <= s.goroutines && f <= s.fds {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("leak: %d goroutines (was %d), %d fds (was %d)\n%s", g, s.goroutines, f, s.fds, Stacks())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func countFDs() int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return 0
	}
	return len(ents)
}

// Stacks returns the stacks of the process's goroutines, but for those
// every test binary has.
func Stacks() string {
	buf := make([]byte, 1<<20)
	n := runtime.Stack(buf, true)
	return interesting(string(buf[:n]))
}

// interesting drops the goroutines every test binary has.
func interesting(stacks string) string {
	var keep []string
	for _, g := range strings.Split(stacks, "\n\n") {
		if strings.Contains(g, "testing.(*T).Run") || strings.Contains(g, "testing.tRunner") && strings.Contains(g, "runtime.Stack") {
			continue
		}
		keep = append(keep, g)
	}
	return strings.Join(keep, "\n\n")
}
