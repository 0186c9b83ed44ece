package linktest

import (
	"testing"

	"github.com/polarnet/polarnet/link"
)

// BenchWriteBurst times q.WriteBurst sending frame b.N times, 64 frames a
// burst, and reports frames/s; the caller sets up the link and the frame
// (whose length is the bytes per op).
func BenchWriteBurst(b *testing.B, q link.Queue, frame []byte) {
	burst := make([]link.TxFrame, 64)
	for i := range burst {
		burst[i].Segs = [][]byte{frame}
	}
	b.SetBytes(int64(len(frame)))
	b.ResetTimer()
	for sent := 0; sent < b.N; {
		n, err := q.WriteBurst(burst[:min(len(burst), b.N-sent)])
		if err != nil {
			b.Fatal(err)
		}
		sent += n
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "frames/s")
}
