package polarnet_test

import (
	"net"
	"net/netip"
	"slices"
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
// is told to shed and allow (link.SYNShedder, link.StrayShedder).
type floodQueue struct {
	link.Queue
	mu     sync.Mutex
	bursts [][][]byte
	// onBurst, if set, runs on the poller before each queued burst is
	// handed out.
	onBurst func()
	shed    []bool
	strays  []bool
	allowed []link.Flow
}

func (q *floodQueue) ReadBurst(frames []link.RxFrame) (int, error) {
	q.mu.Lock()
	if len(q.bursts) == 0 {
		q.mu.Unlock()
		return q.Queue.ReadBurst(frames)
	}
	b := q.bursts[0]
	q.bursts = q.bursts[1:]
	onBurst := q.onBurst
	q.mu.Unlock()
	if onBurst != nil {
		onBurst()
	}
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

func (q *floodQueue) ShedStrays(on bool) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.strays = append(q.strays, on)
	return nil
}

// SYNsShed and StraysShed: the queue drops nothing itself.
func (q *floodQueue) SYNsShed() uint64 { return 0 }

func (q *floodQueue) StraysShed() uint64 { return 0 }

func (q *floodQueue) AllowFlows(flows []link.Flow) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.allowed = append(q.allowed, flows...)
	return nil
}

// told returns what the queue was told to shed strays and which flows
// to allow.
func (q *floodQueue) told() (strays []bool, allowed []link.Flow) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return append([]bool(nil), q.strays...), append([]link.Flow(nil), q.allowed...)
}

// floodPair is a connection between two stacks over a pipe, c dialed
// from client to server, whose queue is fq.
type floodPair struct {
	fq             *floodQueue
	la, lb         *pipe.Link
	client, server *polarnet.Stack
	c, s           *polarnet.TCPConn
}

func newFloodPair(t *testing.T) *floodPair {
	p := &floodPair{}
	p.la, p.lb = pipe.New(pipe.Config{})
	p.client = newStack(t, p.la, addrA, addrA6)
	p.server = newStack(t, wrapQueues(p.lb, func(q link.Queue) link.Queue {
		p.fq = &floodQueue{Queue: q}
		return p.fq
	}), addrB, addrB6)
	p.c, p.s = connPair(t, p.client, p.server, addrB.Addr())
	return p
}

// onThenOff reports whether a link was told to shed, then not, once or
// more.
func onThenOff(calls []bool) bool {
	for i, on := range calls {
		if on != (i%2 == 0) {
			return false
		}
	}
	return len(calls) > 0 && len(calls)%2 == 0
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
// turns the link's shedding of SYNs on, and off again once its hold has
// passed (again if the flood outlasts the hold); a flood of ACKs for no
// connection does not.
func TestShedUnderBacklog(t *testing.T) {
	for _, tc := range []struct {
		name     string
		flags    uint8
		payload  int  // bytes in each segment
		backlog  int  // the listener's
		cookies  bool // the listener answers with SYN cookies before the flood
		linkSYNs bool // the link is told to shed SYNs
	}{
		{"SYN", frame.FlagSYN, 0, 1, true, true},
		{"SYN before cookies", frame.FlagSYN, 0, 4096, false, false},
		{"ACK", frame.FlagACK, 0, 1, false, false},
		{"data", frame.FlagACK | frame.FlagPSH, 100, 1, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newFloodPair(t)
			fq, la, lb, server, c, s := p.fq, p.la, p.lb, p.server, p.c, p.s
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
			if tc.linkSYNs {
				assert.Eventually(t, func() bool { return onThenOff(fq.calls()) }, 5*time.Second, time.Millisecond, "the link told to shed SYNs, then not")
			} else {
				assert.Empty(t, fq.calls(), "the link told to shed SYNs")
			}
			assert.NoError(t, xfer.Exchange(c, s, 64<<10), "the connection after the flood")
		})
	}
}

// TestFloodOnConnectionWaitsForProcessors floods an established connection
// with full bursts of bare ACKs (outside its window), which the stack
// cannot shed: gVisor would queue them for the connection's TCP processor
// without bound. Once the bursts show a backlog, the poller reads the next
// burst only after the processors have handled the last, and the
// connection moves data byte for byte afterwards.
func TestFloodOnConnectionWaitsForProcessors(t *testing.T) {
	p := newFloodPair(t)
	fq, la, lb, server, c, s := p.fq, p.la, p.lb, p.server, p.c, p.s
	ack := frame.TCPFrame(frame.TCPSpec{
		SrcMAC: la.Info().MAC, DstMAC: lb.Info().MAC,
		Src: c.LocalAddr().(*net.TCPAddr).AddrPort(), Dst: s.LocalAddr().(*net.TCPAddr).AddrPort(),
		Seq: 1 << 31, Ack: 1, Flags: frame.FlagACK, Window: 65535,
	})
	bursts := 2 * polarnet.BacklogBursts
	var queued [][][]byte
	for range bursts {
		queued = append(queued, slices.Repeat([][]byte{ack}, polarnet.RxBurstSize))
	}
	var settled []bool // before each burst, whether the last was handled
	done := make(chan struct{})
	fq.mu.Lock()
	fq.onBurst = func() {
		settled = append(settled, polarnet.Settled(server))
		if len(settled) == bursts {
			close(done)
		}
	}
	fq.mu.Unlock()
	fq.flood(queued)
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		require.Fail(t, "the poller did not read the flood")
	}
	fq.mu.Lock()
	fq.onBurst = nil
	fq.mu.Unlock()
	// The burst that makes BacklogBursts full ones in a row is the first
	// the poller settles after.
	for i := polarnet.BacklogBursts; i < bursts; i++ {
		assert.True(t, settled[i], "burst %d read before the processors handled burst %d", i, i-1)
	}
	assert.NoError(t, xfer.Exchange(c, s, 64<<10), "the connection after the flood")
}

// TestShedStraysTellsConnections floods a stack with full bursts of ACKs
// for no connection: the stack tells its link the connection it has, and
// has it shed stray segments, then not once the hold has passed; a
// connection made afterwards is told as it is made.
func TestShedStraysTellsConnections(t *testing.T) {
	p := newFloodPair(t)
	fq, la, lb, client, server, c, s := p.fq, p.la, p.lb, p.client, p.server, p.c, p.s
	flow := func(c *polarnet.TCPConn) link.Flow {
		return link.Flow{Local: c.LocalAddr().(*net.TCPAddr).AddrPort(), Remote: c.RemoteAddr().(*net.TCPAddr).AddrPort()}
	}
	told := func(f link.Flow) func() bool {
		return func() bool {
			_, allowed := fq.told()
			return slices.Contains(allowed, f)
		}
	}
	// A source on the subnet that does not answer, to a port without a
	// listener: the server's resets wait for its link address.
	spoofed := netip.MustParseAddr("198.18.0.100")
	dst := netip.AddrPortFrom(addrB.Addr(), 9)
	var bursts [][][]byte
	for b := range 3 * polarnet.BacklogBursts {
		var frames [][]byte
		for i := range polarnet.RxBurstSize {
			frames = append(frames, frame.TCPFrame(frame.TCPSpec{
				SrcMAC: la.Info().MAC, DstMAC: lb.Info().MAC,
				Src: netip.AddrPortFrom(spoofed, uint16(1024+b*polarnet.RxBurstSize+i)), Dst: dst,
				Seq: 1, Ack: 7, Flags: frame.FlagACK, Window: 65535,
			}))
		}
		bursts = append(bursts, frames)
	}

	fq.flood(bursts)
	require.Eventually(t, told(flow(s)), 5*time.Second, time.Millisecond, "the connection there was")
	// The link sheds once it knows the connections: from the next
	// backlog, if the first had passed meanwhile.
	fq.flood(bursts)
	assert.Eventually(t, func() bool {
		strays, _ := fq.told()
		return onThenOff(strays)
	}, 5*time.Second, time.Millisecond, "shed, then not")

	c2, s2 := connPair(t, client, server, addrB.Addr())
	assert.Eventually(t, told(flow(s2)), 5*time.Second, time.Millisecond, "a connection made afterwards")
	assert.NoError(t, xfer.Exchange(c, s, 64<<10), "the connection after the flood")
	assert.NoError(t, xfer.Exchange(c2, s2, 64<<10), "the one made afterwards")
}
