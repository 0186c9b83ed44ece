// Package linktest is the test kit for links: the suite every link.Link must
// pass (TestLinkPair), an AF_PACKET link (PacketSocketLink) that plays the
// far end of a real device, and CheckStub for builds without a cgo link.
// It imports testing and testify, so only tests import it; the in-memory
// link is package link/pipe.
package linktest

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/polarnet/polarnet/link"
)

// ethHeaderLen is the length of an Ethernet header without VLAN tags: what
// a frame carries on top of the MTU.
const ethHeaderLen = 14

// Suite frames carry, after the Ethernet header, a tag telling them from the
// noise of real interfaces (IPv6 router solicitations, MLD reports) and from
// the frames of other flows.
const (
	// suiteEtherType is IEEE's local experimental EtherType 1.
	suiteEtherType = 0x88B5
	offNonce       = ethHeaderLen     // uint64: the flow's random nonce
	offQueue       = offNonce + 8     // uint16: the TX queue it was sent on
	offSeq         = offQueue + 2     // uint32: its index on that queue
	tagEnd         = offSeq + 4       // the random payload follows
	minFrameLen    = 60               // Ethernet's minimum without FCS
	denseSizesUpTo = 1514             // frames up to this size are tried at every length
	burstLen       = 64               // frames per WriteBurst in the burst tests
	sizesBurstLen  = 8                // frames per WriteBurst in the size tests
	rxBurstLen     = 32               // frames per ReadBurst
	suiteTimeout   = 10 * time.Second // bounds every wait
	settle         = 50 * time.Millisecond
	// idleWakeups bounds how often WaitRead may return per queue while no
	// suite frame is sent: a few for the noise of real interfaces, far
	// fewer than a WaitRead that spins instead of parking.
	idleWakeups = 20
)

// TestLinkPair checks that a pair of links wired back to back meets the
// link.Link contract: every frame written to a queue of a arrives on some
// queue of b, byte for byte, and vice versa.
//
// open is called once per subtest with the subtest's t and must return fresh
// links (subtests close them). Both may be polarnet links under test, or one
// may be the far end of the other: a PacketSocketLink on the kernel side of a
// TAP, for instance. open may register cleanups of its own (namespaces,
// interfaces): they run after the suite has closed the links.
//
// Frames are tagged (EtherType 0x88B5, a nonce, a sequence number), so other
// traffic on the links is ignored. Frames sent on one queue must arrive in
// order on each receiving queue; which receiving queue they reach is up to
// the link's steering.
func TestLinkPair(t *testing.T, open func(t *testing.T) (a, b link.Link)) {
	pair := func(t *testing.T) (a, b link.Link) {
		t.Helper()
		a, b = open(t)
		require.NotNil(t, a)
		require.NotNil(t, b)
		t.Cleanup(func() {
			closeLink(t, a)
			closeLink(t, b)
		})
		return a, b
	}
	t.Run("Info", func(t *testing.T) {
		a, b := pair(t)
		checkInfo(t, a)
		checkInfo(t, b)
	})
	t.Run("Sizes", func(t *testing.T) {
		a, b := pair(t)
		sizes := frameSizes(maxFrame(a, b))
		for _, dir := range []struct {
			name     string
			from, to link.Link
		}{{"AtoB", a, b}, {"BtoA", b, a}} {
			t.Run(dir.name, func(t *testing.T) {
				startTransfer(t, dir.from, dir.to, sizes, sizesBurstLen, 0).wait(t)
			})
		}
	})
	t.Run("Bursts", func(t *testing.T) {
		a, b := pair(t)
		sizes := burstSizes(maxFrame(a, b), 4*burstLen)
		ab := startTransfer(t, a, b, sizes, burstLen, 0)
		ba := startTransfer(t, b, a, sizes, burstLen, 0)
		ab.wait(t)
		ba.wait(t)
	})
	// The checks of one end run on a fresh pair for each end (subtests A
	// and B): l is the end checked, peer the other.
	for _, c := range []struct {
		name  string
		check func(t *testing.T, l, peer link.Link)
	}{
		{"WaitReadWakes", checkWaitReadWakes},
		{"WaitReadPending", checkWaitReadPending},
		{"Interrupt", checkInterrupt},
		{"CloseUnblocksWaitRead", checkCloseUnblocks},
		{"AfterClose", checkAfterClose},
		{"CloseWhileBusy", checkCloseWhileBusy},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Run("A", func(t *testing.T) {
				a, b := pair(t)
				c.check(t, a, b)
			})
			t.Run("B", func(t *testing.T) {
				a, b := pair(t)
				c.check(t, b, a)
			})
		})
	}
}

// closeLink closes l, accepting a link that is closed already.
func closeLink(t *testing.T, l link.Link) {
	t.Helper()
	if err := l.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
		t.Errorf("closing %s: %v", l.Info().Name, err)
	}
}

// checkInfo checks that l describes itself sensibly and consistently.
func checkInfo(t *testing.T, l link.Link) {
	info := l.Info()
	assert.NotEmpty(t, info.Name)
	if assert.Len(t, info.MAC, 6) {
		assert.Zero(t, info.MAC[0]&1, "%s: MAC %v is a multicast address", info.Name, info.MAC)
	}
	assert.GreaterOrEqual(t, info.MTU, 68, "%s: MTU below IPv4's minimum", info.Name)
	assert.GreaterOrEqual(t, info.RxFrameSize, info.MTU+ethHeaderLen, "%s: RxFrameSize cannot hold an MTU-sized frame", info.Name)
	if info.Caps&link.CapGSO != 0 {
		assert.Greater(t, info.GSOMaxSize, info.MTU+ethHeaderLen, "%s: CapGSO without a GSOMaxSize", info.Name)
	}
	assert.Equal(t, info, l.Info(), "Info must not change")
	queues := l.Queues()
	require.NotEmpty(t, queues, "%s has no queues", info.Name)
	assert.Equal(t, queues, l.Queues(), "Queues must not change")
}

// maxFrame is the largest frame both links carry.
func maxFrame(a, b link.Link) int {
	return min(a.Info().MTU, b.Info().MTU) + ethHeaderLen
}

// frameSizes returns every frame length from the minimum to 1514 bytes, and
// above that the lengths around powers of two and the largest two: every
// length of a 64 KiB MTU would be gigabytes of frames.
func frameSizes(largest int) []int {
	var sizes []int
	for n := minFrameLen; n <= min(largest, denseSizesUpTo); n++ {
		sizes = append(sizes, n)
	}
	for p := 2048; p < largest; p *= 2 {
		sizes = append(sizes, p-1, p, p+1)
	}
	if largest > denseSizesUpTo {
		sizes = append(sizes, largest-1, largest)
	}
	return sizes
}

// burstSizes returns n frame lengths spread over the range up to 1514 bytes:
// bursts check batching and order, and jumbo bursts would overflow the
// socket buffers of real devices.
func burstSizes(largest, n int) []int {
	top := min(largest, denseSizesUpTo)
	sizes := make([]int, n)
	for i := range sizes {
		sizes[i] = minFrameLen + i*487%(top-minFrameLen+1) // a stride that scatters sizes
	}
	return sizes
}

// transfer sends frames of the given sizes on every TX queue of one link and
// checks their arrival on the other.
type transfer struct {
	from, to link.Link
	nonce    uint64
	sent     [][][]byte // sent[txq][seq] is the frame
	rx       *receiver
	senders  chan error // one result per TX queue, nil when all was sent
	deadline time.Time
}

// startTransfer starts a receiver on to, then after delay sends the frames
// from every TX queue of from, burst frames per WriteBurst.
func startTransfer(t *testing.T, from, to link.Link, sizes []int, burst int, delay time.Duration) *transfer {
	t.Helper()
	tr := &transfer{
		from:     from,
		to:       to,
		nonce:    randomNonce(),
		deadline: time.Now().Add(suiteTimeout),
	}
	txqs := from.Queues()
	for txq := range txqs {
		frames := make([][]byte, len(sizes))
		for seq, size := range sizes {
			frames[seq] = tr.frame(size, txq, seq)
		}
		tr.sent = append(tr.sent, frames)
	}
	tr.rx = startReceiver(t, to, tr.nonce, len(sizes)*len(txqs))
	tr.senders = make(chan error, len(txqs))
	for txq, q := range txqs {
		go func() {
			time.Sleep(delay)
			tr.senders <- tr.send(q, txq, burst)
		}()
	}
	return tr
}

// frame builds a tagged frame of size bytes with a random payload.
func (tr *transfer) frame(size, txq, seq int) []byte {
	f := make([]byte, size)
	copy(f[0:6], tr.to.Info().MAC)
	copy(f[6:12], tr.from.Info().MAC)
	binary.BigEndian.PutUint16(f[12:], suiteEtherType)
	binary.BigEndian.PutUint64(f[offNonce:], tr.nonce)
	binary.BigEndian.PutUint16(f[offQueue:], uint16(txq))
	binary.BigEndian.PutUint32(f[offSeq:], uint32(seq))
	rand.Read(f[tagEnd:])
	return f
}

// gather cuts a frame into a gather list whose shape varies with seq: one
// segment; header and rest; or header, two halves and an empty segment.
func gather(f []byte, seq int) [][]byte {
	switch mid := tagEnd + (len(f)-tagEnd)/2; seq % 3 {
	case 0:
		return [][]byte{f}
	case 1:
		return [][]byte{f[:ethHeaderLen], f[ethHeaderLen:]}
	default:
		return [][]byte{f[:ethHeaderLen], f[ethHeaderLen:mid], nil, f[mid:]}
	}
}

// send writes the frames of one TX queue in order, retrying those a full
// ring did not accept.
func (tr *transfer) send(q link.Queue, txq, burst int) error {
	frames := tr.sent[txq]
	batch := make([]link.TxFrame, 0, burst)
	for next := 0; next < len(frames); {
		batch = batch[:0]
		for seq := next; seq < min(next+burst, len(frames)); seq++ {
			batch = append(batch, link.TxFrame{Segs: gather(frames[seq], seq)})
		}
		n, err := q.WriteBurst(batch)
		switch {
		case err != nil:
			return fmt.Errorf("queue %d: WriteBurst of frames %d..%d: %w", txq, next, next+len(batch)-1, err)
		case n < 0 || n > len(batch):
			return fmt.Errorf("queue %d: WriteBurst of %d frames returned %d", txq, len(batch), n)
		case n == 0 && time.Now().After(tr.deadline):
			return fmt.Errorf("queue %d: ring still full after %v, %d of %d frames sent", txq, suiteTimeout, next, len(frames))
		case n == 0:
			time.Sleep(100 * time.Microsecond) // full ring: let the receiver drain it
		}
		next += n
	}
	return nil
}

// wait checks the frames arriving until all have, and stops the receiver.
// Each must arrive once, byte for byte, in order among the frames of its TX
// queue reaching the same RX queue.
func (tr *transfer) wait(t *testing.T) {
	t.Helper()
	defer tr.rx.stop()
	var (
		want, got  = len(tr.sent) * len(tr.sent[0]), 0
		arrived    = make([][]bool, len(tr.sent))
		last       = map[[2]int]int{} // [txq, rxq] -> last seq
		sendersRun = len(tr.sent)
		timeout    = time.NewTimer(time.Until(tr.deadline))
	)
	defer timeout.Stop()
	for txq := range arrived {
		arrived[txq] = make([]bool, len(tr.sent[txq]))
	}
	for got < want || sendersRun > 0 {
		select {
		case err := <-tr.senders:
			sendersRun--
			require.NoError(t, err, "sending %s -> %s", tr.from.Info().Name, tr.to.Info().Name)
		case err := <-tr.rx.errs:
			require.NoError(t, err, "receiving on %s", tr.to.Info().Name)
		case fr := <-tr.rx.got:
			got++
			txq := int(binary.BigEndian.Uint16(fr.data[offQueue:]))
			seq := int(binary.BigEndian.Uint32(fr.data[offSeq:]))
			require.Less(t, txq, len(tr.sent), "frame tagged with TX queue %d", txq)
			require.Less(t, seq, len(tr.sent[txq]), "frame tagged with sequence number %d", seq)
			require.False(t, arrived[txq][seq], "frame %d of queue %d arrived twice", seq, txq)
			arrived[txq][seq] = true
			requireSameFrame(t, tr.sent[txq][seq], fr.data, "frame %d of queue %d", seq, txq)
			key := [2]int{txq, fr.rxq}
			if prev, ok := last[key]; ok {
				require.Greater(t, seq, prev, "frames from TX queue %d reordered on RX queue %d", txq, fr.rxq)
			}
			last[key] = seq
		case <-timeout.C:
			require.Failf(t, "frames lost", "%d of %d frames %s -> %s arrived within %v (first missing: %s)",
				got, want, tr.from.Info().Name, tr.to.Info().Name, suiteTimeout, firstMissing(arrived, tr.sent))
		}
	}
}

// requireSameFrame compares frames without dumping kilobytes of hex.
func requireSameFrame(t *testing.T, want, got []byte, msg string, args ...any) {
	t.Helper()
	if bytes.Equal(want, got) {
		return
	}
	i := 0
	for i < min(len(want), len(got)) && want[i] == got[i] {
		i++
	}
	require.Failf(t, "frame changed", msg+": sent %d bytes, received %d, first difference at offset %d",
		append(args, len(want), len(got), i)...)
}

func firstMissing(arrived [][]bool, sent [][][]byte) string {
	for txq := range arrived {
		for seq, ok := range arrived[txq] {
			if !ok {
				return fmt.Sprintf("frame %d of TX queue %d, %d bytes", seq, txq, len(sent[txq][seq]))
			}
		}
	}
	return "none"
}

// receiver drains every queue of a link on a goroutine per queue, as the
// engine's pollers do, and passes on the frames tagged with its nonce.
type receiver struct {
	t       *testing.T
	link    link.Link
	nonce   uint64
	got     chan rxFrame
	errs    chan error // at most one per queue: its goroutine then ends
	done    chan struct{}
	wg      sync.WaitGroup
	wakeups atomic.Int64 // WaitRead returns, to tell parking from spinning
	once    sync.Once
}

type rxFrame struct {
	rxq  int
	data []byte
}

// startReceiver starts a receiver with room for want frames; t.Cleanup stops
// it if the test ends first.
func startReceiver(t *testing.T, l link.Link, nonce uint64, want int) *receiver {
	queues := l.Queues()
	r := &receiver{
		t:     t,
		link:  l,
		nonce: nonce,
		got:   make(chan rxFrame, want),
		errs:  make(chan error, len(queues)),
		done:  make(chan struct{}),
	}
	r.wg.Add(len(queues))
	for i, q := range queues {
		go r.run(i, q)
	}
	t.Cleanup(r.stop)
	return r
}

func (r *receiver) run(rxq int, q link.Queue) {
	defer r.wg.Done()
	frames := make([]link.RxFrame, rxBurstLen)
	for i := range frames {
		frames[i].Buf = make([]byte, r.link.Info().RxFrameSize)
	}
	for {
		select {
		case <-r.done:
			return
		default:
		}
		n, err := q.ReadBurst(frames)
		if err == nil && (n < 0 || n > len(frames)) {
			err = fmt.Errorf("ReadBurst of %d frames returned %d", len(frames), n)
		}
		if err != nil {
			r.errs <- fmt.Errorf("queue %d: %w", rxq, err)
			return
		}
		for _, f := range frames[:n] {
			if f.Len < 0 || f.Len > len(f.Buf) {
				r.errs <- fmt.Errorf("queue %d: frame length %d, buffer %d", rxq, f.Len, len(f.Buf))
				return
			}
			if !isSuiteFrame(f.Buf[:f.Len], r.nonce) {
				continue
			}
			select {
			case r.got <- rxFrame{rxq, bytes.Clone(f.Buf[:f.Len])}:
			case <-r.done:
				return
			}
		}
		if n > 0 {
			continue
		}
		err = q.WaitRead()
		r.wakeups.Add(1)
		if err != nil {
			r.errs <- fmt.Errorf("queue %d: WaitRead: %w", rxq, err)
			return
		}
	}
}

// isSuiteFrame reports whether f is a suite frame of the flow nonce.
func isSuiteFrame(f []byte, nonce uint64) bool {
	return len(f) >= tagEnd &&
		binary.BigEndian.Uint16(f[12:]) == suiteEtherType &&
		binary.BigEndian.Uint64(f[offNonce:]) == nonce
}

// stop ends the receiver's goroutines and waits for them; Interrupt wakes
// those parked in WaitRead. If it does not, the goroutines are left to the
// link's Close.
func (r *receiver) stop() {
	r.once.Do(func() {
		close(r.done)
		for _, q := range r.link.Queues() {
			q.Interrupt()
		}
		stopped := make(chan struct{})
		go func() {
			r.wg.Wait()
			close(stopped)
		}()
		select {
		case <-stopped:
		case <-time.After(suiteTimeout):
			r.t.Errorf("receiver on %s did not stop within %v: Interrupt did not wake WaitRead", r.link.Info().Name, suiteTimeout)
		}
	})
}

// waitLoop calls WaitRead on q, draining what it reports, until WaitRead
// fails, stop reports true after a return, or the suite's timeout passes.
func waitLoop(q link.Queue, bufSize int, stop func() bool) error {
	frames := []link.RxFrame{{Buf: make([]byte, bufSize)}}
	deadline := time.Now().Add(suiteTimeout)
	for time.Now().Before(deadline) {
		// Bounded: a queue receiving faster than we drain it is noise
		// enough to end the test with a timeout anyway.
		for range 1000 {
			n, err := q.ReadBurst(frames)
			if err != nil {
				return err
			}
			if n == 0 {
				break
			}
		}
		if err := q.WaitRead(); err != nil {
			return err
		}
		if stop() {
			return nil
		}
	}
	return fmt.Errorf("WaitRead kept returning without being stopped for %v", suiteTimeout)
}

// within waits up to the suite's timeout for a result from done.
func within(t *testing.T, done <-chan error, what string) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(suiteTimeout):
		require.FailNow(t, what+" did not happen within "+suiteTimeout.String())
		return nil
	}
}

// checkWaitReadWakes checks that a frame wakes a WaitRead parked on l, and
// that WaitRead parks rather than spins meanwhile.
func checkWaitReadWakes(t *testing.T, l, peer link.Link) {
	tr := startTransfer(t, peer, l, []int{minFrameLen}, 1, 2*settle)
	tr.wait(t)
	n := len(l.Queues())
	assert.LessOrEqual(t, int(tr.rx.wakeups.Load()), n*idleWakeups+len(peer.Queues()),
		"WaitRead returned too often on %d idle queues: it should park", n)
}

// checkWaitReadPending checks that WaitRead returns while frames are queued
// but unread, with no new frame arriving: links whose wakeups are edge
// triggered (epoll, eventfd) must look at their ring before parking.
func checkWaitReadPending(t *testing.T, l, peer link.Link) {
	tr := &transfer{from: peer, to: l, nonce: randomNonce()}
	rxqs := l.Queues()
	var sent, stop atomic.Bool
	woke := make(chan error, len(rxqs))
	for _, q := range rxqs {
		go func() { woke <- readWithPending(q, l.Info().RxFrameSize, tr.nonce, sent.Load, stop.Load) }()
	}
	t.Cleanup(func() {
		stop.Store(true)
		for _, q := range rxqs {
			q.Interrupt()
		}
	})
	time.Sleep(settle) // let WaitRead park

	// Enough frames that some queue gets pendingFrames of them.
	frames := make([]link.TxFrame, (pendingFrames-1)*len(rxqs)+1)
	for seq := range frames {
		frames[seq].Segs = [][]byte{tr.frame(minFrameLen, 0, seq)}
	}
	for deadline := time.Now().Add(suiteTimeout); len(frames) > 0; {
		n, err := peer.Queues()[0].WriteBurst(frames)
		require.NoError(t, err)
		require.True(t, n > 0 || time.Now().Before(deadline), "ring stayed full")
		frames = frames[n:]
	}
	sent.Store(true)
	require.NoError(t, within(t, woke, "WaitRead returning with frames pending"))
}

// pendingFrames is how many suite frames readWithPending reads from a queue:
// enough that the noise of a real interface cannot wake a wrongly parked
// WaitRead each time within pendingWaitMax.
const pendingFrames = 16

// pendingWaitMax bounds a WaitRead with frames pending, which should return
// at once.
const pendingWaitMax = 200 * time.Millisecond

// readWithPending waits on q for suite frames of nonce, lets them arrive,
// then reads them one at a time, calling WaitRead before every read but the
// first. Once it has read pendingFrames of them it returns nil if every
// WaitRead made after sent reported true, and followed by a suite frame,
// returned within pendingWaitMax; an error otherwise. Waits made before
// then do not count: a ring smaller than what the sender has to send runs
// empty while the sender refills it. It also returns once stop reports true.
func readWithPending(q link.Queue, bufSize int, nonce uint64, sent, stop func() bool) error {
	frames := []link.RxFrame{{Buf: make([]byte, bufSize)}}
	seen := 0
	var slowest time.Duration
	for deadline := time.Now().Add(suiteTimeout); time.Now().Before(deadline); {
		if err := q.WaitRead(); err != nil || stop() {
			return err
		}
		time.Sleep(settle) // frames sent by now have arrived
		var waited time.Duration
		for {
			n, err := q.ReadBurst(frames)
			if err != nil {
				return err
			}
			if n == 0 {
				break
			}
			if !isSuiteFrame(frames[0].Buf[:frames[0].Len], nonce) {
				continue
			}
			slowest = max(slowest, waited) // the frame was pending during that wait
			if seen++; seen == pendingFrames {
				if slowest > pendingWaitMax {
					return fmt.Errorf("WaitRead took %v with frames pending", slowest)
				}
				return nil
			}
			counts := sent()
			start := time.Now()
			if err := q.WaitRead(); err != nil || stop() {
				return err
			}
			waited = 0
			if counts {
				waited = time.Since(start)
			}
		}
	}
	return fmt.Errorf("no frames arrived within %v", suiteTimeout)
}

// checkInterrupt checks on every queue of l that Interrupt wakes a parked
// WaitRead, and makes the next WaitRead return when none is parked.
func checkInterrupt(t *testing.T, l, _ link.Link) {
	size := l.Info().RxFrameSize
	for i, q := range l.Queues() {
		checkInterruptWakes(t, i, q, size)
		checkInterruptPending(t, i, q, size)
	}
}

func checkInterruptWakes(t *testing.T, i int, q link.Queue, bufSize int) {
	var interrupted atomic.Bool
	done := make(chan error, 1)
	go func() { done <- waitLoop(q, bufSize, interrupted.Load) }()
	time.Sleep(settle) // let WaitRead park
	// Set before Interrupt: a WaitRead returning for Interrupt must see it.
	interrupted.Store(true)
	q.Interrupt()
	require.NoError(t, within(t, done, fmt.Sprintf("queue %d: Interrupt waking WaitRead", i)))
}

func checkInterruptPending(t *testing.T, i int, q link.Queue, bufSize int) {
	q.Interrupt()
	done := make(chan error, 1)
	go func() { done <- waitLoop(q, bufSize, func() bool { return true }) }()
	require.NoError(t, within(t, done, fmt.Sprintf("queue %d: WaitRead returning after an earlier Interrupt", i)))
}

// checkCloseUnblocks checks that Close makes a parked WaitRead return an
// error matching net.ErrClosed.
func checkCloseUnblocks(t *testing.T, l, _ link.Link) {
	queues := l.Queues()
	done := make(chan error, len(queues))
	for _, q := range queues {
		go func() { done <- waitLoop(q, l.Info().RxFrameSize, func() bool { return false }) }()
	}
	time.Sleep(settle) // let WaitRead park
	require.NoError(t, l.Close())
	for i := range queues {
		err := within(t, done, "Close waking WaitRead")
		assert.ErrorIs(t, err, net.ErrClosed, "WaitRead %d after Close", i)
	}
}

// checkAfterClose checks that every call on a closed link fails with an
// error matching net.ErrClosed, and that closing again is harmless.
func checkAfterClose(t *testing.T, l, peer link.Link) {
	require.NoError(t, l.Close())
	tr := &transfer{from: l, to: peer, nonce: randomNonce()}
	frame := link.TxFrame{Segs: [][]byte{tr.frame(minFrameLen, 0, 0)}}
	rx := []link.RxFrame{{Buf: make([]byte, l.Info().RxFrameSize)}}
	for i, q := range l.Queues() {
		_, err := q.ReadBurst(rx)
		assert.ErrorIs(t, err, net.ErrClosed, "ReadBurst on queue %d", i)
		n, err := q.WriteBurst([]link.TxFrame{frame})
		assert.ErrorIs(t, err, net.ErrClosed, "WriteBurst on queue %d", i)
		assert.Zero(t, n, "WriteBurst on queue %d accepted a frame after Close", i)
		done := make(chan error, 1)
		go func() { done <- q.WaitRead() }()
		assert.ErrorIs(t, within(t, done, "WaitRead after Close"), net.ErrClosed, "WaitRead on queue %d", i)
		assert.NotPanics(t, q.Interrupt)
	}
	var err error
	require.NotPanics(t, func() { err = l.Close() })
	if err != nil {
		assert.ErrorIs(t, err, net.ErrClosed, "second Close")
	}
}

// checkCloseWhileBusy closes l while its queues read and write and peer
// writes to it: every call on l must end with a closed error, none may hang.
func checkCloseWhileBusy(t *testing.T, l, peer link.Link) {
	rx := startReceiver(t, l, randomNonce(), 0)

	deadline := time.Now().Add(suiteTimeout)
	toPeer := &transfer{from: l, to: peer, nonce: randomNonce()}
	toL := &transfer{from: peer, to: l, nonce: randomNonce()}
	lDone := make(chan error, len(l.Queues()))
	for i, q := range l.Queues() {
		go func() { lDone <- flood(q, toPeer.frame(minFrameLen, i, 0), nil, deadline) }()
	}
	stopPeer := make(chan struct{})
	peerDone := make(chan error, len(peer.Queues()))
	for i, q := range peer.Queues() {
		go func() { peerDone <- flood(q, toL.frame(minFrameLen, i, 0), stopPeer, deadline) }()
	}
	time.Sleep(settle)
	require.NoError(t, l.Close())
	for range l.Queues() {
		assert.ErrorIs(t, within(t, lDone, "Close ending WriteBurst"), net.ErrClosed, "WriteBurst during Close")
		assert.ErrorIs(t, within(t, rx.errs, "Close ending ReadBurst/WaitRead"), net.ErrClosed, "ReadBurst/WaitRead during Close")
	}
	close(stopPeer)
	for range peer.Queues() {
		// Only that the writers stop matters: writes towards a closed
		// link may fail (a TAP's interface goes away with its fd).
		_ = within(t, peerDone, "writers to a closed link stopping")
	}
}

// flood writes copies of frame to q until stop is closed (then it returns
// nil), WriteBurst fails, or deadline passes.
func flood(q link.Queue, frame []byte, stop <-chan struct{}, deadline time.Time) error {
	batch := make([]link.TxFrame, 16)
	for i := range batch {
		batch[i].Segs = [][]byte{frame}
	}
	for time.Now().Before(deadline) {
		select {
		case <-stop:
			return nil
		default:
		}
		n, err := q.WriteBurst(batch)
		if err != nil {
			return err
		}
		if n == 0 {
			time.Sleep(50 * time.Microsecond)
		}
	}
	return fmt.Errorf("still writing after %v", suiteTimeout)
}

func randomNonce() uint64 {
	var b [8]byte
	rand.Read(b[:])
	return binary.BigEndian.Uint64(b[:])
}
