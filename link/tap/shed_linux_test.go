package tap

import (
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/polarnet/polarnet/internal/frame"
	"github.com/polarnet/polarnet/link"
	"github.com/polarnet/polarnet/link/linktest"
)

// shedBench is a TAP device with one queue in its own namespace, a packet
// socket on its kernel side to send frames through it, and a port the
// frames are for, on an IPv4 and an IPv6 address.
type shedBench struct {
	t      *testing.T
	l      *Link
	q      link.Queue
	raw    *linktest.PacketSocketLink
	kmac   []byte
	v4, v6 netip.AddrPort
}

const shedPort = 7000

func newShedBench(t *testing.T) *shedBench {
	ns := newNS(t)
	l := openTAP(t, Config{Queues: 1})
	b := &shedBench{t: t, l: l, q: l.Queues()[0], kmac: plug(t, ns, l, 7),
		v4: netip.AddrPortFrom(linkAddr(7), shedPort),
		v6: netip.AddrPortFrom(netip.MustParseAddr("fd00:7::2"), shedPort)}
	require.NoError(t, ns.Do(func() (err error) {
		b.raw, err = linktest.OpenPacketSocket(l.Info().Name)
		return err
	}))
	t.Cleanup(func() { b.raw.Close() })
	return b
}

// flow is the i-th flow to dst (its remote end's port is 10000+i).
func (b *shedBench) flow(dst netip.AddrPort, i int) link.Flow {
	src := kernelAddr(7)
	if dst.Addr().Is6() {
		src = netip.MustParseAddr("fd00:7::1")
	}
	return link.Flow{Local: dst, Remote: netip.AddrPortFrom(src, uint16(10000+i))}
}

// segment is a TCP segment of the i-th flow to dst.
func (b *shedBench) segment(dst netip.AddrPort, i int, flags uint8, payload int) []byte {
	f := b.flow(dst, i)
	return frame.TCPFrame(frame.TCPSpec{
		SrcMAC: b.kmac, DstMAC: b.l.Info().MAC, Src: f.Remote, Dst: f.Local,
		Seq: uint32(i), Ack: 1, Flags: flags, Window: 1000, Payload: make([]byte, payload),
	})
}

// send writes frames, then a datagram that marks their end, and returns
// the segments to the port the queue received up to the mark, by source
// port.
func (b *shedBench) send(frames [][]byte) (got []frame.TCP) {
	t := b.t
	t.Helper()
	for len(frames) > 0 {
		burst := make([]link.TxFrame, min(len(frames), 64))
		for i := range burst {
			burst[i].Segs = [][]byte{frames[i]}
		}
		n, err := b.raw.WriteBurst(burst)
		require.NoError(t, err)
		frames = frames[n:]
	}
	mark := netip.AddrPortFrom(kernelAddr(7), 9)
	_, err := b.raw.WriteBurst([]link.TxFrame{{Segs: [][]byte{udpv4Frame(b.l.Info().MAC, b.kmac, mark, b.v4, []byte("end"))}}})
	require.NoError(t, err)
	receive(t, b.q, b.l.Info().RxFrameSize, 5*time.Second, func(f []byte, _ bool) bool {
		p, ok := frame.Parse(f)
		if !ok {
			return false
		}
		if p.Proto == frame.ProtoUDP {
			return true
		}
		if th, ok := frame.ParseTCP(f, p); ok && th.DstPort == shedPort {
			got = append(got, th)
		}
		return false
	})
	return got
}

// shed returns the link's count of frames shed.
func (b *shedBench) shed() uint64 {
	st := b.l.LinkStats()
	require.Len(b.t, st, 1)
	return st[0].RxShed
}

// assertSampled checks that of sent frames the queue was to shed, passed
// went through, a sample, and the link counted the rest as shed, none as
// lost to a full ring; it returns the count of shed frames.
func (b *shedBench) assertSampled(what string, sent, passed int) uint64 {
	t := b.t
	t.Helper()
	st := b.l.LinkStats()
	require.Len(t, st, 1)
	assert.Equal(t, uint64(sent), uint64(passed)+st[0].RxShed, "%s passed and shed", what)
	assert.NotZero(t, passed, "%s passed while shedding", what)
	assert.Less(t, passed, sent/4, "%s passed while shedding", what)
	assert.Zero(t, st[0].RxRingFull)
	return st[0].RxShed
}

// TestShedSYNs sends frames through the device while its queue sheds and
// while it does not: shedding, connection requests (IPv4 and IPv6) are
// dropped but for a sample, each one counted in RxShed and not in
// RxRingFull, and every other segment (SYN-ACK, ACK, data) and datagram
// passes; not shedding, everything passes. Once the link is closed, the
// queue cannot shed.
func TestShedSYNs(t *testing.T) {
	b := newShedBench(t)
	shedder, ok := b.q.(link.SYNShedder)
	require.True(t, ok)
	requests := func(got []frame.TCP) (requests, others int) {
		for _, th := range got {
			if th.Flags&(frame.FlagSYN|frame.FlagACK) == frame.FlagSYN {
				requests++
			} else {
				others++
			}
		}
		return requests, others
	}

	// flood returns n connection requests, half IPv4, half IPv6, and other
	// segments to the same port among them, and how many others.
	flood := func(n int) (frames [][]byte, others int) {
		for i := range n {
			dst := b.v4
			if i%2 == 1 {
				dst = b.v6
			}
			frames = append(frames, b.segment(dst, i, frame.FlagSYN, 0))
			if i%16 == 0 {
				frames = append(frames,
					b.segment(dst, i, frame.FlagSYN|frame.FlagACK, 0),
					b.segment(dst, i, frame.FlagACK, 0),
					b.segment(dst, i, frame.FlagACK|frame.FlagPSH, 100))
				others += 3
			}
		}
		return frames, others
	}

	// 4,096 requests all shed would be a 2^-46 chance; while shedding
	// they fit in the device's ring, which holds 1,000 frames, and so do
	// the 256 sent while not shedding.
	const n, unshed = 4096, 256
	frames, others := flood(n)
	require.NoError(t, shedder.ShedSYNs(true))
	passed, got := requests(b.send(frames))
	assert.Equal(t, others, got, "other segments while shedding")
	shed := b.assertSampled("connection requests", n, passed)
	assert.Equal(t, shed, shedder.SYNsShed(), "counted as connection requests")
	assert.Zero(t, b.q.(link.StrayShedder).StraysShed(), "counted as strays")

	require.NoError(t, shedder.ShedSYNs(false))
	frames, others = flood(unshed)
	passed, got = requests(b.send(frames))
	assert.Equal(t, others, got, "other segments")
	assert.Equal(t, unshed, passed, "connection requests")
	assert.Equal(t, shed, b.shed(), "shed once off")

	require.NoError(t, b.l.Close())
	assert.ErrorIs(t, shedder.ShedSYNs(true), link.ErrClosed)
}

// TestShedStrays sends bare ACKs of allowed flows and of others, and other
// segments of the others, while the queue sheds strays and while it does
// not: shedding, the bare ACKs of flows not allowed (IPv4 and IPv6) are
// dropped but for a sample, each counted in RxShed, and everything else
// passes, connection requests too; not shedding, everything passes. Once
// the link is closed, the queue cannot shed.
func TestShedStrays(t *testing.T) {
	b := newShedBench(t)
	shedder, ok := b.q.(link.StrayShedder)
	require.True(t, ok)

	// All of them fit in the device's ring, 1,000 frames, when none is
	// shed.
	const strays, allowed = 640, 64
	var flows []link.Flow
	var frames [][]byte
	// Flows below allowed are allowed; each sends a bare ACK, and every
	// sixteenth other flow a data segment, a FIN, a RST and a SYN too.
	for i := range allowed + strays {
		dst := b.v4
		if i%2 == 1 {
			dst = b.v6
		}
		frames = append(frames, b.segment(dst, i, frame.FlagACK, 0))
		if i < allowed {
			flows = append(flows, b.flow(dst, i))
		} else if i%16 == 0 {
			frames = append(frames,
				b.segment(dst, i, frame.FlagACK|frame.FlagPSH, 100),
				b.segment(dst, i, frame.FlagACK|frame.FlagFIN, 0),
				b.segment(dst, i, frame.FlagRST, 0),
				b.segment(dst, i, frame.FlagSYN, 0))
		}
	}
	others := len(frames) - allowed - strays
	// count returns the bare ACKs of allowed flows and of others received,
	// and the other segments.
	count := func(got []frame.TCP) (fromAllowed, fromStrays, other int) {
		for _, th := range got {
			switch {
			case th.Flags != frame.FlagACK || th.PayloadLen > 0:
				other++
			case int(th.SrcPort) < 10000+allowed:
				fromAllowed++
			default:
				fromStrays++
			}
		}
		return fromAllowed, fromStrays, other
	}

	// Sent rounds times while shedding, the strays all shed would be a
	// 2^-43 chance.
	const rounds = 6
	require.NoError(t, shedder.AllowFlows(flows))
	require.NoError(t, shedder.ShedStrays(true))
	passed := 0
	for range rounds {
		fromAllowed, fromStrays, other := count(b.send(frames))
		assert.Equal(t, allowed, fromAllowed, "bare ACKs of allowed flows")
		assert.Equal(t, others, other, "other segments")
		passed += fromStrays
	}
	shed := b.assertSampled("stray ACKs", rounds*strays, passed)
	assert.Equal(t, shed, shedder.StraysShed(), "counted as strays")
	assert.Zero(t, b.q.(link.SYNShedder).SYNsShed(), "counted as connection requests")

	require.NoError(t, shedder.ShedStrays(false))
	fromAllowed, passed, other := count(b.send(frames))
	assert.Equal(t, []int{allowed, strays, others}, []int{fromAllowed, passed, other}, "not shedding")
	assert.Equal(t, shed, b.shed(), "shed once off")

	require.NoError(t, b.l.Close())
	assert.ErrorIs(t, shedder.ShedStrays(true), link.ErrClosed)
	assert.ErrorIs(t, shedder.AllowFlows(flows), link.ErrClosed)
}
