// Package testenv gates tests on what they need from the host: root
// privileges and commands on PATH.
//
// A missing requirement skips the test on a developer's machine but fails it
// when POLARNET_REQUIRE_PRIV is set (CI runs as root and sets it), so a
// privileged test can never silently stop running where it matters.
package testenv

import (
	"os"
	"os/exec"
	"testing"
)

// RequirePrivEnv names the environment variable that turns skips into
// failures when set to a non-empty value.
const RequirePrivEnv = "POLARNET_REQUIRE_PRIV"

// RequirePriv skips t unless the process runs as root (effective uid 0). When
// RequirePrivEnv is set it fails t instead of skipping.
func RequirePriv(t testing.TB) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	missing(t, "test needs root (effective uid is %d)", os.Geteuid())
}

// RequireCommand skips t unless the command name is found on PATH, and
// returns its path. When RequirePrivEnv is set it fails t instead of skipping.
func RequireCommand(t testing.TB, name string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		missing(t, "test needs command %q: %v", name, err)
	}
	return path
}

func missing(t testing.TB, format string, args ...any) {
	t.Helper()
	if os.Getenv(RequirePrivEnv) != "" {
		t.Fatalf(format+" (and %s is set, so this is a failure, not a skip)", append(args, RequirePrivEnv)...)
	}
	t.Skipf(format+" (set %s to fail instead of skipping)", append(args, RequirePrivEnv)...)
}
