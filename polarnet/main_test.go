package polarnet

import (
	"os"
	"testing"

	"github.com/polarnet/polarnet/internal/leakcheck"
)

// TestMain fails the package if its tests, all passing, left goroutines or
// fds behind.
func TestMain(m *testing.M) { os.Exit(leakcheck.Main(m)) }
