package reliability

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/polarnet/polarnet/internal/frame"
	"github.com/polarnet/polarnet/internal/taptopo"
	"github.com/polarnet/polarnet/link"
	"github.com/polarnet/polarnet/link/capture"
)

// send writes frames from the kernel side, all of them.
func send(t *testing.T, q link.Queue, frames ...[]byte) {
	t.Helper()
	for _, f := range frames {
		n, err := q.WriteBurst([]link.TxFrame{{Segs: [][]byte{f}}})
		require.NoError(t, err)
		require.Equal(t, 1, n)
	}
}

// TestNoForwarding sends the stack datagrams and segments for addresses
// that are not its own, on its subnet and beyond it: a stack is a host,
// not a router, so it drops them all (counted as invalid destinations) and
// sends none of them on.
func TestNoForwarding(t *testing.T) {
	dsts := []netip.Addr{
		netip.MustParseAddr("198.18.100.77"), netip.MustParseAddr("198.18.100.200"),
		netip.MustParseAddr("fd00:198:18:100::77"), netip.MustParseAddr("fd00:198:18:101::1"),
	}
	out := &sentTo{dsts: dsts}
	e := newEnv(t, taptopo.Options{Wrap: func(l link.Link) link.Link { return capture.New(l, out) }})
	raw := e.raw(t)
	var frames [][]byte
	for _, dst := range dsts {
		to, from := netip.AddrPortFrom(dst, 9), netip.AddrPortFrom(kernel4, 9)
		if dst.Is6() {
			from = netip.AddrPortFrom(kernel6, 9)
		}
		frames = append(frames,
			frame.UDPFrame(forgerMAC, e.stackMAC, from, to, []byte("route me")),
			e.forge(frame.TCPSpec{Src: from, Dst: to, Flags: frame.FlagSYN, Window: 1024}))
	}
	resets := protocolCounter(t, e.Stack, "TCP.ResetsSent")
	invalidDst := protocolCounter(t, e.Stack, "IP.InvalidDestinationAddressesReceived")
	forwardErrors := protocolCounter(t, e.Stack, "IP.Forwarding.Errors")
	resetsBefore, invalidDstBefore, forwardErrorsBefore := resets(), invalidDst(), forwardErrors()
	send(t, raw, frames...)
	// A SYN to a closed port of the stack's, last: the stack handles
	// frames in order, so once it has answered it with a reset, it has
	// handled all the others.
	send(t, raw, e.forge(frame.TCPSpec{Src: netip.AddrPortFrom(kernel4, 9), Dst: netip.AddrPortFrom(stack4, 9), Flags: frame.FlagSYN, Window: 1024}))
	require.Eventually(t, func() bool { return resets() > resetsBefore }, ioBound, time.Millisecond, "the closed port answered")
	// The kernel side's own multicast (router solicitations, MLD reports)
	// may count as invalid destinations too: at least ours do.
	assert.GreaterOrEqual(t, invalidDst()-invalidDstBefore, uint64(len(frames)), "packets dropped as not ours")
	assert.Zero(t, out.n.Load(), "packets sent on to their destinations")
	assert.Zero(t, forwardErrors()-forwardErrorsBefore, "forwarding attempts")
}

// sentTo counts the frames a stack sends to any of dsts (it is a
// capture.Recorder on the stack's link).
type sentTo struct {
	dsts []netip.Addr
	n    atomic.Int64
}

var _ capture.Snapper = (*sentTo)(nil)

// Snaplen implements capture.Snapper: the IP header is enough.
func (s *sentTo) Snaplen() int { return 128 }

// Record implements capture.Recorder.
func (s *sentTo) Record(p *capture.Packet) {
	if pkt, ok := frame.ParseTruncated(p.Data); ok && p.Dir == capture.Out && slices.Contains(s.dsts, pkt.Dst) {
		s.n.Add(1)
	}
}

// TestSpoofedSources sends a listener SYNs from addresses no peer can
// have (broadcast, the subnet's broadcast, multicast, loopback, reserved,
// unspecified, the stack's own: the LAND attack) over the TAP device: the
// engine drops them before TCP sees them, so no SYN-ACK goes to a
// broadcast address. One SYN from an ordinary address shows the way in
// was open.
func TestSpoofedSources(t *testing.T) {
	e := newEnv(t, taptopo.Options{})
	ln, err := e.Stack.ListenTCP("tcp", netip.AddrPortFrom(netip.IPv6Unspecified(), 0), 0, net.KeepAliveConfig{})
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	port := uint16(ln.Addr().(*net.TCPAddr).Port)
	raw := e.raw(t)
	martians := []string{"255.255.255.255", "198.18.100.127", "224.0.0.1", "127.0.0.1", "0.0.0.0", "240.0.0.1", stack4.String(),
		"ff02::1", "::1", stack6.String()}
	var frames [][]byte
	for _, src := range martians {
		from := netip.AddrPortFrom(netip.MustParseAddr(src), port)
		to := netip.AddrPortFrom(stack4, port)
		if from.Addr().Is6() {
			to = netip.AddrPortFrom(stack6, port)
		}
		frames = append(frames, e.forge(frame.TCPSpec{Src: from, Dst: to, Seq: 1, Flags: frame.FlagSYN, Window: 1024}))
	}
	valid := protocolCounter(t, e.Stack, "TCP.ValidSegmentsReceived")
	invalid := protocolCounter(t, e.Stack, "TCP.InvalidSegmentsReceived")
	tcpSegments := func() uint64 { return valid() + invalid() }
	martianBefore, segmentsBefore := e.Stack.Stats().Total.RxMartian, tcpSegments()
	dropped := func() uint64 { return e.Stack.Stats().Total.RxMartian - martianBefore }
	send(t, raw, frames...)
	send(t, raw, e.forge(frame.TCPSpec{Src: netip.AddrPortFrom(spoofed.Addr().Next(), 4000), Dst: netip.AddrPortFrom(stack4, port), Seq: 1, Flags: frame.FlagSYN, Window: 1024}))
	// The frames spread over the device's queues, each drained by its own
	// shard, so the ordinary SYN reaching TCP says nothing of the others:
	// wait for both counts.
	require.Eventually(t, func() bool { return tcpSegments()-segmentsBefore >= 1 }, ioBound, time.Millisecond, "the ordinary SYN reaches TCP")
	require.Eventually(t, func() bool { return dropped() >= uint64(len(frames)) }, ioBound, time.Millisecond, "martian sources dropped")
	assert.Equal(t, uint64(len(frames)), dropped(), "martian sources dropped")
	assert.Equal(t, uint64(1), tcpSegments()-segmentsBefore, "segments TCP saw")
}

// TestICMPRateLimit sends a burst of datagrams to a closed port, from the
// kernel side's own addresses: the stack answers with port-unreachable
// errors at a bounded rate (gVisor's default, 1000 a second with a burst of
// 50, as Linux's icmp_ratelimit) and counts the errors it held back, so a
// flood of probes cannot turn the stack into an amplifier.
func TestICMPRateLimit(t *testing.T) {
	const datagrams = 2000
	e := newEnv(t, taptopo.Options{})
	raw := e.raw(t)
	for _, v6 := range []bool{false, true} {
		t.Run(fmt.Sprintf("IPv%d", map[bool]int{false: 4, true: 6}[v6]), func(t *testing.T) {
			from, to := netip.AddrPortFrom(kernel4, 9), netip.AddrPortFrom(stack4, 9)
			unreachablePath, heldPath := "ICMP.V4.PacketsSent.ICMPv4PacketStats.DstUnreachable", "ICMP.V4.PacketsSent.RateLimited"
			if v6 {
				from, to = netip.AddrPortFrom(kernel6, 9), netip.AddrPortFrom(stack6, 9)
				unreachablePath, heldPath = "ICMP.V6.PacketsSent.ICMPv6PacketStats.DstUnreachable", "ICMP.V6.PacketsSent.RateLimited"
			}
			// counts returns the datagrams UDP found no socket for, and the
			// port-unreachable errors sent and held back.
			unknownPort := protocolCounter(t, e.Stack, "UDP.UnknownPortErrors")
			unreachable, held := protocolCounter(t, e.Stack, unreachablePath), protocolCounter(t, e.Stack, heldPath)
			counts := func() (closed, answered, limited uint64) { return unknownPort(), unreachable(), held() }
			datagram := frame.UDPFrame(forgerMAC, e.stackMAC, from, to, []byte("anyone?"))
			closed0, answered0, limited0 := counts()
			dropped0 := tapDropped(e) // the device's count since it was made
			f := startFlood(raw, datagrams, 0, func() []byte { return datagram })
			<-f.done
			n, rate, err := f.stop()
			require.NoError(t, err)
			require.Equal(t, int64(datagrams), n)
			// Frames the TAP queue dropped on the way never reach UDP: wait
			// until those that did are all accounted for.
			var closed, answered, limited uint64
			require.Eventually(t, func() bool {
				closed, answered, limited = counts()
				closed, answered, limited = closed-closed0, answered-answered0, limited-limited0
				return closed+tapDropped(e)-dropped0 >= datagrams && answered+limited == closed
			}, ioBound, time.Millisecond, "every datagram that arrived answered or rate-limited")
			assert.Positive(t, limited, "errors held back")
			t.Logf("%d datagrams at %.0f/s, %d reached UDP: %d port-unreachable errors sent, %d rate-limited", datagrams, rate, closed, answered, limited)
		})
	}
}
