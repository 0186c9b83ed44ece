package tap

import (
	"testing"

	"github.com/polarnet/polarnet/link"
)

// FuzzVnetHeader decodes arbitrary virtio-net headers, as a kernel could
// hand them over, and encodes arbitrary offload requests: never a panic,
// and an accepted request always encodes to a header that decodes back.
func FuzzVnetHeader(f *testing.F) {
	f.Add([]byte{1, 3, 54, 0, 168, 5, 34, 0, 16, 0}, true, uint16(34), uint16(16), uint8(1), uint16(1448), uint16(54), 30000)
	f.Add([]byte{2, 0, 0, 0, 0, 0, 0, 0, 0, 0}, false, uint16(0), uint16(0), uint8(0), uint16(0), uint16(0), 60)
	f.Fuzz(func(t *testing.T, raw []byte, csum bool, start, offset uint16, gso uint8, gsoSize, hdrLen uint16, frameLen int) {
		if len(raw) >= vnetHdrLen {
			h := decodeVnetHdr(raw)
			h.checksumValid()
		}
		off := link.TxOffload{NeedsChecksum: csum, ChecksumStart: start, ChecksumOffset: offset, GSO: link.GSOKind(gso % 3), GSOSize: gsoSize, HeaderLen: hdrLen}
		h, err := txVnetHdr(&off, frameLen)
		if err != nil {
			return
		}
		b := make([]byte, vnetHdrLen)
		h.encode(b)
		if got := decodeVnetHdr(b); got != h {
			t.Fatalf("encoded %+v, decoded %+v", h, got)
		}
	})
}
