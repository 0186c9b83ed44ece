package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// kernelMIB sums named counters of one section of a /proc/net MIB file,
// and says -1 where a name or the section is missing.
func TestKernelMIB(t *testing.T) {
	path := filepath.Join(t.TempDir(), "netstat")
	require.NoError(t, os.WriteFile(path, []byte(
		"TcpExt: SyncookiesSent TCPFullUndo TCPLossUndo\n"+
			"TcpExt: 7 2 3\n"+
			"IpExt: InNoRoutes TCPFullUndo\n"+
			"IpExt: 1 100\n"), 0o600))
	assert.Equal(t, int64(5), kernelMIB(path, "TcpExt:", "TCPFullUndo", "TCPLossUndo"))
	assert.Equal(t, int64(100), kernelMIB(path, "IpExt:", "TCPFullUndo"))
	assert.Equal(t, int64(-1), kernelMIB(path, "TcpExt:", "TCPFullUndo", "TCPDSACKUndo"))
	assert.Equal(t, int64(-1), kernelMIB(path, "MPTcpExt:", "TCPFullUndo"))
	assert.Equal(t, int64(-1), kernelMIB(filepath.Join(t.TempDir(), "none"), "TcpExt:", "TCPFullUndo"))
	assert.GreaterOrEqual(t, kernelSpurious(), int64(0), "this host's counters")
	assert.GreaterOrEqual(t, kernelRetrans(), int64(0))
}
