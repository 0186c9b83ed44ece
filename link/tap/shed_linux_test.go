package tap

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/polarnet/polarnet/internal/frame"
	"github.com/polarnet/polarnet/internal/testenv"
	"github.com/polarnet/polarnet/link"
	"github.com/polarnet/polarnet/link/linktest"
)

func TestPureSYN(t *testing.T) {
	v4 := func(flags uint8) []byte {
		return frame.TCPFrame(frame.TCPSpec{
			Src: netip.MustParseAddrPort("198.18.0.1:1000"), Dst: netip.MustParseAddrPort("198.18.0.2:80"), Flags: flags,
		})
	}
	v6 := frame.TCPFrame(frame.TCPSpec{
		Src: netip.MustParseAddrPort("[fd00:198:18::1]:1000"), Dst: netip.MustParseAddrPort("[fd00:198:18::2]:80"), Flags: frame.FlagSYN,
	})
	fragment := v4(frame.FlagSYN)
	fragment[frame.EthLen+6] |= 0x20 // more fragments
	udp := frame.UDPFrame(nil, nil, netip.MustParseAddrPort("198.18.0.1:1000"), netip.MustParseAddrPort("198.18.0.2:80"), []byte{frame.FlagSYN})
	for _, tc := range []struct {
		name  string
		frame []byte
		want  bool
	}{
		{"IPv4 SYN", v4(frame.FlagSYN), true},
		{"IPv6 SYN", v6, true},
		{"SYN-ACK", v4(frame.FlagSYN | frame.FlagACK), false},
		{"ACK", v4(frame.FlagACK), false},
		{"fragment", fragment, false},
		{"UDP", udp, false},
		{"truncated", v4(frame.FlagSYN)[:frame.EthLen+20], false},
	} {
		assert.Equal(t, tc.want, pureSYN(tc.frame), tc.name)
	}
}

// TestBacklogShedsSYNs queues a backlog of SYNs with a segment of an
// established connection every eighth frame, as a SYN flood does, and
// reads it: every established segment arrives, the bursts read once the
// queue is backlogged admit at most synBudget SYNs each, and the SYNs shed
// are counted as lost to a full ring.
func TestBacklogShedsSYNs(t *testing.T) {
	testenv.RequirePriv(t)
	const (
		frames = 800 // within the device's queue of txqueuelen (1000) frames
		every  = 8
		// burstSize is the engine's RX burst.
		burstSize = 32
	)
	ns := newNS(t)
	l := openTAP(t, Config{})
	kernelMAC := plug(t, ns, l, 0)
	var sock *linktest.PacketSocketLink
	require.NoError(t, ns.Do(func() (err error) {
		sock, err = linktest.OpenPacketSocket(l.Info().Name)
		return err
	}))
	t.Cleanup(func() { sock.Close() })

	dst := netip.AddrPortFrom(linkAddr(0), 80)
	backlog := make([]link.TxFrame, frames)
	for i := range backlog {
		spec := frame.TCPSpec{SrcMAC: kernelMAC, DstMAC: l.Info().MAC, Src: netip.AddrPortFrom(kernelAddr(0), uint16(1024+i)), Dst: dst, Flags: frame.FlagSYN}
		if i%every == 0 {
			spec.Src, spec.Flags, spec.Payload = netip.AddrPortFrom(kernelAddr(0), 1000), frame.FlagACK, []byte{byte(i / every)}
		}
		backlog[i] = link.TxFrame{Segs: [][]byte{frame.TCPFrame(spec)}}
	}
	for off := 0; off < frames; {
		n, err := sock.WriteBurst(backlog[off:])
		require.NoError(t, err)
		require.Positive(t, n, "the device's queue took no more after %d frames", off)
		off += n
	}

	q := l.Queues()[0]
	burst := make([]link.RxFrame, burstSize)
	for i := range burst {
		burst[i].Buf = make([]byte, l.Info().RxFrameSize)
	}
	var established []byte
	admitted := 0
	for i := range frames {
		n, err := q.ReadBurst(burst)
		require.NoError(t, err)
		if n == 0 {
			break
		}
		syns := 0
		for _, f := range burst[:n] {
			b := f.Buf[:f.Len]
			if pureSYN(b) {
				syns++
				continue
			}
			p, ok := frame.Parse(b)
			if tcp, isTCP := frame.ParseTCP(b, p); ok && isTCP && tcp.PayloadLen == 1 {
				established = append(established, b[p.L4+tcp.HeaderLen])
			}
		}
		admitted += syns
		if i >= backlogBursts {
			assert.LessOrEqual(t, syns, synBudget, "SYNs admitted by burst %d, backlogged", i+1)
		}
	}
	want := make([]byte, frames/every)
	for i := range want {
		want[i] = byte(i)
	}
	assert.Equal(t, want, established, "the established connection's segments, in order")
	shed := frames - frames/every - admitted
	assert.Positive(t, shed, "SYNs shed")
	stats := l.LinkStats()
	require.Len(t, stats, 1)
	assert.Equal(t, uint64(shed), stats[0].RxRingFull, "SYNs shed, counted as lost to a full ring")
}
