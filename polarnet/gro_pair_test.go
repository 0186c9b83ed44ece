package polarnet_test

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/polarnet/polarnet/link/pipe"
	"github.com/polarnet/polarnet/polarnet"
)

// tcpSegmentsIn is how many TCP segments a stack's gVisor layers received.
func tcpSegmentsIn(st *polarnet.Stack) uint64 {
	n, _ := st.ProtocolCounter("TCP.ValidSegmentsReceived")
	return n
}

// TestGROPipe moves a stream and request/response traffic between two stacks
// at MTUs below the message sizes, with GRO on (the default) and off: every
// byte arrives intact and in order, and with GRO the receiver's TCP sees
// fewer segments than the link carried.
func TestGROPipe(t *testing.T) {
	for _, mtu := range []int{1500, 9000} {
		for _, disable := range []bool{false, true} {
			t.Run(fmt.Sprintf("mtu=%d/gro=%v", mtu, !disable), func(t *testing.T) {
				a, z := newPair(t, pipe.Config{MTU: mtu}, func(c *polarnet.Config) { c.DisableGRO = disable })
				client, server := connPair(t, a, z, addrB.Addr())

				data := make([]byte, 2<<20)
				for i := range data {
					data[i] = byte(rand.Uint32())
				}
				framesBefore, segsBefore := z.Stats().Total.RxFrames, tcpSegmentsIn(z)
				got := make(chan []byte, 1)
				go func() {
					b := make([]byte, len(data))
					_, err := io.ReadFull(server, b)
					if err != nil {
						b = nil
					}
					got <- b
				}()
				_, err := client.Write(data)
				require.NoError(t, err)
				require.True(t, bytes.Equal(data, <-got), "the stream arrived intact")
				counts := func() (frames, segs uint64) {
					return z.Stats().Total.RxFrames - framesBefore, tcpSegmentsIn(z) - segsBefore
				}
				frames, segs := counts()
				if disable {
					// A frame is counted as its burst arrives, a segment once
					// TCP has taken it: a late one (a tail-loss probe) may be
					// between the two.
					for deadline := time.Now().Add(5 * time.Second); frames != segs && time.Now().Before(deadline); frames, segs = counts() {
						time.Sleep(time.Millisecond)
					}
					assert.Equal(t, frames, segs, "one segment per frame")
				} else {
					assert.Less(t, segs, frames, "segments were merged")
				}

				// Request/response, each message a few segments long.
				go func() {
					req := make([]byte, 4096)
					for {
						if _, err := io.ReadFull(server, req); err != nil {
							return
						}
						if _, err := server.Write(req); err != nil {
							return
						}
					}
				}()
				req, resp := make([]byte, 4096), make([]byte, 4096)
				for range 200 {
					for i := range req {
						req[i] = byte(rand.Uint32())
					}
					_, err := client.Write(req)
					require.NoError(t, err)
					_, err = io.ReadFull(client, resp)
					require.NoError(t, err)
					require.Equal(t, req, resp)
				}
			})
		}
	}
}

// processCPU is the user and system CPU time of this process: on a shared
// machine a steadier figure than elapsed time.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkGRO measures receive coalescing on and off, over the in-memory
// link at each MTU: 4 KiB request/response (as BenchmarkRoundTrip4K) and a
// one-way stream of 64 KiB writes. segs/op counts frames on the link,
// tcp-in/op the segments the receivers' TCP processed, cpu-ns/op the
// process's CPU time (both stacks) per operation.
func BenchmarkGRO(b *testing.B) {
	for _, mtu := range []int{1500, 9000, 65535} {
		for _, gro := range []bool{true, false} {
			tweak := func(c *polarnet.Config) { c.DisableGRO = !gro }
			b.Run(fmt.Sprintf("rr4k/mtu=%d/gro=%v", mtu, gro), func(b *testing.B) {
				a, z := newPair(b, pipe.Config{MTU: mtu}, tweak)
				client, server := connPair(b, a, z, addrB.Addr())
				go echo4K(server)
				req, resp := make([]byte, 4096), make([]byte, 64)
				for range 100 {
					roundTrip(b, client, req, resp)
				}
				segs := func() uint64 { return tcpSegmentsIn(a) + tcpSegmentsIn(z) }
				meter, s0 := startMeter(a, z), segs()
				b.ReportAllocs()
				b.ResetTimer()
				for b.Loop() {
					roundTrip(b, client, req, resp)
				}
				b.StopTimer()
				meter.report(b)
				b.ReportMetric(float64(segs()-s0)/float64(b.N), "tcp-in/op")
			})
			b.Run(fmt.Sprintf("stream/mtu=%d/gro=%v", mtu, gro), func(b *testing.B) {
				a, z := newPair(b, pipe.Config{MTU: mtu}, tweak)
				client, server := connPair(b, a, z, addrB.Addr())
				chunk := make([]byte, 64<<10)
				done := make(chan int64, 1)
				go func() {
					n, _ := io.Copy(io.Discard, server)
					done <- n
				}()
				b.SetBytes(int64(len(chunk)))
				b.ReportAllocs()
				c0 := processCPU()
				b.ResetTimer()
				for b.Loop() {
					if _, err := client.Write(chunk); err != nil {
						b.Fatal(err)
					}
				}
				client.CloseWrite()
				n := <-done
				b.StopTimer()
				b.ReportMetric(float64(processCPU()-c0)/float64(b.N), "cpu-ns/op")
				if n != int64(b.N)*int64(len(chunk)) {
					b.Fatalf("received %d bytes of %d", n, int64(b.N)*int64(len(chunk)))
				}
			})
		}
	}
}
