//go:build !(dpdk && linux && cgo)

package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestMemifWithoutDPDK: without DPDK in the build p2p-memif is not listed
// (nor run by TestModes), and asking for it says how to build it.
func TestMemifWithoutDPDK(t *testing.T) {
	assert.NotContains(t, modeOrder, "p2p-memif")
	m, err := parseMode("p2p-memif:mtu=9000")
	require.NoError(t, err)
	tc, err := parseTest("rr/4k-write/c1/d1")
	require.NoError(t, err)
	_, err = runOnce(t.Context(), smokeOpts(t), m, tc)
	assert.ErrorContains(t, err, "-tags dpdk")
	assert.ErrorContains(t, err, "libdpdk-dev")
}
