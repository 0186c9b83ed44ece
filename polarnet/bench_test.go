package polarnet_test

import (
	"fmt"
	"io"
	"net"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/polarnet/polarnet/link/pipe"
	"github.com/polarnet/polarnet/polarnet"
)

// BenchmarkRoundTrip4K is the hot path: one 4 KiB request and a 64-byte
// response between two stacks over the in-memory link, at the link's
// largest MTU (one segment per message) and at 1500, in each poll mode,
// with the ACK filter on and off. segs/op counts frames on the link in both
// directions, cpu-ns/op the process's CPU time (both stacks and both apps).
func BenchmarkRoundTrip4K(b *testing.B) {
	for _, mtu := range []int{65535, 1500} {
		for _, mode := range []polarnet.PollMode{polarnet.PollAdaptive, polarnet.PollBlocking} {
			for _, ackFilter := range []bool{true, false} {
				name := fmt.Sprintf("mtu=%d/%v/ackfilter=%v", mtu, mode, ackFilter)
				b.Run(name, func(b *testing.B) {
					a, z := newPair(b, pipe.Config{MTU: mtu}, func(c *polarnet.Config) {
						c.Poll = mode
						c.ACK.DisableFilter = !ackFilter
					})
					client, server := connPair(b, a, z, addrB.Addr())
					go echo4K(server)
					req, resp := make([]byte, 4096), make([]byte, 64)
					for range 100 {
						roundTrip(b, client, req, resp)
					}
					meter := startMeter(a, z)
					b.ReportAllocs()
					b.ResetTimer()
					for b.Loop() {
						roundTrip(b, client, req, resp)
					}
					b.StopTimer()
					meter.report(b)
				})
			}
		}
	}
}

func roundTrip(b *testing.B, c net.Conn, req, resp []byte) {
	if _, err := c.Write(req); err != nil {
		b.Fatal(err)
	}
	if _, err := io.ReadFull(c, resp); err != nil {
		b.Fatal(err)
	}
}

// echo4K answers each 4096-byte request with 64 bytes until the conn ends.
func echo4K(c *polarnet.TCPConn) {
	req, resp := make([]byte, 4096), make([]byte, 64)
	for {
		if _, err := io.ReadFull(c, req); err != nil {
			return
		}
		if _, err := c.Write(resp); err != nil {
			return
		}
	}
}

// BenchmarkRoundTrip4K64Conns is the same round trip on 64 conns at once,
// each with one request outstanding, at the link's largest MTU: what one
// shard per stack costs when many conns share its poll iterations.
func BenchmarkRoundTrip4K64Conns(b *testing.B) {
	const conns = 64
	a, z := newPair(b, pipe.Config{MTU: 65535})
	clients := make([]*polarnet.TCPConn, conns)
	for i := range clients {
		client, server := connPair(b, a, z, addrB.Addr())
		go echo4K(server)
		clients[i] = client
	}
	meter := startMeter(a, z)
	b.ReportAllocs()
	b.ResetTimer()
	b.SetParallelism((conns + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
	var next atomic.Int32
	b.RunParallel(func(pb *testing.PB) {
		client := clients[next.Add(1)-1]
		req, resp := make([]byte, 4096), make([]byte, 64)
		for pb.Next() {
			roundTrip(b, client, req, resp)
		}
	})
	b.StopTimer()
	meter.report(b)
}

// opMeter reports what a round-trip benchmark cost per op: frames on the
// link in both directions (segs/op) and the process's CPU time (cpu-ns/op),
// a steadier figure than elapsed time on a shared machine.
type opMeter struct {
	a, z   *polarnet.Stack
	frames uint64
	cpu    time.Duration
}

func startMeter(a, z *polarnet.Stack) opMeter {
	m := opMeter{a: a, z: z}
	m.frames, m.cpu = m.framesNow(), processCPU()
	return m
}

func (m opMeter) framesNow() uint64 {
	return m.a.Stats().Total.TxFrames + m.z.Stats().Total.TxFrames
}

func (m opMeter) report(b *testing.B) {
	b.ReportMetric(float64(processCPU()-m.cpu)/float64(b.N), "cpu-ns/op")
	b.ReportMetric(float64(m.framesNow()-m.frames)/float64(b.N), "segs/op")
}
