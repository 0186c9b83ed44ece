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

// TestShedSYNs sends frames through the device while its queue sheds and
// while it does not: shedding, connection requests (IPv4 and IPv6) are
// dropped but for a sample, each one counted in RxShed and not in
// RxRingFull, and every other segment (SYN-ACK, ACK, data) and datagram
// passes; not shedding, everything passes. Once the link is closed, the
// queue cannot shed.
func TestShedSYNs(t *testing.T) {
	ns := newNS(t)
	l := openTAP(t, Config{Queues: 1})
	kmac := plug(t, ns, l, 7)
	var raw *linktest.PacketSocketLink
	require.NoError(t, ns.Do(func() (err error) {
		raw, err = linktest.OpenPacketSocket(l.Info().Name)
		return err
	}))
	t.Cleanup(func() { raw.Close() })
	q := l.Queues()[0]
	shedder, ok := q.(link.SYNShedder)
	require.True(t, ok)

	const port = 7000
	v4 := netip.AddrPortFrom(linkAddr(7), port)
	v6 := netip.AddrPortFrom(netip.MustParseAddr("fd00:7::2"), port)
	tcp := func(dst netip.AddrPort, i int, flags uint8, payload int) []byte {
		src := netip.AddrPortFrom(kernelAddr(7), uint16(10000+i))
		if dst.Addr().Is6() {
			src = netip.AddrPortFrom(netip.MustParseAddr("fd00:7::1"), uint16(10000+i))
		}
		return frame.TCPFrame(frame.TCPSpec{
			SrcMAC: kmac, DstMAC: l.Info().MAC, Src: src, Dst: dst,
			Seq: uint32(i), Ack: 1, Flags: flags, Window: 1000, Payload: make([]byte, payload),
		})
	}
	// send writes frames, then a datagram that marks their end, and counts
	// what the queue receives up to the mark: connection requests and
	// other segments to port.
	send := func(frames [][]byte) (requests, others int) {
		t.Helper()
		for len(frames) > 0 {
			burst := make([]link.TxFrame, min(len(frames), 64))
			for i := range burst {
				burst[i].Segs = [][]byte{frames[i]}
			}
			n, err := raw.WriteBurst(burst)
			require.NoError(t, err)
			frames = frames[n:]
		}
		mark := netip.AddrPortFrom(kernelAddr(7), 9)
		_, err := raw.WriteBurst([]link.TxFrame{{Segs: [][]byte{udpv4Frame(l.Info().MAC, kmac, mark, v4, []byte("end"))}}})
		require.NoError(t, err)
		receive(t, q, l.Info().RxFrameSize, 5*time.Second, func(f []byte, _ bool) bool {
			p, ok := frame.Parse(f)
			if !ok {
				return false
			}
			if p.Proto == frame.ProtoUDP {
				return true
			}
			th, ok := frame.ParseTCP(f, p)
			if !ok || th.DstPort != port {
				return false
			}
			if th.Flags&(frame.FlagSYN|frame.FlagACK) == frame.FlagSYN {
				requests++
			} else {
				others++
			}
			return false
		})
		return requests, others
	}
	linkShed := func() (shed, ringFull uint64) {
		st := l.LinkStats()
		require.Len(t, st, 1)
		return st[0].RxShed, st[0].RxRingFull
	}

	// flood returns n connection requests, half IPv4, half IPv6, and other
	// segments to the same port among them, and how many others.
	flood := func(n int) (frames [][]byte, others int) {
		for i := range n {
			dst := v4
			if i%2 == 1 {
				dst = v6
			}
			frames = append(frames, tcp(dst, i, frame.FlagSYN, 0))
			if i%16 == 0 {
				frames = append(frames,
					tcp(dst, i, frame.FlagSYN|frame.FlagACK, 0),
					tcp(dst, i, frame.FlagACK, 0),
					tcp(dst, i, frame.FlagACK|frame.FlagPSH, 100))
				others += 3
			}
		}
		return frames, others
	}

	// 1,024 requests all shed would be a 2^-46 chance; while shedding
	// they fit in the device's ring, which holds 1,000 frames.
	const requests = 1024
	frames, others := flood(requests)
	require.NoError(t, shedder.ShedSYNs(true))
	passed, got := send(frames)
	shed, ringFull := linkShed()
	assert.Equal(t, others, got, "other segments while shedding")
	assert.Equal(t, uint64(requests), uint64(passed)+shed, "connection requests passed and shed")
	assert.NotZero(t, passed, "connection requests passed while shedding")
	assert.Less(t, passed, requests/4, "connection requests passed while shedding")
	assert.Zero(t, ringFull)

	require.NoError(t, shedder.ShedSYNs(false))
	frames, others = flood(requests / 4)
	passed, got = send(frames)
	assert.Equal(t, others, got, "other segments")
	assert.Equal(t, requests/4, passed, "connection requests")
	after, _ := linkShed()
	assert.Equal(t, shed, after, "shed once off")

	require.NoError(t, l.Close())
	assert.ErrorIs(t, shedder.ShedSYNs(true), link.ErrClosed)
}
