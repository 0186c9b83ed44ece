// Package testenv gates tests on what they need from the host (root
// privileges, commands on PATH) and gives them network namespaces and veth
// pairs that are removed when the test ends.
//
// A missing requirement skips the test on a developer's machine but fails it
// when POLARNET_REQUIRE_PRIV is set (CI runs as root and sets it), so a
// privileged test can never silently stop running where it matters.
package testenv

import (
	"os"
	"os/exec"
	"testing"

	"github.com/polarnet/polarnet/internal/netns"
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

// NewNS creates a uniquely named namespace (prefix "pn-" + short random
// suffix, name <= 15 chars) with lo up, and registers t.Cleanup that deletes
// it (and kills processes left in it). Fails the test on error.
//
// It skips or fails t as RequirePriv does when not running as root, and as
// RequireCommand does when ip is not installed.
//
// The kernel frees a namespace, and destroys the interfaces in it, only once
// nothing refers to it: close sockets opened with Do before the cleanup runs
// (a t.Cleanup registered after NewNS runs before it).
func NewNS(t testing.TB) *netns.NS {
	t.Helper()
	RequirePriv(t)
	RequireCommand(t, "ip")
	ns, err := netns.Create()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := ns.Delete(); err != nil {
			t.Error(err)
		}
	})
	return ns
}

// Veth creates a veth pair named a/b in the current namespace (both up) and
// registers cleanup to delete it.
//
// It skips or fails t as NewNS does. Ends moved into a namespace made by
// NewNS go away with that namespace; the cleanup deletes the pair if an end
// is still in the current namespace.
func Veth(t testing.TB, a, b string) {
	t.Helper()
	RequirePriv(t)
	RequireCommand(t, "ip")
	if err := netns.AddVeth(a, b); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := netns.DeleteVeth(a, b); err != nil {
			t.Error(err)
		}
	})
}
