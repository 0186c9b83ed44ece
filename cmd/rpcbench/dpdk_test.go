//go:build dpdk && linux && cgo

package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/polarnet/polarnet/internal/testenv"
)

// TestMemifVariants: TestModes runs p2p-memif's smoke cases with the other
// modes (dpdk.go lists it); this adds its pinned row and jumbo MTUs, checks
// that no frame was dropped for want of room on the memif rings, and that
// an MTU memif cannot carry is refused clearly.
func TestMemifVariants(t *testing.T) {
	require.Contains(t, modeOrder, "p2p-memif")
	testenv.RequirePriv(t)
	for _, c := range []struct {
		mode modeSpec
		test string
	}{
		{modeSpec{Name: "p2p-memif", Pin: true}, "rr/4k-write/c1/d1"},
		{modeSpec{Name: "p2p-memif", MTU: 9000}, "rr/4k-write/c4/d8"},
		{modeSpec{Name: "p2p-memif", MTU: 65000}, "stream/c1"},
	} {
		t.Run(c.mode.String()+"/"+c.test, func(t *testing.T) {
			o := smokeOpts(t)
			tc, err := parseTest(c.test)
			require.NoError(t, err)
			res, err := runOnce(t.Context(), o, c.mode, tc)
			require.NoError(t, err)
			checkResult(t, &res, tc, false)
			assert.Zero(t, res.DropsClient, "client link drops")
			assert.Zero(t, res.DropsServer, "server link drops")
		})
	}
	t.Run("mtu=65535", func(t *testing.T) {
		tc, err := parseTest("rr/4k-write/c1/d1")
		require.NoError(t, err)
		_, err = runOnce(t.Context(), smokeOpts(t), modeSpec{Name: "p2p-memif", MTU: 65535}, tc)
		assert.ErrorContains(t, err, "at most 65535 bytes (MTU 65517)")
	})
}
