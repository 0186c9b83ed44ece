package polarnet_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"

	"github.com/polarnet/polarnet/internal/xfer"
	"github.com/polarnet/polarnet/link"
	"github.com/polarnet/polarnet/link/pipe"
	"github.com/polarnet/polarnet/polarnet"
)

// The far end of a pipe is driven by the test: frames written to its queue
// reach the stack on the near end exactly as built.

var (
	peerMAC = net.HardwareAddr{0x02, 0x70, 0x6e, 0, 0, 2}
	peerIP  = netip.MustParseAddr("198.18.0.9")
)

// udpFrame builds an Ethernet/IPv4/UDP frame from the peer to dst with a
// correct UDP checksum unless badChecksum.
func udpFrame(dstMAC net.HardwareAddr, dst netip.AddrPort, payload []byte, badChecksum bool) []byte {
	frame := make([]byte, header.EthernetMinimumSize+header.IPv4MinimumSize+header.UDPMinimumSize+len(payload))
	header.Ethernet(frame).Encode(&header.EthernetFields{
		SrcAddr: tcpip.LinkAddress(peerMAC),
		DstAddr: tcpip.LinkAddress(dstMAC),
		Type:    header.IPv4ProtocolNumber,
	})
	ipb := frame[header.EthernetMinimumSize:]
	src, dstAddr := tcpip.AddrFrom4(peerIP.As4()), tcpip.AddrFrom4(dst.Addr().As4())
	ip := header.IPv4(ipb)
	ip.Encode(&header.IPv4Fields{
		TotalLength: uint16(len(ipb)),
		TTL:         64,
		Protocol:    uint8(header.UDPProtocolNumber),
		SrcAddr:     src,
		DstAddr:     dstAddr,
	})
	ip.SetChecksum(^ip.CalculateChecksum())
	udp := header.UDP(ipb[header.IPv4MinimumSize:])
	udp.Encode(&header.UDPFields{SrcPort: 4000, DstPort: dst.Port(), Length: uint16(len(udp))})
	copy(udp.Payload(), payload)
	xsum := header.PseudoHeaderChecksum(header.UDPProtocolNumber, src, dstAddr, uint16(len(udp)))
	xsum = checksum.Checksum(payload, xsum)
	udp.SetChecksum(^udp.CalculateChecksum(xsum))
	if badChecksum {
		udp.SetChecksum(udp.Checksum() ^ 0x5a5a)
	}
	return frame
}

// injector is a stack on one end of a pipe whose other end the test writes.
type injector struct {
	stack *polarnet.Stack
	peer  link.Queue
	mac   net.HardwareAddr
}

// newInjector builds it; wrap, if set, wraps the stack's end of the pipe.
func newInjector(t *testing.T, wrap func(link.Link) link.Link, tweak ...func(*polarnet.Config)) *injector {
	la, lb := pipe.New(pipe.Config{})
	var l link.Link = la
	if wrap != nil {
		l = wrap(la)
	}
	st := newStack(t, l, addrA, addrA6, tweak...)
	t.Cleanup(func() { lb.Close() })
	return &injector{stack: st, peer: lb.Queues()[0], mac: la.Info().MAC}
}

func (in *injector) send(t *testing.T, frames ...[]byte) {
	t.Helper()
	tx := make([]link.TxFrame, len(frames))
	for i, f := range frames {
		tx[i] = link.TxFrame{Segs: [][]byte{f}}
	}
	n, err := in.peer.WriteBurst(tx)
	require.NoError(t, err)
	require.Equal(t, len(frames), n)
}

// waitRx waits until the stack has received want frames in all.
func (in *injector) waitRx(t *testing.T, want uint64) polarnet.Stats {
	t.Helper()
	var st polarnet.Stats
	require.Eventually(t, func() bool {
		st = in.stack.Stats()
		return st.Total.RxFrames >= want
	}, 5*time.Second, time.Millisecond)
	require.Equal(t, want, st.Total.RxFrames)
	return st
}

// waitDrop waits until drop counter name has reached want: RxFrames moves
// when a burst arrives, a drop counter only once its frame is worked on, so
// waitRx alone can return before it.
func (in *injector) waitDrop(t *testing.T, name string, want uint64) polarnet.Stats {
	t.Helper()
	var st polarnet.Stats
	require.Eventually(t, func() bool {
		st = in.stack.Stats()
		return dropsOf(st.Total)[name] >= want
	}, 5*time.Second, time.Millisecond, "%s never reached %d", name, want)
	return st
}

// dropsOf lists every drop counter of a ShardStats by name.
func dropsOf(s polarnet.ShardStats) map[string]uint64 {
	return map[string]uint64{
		"RxBadFrame": s.RxBadFrame, "RxOversize": s.RxOversize, "RxChecksum": s.RxChecksum,
		"RxNoDispatcher": s.RxNoDispatcher, "RxMartian": s.RxMartian, "HandoffDrop": s.HandoffDrop,
		"TxRingFull": s.TxRingFull, "TxErrors": s.TxErrors, "StackChecksum": s.StackChecksum,
		"StackInvalid": s.StackInvalid, "StackDropped": s.StackDropped,
		"AppAcceptOverflow": s.AppAcceptOverflow, "AppUDPReceiveBufferFull": s.AppUDPReceiveBufferFull,
	}
}

// onlyDrop asserts that drop counter name is want and every other one 0.
func onlyDrop(t *testing.T, s polarnet.ShardStats, name string, want uint64) {
	t.Helper()
	for k, v := range dropsOf(s) {
		if k == name {
			assert.Equal(t, want, v, k)
		} else {
			assert.Zero(t, v, "%s moved; only %s should have", k, name)
		}
	}
}

func TestStatsCountReceivedFrames(t *testing.T) {
	in := newInjector(t, nil)
	sock, err := in.stack.ListenUDP("udp4", netip.AddrPortFrom(addrA.Addr(), 7000))
	require.NoError(t, err)
	defer sock.Close()

	const n = 50
	var frames [][]byte
	var bytes uint64
	for i := range n {
		f := udpFrame(in.mac, netip.AddrPortFrom(addrA.Addr(), 7000), []byte(strings.Repeat("x", i+1)), false)
		frames = append(frames, f)
		bytes += uint64(len(f))
	}
	// Several bursts: the engine reads up to 32 frames at once.
	in.send(t, frames[:20]...)
	in.send(t, frames[20:]...)
	st := in.waitRx(t, n)
	assert.Equal(t, bytes, st.Total.RxBytes)
	onlyDrop(t, st.Total, "", 0)
	buf := make([]byte, 256)
	for i := range n {
		require.NoError(t, sock.SetReadDeadline(time.Now().Add(5*time.Second)))
		m, err := sock.Read(buf)
		require.NoError(t, err)
		require.Equal(t, i+1, m)
	}
	assert.Equal(t, uint64(n), protocolCounter(t, in.stack, "UDP.PacketsReceived"))
	// Every frame was worked on by some poll iteration, each one timed.
	lat := st.Total.PollLatency
	assert.NotZero(t, lat.Count())
	assert.LessOrEqual(t, lat.Count(), uint64(n))
	assert.NotZero(t, lat.Sum)
	assert.NotZero(t, st.Total.PollNanos)
	assert.Greater(t, st.Total.BusyRatio(), 0.0)
	assert.LessOrEqual(t, st.Total.BusyRatio(), 1.0)
	assert.Equal(t, "pipe", st.LinkName[:4])
	assert.Nil(t, st.Link, "the pipe keeps no counters of its own")
}

func TestStatsMalformedFrameCountsBadFrameOnly(t *testing.T) {
	in := newInjector(t, nil)
	in.send(t, []byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}) // shorter than an Ethernet header
	in.waitRx(t, 1)
	st := in.waitDrop(t, "RxBadFrame", 1)
	onlyDrop(t, st.Total, "RxBadFrame", 1)
	assert.Zero(t, st.Total.TxFrames, "a dropped frame is not answered")
	assert.Zero(t, protocolCounter(t, in.stack, "IP.PacketsReceived"), "it never reached gVisor")
}

// wrappedLink presents a link's queues through wrap, made once.
type wrappedLink struct {
	link.Link
	queues []link.Queue
}

func wrapQueues(l link.Link, wrap func(link.Queue) link.Queue) wrappedLink {
	w := wrappedLink{Link: l}
	for _, q := range l.Queues() {
		w.queues = append(w.queues, wrap(q))
	}
	return w
}

func (l wrappedLink) Queues() []link.Queue { return l.queues }

// uncheckedLink clears ChecksumValid on every received frame, as a link
// without RX checksum offload would leave it.
type uncheckedLink struct{ wrappedLink }

func newUncheckedLink(l link.Link) link.Link {
	return uncheckedLink{wrapQueues(l, func(q link.Queue) link.Queue { return uncheckedQueue{q} })}
}

func (l uncheckedLink) Info() link.Info {
	info := l.Link.Info()
	info.Caps &^= link.CapRXChecksum
	return info
}

type uncheckedQueue struct{ link.Queue }

func (q uncheckedQueue) ReadBurst(frames []link.RxFrame) (int, error) {
	n, err := q.Queue.ReadBurst(frames)
	for i := range n {
		frames[i].ChecksumValid = false
	}
	return n, err
}

func TestStatsBadChecksumCountsChecksumOnly(t *testing.T) {
	in := newInjector(t, newUncheckedLink)
	sock, err := in.stack.ListenUDP("udp4", netip.AddrPortFrom(addrA.Addr(), 7000))
	require.NoError(t, err)
	defer sock.Close()
	dst := netip.AddrPortFrom(addrA.Addr(), 7000)
	in.send(t, udpFrame(in.mac, dst, []byte("corrupted"), true))
	in.waitRx(t, 1)
	st := in.waitDrop(t, "RxChecksum", 1)
	onlyDrop(t, st.Total, "RxChecksum", 1)

	// A good frame after it is delivered and counted as such.
	in.send(t, udpFrame(in.mac, dst, []byte("fine"), false))
	st = in.waitRx(t, 2)
	onlyDrop(t, st.Total, "RxChecksum", 1)
	require.NoError(t, sock.SetReadDeadline(time.Now().Add(5*time.Second)))
	buf := make([]byte, 64)
	n, err := sock.Read(buf)
	require.NoError(t, err)
	assert.Equal(t, "fine", string(buf[:n]))
}

func TestStatsTCPTrafficMovesEngineCounters(t *testing.T) {
	a, b := newPair(t, pipe.Config{Queues: 2})
	for range 4 {
		c, s := connPair(t, a, b, addrB.Addr())
		require.NoError(t, xfer.Exchange(c, s, 256<<10))
	}
	// Every WriteBurst is one TX batch. Trailing ACKs may still be leaving:
	// compare once a snapshot is quiet.
	var st polarnet.Stats
	require.Eventually(t, func() bool {
		st = a.Stats()
		return st.Total.TxBursts == st.Total.TxBatch.Count()
	}, 5*time.Second, 10*time.Millisecond)
	require.Len(t, st.Shards, 2)
	tot := st.Total
	assert.GreaterOrEqual(t, tot.TxBatch.Sum, tot.TxFrames)
	assert.LessOrEqual(t, tot.TxBatch.Quantile(1), uint64(64))
	assert.NotZero(t, tot.PollLatency.Count())
	for i, sh := range st.Shards {
		assert.NotZero(t, sh.PollNanos, "shard %d", i)
	}
	// The per-shard histograms add up to the total.
	var sum polarnet.Histogram
	for _, sh := range st.Shards {
		for i := range sum.Counts {
			sum.Counts[i] += sh.TxBatch.Counts[i]
		}
	}
	assert.Equal(t, tot.TxBatch.Counts, sum.Counts)

	// ProtocolCounters reports gVisor's protocol counters in the
	// catalogue's order; ProtocolCounter reads one of them by its path.
	// Trailing ACKs may still be leaving: compare once they agree.
	var counters []polarnet.ProtocolCounter
	byPath := map[string]polarnet.ProtocolCounter{}
	require.Eventually(t, func() bool {
		counters = a.ProtocolCounters()
		for _, c := range counters {
			byPath[c.Path] = c
		}
		sent, okSent := a.ProtocolCounter("TCP.SegmentsSent")
		established, okEstablished := a.ProtocolCounter("TCP.CurrentEstablished") // a gauge
		return okSent && okEstablished && sent > 0 &&
			sent == byPath["TCP.SegmentsSent"].Value && established == byPath["TCP.CurrentEstablished"].Value
	}, 5*time.Second, 10*time.Millisecond)
	require.Len(t, counters, len(polarnet.ProtocolCatalogue()))
	for i, c := range counters {
		assert.Equal(t, polarnet.ProtocolCatalogue()[i].Path, c.Path)
	}
	assert.Equal(t, uint64(4), byPath["TCP.ActiveConnectionOpenings"].Value)
	assert.Equal(t, uint64(4), protocolCounter(t, a, "TCP.ActiveConnectionOpenings"))
	assert.False(t, byPath["TCP.ActiveConnectionOpenings"].Gauge)
	assert.True(t, byPath["TCP.CurrentEstablished"].Gauge)
	for _, path := range []string{"", "TCP", "tcp.retransmits", "TCP.Retransmits.", "TCP.NoSuchCounter"} {
		_, ok := a.ProtocolCounter(path)
		assert.False(t, ok, "%q names no counter", path)
	}
}

// TestProtocolCounterPaths checks that the counters read by path across the
// module (tests, benchmarks, conformance) exist.
func TestProtocolCounterPaths(t *testing.T) {
	a, _ := newPair(t, pipe.Config{})
	for _, path := range []string{
		"DroppedPackets",
		"ICMP.V4.PacketsSent.ICMPv4PacketStats.DstUnreachable",
		"ICMP.V4.PacketsSent.RateLimited",
		"ICMP.V6.PacketsSent.ICMPv6PacketStats.DstUnreachable",
		"ICMP.V6.PacketsSent.RateLimited",
		"IP.Forwarding.Errors",
		"IP.InvalidDestinationAddressesReceived",
		"IP.PacketsDelivered",
		"IP.PacketsReceived",
		"TCP.FastRetransmit",
		"TCP.InvalidSegmentsReceived",
		"TCP.ListenOverflowInvalidSynCookieRcvd",
		"TCP.ListenOverflowSynCookieSent",
		"TCP.ResetsSent",
		"TCP.Retransmits",
		"TCP.SACKRecovery",
		"TCP.Timeouts",
		"TCP.ValidSegmentsReceived",
		"UDP.PacketsReceived",
		"UDP.UnknownPortErrors",
	} {
		_, ok := a.ProtocolCounter(path)
		assert.True(t, ok, path)
	}
}

// lossyQueue drops every nth data frame written to it.
type lossyQueue struct {
	link.Queue
	every   uint64
	written *atomic.Uint64
	keep    []link.TxFrame
}

func (q *lossyQueue) WriteBurst(frames []link.TxFrame) (int, error) {
	q.keep = q.keep[:0]
	for _, f := range frames {
		if q.written.Add(1)%q.every != 0 || f.Len() < 200 {
			q.keep = append(q.keep, f)
		}
	}
	if _, err := q.Queue.WriteBurst(q.keep); err != nil {
		return 0, err
	}
	return len(frames), nil // the lost ones were "sent"
}

func TestStatsLossCountsRetransmits(t *testing.T) {
	la, lb := pipe.New(pipe.Config{})
	written := new(atomic.Uint64)
	lossy := wrapQueues(la, func(q link.Queue) link.Queue { return &lossyQueue{Queue: q, every: 40, written: written} })
	a := newStack(t, lossy, addrA, addrA6)
	b := newStack(t, lb, addrB, addrB6)
	c, s := connPair(t, a, b, addrB.Addr())
	require.NoError(t, xfer.Exchange(c, s, 1<<20))
	st := a.Stats().Total
	assert.NotZero(t, st.Retransmits, "lost data segments are retransmitted")
	assert.NotZero(t, st.FastRecovery+st.SACKRecovery+st.TLPRecovery+st.RTOTimeouts, "and recovered")
	// Nothing the engine or the stacks count as a drop: the loss was silent.
	onlyDrop(t, st, "", 0)
}

// statsLink is a pipe end that also reports link counters.
type statsLink struct {
	link.Link
	stats []link.QueueStats
}

func (l statsLink) LinkStats() []link.QueueStats { return l.stats }

func TestStatsReportsLinkCounters(t *testing.T) {
	la, _ := pipe.New(pipe.Config{})
	want := []link.QueueStats{{Queue: 0, RxRingFull: 3, RxNoBuffers: 2, PoolSize: 64, PoolFree: 60, PoolFreeMin: 10}}
	st := newStack(t, statsLink{Link: la, stats: want}, addrA, addrA6)
	assert.Equal(t, want, st.Stats().Link)
}

// failingQueue fails every ReadBurst.
type failingQueue struct{ link.Queue }

var errDeviceGone = errors.New("device gone")

func (q failingQueue) ReadBurst(frames []link.RxFrame) (int, error) {
	if _, err := q.Queue.ReadBurst(frames); err != nil {
		return 0, err
	}
	return 0, errDeviceGone
}

// recordingHandler keeps the records a logger receives.
type recordingHandler struct {
	mu      sync.Mutex
	records []slog.Record
}

func (h *recordingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *recordingHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.records = append(h.records, r.Clone())
	return nil
}
func (h *recordingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *recordingHandler) WithGroup(string) slog.Handler      { return h }

func (h *recordingHandler) messages() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, r := range h.records {
		var b bytes.Buffer
		b.WriteString(r.Message)
		r.Attrs(func(a slog.Attr) bool {
			b.WriteString(" " + a.String())
			return true
		})
		out = append(out, b.String())
	}
	return out
}

func TestLogsRateLimitPollErrors(t *testing.T) {
	h := &recordingHandler{}
	la, _ := pipe.New(pipe.Config{})
	failing := wrapQueues(la, func(q link.Queue) link.Queue { return failingQueue{q} })
	st := newStack(t, failing, addrA, addrA6, func(c *polarnet.Config) {
		c.Logger = slog.New(h)
		c.Poll = polarnet.PollBusy
	})
	require.Eventually(t, func() bool { return st.Stats().Total.PollErrors > 1000 }, 5*time.Second, time.Millisecond)
	msgs := h.messages()
	require.NotEmpty(t, msgs)
	// A burst of 5, then about one a second: a test this short sees few.
	assert.LessOrEqual(t, len(msgs), 8, "%q", msgs)
	assert.Contains(t, msgs[0], "polarnet: link read failed")
	assert.Contains(t, msgs[0], "device gone")
	assert.Contains(t, msgs[0], "shard=0")
	assert.Greater(t, st.Stats().Total.LogsSuppressed, uint64(900))
}

func TestLogsDropBursts(t *testing.T) {
	h := &recordingHandler{}
	in := newInjector(t, nil, func(c *polarnet.Config) { c.Logger = slog.New(h) })
	bad := make([][]byte, 10)
	for i := range bad {
		bad[i] = []byte{1, 2, 3}
	}
	in.send(t, bad...)
	in.waitRx(t, 10)
	require.Eventually(t, func() bool { return len(h.messages()) > 0 }, 5*time.Second, time.Millisecond)
	msgs := h.messages()
	assert.Contains(t, msgs[0], "polarnet: frames dropped")
	assert.Contains(t, msgs[0], "bad_frame=10")
}
