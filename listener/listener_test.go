package listener

import (
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestKernelPathGetsEveryField: what a polarnet stack cannot use (Control,
// MPTCP) still reaches Go's net when there is no stack.
func TestKernelPathGetsEveryField(t *testing.T) {
	called := false
	lc := ListenConfig{Control: func(string, string, syscall.RawConn) error { called = true; return nil }}
	lc.SetMultipathTCP(true)
	k := lc.kernel()
	require.NotNil(t, k.Control)
	require.NoError(t, k.Control("tcp", "198.18.0.1:1", nil))
	assert.True(t, called)
	assert.True(t, k.MultipathTCP())
	assert.True(t, lc.MultipathTCP(), "no default stack here: Go's net decides")
}
