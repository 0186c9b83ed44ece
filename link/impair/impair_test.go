package impair_test

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/polarnet/polarnet/internal/frame"
	"github.com/polarnet/polarnet/link"
	"github.com/polarnet/polarnet/link/impair"
	"github.com/polarnet/polarnet/link/linktest"
	"github.com/polarnet/polarnet/link/pipe"
)

func TestSuite(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  impair.Config
	}{
		{"Zero", impair.Config{}},
		{"Delay", impair.Symmetric(impair.Impairment{Delay: time.Millisecond, Jitter: 500 * time.Microsecond}, 1)},
		{"Rate", impair.Symmetric(impair.Impairment{Rate: 1e9}, 1)},
		{"ClampMSS", impair.Symmetric(impair.Impairment{ClampMSS: 536}, 1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			linktest.TestLinkPair(t, func(*testing.T) (link.Link, link.Link) {
				a, b := pipe.New(pipe.Config{MTU: 9000})
				return impair.New(a, tc.cfg), b
			})
		})
	}
}

func TestRelaySuite(t *testing.T) {
	linktest.TestLinkPair(t, func(t *testing.T) (link.Link, link.Link) {
		a1, a2 := pipe.New(pipe.Config{})
		b1, b2 := pipe.New(pipe.Config{})
		r, err := impair.NewRelay(a2, impair.New(b1, impair.Symmetric(impair.Impairment{Delay: 100 * time.Microsecond}, 1)))
		require.NoError(t, err)
		t.Cleanup(func() { assert.NoError(t, r.Close()) })
		return a1, b2
	})
}

// dataFrame returns a valid Ethernet/IPv4/TCP frame whose payload starts
// with seq, padded to size bytes.
func dataFrame(seq uint32, size int) []byte {
	f := frame.TCPFrame(frame.TCPSpec{
		Src: netip.MustParseAddrPort("198.18.0.1:1000"), Dst: netip.MustParseAddrPort("198.18.0.2:2000"),
		Flags: frame.FlagACK, Payload: make([]byte, size-54),
	})
	p, _ := frame.Parse(f)
	binary.BigEndian.PutUint32(f[p.L4+frame.TCPLen:], seq)
	frame.FixChecksum(f, p)
	return f
}

func seqOf(f []byte) uint32 {
	return binary.BigEndian.Uint32(f[frame.EthLen+frame.IPv4Len+frame.TCPLen:])
}

// arrival is a received frame and when it came.
type arrival struct {
	data  []byte
	at    time.Time
	valid bool
}

// send writes frames one WriteBurst each, spaced by gap.
func send(t *testing.T, q link.Queue, frames [][]byte, gap time.Duration, offload link.TxOffload) {
	t.Helper()
	for _, f := range frames {
		n, err := q.WriteBurst([]link.TxFrame{{Segs: [][]byte{f[:20], f[20:]}, Offload: offload}})
		require.NoError(t, err)
		require.Equal(t, 1, n)
		if gap > 0 {
			time.Sleep(gap)
		}
	}
}

// collect reads from q until want frames arrived or quiet passes with none.
func collect(t *testing.T, q link.Queue, want int, quiet time.Duration) []arrival {
	t.Helper()
	var out []arrival
	rx := make([]link.RxFrame, 16)
	for i := range rx {
		rx[i].Buf = make([]byte, 9100)
	}
	last := time.Now()
	for len(out) < want && time.Since(last) < quiet {
		n, err := q.ReadBurst(rx)
		require.NoError(t, err)
		now := time.Now()
		for _, f := range rx[:n] {
			out = append(out, arrival{append([]byte(nil), f.Buf[:f.Len]...), now, f.ChecksumValid})
			last = now
		}
		if n == 0 {
			time.Sleep(50 * time.Microsecond)
		}
	}
	return out
}

func frames(n, size int) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		out[i] = dataFrame(uint32(i), size)
	}
	return out
}

// run sends n frames through an impairment on the sending side (egress) or
// the receiving side (ingress) and returns what arrived.
func run(t *testing.T, cfg impair.Config, n int, ingress bool) ([]arrival, impair.Stats) {
	a, b := pipe.New(pipe.Config{})
	var imp *impair.Link
	var tx, rx link.Link = a, b
	if ingress {
		imp = impair.New(b, cfg)
		rx = imp
	} else {
		imp = impair.New(a, cfg)
		tx = imp
	}
	defer tx.Close()
	defer rx.Close()
	send(t, tx.Queues()[0], frames(n, 200), 0, link.TxOffload{})
	got := collect(t, rx.Queues()[0], 2*n, 300*time.Millisecond)
	return got, imp.Stats()
}

func seqs(as []arrival) []uint32 {
	var out []uint32
	for _, a := range as {
		out = append(out, seqOf(a.data))
	}
	return out
}

func TestReproducible(t *testing.T) {
	// A long hold: on a loaded machine the next frame may come more than
	// the default millisecond later, and the held one would leave alone.
	imp := impair.Impairment{Loss: 0.2, Duplicate: 0.1, Reorder: 0.2, ReorderHold: 100 * time.Millisecond, Corrupt: 0.1}
	for _, ingress := range []bool{false, true} {
		t.Run(fmt.Sprintf("ingress=%v", ingress), func(t *testing.T) {
			cfg := impair.Config{Egress: imp, Ingress: imp, Seed: 42}
			first, st := run(t, cfg, 500, ingress)
			second, _ := run(t, cfg, 500, ingress)
			assert.Equal(t, seqs(first), seqs(second), "same seed, same outcome")
			for i := range first {
				assert.Equal(t, first[i].data, second[i].data)
			}
			cfg.Seed = 43
			third, _ := run(t, cfg, 500, ingress)
			assert.NotEqual(t, seqs(first), seqs(third), "another seed, another outcome")

			d := st.Egress
			if ingress {
				d = st.Ingress
			}
			assert.EqualValues(t, 500, d.Frames)
			assert.InDelta(t, 100, d.Lost, 40)
			assert.InDelta(t, 40, d.Duplicated, 25)
			assert.NotZero(t, d.Reordered)
			assert.NotZero(t, d.Corrupted)
			assert.EqualValues(t, len(first), d.Delivered)
			assert.EqualValues(t, 500-d.Lost+d.Duplicated, d.Delivered)

			// Reordered frames arrive after their successor; the others in order.
			inversions := 0
			for i := 1; i < len(first); i++ {
				if seqOf(first[i].data) < seqOf(first[i-1].data) {
					inversions++
				}
			}
			assert.NotZero(t, inversions)
			assert.LessOrEqual(t, inversions, int(d.Reordered))
		})
	}
}

func TestCorruptionIsDetectable(t *testing.T) {
	imp := impair.Impairment{Corrupt: 1}
	for _, ingress := range []bool{false, true} {
		t.Run(fmt.Sprintf("ingress=%v", ingress), func(t *testing.T) {
			a, b := pipe.New(pipe.Config{})
			var tx, rx link.Link = a, b
			if ingress {
				rx = impair.New(b, impair.Config{Ingress: imp, Seed: 7})
			} else {
				tx = impair.New(a, impair.Config{Egress: imp, Seed: 7})
			}
			defer tx.Close()
			defer rx.Close()
			// Frames with a partial checksum, which the pipe marks
			// ChecksumValid on arrival: the impairment must complete the
			// checksum before flipping a bit, and drop the mark.
			var sent [][]byte
			for i := range 200 {
				f := dataFrame(uint32(i), 100+i)
				p, _ := frame.Parse(f)
				binary.BigEndian.PutUint16(f[p.L4+16:], frame.Fold(frame.PseudoHeaderSum(p, p.End-p.L4)))
				sent = append(sent, f)
			}
			send(t, tx.Queues()[0], sent, 0, link.TxOffload{NeedsChecksum: true, ChecksumStart: frame.EthLen + frame.IPv4Len, ChecksumOffset: 16})
			got := collect(t, rx.Queues()[0], len(sent), 200*time.Millisecond)
			require.Len(t, got, len(sent))
			for i, g := range got {
				if ingress {
					// (A pipe marks every frame it delivers: only the
					// decorator's own deliveries say something.)
					assert.False(t, g.valid, "frame %d must not be marked ChecksumValid", i)
				}
				p, ok := frame.Parse(g.data)
				if !ok {
					continue // the flip broke the IP header: dropped anyway
				}
				assert.False(t, frame.ChecksumOK(g.data, p) && frame.IPv4HeaderOK(g.data, p), "frame %d: corruption must be detectable", i)
			}
		})
	}
}

func TestDelayAndRate(t *testing.T) {
	const delay = 20 * time.Millisecond
	a, b := pipe.New(pipe.Config{})
	tx := impair.New(a, impair.Config{Egress: impair.Impairment{Delay: delay, Jitter: 5 * time.Millisecond, Rate: 8_000_000}})
	defer tx.Close()
	defer b.Close()
	start := time.Now()
	// 100 frames of 1000 bytes at 8 Mbit/s take 100ms to serialise.
	send(t, tx.Queues()[0], frames(100, 1000), 0, link.TxOffload{})
	got := collect(t, b.Queues()[0], 100, time.Second)
	require.Len(t, got, 100)
	assert.GreaterOrEqual(t, got[0].at.Sub(start), delay-5*time.Millisecond)
	assert.GreaterOrEqual(t, got[99].at.Sub(start), 100*time.Millisecond)
	assert.Equal(t, seqs(got), seqs(func() []arrival {
		var in []arrival
		for _, f := range frames(100, 1000) {
			in = append(in, arrival{data: f})
		}
		return in
	}()), "jitter keeps order")
}

func TestIngressDelayWakesWaitRead(t *testing.T) {
	const delay = 30 * time.Millisecond
	a, b := pipe.New(pipe.Config{})
	rx := impair.New(b, impair.Config{Ingress: impair.Impairment{Delay: delay}})
	defer a.Close()
	defer rx.Close()
	q := rx.Queues()[0]
	start := time.Now()
	send(t, a.Queues()[0], frames(1, 100), 0, link.TxOffload{})
	buf := []link.RxFrame{{Buf: make([]byte, 1514)}}
	for i := 0; ; i++ {
		require.Less(t, i, 100, "WaitRead spins")
		n, err := q.ReadBurst(buf)
		require.NoError(t, err)
		if n == 1 {
			break
		}
		require.NoError(t, q.WaitRead())
	}
	assert.GreaterOrEqual(t, time.Since(start), delay)
}

func TestClampMSS(t *testing.T) {
	syn := frame.TCPFrame(frame.TCPSpec{
		Src: netip.MustParseAddrPort("198.18.0.1:1000"), Dst: netip.MustParseAddrPort("198.18.0.2:2000"),
		Flags: frame.FlagSYN, Options: frame.MSSOption(1460),
	})
	for _, partial := range []bool{false, true} {
		a, b := pipe.New(pipe.Config{})
		tx := impair.New(a, impair.Config{Egress: impair.Impairment{ClampMSS: 1200}})
		f := append([]byte(nil), syn...)
		var off link.TxOffload
		p, _ := frame.Parse(f)
		if partial {
			binary.BigEndian.PutUint16(f[p.L4+16:], frame.Fold(frame.PseudoHeaderSum(p, p.End-p.L4)))
			off = link.TxOffload{NeedsChecksum: true, ChecksumStart: uint16(p.L4), ChecksumOffset: 16}
		}
		send(t, tx.Queues()[0], [][]byte{f}, 0, off)
		got := collect(t, b.Queues()[0], 1, 200*time.Millisecond)
		require.Len(t, got, 1)
		g := got[0].data
		tcp, _ := frame.ParseTCP(g, p)
		assert.Equal(t, uint16(1200), tcp.Options.MSS)
		if partial {
			// The pipe does not complete checksums: do it as a NIC would.
			frame.CompletePartial(g, p.L4, 16, len(g))
		}
		assert.True(t, frame.ChecksumOK(g, p))
		assert.EqualValues(t, 1, tx.Stats().Egress.Clamped)
		tx.Close()
		b.Close()
	}
}

func TestRelayCompletesPartialChecksums(t *testing.T) {
	a1, a2 := pipe.New(pipe.Config{})
	b1, b2 := pipe.New(pipe.Config{MTU: 576})
	r, err := impair.NewRelay(a2, b1)
	require.NoError(t, err)
	defer func() { assert.NoError(t, r.Close()) }()
	defer a1.Close()
	defer b2.Close()
	f := dataFrame(1, 300)
	p, _ := frame.Parse(f)
	binary.BigEndian.PutUint16(f[p.L4+16:], frame.Fold(frame.PseudoHeaderSum(p, p.End-p.L4)))
	// The pipe marks it ChecksumValid on a2; the relay must complete it. The
	// oversize frame goes first, so that it has been counted once the other
	// arrives; Close waits for the relay's counting of what it sent.
	send(t, a1.Queues()[0], [][]byte{dataFrame(2, 1000), f}, 0, link.TxOffload{NeedsChecksum: true, ChecksumStart: uint16(p.L4), ChecksumOffset: 16})
	got := collect(t, b2.Queues()[0], 1, 200*time.Millisecond)
	require.Len(t, got, 1, "the 1000-byte frame exceeds MTU 576")
	assert.True(t, frame.ChecksumOK(got[0].data, p))
	require.NoError(t, r.Close())
	assert.EqualValues(t, 1, r.Stats().AtoB.Oversize)
	assert.EqualValues(t, 1, r.Stats().AtoB.Frames)
}

func TestCheck(t *testing.T) {
	assert.NoError(t, impair.Config{}.Check())
	assert.ErrorContains(t, impair.Config{Egress: impair.Impairment{Loss: 1.5}}.Check(), "Egress.Loss")
	assert.ErrorContains(t, impair.Config{Ingress: impair.Impairment{Delay: -1}}.Check(), "negative")
	assert.Panics(t, func() { impair.New(nil, impair.Config{Ingress: impair.Impairment{Corrupt: -1}}) })
}

func TestHidesGSOWhenCorrupting(t *testing.T) {
	gso := &gsoLink{}
	assert.NotZero(t, impair.New(gso, impair.Config{}).Info().Caps&link.CapGSO)
	assert.Zero(t, impair.New(gso, impair.Config{Egress: impair.Impairment{Corrupt: 0.1}}).Info().Caps&link.CapGSO)
}

// gsoLink is a queueless link that claims GSO, for Info checks.
type gsoLink struct{}

func (*gsoLink) Info() link.Info {
	return link.Info{Name: "gso", MTU: 1500, RxFrameSize: 65535, Caps: link.CapGSO | link.CapTXChecksum, GSOMaxSize: 65535}
}
func (*gsoLink) Queues() []link.Queue { return nil }
func (*gsoLink) Close() error         { return nil }
