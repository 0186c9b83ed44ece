package xfer

import (
	"bytes"
	"io"
	"testing"
	"testing/iotest"

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

// TestVerify checks a pattern read in pieces of any size, a short one, and
// one with a byte changed, which Verify names.
func TestVerify(t *testing.T) {
	const n = 100003
	want, err := io.ReadAll(Pattern(n, 5))
	require.NoError(t, err)
	got, err := Verify(iotest.HalfReader(bytes.NewReader(want)), 5)
	assert.NoError(t, err)
	assert.Equal(t, int64(n), got)
	got, err = Verify(bytes.NewReader(want[:n/2]), 5)
	assert.NoError(t, err, "a stream cut short is the pattern's start")
	assert.Equal(t, int64(n/2), got)

	bad := bytes.Clone(want)
	bad[77777] ^= 1
	got, err = Verify(bytes.NewReader(bad), 5)
	assert.ErrorContains(t, err, "byte 77777")
	assert.Equal(t, int64(77777), got)
	_, err = Verify(bytes.NewReader(want), 6)
	assert.Error(t, err, "another seed's pattern")
}
