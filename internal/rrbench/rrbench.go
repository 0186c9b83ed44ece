// Package rrbench holds the request/response benchmark the links share:
// a kernel echo server in a namespace, clients doing fixed-size round trips
// on one or many connections, and the kernel-to-kernel reference over a veth
// pair (k2k) that link benchmarks (p2k) are compared with in the same run.
package rrbench

import (
	"io"
	"net"
	"net/netip"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/polarnet/polarnet/internal/netns"
	"github.com/polarnet/polarnet/internal/testenv"
)

// Sizes of a round trip: the request the client writes and the response the
// server answers each one with.
type Sizes struct{ Request, Response int }

// RR4K is a 4 KiB request with a 64-byte response.
var RR4K = Sizes{Request: 4096, Response: 64}

// StartKernelServer starts a kernel TCP server in ns on addr that answers
// every request of sz.Request bytes with sz.Response bytes; b's cleanup
// stops it.
func StartKernelServer(b testing.TB, ns *netns.NS, addr netip.Addr, sz Sizes) netip.AddrPort {
	var ln net.Listener
	require.NoError(b, ns.Do(func() (err error) {
		ln, err = net.Listen("tcp", netip.AddrPortFrom(addr, 0).String())
		return err
	}))
	b.Cleanup(func() { ln.Close() })
	go Serve(ln, sz.Answer)
	return ln.Addr().(*net.TCPAddr).AddrPort()
}

// Serve accepts connections on ln until it is closed and handles each on a
// goroutine of its own, closing it when handle returns.
func Serve(ln net.Listener, handle func(net.Conn)) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			handle(c)
		}()
	}
}

// Answer is the server's side of round trips on c: it answers every request
// of sz.Request bytes with sz.Response bytes until c fails or ends.
func (sz Sizes) Answer(c net.Conn) {
	req, resp := make([]byte, sz.Request), make([]byte, sz.Response)
	for {
		if _, err := io.ReadFull(c, req); err != nil {
			return
		}
		if _, err := c.Write(resp); err != nil {
			return
		}
	}
}

// Run does b.N round trips spread over conns, one goroutine per conn, after
// a warm-up, and reports ops/s and the CPU time of the whole process per op
// (both ends when both run in this process).
func Run(b *testing.B, conns []net.Conn, sz Sizes) {
	roundTrip := func(c net.Conn, req, resp []byte) error {
		if _, err := c.Write(req); err != nil {
			return err
		}
		_, err := io.ReadFull(c, resp)
		return err
	}
	bufs := make([][2][]byte, len(conns))
	for i, c := range conns {
		bufs[i] = [2][]byte{make([]byte, sz.Request), make([]byte, sz.Response)}
		for range 200 { // warm up: windows open, caches fill
			require.NoError(b, roundTrip(c, bufs[i][0], bufs[i][1]))
		}
	}
	var before, after syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &before)
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, len(conns))
	for i, c := range conns {
		n := b.N / len(conns)
		if i < b.N%len(conns) {
			n++
		}
		wg.Go(func() {
			for range n {
				if err := roundTrip(c, bufs[i][0], bufs[i][1]); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	syscall.Getrusage(syscall.RUSAGE_SELF, &after)
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	cpu := time.Duration(after.Utime.Nano() + after.Stime.Nano() - before.Utime.Nano() - before.Stime.Nano())
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "ops/s")
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/op")
}

// The k2k reference's addresses: the server's end and the client's.
var (
	K2KServer = netip.MustParsePrefix("198.18.1.1/24")
	K2KClient = netip.MustParsePrefix("198.18.1.2/24")
)

// KernelVeth builds the k2k path: a veth pair between two fresh namespaces,
// K2KServer on the server's end and K2KClient on the client's, MTU 1500,
// with the kernel's default offloads. b's cleanup removes it all.
func KernelVeth(b testing.TB) (server, client *netns.NS) {
	server, client = testenv.NewNS(b), testenv.NewNS(b)
	a, z := netns.UniqueName("pnk"), netns.UniqueName("pnk")
	testenv.Veth(b, a, z)
	require.NoError(b, server.MoveLink(a))
	require.NoError(b, client.MoveLink(z))
	require.NoError(b, server.Configure(a, 1500, K2KServer))
	require.NoError(b, client.Configure(z, 1500, K2KClient))
	return server, client
}

// KernelToKernel builds the reference: KernelVeth's path, a server started
// as StartKernelServer does on K2KServer, and n client connections to it
// from the client's namespace.
func KernelToKernel(b *testing.B, sz Sizes, n int) []net.Conn {
	server, client := KernelVeth(b)
	ln := StartKernelServer(b, server, K2KServer.Addr(), sz)
	conns := make([]net.Conn, n)
	for i := range conns {
		require.NoError(b, client.Do(func() (err error) {
			conns[i], err = net.DialTimeout("tcp", ln.String(), 10*time.Second)
			return err
		}))
		b.Cleanup(func() { conns[i].Close() })
	}
	return conns
}
