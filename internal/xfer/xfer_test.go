package xfer

import (
	"bytes"
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPatternReadSizes checks the stream is the same bytes whatever sizes
// the reads take, and exactly n of them.
func TestPatternReadSizes(t *testing.T) {
	const n = 10007
	want, err := io.ReadAll(Pattern(n, 7))
	require.NoError(t, err)
	require.Len(t, want, n)
	for _, size := range []int{1, 3, 7, 8, 9, 64, 4093} {
		p, got, buf := Pattern(n, 7), []byte(nil), make([]byte, size)
		for {
			k, err := p.Read(buf)
			got = append(got, buf[:k]...)
			if err == io.EOF {
				break
			}
			require.NoError(t, err)
		}
		assert.Equal(t, want, got, "reads of %d bytes", size)
	}
	other, err := io.ReadAll(Pattern(n, 8))
	require.NoError(t, err)
	assert.False(t, bytes.Equal(want, other), "seeds 7 and 8 gave the same bytes")
}
