package rdma

import (
	"bytes"
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/polarnet/polarnet/internal/leakcheck"
	"github.com/polarnet/polarnet/link"
)

// fakeLink is a link on a fake device and the device.
type fakeLink struct {
	*Link
	dev *fakeDevice
}

// newFakeLink builds a link on a new device of wire; port MTU 9216, so the
// config's MTU decides. prep may adjust the device before setup.
func newFakeLink(t *testing.T, w *fakeWire, n byte, cfg Config, prep func(*fakeDevice)) *fakeLink {
	t.Helper()
	d := w.newDevice(fmt.Sprintf("fake%d", n))
	if prep != nil {
		prep(d)
	}
	if cfg.MTU == 0 {
		cfg.MTU = 1500
	}
	cfg, err := cfg.check()
	require.NoError(t, err)
	snap := leakcheck.Take()
	l, err := build(cfg, fakePort(d.name, macN(n), 9216), d)
	require.NoError(t, err)
	fl := &fakeLink{l, d}
	// Whatever a test did, closing the link gives every buffer back, leaves
	// no work request on the device, and no goroutine or fd behind.
	// Cleanups run last-in first-out: a link created later is closed and
	// checked first, so each snapshot sees the links made before it.
	t.Cleanup(func() {
		assert.NoError(t, l.Close())
		requireAllFree(t, fl)
		snap.Check(t)
	})
	return fl
}

// ownMAC gives a link a MAC of its own: every frame to it is the link's.
func ownMAC(cfg Config, n byte) Config {
	cfg.MAC = macN(0x80 | n)
	return cfg
}

// counts are a queue's buffers by state.
type counts struct{ free, posted, inflight, reaped int }

// accounting checks that every buffer of every queue is in exactly one
// place and that the link's view matches the device's: the buffers posted
// for receive are those the device holds, and every send the device still
// holds is in flight. It returns the counts per queue.
func accounting(t *testing.T, l *fakeLink) []counts {
	t.Helper()
	var out []counts
	for i, q := range l.queues {
		q.mu.Lock()
		var c counts
		for _, s := range q.state {
			switch s {
			case bufFree:
				c.free++
			case bufPosted:
				c.posted++
			case bufInflight:
				c.inflight++
			case bufReaped:
				c.reaped++
			}
		}
		assert.Equal(t, len(q.state), c.free+c.posted+c.inflight+c.reaped, "queue %d", i)
		assert.Equal(t, c.posted, q.posted, "queue %d: posted count", i)
		assert.Equal(t, c.inflight, q.inflight.len(), "queue %d: in-flight count", i)
		freeRx, freeTx := slices.Clone(q.rxFree), slices.Clone(q.txFree)
		assert.Equal(t, c.free, len(freeRx)+len(freeTx), "queue %d: free lists", i)
		slices.Sort(freeRx)
		slices.Sort(freeTx)
		assert.Equal(t, len(freeRx), len(slices.Compact(freeRx)), "queue %d: receive buffer free twice", i)
		assert.Equal(t, len(freeTx), len(slices.Compact(freeTx)), "queue %d: send buffer free twice", i)
		q.mu.Unlock()
		out = append(out, c)
	}
	l.dev.wire.mu.Lock()
	for i, qp := range l.dev.qps {
		if !l.closed.Load() && !qp.broken {
			assert.Equal(t, out[i].posted, len(qp.rq)+countRecvCQ(qp), "queue %d: posted buffers the device does not hold", i)
		}
		assert.LessOrEqual(t, len(qp.sq), out[i].inflight, "queue %d: the device holds sends the link forgot", i)
	}
	l.dev.wire.mu.Unlock()
	return out
}

// countRecvCQ counts the receive completions not reaped yet.
func countRecvCQ(qp *fakeQP) int { return len(qp.rcq) }

// requireAllFree checks, after Close, that every buffer came back.
func requireAllFree(t *testing.T, l *fakeLink) {
	t.Helper()
	for i, c := range accounting(t, l) {
		require.Equal(t, counts{free: len(l.queues[i].state)}, c, "queue %d after Close", i)
		require.Len(t, l.queues[i].rxFree, l.queues[i].rxDepth)
	}
	require.True(t, l.dev.closed, "device not closed")
	rq, sq, _, _ := l.dev.outstanding()
	require.Zero(t, rq, "receive work requests left on the device")
	require.Zero(t, sq, "send work requests left on the device")
}

// ipv4Frame builds a UDP frame from src to dst between two MACs.
func udpFrame(srcMAC, dstMAC []byte, src, dst netip.AddrPort, payload int) []byte {
	f := make([]byte, 14+20+8+payload)
	copy(f[0:], dstMAC)
	copy(f[6:], srcMAC)
	f[12], f[13] = 0x08, 0x00
	ip := f[14:]
	ip[0], ip[8], ip[9] = 0x45, 64, protoUDP
	putU16(ip[2:], uint16(20+8+payload))
	s, d := src.Addr().As4(), dst.Addr().As4()
	copy(ip[12:], s[:])
	copy(ip[16:], d[:])
	u := ip[20:]
	putU16(u[0:], src.Port())
	putU16(u[2:], dst.Port())
	putU16(u[4:], uint16(8+payload))
	for i := range payload {
		u[8+i] = byte(i)
	}
	return f
}

func putU16(b []byte, v uint16) { b[0], b[1] = byte(v>>8), byte(v) }

// write sends frames on q, retrying what a full ring refuses, for up to a
// few seconds.
func write(t *testing.T, q link.Queue, frames ...[]byte) {
	t.Helper()
	batch := make([]link.TxFrame, len(frames))
	for i, f := range frames {
		batch[i].Segs = [][]byte{f}
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(batch) > 0 {
		n, err := q.WriteBurst(batch)
		require.NoError(t, err)
		batch = batch[n:]
		if n == 0 {
			require.True(t, time.Now().Before(deadline), "ring stayed full")
			time.Sleep(100 * time.Microsecond)
		}
	}
}

// read collects at least want frames from q within a few seconds.
func read(t *testing.T, l *Link, q link.Queue, want int) [][]byte {
	t.Helper()
	frames := make([]link.RxFrame, 32)
	for i := range frames {
		frames[i].Buf = make([]byte, l.Info().RxFrameSize)
	}
	var got [][]byte
	deadline := time.Now().Add(5 * time.Second)
	for len(got) < want {
		require.True(t, time.Now().Before(deadline), "%d of %d frames arrived", len(got), want)
		n, err := q.ReadBurst(frames)
		require.NoError(t, err)
		for _, f := range frames[:n] {
			got = append(got, slices.Clone(f.Buf[:f.Len]))
		}
		if n == 0 {
			require.NoError(t, waitBounded(q, time.Second))
		}
	}
	return got
}

// waitBounded runs WaitRead, interrupting it after d.
func waitBounded(q link.Queue, d time.Duration) error {
	t := time.AfterFunc(d, q.Interrupt)
	defer t.Stop()
	return q.WaitRead()
}

// requireFrames checks that got holds the frames of want, in order, without
// dumping them.
func requireFrames(t *testing.T, want, got [][]byte) {
	t.Helper()
	require.Len(t, got, len(want), "frames received")
	for i := range want {
		require.True(t, bytes.Equal(want[i], got[i]), "frame %d differs: %d bytes sent, %d received", i, len(want[i]), len(got[i]))
	}
}
