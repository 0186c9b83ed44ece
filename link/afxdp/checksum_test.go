package afxdp

import (
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/polarnet/polarnet/internal/frame"
)

// TestCompleteChecksum completes a partial checksum over a frame cut into
// pieces, as a multi-buffer frame lies in UMEM, at even and odd cuts.
func TestCompleteChecksum(t *testing.T) {
	payload := make([]byte, 8999)
	for i := range payload {
		payload[i] = byte(i*13 + 5)
	}
	for _, v6 := range []bool{false, true} {
		src, dst := netip.AddrPortFrom(stack4, 80), netip.AddrPortFrom(kernel4, 40000)
		if v6 {
			src, dst = netip.AddrPortFrom(stack6, 80), netip.AddrPortFrom(kernel6, 40000)
		}
		f := frame.TCPFrame(frame.TCPSpec{Src: src, Dst: dst, Seq: 7, Flags: frame.FlagACK | frame.FlagPSH, Window: 512, Payload: payload})
		p, ok := frame.Parse(f)
		require.True(t, ok)
		for _, cuts := range [][]int{nil, {3840, 7680}, {101, 102, 3001, 5000}, {p.L4 + 18, p.L4 + 19, len(f) - 1}} {
			partial := append([]byte(nil), f...)
			binary.BigEndian.PutUint16(partial[p.L4+16:], frame.Fold(frame.PseudoHeaderSum(p, len(partial)-p.L4)))
			var pieces [][]byte
			last := 0
			for _, c := range append(cuts, len(partial)) {
				pieces = append(pieces, partial[last:c])
				last = c
			}
			completeChecksum(pieces, p.L4, 16)
			assert.Equal(t, f, partial, "v6=%v cuts=%v", v6, cuts)
		}
	}
}
