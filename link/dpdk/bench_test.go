//go:build dpdk && linux && cgo

package dpdk

import (
	"fmt"
	"io"
	"net"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/polarnet/polarnet/internal/rrbench"
	"github.com/polarnet/polarnet/polarnet"
)

// benchServerCPUEnv pins the benchmarks' server process to a CPU list
// (taskset -c); pin the client with taskset on the go test command.
const benchServerCPUEnv = "POLARNET_BENCH_SERVER_CPU"

// rpcEnds is a server process and a way to dial it.
type rpcEnds struct {
	server *helperProc
	dial   func(b *testing.B, service string) net.Conn
}

// BenchmarkRPC compares polarnet p2p over net_memif (two processes, shared
// memory, no kernel on the data path) with kernel-to-kernel TCP over
// loopback and over a veth between two namespaces, the way rpcbench does:
//
//	rr-d1   one connection, 4 KiB requests with 64-byte responses, one at a
//	        time: p50/p99 round-trip latency
//	rr-512  16 connections × 32 requests in flight (512 outstanding):
//	        requests per second
//	bulk    one connection streaming 64 KiB writes into a sink
//
// The server runs in a process of its own (this test binary again); CPU per
// op is reported for each end (client: this process, getrusage; server:
// /proc/PID/stat, 10 ms ticks) and summed. Pin with
// POLARNET_BENCH_SERVER_CPU=1 taskset -c 0 go test ....
func BenchmarkRPC(b *testing.B) {
	modes := []struct {
		name  string
		setup func(b *testing.B) *rpcEnds
	}{
		{"p2p-memif-1500", func(b *testing.B) *rpcEnds { return memifEnds(b, 1500, false, polarnet.PollAdaptive, 0) }},
		{"p2p-memif-1500-spin2ms", func(b *testing.B) *rpcEnds {
			return memifEnds(b, 1500, false, polarnet.PollAdaptive, 2*time.Millisecond)
		}},
		{"p2p-memif-1500-busy", func(b *testing.B) *rpcEnds { return memifEnds(b, 1500, false, polarnet.PollBusy, 0) }},
		{"p2p-memif-64k", func(b *testing.B) *rpcEnds { return memifEnds(b, 65000, true, polarnet.PollAdaptive, 0) }},
		{"p2p-memif-64k-spin2ms", func(b *testing.B) *rpcEnds {
			return memifEnds(b, 65000, true, polarnet.PollAdaptive, 2*time.Millisecond)
		}},
		{"k2k-loopback", loopbackEnds},
		{"k2k-veth", vethEnds},
	}
	for _, m := range modes {
		b.Run(m.name, func(b *testing.B) {
			ends := m.setup(b)
			b.Run("rr-d1", func(b *testing.B) { benchRR1(b, ends) })
			b.Run("rr-512", func(b *testing.B) { benchRRDeep(b, ends, 16, 32) })
			b.Run("bulk", func(b *testing.B) { benchBulk(b, ends) })
		})
	}
}

func memifEnds(b *testing.B, mtu int, skip bool, poll polarnet.PollMode, spin time.Duration) *rpcEnds {
	h, st, _ := memifPairSpin(b, mtu, skip, poll, spin)
	return &rpcEnds{server: h, dial: func(b *testing.B, service string) net.Conn {
		c, err := st.DialTCP(b.Context(), "tcp", netip.AddrPort{}, netip.AddrPortFrom(kernel4, uint16(h.ports[service])))
		require.NoError(b, err)
		return c
	}}
}

func loopbackEnds(b *testing.B) *rpcEnds {
	h := startHelper(b, "", "PNH_LINK=kernel", "PNH_ADDR=127.0.0.1")
	return &rpcEnds{server: h, dial: func(b *testing.B, service string) net.Conn {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", h.ports[service]))
		require.NoError(b, err)
		return c
	}}
}

func vethEnds(b *testing.B) *rpcEnds {
	server, client := rrbench.KernelVeth(b)
	addr := rrbench.K2KServer.Addr()
	h := startHelper(b, server.Name, "PNH_LINK=kernel", "PNH_ADDR="+addr.String())
	return &rpcEnds{server: h, dial: func(b *testing.B, service string) net.Conn {
		var c net.Conn
		require.NoError(b, client.Do(func() (err error) {
			c, err = net.Dial("tcp", netip.AddrPortFrom(addr, uint16(h.ports[service])).String())
			return err
		}))
		return c
	}}
}

// cpuMeter measures both ends' CPU time over a window.
type cpuMeter struct {
	ends           *rpcEnds
	client, server time.Duration
	start          time.Time
}

func startCPU(b *testing.B, ends *rpcEnds) *cpuMeter {
	srv, err := ends.server.cpu()
	require.NoError(b, err)
	return &cpuMeter{ends: ends, client: selfCPU(), server: srv, start: time.Now()}
}

// report adds ops/s and CPU µs per op of each end to b's metrics.
func (m *cpuMeter) report(b *testing.B, ops int) time.Duration {
	elapsed := time.Since(m.start)
	srv, err := m.ends.server.cpu()
	require.NoError(b, err)
	client, server := selfCPU()-m.client, srv-m.server
	b.ReportMetric(float64(ops)/elapsed.Seconds(), "ops/s")
	b.ReportMetric(float64(client.Microseconds())/float64(ops), "client-cpu-µs/op")
	b.ReportMetric(float64(server.Microseconds())/float64(ops), "server-cpu-µs/op")
	b.ReportMetric(float64((client+server).Microseconds())/float64(ops), "cpu-µs/op")
	return elapsed
}

func benchRR1(b *testing.B, ends *rpcEnds) {
	c := ends.dial(b, "rr")
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Minute)) // bounds a stuck run
	req, resp := make([]byte, rrbench.RR4K.Request), make([]byte, rrbench.RR4K.Response)
	roundTrip := func() {
		if _, err := c.Write(req); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(c, resp); err != nil {
			b.Fatal(err)
		}
	}
	for range 2000 { // warm up: windows open, caches fill
		roundTrip()
	}
	lat := make([]time.Duration, 0, b.N)
	m := startCPU(b, ends)
	b.ResetTimer()
	for b.Loop() {
		t0 := time.Now()
		roundTrip()
		lat = append(lat, time.Since(t0))
	}
	b.StopTimer()
	m.report(b, len(lat))
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds())/1e3, "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds())/1e3, "p99-µs")
}

// benchRRDeep keeps conns × depth requests outstanding: each connection
// has a writer that sends while fewer than depth responses are due and a
// reader that takes them, over its share of the ops.
func benchRRDeep(b *testing.B, ends *rpcEnds, conns, depth int) {
	cs := make([]net.Conn, conns)
	for i := range cs {
		cs[i] = ends.dial(b, "rr")
		defer cs[i].Close()
	}
	run := func(total int) {
		var wg sync.WaitGroup
		errs := make(chan error, 2*conns)
		for i, c := range cs {
			quota := total / conns
			if i < total%conns {
				quota++
			}
			c.SetDeadline(time.Now().Add(time.Minute)) // bounds a stuck run
			tokens := make(chan struct{}, depth)
			wg.Add(2)
			go func() { // writer
				defer wg.Done()
				req := make([]byte, rrbench.RR4K.Request)
				for range quota {
					tokens <- struct{}{}
					if _, err := c.Write(req); err != nil {
						errs <- err
						return
					}
				}
			}()
			go func() { // reader
				defer wg.Done()
				resp := make([]byte, rrbench.RR4K.Response)
				for range quota {
					if _, err := io.ReadFull(c, resp); err != nil {
						errs <- err
						return
					}
					<-tokens
				}
			}()
		}
		wg.Wait()
		select {
		case err := <-errs:
			b.Fatal(err)
		default:
		}
	}
	run(20000) // warm up
	m := startCPU(b, ends)
	b.ResetTimer()
	run(b.N)
	b.StopTimer()
	m.report(b, b.N)
}

func benchBulk(b *testing.B, ends *rpcEnds) {
	c := ends.dial(b, "sink")
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Minute)) // bounds a stuck run
	buf := make([]byte, 64<<10)
	for range 1000 {
		if _, err := c.Write(buf); err != nil {
			b.Fatal(err)
		}
	}
	b.SetBytes(int64(len(buf)))
	m := startCPU(b, ends)
	b.ResetTimer()
	for b.Loop() {
		if _, err := c.Write(buf); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	elapsed := m.report(b, b.N)
	b.ReportMetric(float64(b.N)*float64(len(buf))*8/elapsed.Seconds()/1e9, "Gbit/s")
}
