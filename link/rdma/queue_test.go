package rdma

import (
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/polarnet/polarnet/internal/frame"
	"github.com/polarnet/polarnet/internal/leakcheck"
	"github.com/polarnet/polarnet/link"
)

var (
	addrA = netip.MustParseAddrPort("198.18.0.1:4000")
	addrB = netip.MustParseAddrPort("198.18.0.2:5000")
)

// framesTo builds n UDP frames from a to b (b's MAC), source ports varying.
func framesTo(a, b *fakeLink, n, payload int) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		src := netip.AddrPortFrom(addrA.Addr(), uint16(10000+i))
		out[i] = udpFrame(a.Info().MAC, b.Info().MAC, src, addrB, payload)
		binary.BigEndian.PutUint32(out[i][len(out[i])-4:], uint32(i)) // a sequence number
	}
	return out
}

// TestRefillUnderLoad floods a receiver with a small ring, reading in small
// bursts, on a wire without flow control: the ring is refilled burst after
// burst, every frame is either received or counted as dropped by the NIC,
// and once the flood is over every buffer is posted again.
func TestRefillUnderLoad(t *testing.T) {
	w := newFakeWire(false)
	a := newFakeLink(t, w, 1, ownMAC(Config{}, 1), nil)
	b := newFakeLink(t, w, 2, ownMAC(Config{RxRing: 32}, 2), nil)
	// Each round sends a ring's worth and reads a few small bursts: the
	// ring is never drained, the NIC drops what finds no buffer, and every
	// burst's buffers are posted again before the next round.
	const rounds, total = 100, 100 * 32
	frames := framesTo(a, b, total, 64)
	rx := make([]link.RxFrame, 4)
	for i := range rx {
		rx[i].Buf = make([]byte, b.Info().RxFrameSize)
	}
	received := 0
	for r := range rounds {
		write(t, a.Queues()[0], frames[r*32:(r+1)*32]...)
		for range 3 {
			n, err := b.Queues()[0].ReadBurst(rx)
			require.NoError(t, err)
			require.Equal(t, 4, n)
			received += n
		}
		c := accounting(t, b)[0]
		require.Equal(t, 32, c.posted, "round %d: the ring is refilled after every burst", r)
	}
	for range 100 { // what is left in the ring
		n, err := b.Queues()[0].ReadBurst(rx)
		require.NoError(t, err)
		received += n
		if n == 0 {
			break
		}
	}
	b.dev.do(func() {})
	st := b.Stats().Queues[0]
	assert.Equal(t, total, received+b.dev.dropped, "received %d, dropped %d", received, b.dev.dropped)
	assert.Equal(t, rounds*12+20, received, "each round's 12, and the 20 left in the ring")
	assert.Equal(t, 32, st.Posted, "every buffer posted again")
	assert.EqualValues(t, received, st.RxFrames)
	c := accounting(t, b)
	assert.Equal(t, counts{posted: 32, free: b.setup.TxRing}, c[0])
}

// TestReceiveCompletionError: a failed receive completion puts the receive
// queue in the error state; the link restarts it and traffic goes on.
func TestReceiveCompletionError(t *testing.T) {
	w := newFakeWire(true)
	a := newFakeLink(t, w, 1, ownMAC(Config{}, 1), nil)
	b := newFakeLink(t, w, 2, ownMAC(Config{RxRing: 16}, 2), nil)
	b.dev.do(func() { b.dev.qps[0].recvErrs = 1 })
	write(t, a.Queues()[0], framesTo(a, b, 1, 10)...)
	rx := []link.RxFrame{{Buf: make([]byte, b.Info().RxFrameSize)}}
	n, err := b.Queues()[0].ReadBurst(rx)
	require.NoError(t, err)
	assert.Zero(t, n, "the failed frame is not delivered")
	accounting(t, b)

	frames := framesTo(a, b, 40, 10)
	write(t, a.Queues()[0], frames...)
	requireFrames(t, frames, read(t, b.Link, b.Queues()[0], 40))
	st := b.Stats().Queues[0]
	assert.EqualValues(t, 1, st.RxErrors)
	assert.EqualValues(t, 1, st.Restarts)
	assert.ErrorContains(t, st.LastError, "local protection error")
	assert.Equal(t, 1, b.dev.qps[0].stops)
	accounting(t, b)
}

// TestSendCompletionError: a failed send completion is noticed by the next
// WriteBurst, which accepts nothing and wakes the poller; the poller's
// ReadBurst restarts the queue and sending goes on.
func TestSendCompletionError(t *testing.T) {
	w := newFakeWire(true)
	a := newFakeLink(t, w, 1, ownMAC(Config{TxRing: 32}, 1), nil)
	b := newFakeLink(t, w, 2, ownMAC(Config{}, 2), nil)
	a.dev.do(func() { a.dev.qps[0].sendErrs = 1 })
	first := framesTo(a, b, 5, 10)
	write(t, a.Queues()[0], first...)

	qa := a.Queues()[0]
	n, err := qa.WriteBurst([]link.TxFrame{{Segs: [][]byte{first[0]}}})
	require.NoError(t, err)
	assert.Zero(t, n, "a broken queue accepts nothing")
	require.NoError(t, waitBounded(qa, time.Second), "the poller is woken")
	_, err = qa.ReadBurst([]link.RxFrame{{Buf: make([]byte, a.Info().RxFrameSize)}})
	require.NoError(t, err)

	frames := framesTo(a, b, 50, 20)
	write(t, qa, frames...)
	// The failed frame is lost, and those queued behind it were flushed.
	requireFrames(t, frames, read(t, b.Link, b.Queues()[0], 50))
	st := a.Stats().Queues[0]
	assert.EqualValues(t, 1, st.TxErrors)
	assert.EqualValues(t, 1, st.Restarts)
	assert.ErrorContains(t, st.LastError, "local QP operation error")
	accounting(t, a)
}

// TestSendQueueFull: a send queue that takes fewer work requests than the
// link has buffers makes WriteBurst accept fewer frames, with no error; the
// rest goes once the device has sent what it holds.
func TestSendQueueFull(t *testing.T) {
	w := newFakeWire(true)
	a := newFakeLink(t, w, 1, ownMAC(Config{TxRing: 64}, 1), func(d *fakeDevice) { d.sqDepth = 4 })
	b := newFakeLink(t, w, 2, ownMAC(Config{}, 2), nil)
	a.dev.do(func() { a.dev.qps[0].holdSend = true })
	frames := framesTo(a, b, 16, 10)
	batch := make([]link.TxFrame, len(frames))
	for i, f := range frames {
		batch[i].Segs = [][]byte{f}
	}
	n, err := a.Queues()[0].WriteBurst(batch)
	require.NoError(t, err)
	assert.Equal(t, 4, n)
	n, err = a.Queues()[0].WriteBurst(batch[4:])
	require.NoError(t, err)
	assert.Zero(t, n, "the send queue is full")
	st := a.Stats().Queues[0]
	assert.EqualValues(t, 12+12, st.TxFull)
	c := accounting(t, a)[0]
	assert.Equal(t, 4, c.inflight, "only the posted frames are in flight")

	a.dev.do(func() { a.dev.qps[0].holdSend = false })
	write(t, a.Queues()[0], frames[4:]...)
	requireFrames(t, frames, read(t, b.Link, b.Queues()[0], 16))
	accounting(t, a)
}

// TestSendBufferExhaustion: while the device sends nothing, WriteBurst
// takes as many frames as there are send buffers and then none; once the
// device sends again the buffers come back.
func TestSendBufferExhaustion(t *testing.T) {
	w := newFakeWire(true)
	a := newFakeLink(t, w, 1, ownMAC(Config{TxRing: 16}, 1), nil)
	b := newFakeLink(t, w, 2, ownMAC(Config{}, 2), nil)
	a.dev.do(func() { a.dev.qps[0].holdSend = true })
	frames := framesTo(a, b, 40, 10)
	accepted := 0
	for i := range 10 {
		n, err := a.Queues()[0].WriteBurst([]link.TxFrame{{Segs: [][]byte{frames[accepted]}}, {Segs: [][]byte{frames[accepted+1]}}})
		require.NoError(t, err)
		accepted += n
		if i >= 8 {
			assert.Zero(t, n)
		}
	}
	assert.Equal(t, 16, accepted, "one frame per send buffer")
	assert.Equal(t, counts{posted: a.setup.RxRing, inflight: 16}, accounting(t, a)[0])

	a.dev.do(func() { a.dev.qps[0].holdSend = false })
	write(t, a.Queues()[0], frames[16:]...)
	requireFrames(t, frames, read(t, b.Link, b.Queues()[0], 40))
}

// TestReceiveBufferExhaustion: when the device refuses receive buffers, the
// ring runs dry (the NIC drops what arrives), WaitRead keeps returning
// instead of waiting for completions that cannot come, and the ring is
// refilled as soon as the device takes buffers again.
func TestReceiveBufferExhaustion(t *testing.T) {
	w := newFakeWire(false)
	a := newFakeLink(t, w, 1, ownMAC(Config{}, 1), nil)
	b := newFakeLink(t, w, 2, ownMAC(Config{RxRing: 16}, 2), nil)
	qb := b.Queues()[0]
	b.dev.do(func() { b.dev.qps[0].postRecvErrs = 1 << 30 })
	write(t, a.Queues()[0], framesTo(a, b, 30, 10)...)
	assert.Len(t, read(t, b.Link, qb, 16), 16, "the posted buffers fill")
	assert.Equal(t, 14, b.dev.dropped, "then the NIC drops")
	st := b.Stats().Queues[0]
	assert.Zero(t, st.Posted)
	assert.NotZero(t, st.RefillShort)
	assert.Equal(t, counts{free: 16 + b.setup.TxRing}, accounting(t, b)[0])

	start := time.Now()
	require.NoError(t, qb.WaitRead())
	assert.Less(t, time.Since(start), time.Second, "WaitRead with no buffer posted must come back to refill")

	b.dev.do(func() { b.dev.qps[0].postRecvErrs = 0 })
	require.NoError(t, waitBounded(qb, time.Second))
	assert.Equal(t, 16, b.Stats().Queues[0].Posted, "refilled")
	frames := framesTo(a, b, 10, 10)
	write(t, a.Queues()[0], frames...)
	requireFrames(t, frames, read(t, b.Link, qb, 10))
}

// TestStaleCompletion: a completion naming a buffer the queue did not post
// is a bookkeeping mismatch; the link restarts the queue rather than
// trusting it.
func TestStaleCompletion(t *testing.T) {
	w := newFakeWire(true)
	a := newFakeLink(t, w, 1, ownMAC(Config{}, 1), nil)
	b := newFakeLink(t, w, 2, ownMAC(Config{}, 2), nil)
	b.dev.do(func() { b.dev.qps[0].staleRecv = 1 })
	rx := []link.RxFrame{{Buf: make([]byte, b.Info().RxFrameSize)}}
	n, err := b.Queues()[0].ReadBurst(rx)
	require.NoError(t, err)
	assert.Zero(t, n)
	frames := framesTo(a, b, 5, 10)
	write(t, a.Queues()[0], frames...)
	requireFrames(t, frames, read(t, b.Link, b.Queues()[0], 5))
	st := b.Stats().Queues[0]
	assert.EqualValues(t, 1, st.Restarts)
	assert.ErrorContains(t, st.LastError, "not posted")
}

// TestRestartFailure: a queue the device cannot restart reports it from
// ReadBurst, and recovers once the device can.
func TestRestartFailure(t *testing.T) {
	w := newFakeWire(true)
	a := newFakeLink(t, w, 1, ownMAC(Config{}, 1), nil)
	b := newFakeLink(t, w, 2, ownMAC(Config{}, 2), nil)
	b.dev.do(func() {
		b.dev.qps[0].recvErrs = 1
		b.dev.qps[0].restartErr = errors.New("device unplugged")
	})
	write(t, a.Queues()[0], framesTo(a, b, 1, 10)...)
	rx := []link.RxFrame{{Buf: make([]byte, b.Info().RxFrameSize)}}
	_, err := b.Queues()[0].ReadBurst(rx)
	require.ErrorContains(t, err, "device unplugged")
	_, err = b.Queues()[0].ReadBurst(rx)
	require.ErrorContains(t, err, "device unplugged", "tried again, failed again")
	assert.Equal(t, counts{free: b.setup.RxRing + b.setup.TxRing}, accounting(t, b)[0], "nothing is the device's after a failed restart")

	b.dev.do(func() { b.dev.qps[0].restartErr = nil })
	_, err = b.Queues()[0].ReadBurst(rx)
	require.NoError(t, err, "restarted")
	frames := framesTo(a, b, 5, 10)
	write(t, a.Queues()[0], frames...)
	requireFrames(t, frames, read(t, b.Link, b.Queues()[0], 5))
}

// TestCloseWhileTrafficFlows closes links while every queue of both reads
// and writes as fast as it can: every call ends with a closed error, no
// goroutine is left, and every buffer of every queue is accounted for.
func TestCloseWhileTrafficFlows(t *testing.T) {
	for i, pause := range []bool{false, true, false} {
		snap := leakcheck.Take()
		w := newFakeWire(pause)
		a := newFakeLink(t, w, 1, ownMAC(Config{Queues: 2, RxRing: 32, TxRing: 32}, 1), nil)
		b := newFakeLink(t, w, 2, ownMAC(Config{Queues: 2, RxRing: 32, TxRing: 32}, 2), nil)
		if i == 2 {
			for _, qp := range a.dev.qps {
				qp.flushAllTx = true
			}
		}
		var wg sync.WaitGroup
		errs := make(chan error, 16)
		for _, l := range []*fakeLink{a, b} {
			peer := a
			if l == a {
				peer = b
			}
			frames := framesTo(l, peer, 16, 100)
			for _, q := range l.Queues() {
				wg.Add(2)
				go func() { defer wg.Done(); errs <- flood(q, frames) }()
				go func() { defer wg.Done(); errs <- drain(q, l.Info().RxFrameSize) }()
			}
		}
		time.Sleep(30 * time.Millisecond)
		var closers sync.WaitGroup
		for _, l := range []*fakeLink{a, b} {
			closers.Add(1)
			go func() { defer closers.Done(); assert.NoError(t, l.Close()) }()
		}
		closers.Wait()
		wg.Wait()
		close(errs)
		for err := range errs {
			assert.ErrorIs(t, err, net.ErrClosed)
		}
		requireAllFree(t, a)
		requireAllFree(t, b)
		assert.NotZero(t, a.Stats().Queues[0].TxFrames, "traffic flowed")
		assert.NoError(t, a.Close(), "closing again")
		snap.Check(t)
	}
}

// flood writes frames to q until WriteBurst fails.
func flood(q link.Queue, frames [][]byte) error {
	batch := make([]link.TxFrame, len(frames))
	for i, f := range frames {
		batch[i].Segs = [][]byte{f}
	}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		n, err := q.WriteBurst(batch)
		if err != nil {
			return err
		}
		if n == 0 {
			time.Sleep(10 * time.Microsecond)
		}
	}
	return errors.New("still writing")
}

// drain reads q, waiting when it is empty, until a call fails.
func drain(q link.Queue, size int) error {
	rx := make([]link.RxFrame, 8)
	for i := range rx {
		rx[i].Buf = make([]byte, size)
	}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		n, err := q.ReadBurst(rx)
		if err != nil {
			return err
		}
		if n == 0 {
			if err := q.WaitRead(); err != nil {
				return err
			}
		}
	}
	return errors.New("still reading")
}

// TestChecksumCompletion: the link completes partial checksums as it
// copies a frame into its buffer (CapTXChecksum), and marks frames whose
// checksums the device verified (CapRXChecksum).
func TestChecksumCompletion(t *testing.T) {
	w := newFakeWire(true)
	a := newFakeLink(t, w, 1, ownMAC(Config{}, 1), nil)
	b := newFakeLink(t, w, 2, ownMAC(Config{}, 2), nil)
	assert.NotZero(t, a.Info().Caps&link.CapTXChecksum)
	assert.NotZero(t, b.Info().Caps&link.CapRXChecksum)
	f := udpFrame(a.Info().MAC, b.Info().MAC, addrA, addrB, 333)
	p, ok := frame.Parse(f)
	require.True(t, ok)
	binary.BigEndian.PutUint16(f[p.L4+6:], frame.Fold(frame.PseudoHeaderSum(p, p.End-p.L4)))
	require.False(t, frame.ChecksumOK(f, p))
	n, err := a.Queues()[0].WriteBurst([]link.TxFrame{{
		Segs:    [][]byte{f[:20], f[20:]},
		Offload: link.TxOffload{NeedsChecksum: true, ChecksumStart: uint16(p.L4), ChecksumOffset: 6},
	}})
	require.NoError(t, err)
	require.Equal(t, 1, n)
	rx := []link.RxFrame{{Buf: make([]byte, b.Info().RxFrameSize)}}
	require.NoError(t, waitBounded(b.Queues()[0], time.Second))
	n, err = b.Queues()[0].ReadBurst(rx)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	got := rx[0].Buf[:rx[0].Len]
	assert.True(t, frame.ChecksumOK(got, p), "checksum completed")
	assert.True(t, rx[0].ChecksumValid, "verified by the device")
}

// TestWriteRejects checks the frames the link can never send, and a
// receive buffer smaller than the link's frames.
func TestWriteRejects(t *testing.T) {
	w := newFakeWire(true)
	a := newFakeLink(t, w, 1, ownMAC(Config{}, 1), nil)
	b := newFakeLink(t, w, 2, ownMAC(Config{}, 2), nil)
	good := udpFrame(a.Info().MAC, b.Info().MAC, addrA, addrB, 10)
	q := a.Queues()[0]
	n, err := q.WriteBurst([]link.TxFrame{{Segs: [][]byte{good}}, {Segs: [][]byte{make([]byte, 1600)}}})
	assert.Equal(t, 1, n, "the frames before the bad one are sent")
	assert.ErrorContains(t, err, "frame of 1600 bytes")
	_, err = q.WriteBurst([]link.TxFrame{{Segs: [][]byte{good}, Offload: link.TxOffload{GSO: link.GSOTCPv4, GSOSize: 1000}}})
	assert.ErrorIs(t, err, link.ErrNotSupported)
	_, err = q.WriteBurst([]link.TxFrame{{Segs: [][]byte{good}, Offload: link.TxOffload{NeedsChecksum: true, ChecksumStart: 60, ChecksumOffset: 6}}})
	assert.ErrorContains(t, err, "outside")
	_, err = b.Queues()[0].ReadBurst([]link.RxFrame{{Buf: make([]byte, 1514)}})
	assert.ErrorContains(t, err, "receive buffer of 1514 bytes")
	accounting(t, a)
}
