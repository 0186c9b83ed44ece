package afxdp

import (
	"encoding/binary"
	"math/bits"

	"github.com/polarnet/polarnet/internal/frame"
)

// The link completes checksums in software on TX where the kernel cannot be
// asked to; on RX it classifies them with frame.CheckRX.

// completeChecksum finishes a checksum-partial frame as a NIC would. The
// frame is pieces in order (the UMEM frames it spans); the field at
// start+off, within the first piece, holds the pseudo-header sum, and the
// sum of the bytes from start to the end goes there, complemented (0 sent
// as 0xffff, which UDP needs and TCP does not mind).
func completeChecksum(pieces [][]byte, start, off int) {
	var acc uint64
	odd := false // the piece starts at an odd offset from start
	for i, p := range pieces {
		if i == 0 {
			p = p[start:]
		}
		s := frame.Fold(frame.Sum(p, 0))
		if odd {
			// Its bytes sit the other way round in the 16-bit words.
			s = bits.ReverseBytes16(s)
		}
		acc += uint64(s)
		odd = odd != (len(p)%2 == 1)
	}
	c := ^frame.Fold(acc)
	if c == 0 {
		c = 0xffff
	}
	binary.BigEndian.PutUint16(pieces[0][start+off:], c)
}
