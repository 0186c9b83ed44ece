package reliability

import (
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/polarnet/polarnet/internal/frame"
	"github.com/polarnet/polarnet/internal/kpeer"
	"github.com/polarnet/polarnet/internal/netns"
	"github.com/polarnet/polarnet/internal/rrbench"
	"github.com/polarnet/polarnet/internal/taptopo"
	"github.com/polarnet/polarnet/internal/xfer"
)

// floodWindow is how long each flood runs while the established
// connections' throughput is measured; their unloaded rate is measured for
// half of it just before and just after each flood (logShare).
const floodWindow = 2 * time.Second

// TestSYNFloodDuringTransfer floods a listener with SYNs from spoofed
// sources, as fast as the kernel side can send them and then at a rate the
// stack can absorb, and then with ACKs that guess at SYN cookies, while two
// connections established before stream data through the stack both ways:
// the streams complete byte-exact, the stack answers with SYN cookies once
// its SYN queue is full, a new connection gets through the absorbable
// flood, no guessed ACK makes a connection, and the memory a flood leaves
// behind is bounded (the half-open connections of one backlog, not state
// per SYN). The streams' throughput under each flood against their
// unloaded rate, and how long they took to move again after it, are logged
// beside the kernel's under the same SYN and ACK floods from the same
// flooder process, not asserted, as are what the TAP device and the stack
// shed.
//
// Each flood starts from streams that move, their deadlines renewed: a
// flood the stack cannot absorb drops most frames of the established
// connections with the flood's in the TAP queue, the queue's delay
// inflates the peers' RTO, and their retransmission timers back off
// exponentially while it lasts. Recovering after each flood keeps that
// backoff from compounding over the floods and into the next one's
// measurement and bound.
func TestSYNFloodDuringTransfer(t *testing.T) {
	// heapBound bounds what a flood may leave on the heap: the backlog's
	// 4096 half-open connections of a few KiB each, caches and pools;
	// state per SYN would cost ~1 KiB per SYN, gigabytes at these rates.
	const heapBound = 64 << 20
	e := newEnv(t, taptopo.Options{})
	ln, err := e.Stack.ListenTCP("tcp", netip.AddrPortFrom(stack4, 0), 0, net.KeepAliveConfig{})
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	dst := ln.Addr().(*net.TCPAddr).AddrPort()

	k1, s1 := e.accept(t, ln)
	k2, s2 := e.accept(t, ln)
	up, down := startStream(k1, s1, 1, pace{}), startStream(s2, k2, 2, pace{})
	rates(floodWindow/2, up, down) // out of slow start

	// A rate the stack absorbs, with the race detector's slowdown too.
	absorbed := 10_000
	if raceEnabled {
		absorbed = 2_000
	}
	synCookiesSent := protocolCounter(t, e.Stack, "TCP.ListenOverflowSynCookieSent")
	badCookiesReceived := protocolCounter(t, e.Stack, "TCP.ListenOverflowInvalidSynCookieRcvd")
	for _, tc := range []struct {
		flags uint8
		rate  int // segments a second; 0: as fast as the kernel side sends
		// engaged is the counter of the defence the flood must set off.
		engaged func() uint64
	}{
		{frame.FlagSYN, 0, synCookiesSent},
		{frame.FlagSYN, absorbed, synCookiesSent},
		{frame.FlagACK, 0, badCookiesReceived},
	} {
		kind, rate := map[uint8]string{frame.FlagSYN: "SYN", frame.FlagACK: "ACK"}[tc.flags], "max rate"
		if tc.rate > 0 {
			rate = fmt.Sprintf("%d per second", tc.rate)
		}
		t.Run(kind+" "+rate, func(t *testing.T) {
			deadline(ioBound, k1, s1, k2, s2)
			before, engagedBefore := liveHeap(), tc.engaged()
			engaged := func() uint64 { return tc.engaged() - engagedBefore }
			rxBefore, shedBefore, linkShedBefore := e.Stack.Stats().Total.RxFrames, e.Stack.Stats().Total.RxShed, tapShed(e)
			heap := sampleHeap()
			preRates := rates(floodWindow/2, up, down)
			f := startFloodProcess(t, e.NS, floodOrder{
				Device: e.Device, Flags: tc.flags, Rate: tc.rate, Seed: uint64(tc.rate),
				DstMAC: e.stackMAC.String(), Dst: dst.String(),
			})
			loaded := rates(floodWindow, up, down)
			// SYN cookies engage once the SYN queue is full: after a
			// backlog's worth of SYNs, however long the stack takes to see
			// them (the flooder shares the machine's two CPUs with it).
			require.Eventually(t, func() bool { return engaged() > 0 }, ioBound, 10*time.Millisecond, "the stack's defence engaged")
			if tc.flags == frame.FlagSYN && tc.rate > 0 {
				// A connection made under a flood the stack absorbs: a SYN
				// cookie's once the SYN queue is full. (Under one it does
				// not, most SYNs are lost before it sees them.)
				k, s := e.accept(t, ln)
				assert.NoError(t, xfer.Exchange(k, s, 64<<10), "a connection made during the flood")
			}
			sent, sentRate, floodErr := f.stop()
			resumed := moving(t, up, down)
			postRates := rates(floodWindow/2, up, down)
			peak := heap.finish()
			retained := int64(liveHeap()) - int64(before)
			require.NoError(t, floodErr)
			if tc.flags == frame.FlagACK {
				// Had a guessed cookie made a connection, it would be first
				// in the accept queue, and accept would fail on it.
				e.accept(t, ln)
			}
			assert.Less(t, retained, int64(heapBound), "heap left behind by the flood")
			t.Logf("%d %ss at %.0f/s; the TAP shed %d, the stack received %d frames and shed %d, its defence engaged %d times; heap %s before, peak in use %s, %s retained",
				sent, kind, sentRate, tapShed(e)-linkShedBefore, e.Stack.Stats().Total.RxFrames-rxBefore, e.Stack.Stats().Total.RxShed-shedBefore,
				engaged(), mib(before), mib(peak), mib(uint64(max(retained, 0))))
			logShare(t, "kernel→stack", "stack→kernel", preRates, loaded, postRates, resumed)
		})
	}
	deadline(ioBound, k1, s1, k2, s2)
	assert.NoError(t, up.finish(), "kernel→stack stream")
	assert.NoError(t, down.finish(), "stack→kernel stream")
	t.Logf("%d frames lost in the TAP queue towards the stack", tapDropped(e))
	t.Run("kernel reference, SYN max rate", func(t *testing.T) { kernelFlood(t, frame.FlagSYN) })
	t.Run("kernel reference, ACK max rate", func(t *testing.T) { kernelFlood(t, frame.FlagACK) })
}

// logShare logs the rate of two streams (up, down) under a flood over
// their unloaded rate, both together and each, the unloaded rate being the
// mean of what they moved just before the flood and just after it: the
// two streams share the CPUs unevenly and their split drifts, so one
// window alone, or one stream, would mostly measure that drift.
func logShare(t *testing.T, up, down string, before, loaded, after []float64, resumed time.Duration) {
	t.Helper()
	unloaded := make([]float64, len(before))
	for i := range before {
		unloaded[i] = (before[i] + after[i]) / 2
	}
	t.Logf("unloaded: %s %s/s, %s %s/s (before the flood %s/s and %s/s, after it %s/s and %s/s)",
		up, mib(uint64(unloaded[0])), down, mib(uint64(unloaded[1])),
		mib(uint64(before[0])), mib(uint64(before[1])), mib(uint64(after[0])), mib(uint64(after[1])))
	t.Logf("throughput under the flood: %.3f of unloaded (%s %.3f, %s %.3f); both moved again %v after it",
		(loaded[0]+loaded[1])/(unloaded[0]+unloaded[1]), up, loaded[0]/unloaded[0], down, loaded[1]/unloaded[1],
		resumed.Round(time.Millisecond))
}

// spoofedSegments returns a frame maker for startFlood: TCP segments with
// flags (SYN or ACK) to dst from random sources in spoofed, sent by the
// forger to dstMAC. A SYN announces an MSS, an ACK acknowledges a random
// number (a guessed SYN cookie). seed seeds its random numbers.
func spoofedSegments(flags uint8, seed uint64, dstMAC net.HardwareAddr, dst netip.AddrPort) func() []byte {
	rng := rand.New(rand.NewPCG(uint64(flags), seed))
	hosts := uint32(1) << (32 - spoofed.Bits())
	first := spoofed.Addr().As4()
	return func() []byte {
		src := first
		src[3] += byte(rng.Uint32N(hosts))
		spec := frame.TCPSpec{
			SrcMAC: forgerMAC, DstMAC: dstMAC,
			Src: netip.AddrPortFrom(netip.AddrFrom4(src), uint16(1024+rng.IntN(64512))), Dst: dst,
			Seq: rng.Uint32(), Flags: flags, Window: 64240,
		}
		if flags == frame.FlagSYN {
			spec.Options = frame.MSSOption(1460)
		} else {
			spec.Ack = rng.Uint32()
		}
		return frame.TCPFrame(spec)
	}
}

// kernelFlood is the reference of a flood at max rate of segments with
// flags (SYN, or ACK guessing at SYN cookies), logged beside the stack's:
// the same two streams, one each way, and the same flooder, between
// kernels over a veth pair (k2k) whose server sends SYN cookies once its
// SYN queue is full, as Linux does by default. The flooder writes on the
// client's end, whose kernel drops the answers to the spoofed sources (it
// does not forward).
func kernelFlood(t *testing.T, flags uint8) {
	server, client := rrbench.KernelVeth(t)
	_, err := server.Exec("ip", "route", "add", "default", "via", rrbench.K2KClient.Addr().String())
	require.NoError(t, err)
	_, serverMAC := vethEnd(t, server)
	clientDev, _ := vethEnd(t, client)

	ln := kpeer.Listen(t, server, rrbench.K2KServer.Addr())
	dst := ln.Addr().(*net.TCPAddr).AddrPort()
	accept := func() (*net.TCPConn, *net.TCPConn) {
		c := kpeer.Dial(t, client, dst.String())
		s, err := ln.Accept()
		require.NoError(t, err)
		t.Cleanup(func() { s.Close() })
		deadline(ioBound, c, s)
		return c, s.(*net.TCPConn)
	}
	c1, s1 := accept()
	c2, s2 := accept()
	up, down := startStream(c1, s1, 1, pace{}), startStream(s2, c2, 2, pace{})
	rates(floodWindow/2, up, down) // out of slow start
	preRates := rates(floodWindow/2, up, down)
	f := startFloodProcess(t, client, floodOrder{Device: clientDev, Flags: flags, DstMAC: serverMAC.String(), Dst: dst.String()})
	loaded := rates(floodWindow, up, down)
	sent, sentRate, floodErr := f.stop()
	require.NoError(t, floodErr)
	resumed := moving(t, up, down)
	postRates := rates(floodWindow/2, up, down)
	assert.NoError(t, up.finish(), "client→server stream")
	assert.NoError(t, down.finish(), "server→client stream")
	out, err := server.Exec("nstat", "-asz", "TcpExtSyncookiesSent") // #kernel, then name, value, rate
	require.NoError(t, err)
	counter := strings.Fields(out)
	require.Len(t, counter, 4, out)
	kind := map[uint8]string{frame.FlagSYN: "SYN", frame.FlagACK: "ACK"}[flags]
	t.Logf("%d %ss at %.0f/s, the server sent %s SYN cookies", sent, kind, sentRate, counter[2])
	logShare(t, "client→server", "server→client", preRates, loaded, postRates, resumed)
}

// vethEnd returns the name and link address of the interface in ns that
// is not the loopback: its end of a veth pair.
func vethEnd(t *testing.T, ns *netns.NS) (string, net.HardwareAddr) {
	t.Helper()
	var ifi net.Interface
	require.NoError(t, ns.Do(func() error {
		ifs, err := net.Interfaces()
		for _, i := range ifs {
			if i.Flags&net.FlagLoopback == 0 {
				ifi = i
			}
		}
		return err
	}))
	require.NotEmpty(t, ifi.Name, "no veth end in the namespace")
	return ifi.Name, ifi.HardwareAddr
}
