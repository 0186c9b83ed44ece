package tap_test

import (
	"fmt"
	"net"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/polarnet/polarnet/internal/rrbench"
	"github.com/polarnet/polarnet/internal/taptopo"
	"github.com/polarnet/polarnet/polarnet"
)

// BenchmarkRequestResponse4K measures 4 KiB requests with 64-byte responses,
// polarnet over TAP against a kernel echo server (p2k), next to kernel to
// kernel over a veth between two namespaces (k2k), on 1 and 64 connections.
// Both ends run in this process, so CPU per op covers both.
func BenchmarkRequestResponse4K(b *testing.B) {
	for _, conns := range []int{1, 64} {
		for _, mode := range []polarnet.PollMode{polarnet.PollAdaptive, polarnet.PollBlocking} {
			b.Run(fmt.Sprintf("p2k-tap-%v/conns=%d", mode, conns), func(b *testing.B) {
				topo := taptopo.New(b, taptopo.Options{Config: func(c *polarnet.Config) { c.Poll = mode }})
				rrbench.Run(b, dialStack(b, topo.Stack, rrbench.StartKernelServer(b, topo.NS, taptopo.Kernel4, rrbench.RR4K), conns), rrbench.RR4K)
			})
		}
		b.Run(fmt.Sprintf("k2k-veth/conns=%d", conns), func(b *testing.B) {
			rrbench.Run(b, rrbench.KernelToKernel(b, rrbench.RR4K, conns), rrbench.RR4K)
		})
	}
}

// BenchmarkShards64Conns compares one and two shards over TAP with 64
// connections against a kernel echo server: 4 KiB request/response, and
// bulk (64 KiB requests, 64-byte answers; SetBytes makes it MB/s).
func BenchmarkShards64Conns(b *testing.B) {
	bulk := rrbench.Sizes{Request: 64 << 10, Response: 64}
	for _, load := range []struct {
		name string
		sz   rrbench.Sizes
	}{{"rr4k", rrbench.RR4K}, {"bulk", bulk}} {
		for _, queues := range []int{1, 2} {
			b.Run(fmt.Sprintf("%s/shards=%d", load.name, queues), func(b *testing.B) {
				topo := taptopo.New(b, taptopo.Options{Queues: queues})
				if load.sz == bulk {
					b.SetBytes(int64(bulk.Request))
				}
				rrbench.Run(b, dialStack(b, topo.Stack, rrbench.StartKernelServer(b, topo.NS, taptopo.Kernel4, load.sz), 64), load.sz)
				b.ReportMetric(float64(topo.Stack.Stats().Total.HandoffOut), "handoffs")
			})
		}
	}
}

func dialStack(b *testing.B, st *polarnet.Stack, server netip.AddrPort, n int) []net.Conn {
	conns := make([]net.Conn, n)
	for i := range conns {
		c, err := st.DialTCP(b.Context(), "tcp", netip.AddrPort{}, server)
		require.NoError(b, err)
		b.Cleanup(func() { c.Close() })
		conns[i] = c
	}
	return conns
}

// BenchmarkIdleCPU reports the CPU an idle two-shard stack over TAP uses in
// adaptive mode, as a percentage of one core: pollers must sleep, not spin.
// Run with -benchtime=100x for a 10-second measurement.
func BenchmarkIdleCPU(b *testing.B) {
	taptopo.New(b, taptopo.Options{Queues: 2})
	time.Sleep(100 * time.Millisecond) // let start-up traffic (NDP, ARP) settle
	var before, after syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &before)
	start := time.Now()
	for b.Loop() {
		time.Sleep(100 * time.Millisecond)
	}
	elapsed := time.Since(start)
	syscall.Getrusage(syscall.RUSAGE_SELF, &after)
	cpu := time.Duration(after.Utime.Nano() + after.Stime.Nano() - before.Utime.Nano() - before.Stime.Nano())
	b.ReportMetric(100*cpu.Seconds()/elapsed.Seconds(), "cpu-%")
}
