//go:build !(dpdk && linux && cgo)

package dpdk

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/polarnet/polarnet/link"
	"github.com/polarnet/polarnet/link/linktest"
)

// TestStub: without DPDK in the build, New and InitEAL say how to get it,
// and why this build has none (no tag, or no cgo).
func TestStub(t *testing.T) {
	l, err := New(Config{Device: "net_af_packet0,iface=eth0"})
	linktest.CheckStub(t, "dpdk", l, err, "-tags dpdk", "libdpdk-dev", stubReason)
	assert.ErrorIs(t, InitEAL(EALConfig{}), link.ErrNotSupported)
}
