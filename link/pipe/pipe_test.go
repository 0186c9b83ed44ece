package pipe_test

import (
	"fmt"
	"net"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/polarnet/polarnet/link"
	"github.com/polarnet/polarnet/link/linktest"
	"github.com/polarnet/polarnet/link/pipe"
)

func TestPipeSuite(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  pipe.Config
	}{
		{"Defaults", pipe.Config{}},
		{"TwoQueues", pipe.Config{Queues: 2}},
		{"MTU9000", pipe.Config{MTU: 9000}},
		{"MTU65535", pipe.Config{MTU: 65535}},
		{"MTU65535TwoQueues", pipe.Config{MTU: 65535, Queues: 2}},
		{"Ring7", pipe.Config{RingSize: 7}}, // bursts fit in pieces; not a power of two
	} {
		t.Run(tc.name, func(t *testing.T) {
			linktest.TestLinkPair(t, func(*testing.T) (link.Link, link.Link) {
				return pipe.New(tc.cfg)
			})
		})
	}
}

func TestPipeDefaults(t *testing.T) {
	a, b := pipe.New(pipe.Config{})
	ia, ib := a.Info(), b.Info()
	for _, info := range []link.Info{ia, ib} {
		assert.Equal(t, 1500, info.MTU)
		assert.Equal(t, 1514, info.RxFrameSize)
		assert.Equal(t, link.CapRXChecksum|link.CapTXChecksum, info.Caps)
		if assert.Len(t, info.MAC, 6) {
			assert.Equal(t, byte(0x02), info.MAC[0]&0x03, "locally administered unicast")
		}
	}
	assert.NotEqual(t, ia.MAC, ib.MAC)
	assert.NotEqual(t, ia.Name, ib.Name)
	assert.Len(t, a.Queues(), 1)
	assert.Len(t, b.Queues(), 1)
}

func TestPipeConfig(t *testing.T) {
	macA := net.HardwareAddr{0x02, 0, 0, 0, 0, 0xa}
	macB := net.HardwareAddr{0x02, 0, 0, 0, 0, 0xb}
	a, b := pipe.New(pipe.Config{MTU: 65535, Queues: 3, MACA: macA, MACB: macB})
	assert.Equal(t, macA, a.Info().MAC)
	assert.Equal(t, macB, b.Info().MAC)
	assert.Equal(t, 65535+14, b.Info().RxFrameSize)
	assert.Len(t, a.Queues(), 3)

	for _, bad := range []pipe.Config{
		{MTU: 65536}, {MTU: -1}, {Queues: -1}, {RingSize: -1}, {MACA: net.HardwareAddr{1, 2}},
	} {
		assert.Panics(t, func() { pipe.New(bad) }, "%+v", bad)
	}
}

// TestPipeQueues checks what the suite leaves to steering: queue i of one
// end feeds queue i of the other, and frames come marked ChecksumValid.
func TestPipeQueues(t *testing.T) {
	a, b := pipe.New(pipe.Config{Queues: 2})
	qa, qb := a.Queues(), b.Queues()
	for i := range qa {
		n, err := qa[i].WriteBurst([]link.TxFrame{txFrame(60+i, byte(i))})
		require.NoError(t, err)
		require.Equal(t, 1, n)
	}
	for i := range qb {
		rx := rxFrames(2, b.Info().RxFrameSize)
		n, err := qb[i].ReadBurst(rx)
		require.NoError(t, err)
		require.Equal(t, 1, n, "queue %d", i)
		assert.Equal(t, 60+i, rx[0].Len)
		assert.Equal(t, byte(i), rx[0].Buf[59])
		assert.True(t, rx[0].ChecksumValid)
	}
}

func TestPipeRingFull(t *testing.T) {
	a, b := pipe.New(pipe.Config{RingSize: 4})
	qa, qb := a.Queues()[0], b.Queues()[0]
	burst := []link.TxFrame{txFrame(60, 0), txFrame(61, 1), txFrame(62, 2), txFrame(63, 3), txFrame(64, 4), txFrame(65, 5)}

	n, err := qa.WriteBurst(burst)
	require.NoError(t, err)
	assert.Equal(t, 4, n, "a full ring accepts what fits")

	rx := rxFrames(2, b.Info().RxFrameSize)
	n, err = qb.ReadBurst(rx)
	require.NoError(t, err)
	require.Equal(t, 2, n)

	n, err = qa.WriteBurst(burst[4:])
	require.NoError(t, err)
	assert.Equal(t, 2, n, "read slots are free again")

	rx = rxFrames(8, b.Info().RxFrameSize)
	n, err = qb.ReadBurst(rx)
	require.NoError(t, err)
	require.Equal(t, 4, n)
	for i, f := range rx[:n] {
		assert.Equal(t, 62+i, f.Len, "frame %d out of order", i)
	}
}

func TestPipeOversizedFrame(t *testing.T) {
	a, _ := pipe.New(pipe.Config{MTU: 100})
	n, err := a.Queues()[0].WriteBurst([]link.TxFrame{txFrame(114, 0), txFrame(115, 0)})
	assert.Error(t, err)
	assert.Equal(t, 1, n, "frames before the oversized one are accepted")
}

func TestPipePeerClosed(t *testing.T) {
	a, b := pipe.New(pipe.Config{RingSize: 1})
	require.NoError(t, b.Close())
	for range 3 {
		n, err := a.Queues()[0].WriteBurst([]link.TxFrame{txFrame(60, 0)})
		require.NoError(t, err, "the other end's Close does not close this one")
		assert.Equal(t, 1, n, "frames to a closed end are dropped, not refused")
	}
}

// TestPipeNoAllocs checks that a pipe allocates nothing per burst once warm:
// after the first burst (AllocsPerRun's warm-up), later ones reuse its
// buffers even though they land in other ring slots.
func TestPipeNoAllocs(t *testing.T) {
	a, b := pipe.New(pipe.Config{MTU: 65535})
	qa, qb := a.Queues()[0], b.Queues()[0]
	tx := make([]link.TxFrame, 32)
	for i := range tx {
		tx[i] = txFrame(60+i*2000, byte(i))
	}
	rx := rxFrames(len(tx), b.Info().RxFrameSize)
	assert.Zero(t, testing.AllocsPerRun(100, func() {
		if n, err := qa.WriteBurst(tx); n != len(tx) || err != nil {
			t.Fatalf("WriteBurst: %d, %v", n, err)
		}
		if n, err := qb.ReadBurst(rx); n != len(rx) || err != nil {
			t.Fatalf("ReadBurst: %d, %v", n, err)
		}
	}))
}

// BenchmarkPipe measures a burst of 32 frames written and read back.
func BenchmarkPipe(b *testing.B) {
	for _, size := range []int{64, 1514, 65535 + 14} {
		b.Run(fmt.Sprint(size), func(b *testing.B) {
			x, y := pipe.New(pipe.Config{MTU: 65535})
			qx, qy := x.Queues()[0], y.Queues()[0]
			tx := make([]link.TxFrame, 32)
			for i := range tx {
				tx[i] = txFrame(size, byte(i))
			}
			rx := rxFrames(len(tx), y.Info().RxFrameSize)
			b.SetBytes(int64(size * len(tx)))
			b.ReportAllocs()
			for b.Loop() {
				if n, err := qx.WriteBurst(tx); n != len(tx) || err != nil {
					b.Fatalf("WriteBurst: %d, %v", n, err)
				}
				if n, err := qy.ReadBurst(rx); n != len(rx) || err != nil {
					b.Fatalf("ReadBurst: %d, %v", n, err)
				}
			}
		})
	}
}

// txFrame returns a frame of size bytes filled with fill, in two segments.
func txFrame(size int, fill byte) link.TxFrame {
	f := make([]byte, size)
	for i := range f {
		f[i] = fill
	}
	return link.TxFrame{Segs: [][]byte{f[:14], f[14:]}}
}

func rxFrames(n, size int) []link.RxFrame {
	frames := make([]link.RxFrame, n)
	for i := range frames {
		frames[i].Buf = make([]byte, size)
	}
	return frames
}
