package testenv

import (
	"fmt"
	"os"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// recorder is a testing.TB that records Skipf and Fatalf instead of ending
// the real test, so both outcomes of a missing requirement can be checked.
type recorder struct {
	testing.TB
	skipped, failed bool
	msg             string
}

func (*recorder) Helper() {}

func (r *recorder) Skipf(format string, args ...any) {
	r.skipped, r.msg = true, fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func (r *recorder) Fatalf(format string, args ...any) {
	r.failed, r.msg = true, fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// run calls fn with a recorder on its own goroutine, as Skipf and Fatalf end
// the goroutine that calls them.
func run(fn func(testing.TB)) *recorder {
	r := &recorder{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(r)
	}()
	<-done
	return r
}

func TestRequireCommandFound(t *testing.T) {
	var path string
	r := run(func(tb testing.TB) { path = RequireCommand(tb, "sh") })
	assert.False(t, r.skipped || r.failed, r.msg)
	assert.NotEmpty(t, path)
}

func TestRequireCommandMissingSkips(t *testing.T) {
	t.Setenv(RequirePrivEnv, "")
	r := run(func(tb testing.TB) { RequireCommand(tb, "polarnet-no-such-command") })
	assert.True(t, r.skipped)
	assert.False(t, r.failed)
	assert.Contains(t, r.msg, "polarnet-no-such-command")
}

func TestRequireCommandMissingFailsWhenRequired(t *testing.T) {
	t.Setenv(RequirePrivEnv, "1")
	r := run(func(tb testing.TB) { RequireCommand(tb, "polarnet-no-such-command") })
	assert.True(t, r.failed)
	assert.False(t, r.skipped)
	assert.Contains(t, r.msg, RequirePrivEnv)
}

func TestRequirePriv(t *testing.T) {
	t.Setenv(RequirePrivEnv, "1")
	r := run(RequirePriv)
	if os.Geteuid() == 0 {
		require.False(t, r.skipped || r.failed, r.msg)
		return
	}
	assert.True(t, r.failed)
	t.Setenv(RequirePrivEnv, "")
	r = run(RequirePriv)
	assert.True(t, r.skipped)
}
