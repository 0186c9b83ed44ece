package polarnet_test

import (
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/polarnet/polarnet/internal/frame"
	"github.com/polarnet/polarnet/internal/xfer"
	"github.com/polarnet/polarnet/link"
	"github.com/polarnet/polarnet/link/pipe"
	"github.com/polarnet/polarnet/polarnet"
)

// floodQueue is a stack's queue that hands the poller the bursts queued on
// it, one per ReadBurst, before what its pipe brings, and records what it
// is told to shed (link.SYNShedder).
type floodQueue struct {
	link.Queue
	mu     sync.Mutex
	bursts [][][]byte
	shed   []bool
}

func (q *floodQueue) ReadBurst(frames []link.RxFrame) (int, error) {
	q.mu.Lock()
	if len(q.bursts) == 0 {
		q.mu.Unlock()
		return q.Queue.ReadBurst(frames)
	}
	b := q.bursts[0]
	q.bursts = q.bursts[1:]
	q.mu.Unlock()
	for i, f := range b {
		frames[i].Len = copy(frames[i].Buf, f)
		frames[i].ChecksumValid = true
	}
	return len(b), nil
}

func (q *floodQueue) ShedSYNs(on bool) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.shed = append(q.shed, on)
	return nil
}

// flood queues bursts and wakes the poller.
func (q *floodQueue) flood(bursts [][][]byte) {
	q.mu.Lock()
	q.bursts = append(q.bursts, bursts...)
	q.mu.Unlock()
	q.Interrupt()
}

func (q *floodQueue) calls() []bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return append([]bool(nil), q.shed...)
}

// TestShedUnderBacklog floods a listening stack with full bursts of
// segments for no connection, each burst also carrying one segment of an
// established connection: once the bursts show a backlog (BacklogBursts in
// a row), the stack passes one segment for no connection per burst and
// drops the rest, every segment of the connection reaches it, and the
// connection moves data byte for byte afterwards. Segments with data are
// not shed (nor looked up). SYNs are shed only once the listener answers
// with SYN cookies (its queue of one is full), and a flood of them also
// turns the link's shedding on, and off again once its hold has passed; a
// flood of ACKs for no connection does not (the link sheds only SYNs).
func TestShedUnderBacklog(t *testing.T) {
	for _, tc := range []struct {
		name    string
		flags   uint8
		payload int  // bytes in each segment
		backlog int  // the listener's
		cookies bool // the listener answers with SYN cookies before the flood
		shed    []bool
	}{
		{"SYN", frame.FlagSYN, 0, 1, true, []bool{true, false}},
		{"SYN before cookies", frame.FlagSYN, 0, 4096, false, nil},
		{"ACK", frame.FlagACK, 0, 1, false, nil},
		{"data", frame.FlagACK | frame.FlagPSH, 100, 1, false, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var fq *floodQueue
			la, lb := pipe.New(pipe.Config{})
			client := newStack(t, la, addrA, addrA6)
			server := newStack(t, wrapQueues(lb, func(q link.Queue) link.Queue {
				fq = &floodQueue{Queue: q}
				return fq
			}), addrB, addrB6)
			c, s := connPair(t, client, server, addrB.Addr())
			ln, err := server.ListenTCP("tcp", netip.AddrPortFrom(addrB.Addr(), 0), tc.backlog, net.KeepAliveConfig{})
			require.NoError(t, err)
			t.Cleanup(func() { ln.Close() })

			// A source on the subnet that does not answer: the server's
			// answers wait for its link address and never leave.
			spoofed := netip.MustParseAddr("198.18.0.100")
			dst := ln.Addr().(*net.TCPAddr).AddrPort()
			segment := func(i int) []byte {
				return frame.TCPFrame(frame.TCPSpec{
					SrcMAC: la.Info().MAC, DstMAC: lb.Info().MAC,
					Src: netip.AddrPortFrom(spoofed, uint16(1024+i)), Dst: dst,
					Seq: uint32(i), Ack: 7, Flags: tc.flags, Window: 65535, Payload: make([]byte, tc.payload),
				})
			}
			burst, bursts := polarnet.RxBurstSize, 3*polarnet.BacklogBursts
			if tc.cookies {
				// Fill the listener's SYN queue: it answers with cookies.
				fq.flood([][][]byte{{segment(60000), segment(60001), segment(60002)}})
				require.Eventually(t, func() bool {
					return protocolCounter(t, server, "TCP.ListenOverflowSynCookieSent") > 0
				}, 5*time.Second, time.Millisecond)
			}
			var queued [][][]byte
			for b := range bursts {
				var frames [][]byte
				for i := range burst - 1 {
					frames = append(frames, segment(b*burst+i))
				}
				// Outside the window, so the server only answers with an ACK.
				frames = append(frames, frame.TCPFrame(frame.TCPSpec{
					SrcMAC: la.Info().MAC, DstMAC: lb.Info().MAC,
					Src: c.LocalAddr().(*net.TCPAddr).AddrPort(), Dst: s.LocalAddr().(*net.TCPAddr).AddrPort(),
					Seq: 1 << 31, Ack: 1, Flags: frame.FlagACK, Window: 65535,
				}))
				queued = append(queued, frames)
			}
			before := server.Stats().Total
			delivered := protocolCounter(t, server, "TCP.ValidSegmentsReceived")
			fq.flood(queued)

			backlogged := bursts - (polarnet.BacklogBursts - 1)
			want := before.RxFrames + uint64(bursts*burst)
			require.Eventually(t, func() bool { return server.Stats().Total.RxFrames >= want }, 5*time.Second, time.Millisecond)
			// One for no connection and the connection's one pass from
			// each backlogged burst, unless the flood is SYNs the listener
			// can still take, or segments with data: a busy poller's
			// ordinary backlog.
			shed := backlogged * (burst - 2)
			if tc.flags == frame.FlagSYN && !tc.cookies || tc.payload > 0 {
				shed = 0
			}
			admitted := uint64(bursts*burst - shed)
			assert.Eventually(t, func() bool {
				return protocolCounter(t, server, "TCP.ValidSegmentsReceived")-delivered >= admitted
			}, 5*time.Second, time.Millisecond)
			after := server.Stats().Total
			assert.Equal(t, uint64(shed), after.RxShed-before.RxShed, "shed")
			assert.Equal(t, admitted, protocolCounter(t, server, "TCP.ValidSegmentsReceived")-delivered, "delivered")
			assert.Eventually(t, func() bool { return len(fq.calls()) == len(tc.shed) }, 5*time.Second, time.Millisecond)
			assert.Equal(t, tc.shed, fq.calls(), "the link told to shed")
			assert.NoError(t, xfer.Exchange(c, s, 64<<10), "the connection after the flood")
		})
	}
}
