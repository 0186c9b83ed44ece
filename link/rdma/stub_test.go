//go:build !(rdma && linux && cgo)

package rdma

import (
	"testing"

	"github.com/polarnet/polarnet/link/linktest"
)

func TestStubExplainsHowToBuild(t *testing.T) {
	l, err := New(Config{Netdev: "eth0"})
	linktest.CheckStub(t, "rdma", l, err, "-tags rdma", "libibverbs-dev", "CAP_NET_RAW", "cgo")
}
