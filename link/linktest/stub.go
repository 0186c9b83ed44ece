package linktest

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/polarnet/polarnet/polarnet"
)

// CheckStub checks what a cgo link's New returned in a build without the
// link (no build tag, or no cgo): no link, and an error wrapping
// polarnet.ErrNotSupported that contains each of wants (how to get a build
// with the link). It also checks that POLARNET_LINK=kind is not registered,
// so the environment switch fails the same way.
func CheckStub(t *testing.T, kind string, link any, err error, wants ...string) {
	t.Helper()
	require.Error(t, err)
	assert.Nil(t, link)
	assert.ErrorIs(t, err, polarnet.ErrNotSupported)
	for _, want := range wants {
		assert.ErrorContains(t, err, want)
	}
	_, err = polarnet.OpenLink(kind, polarnet.LinkParams{})
	assert.ErrorIs(t, err, polarnet.ErrNotSupported, "POLARNET_LINK=%s is not registered without the link in the build", kind)
}
