//go:build dpdk && linux && cgo

package dpdk

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestHeaderConstants: the flags written out in pure Go are DPDK's.
func TestHeaderConstants(t *testing.T) {
	for name, v := range headerConstants() {
		assert.Equal(t, v[1], v[0], name)
	}
}
