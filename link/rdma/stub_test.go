//go:build !(rdma && linux && cgo)

package rdma

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/polarnet/polarnet/polarnet"
)

func TestStubExplainsHowToBuild(t *testing.T) {
	l, err := New(Config{Netdev: "eth0"})
	require.Error(t, err)
	assert.Nil(t, l)
	assert.ErrorIs(t, err, polarnet.ErrNotSupported)
	for _, want := range []string{"-tags rdma", "libibverbs-dev", "CAP_NET_RAW", "cgo"} {
		assert.Contains(t, err.Error(), want)
	}
	_, err = polarnet.OpenLink("rdma", polarnet.LinkParams{})
	assert.ErrorIs(t, err, polarnet.ErrNotSupported, "without the tag the link is not registered")
}
