package reliability

import (
	"os"
	"testing"

	"github.com/polarnet/polarnet/internal/leakcheck"
)

// TestMain fails the package if its tests, all passing, left goroutines or
// fds behind: the stacks of one test would otherwise load every later one.
func TestMain(m *testing.M) { os.Exit(leakcheck.Main(m)) }
