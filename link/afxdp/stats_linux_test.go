package afxdp

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/polarnet/polarnet/link"
)

// A frame the kernel had no fill buffer for is no buffer, not a bad frame:
// in copy mode the kernel counts it in rx_dropped as well.
func TestEngineStats(t *testing.T) {
	st := QueueStats{RxFrames: 100, TxFrames: 90, RxOversize: 1, RxInvalid: 2, KernelRxDropped: 13,
		KernelRxInvalid: 4, KernelTxInvalid: 5, KernelRxRingFull: 6, KernelFillEmpty: 10}
	want := link.QueueStats{Queue: 3, RxFrames: 100, TxFrames: 90, RxRingFull: 6, RxNoBuffers: 10, TxDropped: 5}
	copyMode, zeroCopy := want, want
	copyMode.RxBadFrame = 1 + 2 + 3 + 4 // three of the kernel's drops were not for want of a buffer
	zeroCopy.RxBadFrame = 1 + 2 + 13 + 4
	assert.Equal(t, copyMode, engineStats(3, st, false), "copy mode")
	assert.Equal(t, zeroCopy, engineStats(3, st, true), "zero-copy mode")
	st.KernelRxDropped = 4 // read a moment before the fill ring's count
	assert.Equal(t, 1+2+4, int(engineStats(3, st, false).RxBadFrame), "never below the link's own count")
}
