package linktest

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/polarnet/polarnet/link"
)

// CheckStub checks what a cgo link's New returned in a build without the
// link (no build tag, or no cgo): no link, and an error wrapping
// link.ErrNotSupported that contains each of wants (how to get a build
// with the link). It also checks that POLARNET_LINK=kind fails with the
// same explanation.
func CheckStub(t *testing.T, kind string, l any, err error, wants ...string) {
	t.Helper()
	require.Error(t, err)
	assert.Nil(t, l)
	assert.ErrorIs(t, err, link.ErrNotSupported)
	for _, want := range wants {
		assert.ErrorContains(t, err, want)
	}
	l, err = link.Open(kind, link.Params{})
	assert.Nil(t, l)
	assert.ErrorIs(t, err, link.ErrNotSupported)
	for _, want := range wants {
		assert.ErrorContains(t, err, want, "POLARNET_LINK=%s", kind)
	}
}
