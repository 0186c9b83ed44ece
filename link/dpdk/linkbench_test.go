//go:build dpdk && linux && cgo

package dpdk

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/polarnet/polarnet/link"
)

// BenchmarkLinkMemif measures the link alone: bursts of frames written to
// one end of a net_memif pair in this process and read from the other, so
// ns/op is the cost of moving one frame through both ends (copy into
// mbufs, memif's two copies, copy out), with the cgo calls amortised over
// bursts. No engine, no TCP.
func BenchmarkLinkMemif(b *testing.B) {
	requireEAL(b)
	dir, err := os.MkdirTemp("", "pnmemif")
	require.NoError(b, err)
	b.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "m.sock")
	srv := openLink(b, Config{Device: vdevName("net_memif") + ",role=server,socket-abstract=no,socket=" + sock, Wait: WaitSleep})
	cli := openLink(b, Config{Device: vdevName("net_memif") + ",role=client,socket-abstract=no,socket=" + sock, Wait: WaitSleep})
	waitUp(b, cli)
	waitUp(b, srv)
	for _, size := range []int{64, 1514} {
		b.Run(fmt.Sprintf("frame=%d", size), func(b *testing.B) {
			const burst = 32
			frame := make([]byte, size)
			copy(frame, srv.Info().MAC)
			frame[12], frame[13] = 0x88, 0xb5
			tx := make([]link.TxFrame, burst)
			for i := range tx {
				tx[i].Segs = [][]byte{frame}
			}
			rx := make([]link.RxFrame, burst)
			for i := range rx {
				rx[i].Buf = make([]byte, 2048)
			}
			wq, rq := cli.Queues()[0], srv.Queues()[0]
			b.SetBytes(int64(size))
			b.ResetTimer()
			deadline := time.Now().Add(time.Minute)
			for sent, got := 0, 0; got < b.N; {
				if sent-got < 512 && sent < b.N {
					n, err := wq.WriteBurst(tx[:min(burst, b.N-sent)])
					if err != nil {
						b.Fatal(err)
					}
					sent += n
				}
				n, err := rq.ReadBurst(rx)
				if err != nil {
					b.Fatal(err)
				}
				got += n
				if time.Now().After(deadline) {
					b.Fatalf("%d of %d frames in a minute", got, b.N)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds()/1e6, "Mpps")
		})
	}
}
