package tap_test

import (
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/polarnet/polarnet/internal/netns"
	"github.com/polarnet/polarnet/internal/taptopo"
	"github.com/polarnet/polarnet/polarnet"
)

// BenchmarkRequestResponse4K measures one connection doing 4 KiB requests
// with 64-byte responses, polarnet over TAP against a kernel echo server
// (p2k), next to kernel to kernel over a veth between two namespaces (k2k).
// Both ends run in this process, so CPU per op covers both.
func BenchmarkRequestResponse4K(b *testing.B) {
	for _, mode := range []polarnet.PollMode{polarnet.PollAdaptive, polarnet.PollBlocking} {
		b.Run("p2k-tap-"+mode.String(), func(b *testing.B) {
			topo := taptopo.New(b, taptopo.Options{Config: func(c *polarnet.Config) { c.Poll = mode }})
			ln := startKernelServer(b, topo.NS, taptopo.Kernel4)
			c, err := topo.Stack.DialTCP(b.Context(), "tcp", netip.AddrPort{}, ln)
			require.NoError(b, err)
			defer c.Close()
			runRR(b, c)
		})
	}
	b.Run("k2k-veth", func(b *testing.B) {
		server, client := netns.New(b), netns.New(b)
		a, z := netns.UniqueName("pnv"), netns.UniqueName("pnv")
		netns.Veth(b, a, z)
		require.NoError(b, server.MoveLink(a))
		require.NoError(b, client.MoveLink(z))
		for ns, args := range map[*netns.NS][]string{
			server: {"ip", "addr", "add", "198.18.1.1/24", "dev", a},
			client: {"ip", "addr", "add", "198.18.1.2/24", "dev", z},
		} {
			out, err := ns.Exec(args...)
			require.NoError(b, err, out)
		}
		ln := startKernelServer(b, server, netip.MustParseAddr("198.18.1.1"))
		var c net.Conn
		require.NoError(b, client.Do(func() (err error) {
			c, err = net.Dial("tcp", ln.String())
			return err
		}))
		defer c.Close()
		runRR(b, c)
	})
}

// startKernelServer answers every 4096-byte request with 64 bytes.
func startKernelServer(b *testing.B, ns *netns.NS, addr netip.Addr) netip.AddrPort {
	var ln net.Listener
	require.NoError(b, ns.Do(func() (err error) {
		ln, err = net.Listen("tcp", netip.AddrPortFrom(addr, 0).String())
		return err
	}))
	b.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				req, resp := make([]byte, 4096), make([]byte, 64)
				for {
					if _, err := io.ReadFull(c, req); err != nil {
						return
					}
					if _, err := c.Write(resp); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().(*net.TCPAddr).AddrPort()
}

func runRR(b *testing.B, c net.Conn) {
	req, resp := make([]byte, 4096), make([]byte, 64)
	roundTrip := func() {
		if _, err := c.Write(req); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(c, resp); err != nil {
			b.Fatal(err)
		}
	}
	for range 1000 { // warm up: windows open, caches fill
		roundTrip()
	}
	var before, after syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &before)
	start := time.Now()
	b.ResetTimer()
	for b.Loop() {
		roundTrip()
	}
	b.StopTimer()
	elapsed := time.Since(start)
	syscall.Getrusage(syscall.RUSAGE_SELF, &after)
	cpu := time.Duration(after.Utime.Nano() + after.Stime.Nano() - before.Utime.Nano() - before.Stime.Nano())
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "ops/s")
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/op")
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

// BenchmarkShardsRR4K64Conns compares one and two shards over TAP with 64
// connections doing 4 KiB request/response against a kernel echo server.
func BenchmarkShardsRR4K64Conns(b *testing.B) {
	for _, queues := range []int{1, 2} {
		b.Run(fmt.Sprintf("shards=%d", queues), func(b *testing.B) {
			topo := taptopo.New(b, taptopo.Options{Queues: queues})
			ln := startKernelServer(b, topo.NS, taptopo.Kernel4)
			const conns = 64
			cs := make([]net.Conn, conns)
			for i := range cs {
				c, err := topo.Stack.DialTCP(b.Context(), "tcp", netip.AddrPort{}, ln)
				require.NoError(b, err)
				defer c.Close()
				cs[i] = c
			}
			var before, after syscall.Rusage
			syscall.Getrusage(syscall.RUSAGE_SELF, &before)
			start := time.Now()
			b.ResetTimer()
			var wg sync.WaitGroup
			per := b.N/conns + 1
			for _, c := range cs {
				wg.Go(func() {
					req, resp := make([]byte, 4096), make([]byte, 64)
					for range per {
						if _, err := c.Write(req); err != nil {
							return
						}
						if _, err := io.ReadFull(c, resp); err != nil {
							return
						}
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			elapsed := time.Since(start)
			syscall.Getrusage(syscall.RUSAGE_SELF, &after)
			ops := per * conns
			cpu := time.Duration(after.Utime.Nano() + after.Stime.Nano() - before.Utime.Nano() - before.Stime.Nano())
			b.ReportMetric(float64(ops)/elapsed.Seconds(), "ops/s")
			b.ReportMetric(float64(cpu.Microseconds())/float64(ops), "cpu-µs/op")
			b.ReportMetric(float64(topo.Stack.Stats().Total.HandoffOut), "handoffs")
		})
	}
}
