package impair

import (
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/polarnet/polarnet/internal/frame"
	"github.com/polarnet/polarnet/link"
)

// Impairment is what happens to the frames of one direction. The zero value
// passes frames through untouched.
type Impairment struct {
	// Delay holds every frame back this long.
	Delay time.Duration
	// Jitter varies each frame's delay uniformly within ±Jitter (a delay
	// never goes below zero). Jitter never reorders frames: a frame leaves
	// no earlier than the one ahead of it, as with netem's rate or a FIFO
	// queue behind it. Use Reorder for reordering.
	Jitter time.Duration
	// Loss is the probability that a frame is dropped.
	Loss float64
	// Duplicate is the probability that a frame is sent twice.
	Duplicate float64
	// Reorder is the probability that a frame is held back until the next
	// frame of the same direction has gone ahead of it; if none comes
	// within ReorderHold, it leaves anyway.
	Reorder float64
	// ReorderHold bounds how long a reordered frame waits for another to
	// overtake it. Zero: 1ms.
	ReorderHold time.Duration
	// Corrupt is the probability that one random bit of a frame's IP
	// packet is flipped (see the package documentation on checksums).
	Corrupt float64
	// Rate limits the direction to this many bits per second (Ethernet
	// header included), queueing frames as a slower link would. Zero:
	// unlimited.
	Rate int64
	// Limit is how many frames may wait (for their delay or their turn at
	// the rate); more are dropped, as by a full queue. Zero: 10,000.
	Limit int
	// ClampMSS, when not zero, lowers the MSS option of TCP SYNs to it.
	ClampMSS uint16
}

// Config configures a decorator. Egress is applied to frames the engine
// sends (WriteBurst), Ingress to frames it receives (ReadBurst).
type Config struct {
	Egress, Ingress Impairment
	// Seed makes the random choices reproducible: every queue and direction
	// draws from a generator seeded from it.
	Seed uint64
}

// Symmetric returns a Config that impairs both directions alike.
func Symmetric(imp Impairment, seed uint64) Config {
	return Config{Egress: imp, Ingress: imp, Seed: seed}
}

// Check reports the first invalid field of c.
func (c Config) Check() error {
	for _, d := range []struct {
		name string
		imp  Impairment
	}{{"Egress", c.Egress}, {"Ingress", c.Ingress}} {
		i := d.imp
		for _, p := range []struct {
			name string
			v    float64
		}{{"Loss", i.Loss}, {"Duplicate", i.Duplicate}, {"Reorder", i.Reorder}, {"Corrupt", i.Corrupt}} {
			if !(p.v >= 0 && p.v <= 1) {
				return fmt.Errorf("impair: %s.%s = %v, want a probability in [0, 1]", d.name, p.name, p.v)
			}
		}
		if i.Delay < 0 || i.Jitter < 0 || i.ReorderHold < 0 || i.Rate < 0 || i.Limit < 0 {
			return fmt.Errorf("impair: %s has a negative duration, rate or limit", d.name)
		}
		if i.ClampMSS != 0 && i.ClampMSS < 64 {
			return fmt.Errorf("impair: %s.ClampMSS = %d is too small to carry a TCP segment", d.name, i.ClampMSS)
		}
	}
	return nil
}

const (
	defaultLimit       = 10_000
	defaultReorderHold = time.Millisecond
	maxBurst           = 64 // frames per WriteBurst of waiting frames
	// retryInterval is how long frames wait after the wrapped link had no
	// room for them (a full TAP queue drains in well under this).
	retryInterval = 200 * time.Microsecond
)

// Link is the decorator: a link.Link over the link it wraps, with the
// impairments of its Config.
type Link struct {
	inner  link.Link
	info   link.Info
	cfg    atomic.Pointer[Config]
	queues []link.Queue
	closed atomic.Bool
	done   chan struct{}
	wg     sync.WaitGroup
	once   sync.Once
	err    error
}

var _ link.Link = (*Link)(nil)

// New wraps inner with the impairments of cfg, which must pass Check (New
// panics otherwise: configurations are written by programmers). The
// decorator owns inner: closing it closes inner.
func New(inner link.Link, cfg Config) *Link {
	if err := cfg.Check(); err != nil {
		panic(err)
	}
	l := &Link{inner: inner, info: inner.Info(), done: make(chan struct{})}
	if cfg.Egress.Corrupt > 0 && l.info.Caps&link.CapGSO != 0 {
		l.info.Caps &^= link.CapGSO
		l.info.GSOMaxSize = 0
	}
	l.cfg.Store(&cfg)
	for i, q := range inner.Queues() {
		nq := &queue{link: l, inner: q, kick: make(chan struct{}, 1)}
		nq.tx.rng = rand.New(rand.NewPCG(cfg.Seed, uint64(2*i)))
		nq.rx.rng = rand.New(rand.NewPCG(cfg.Seed, uint64(2*i+1)))
		nq.rxTimer = time.AfterFunc(time.Hour, q.Interrupt)
		nq.rxTimer.Stop()
		l.queues = append(l.queues, nq)
		l.wg.Add(1)
		go nq.pump()
	}
	return l
}

// Set replaces the impairments from the next frame on; frames already
// waiting keep their schedule. The random generators are not reseeded (the
// new Seed is ignored), and Info does not change: see the package
// documentation about corruption and GSO.
func (l *Link) Set(cfg Config) error {
	if err := cfg.Check(); err != nil {
		return err
	}
	l.cfg.Store(&cfg)
	for _, q := range l.queues {
		q.(*queue).kickPump()
	}
	return nil
}

// Config returns the impairments in force.
func (l *Link) Config() Config { return *l.cfg.Load() }

// Info implements link.Link: the wrapped link's, without CapGSO when
// Egress.Corrupt was set at New.
func (l *Link) Info() link.Info {
	info := l.info
	info.MAC = append(net.HardwareAddr(nil), l.info.MAC...)
	return info
}

// Queues implements link.Link.
func (l *Link) Queues() []link.Queue { return l.queues }

// Close stops the decorator, drops the frames still waiting and closes the
// wrapped link. Closing again returns link.ErrClosed.
func (l *Link) Close() error {
	err := error(link.ErrClosed)
	l.once.Do(func() {
		l.closed.Store(true)
		close(l.done)
		l.wg.Wait()
		for _, q := range l.queues {
			q := q.(*queue)
			q.rxTimer.Stop()
			q.tx.drain()
			q.rx.drain()
		}
		l.err = l.inner.Close()
		err = l.err
	})
	return err
}

// Stats returns the decorator's counters, summed over queues.
func (l *Link) Stats() Stats {
	var s Stats
	for _, q := range l.queues {
		q := q.(*queue)
		s.Egress.add(q.tx.snapshot())
		s.Ingress.add(q.rx.snapshot())
	}
	return s
}

// Stats counts what the decorator did to each direction.
type Stats struct {
	Egress, Ingress DirectionStats
}

// DirectionStats are one direction's counters.
type DirectionStats struct {
	// Frames counts the frames offered to the impairment.
	Frames uint64
	// Lost, Duplicated, Reordered, Corrupted and Clamped count the frames
	// each impairment hit; Overlimit those dropped because Limit frames
	// were waiting.
	Lost, Duplicated, Reordered, Corrupted, Clamped, Overlimit uint64
	// Delivered counts the frames handed on (duplicates included).
	Delivered uint64
	// Refused counts frames the wrapped link failed to send (an error).
	// Frames it did not accept for want of room (ring full, carrier down)
	// keep waiting and are tried again, within Limit.
	Refused uint64
}

func (a *DirectionStats) add(b DirectionStats) {
	a.Frames += b.Frames
	a.Lost += b.Lost
	a.Duplicated += b.Duplicated
	a.Reordered += b.Reordered
	a.Corrupted += b.Corrupted
	a.Clamped += b.Clamped
	a.Overlimit += b.Overlimit
	a.Delivered += b.Delivered
	a.Refused += b.Refused
}

// pending is a frame waiting in the decorator, in a pooled buffer.
type pending struct {
	buf *[]byte
	n   int
	at  time.Time // when it may leave
	// csumValid is the received frame's ChecksumValid; offload the sent
	// frame's request.
	csumValid bool
	offload   link.TxOffload
}

func (p *pending) data() []byte { return (*p.buf)[:p.n] }

// direction is the impairment state of one direction of one queue.
type direction struct {
	mu        sync.Mutex
	rng       *rand.Rand
	waiting   []*pending // FIFO, leave times non-decreasing
	head      int
	held      *pending // a reordered frame waiting to be overtaken
	heldUntil time.Time
	busyUntil time.Time // rate limit: when the link is free again
	lastLeave time.Time
	// blockedUntil holds everything back after the wrapped link had no
	// room, so that the pump retries instead of spinning.
	blockedUntil time.Time
	stats        DirectionStats
}

func (d *direction) snapshot() DirectionStats {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.stats
}

func (d *direction) queued() int { return len(d.waiting) - d.head }

// idle reports whether nothing waits; callers hold mu.
func (d *direction) idle() bool { return d.queued() == 0 && d.held == nil }

// admit applies imp to one frame (the gather list segs of n bytes, with its
// checksum state) and queues what comes out, copied. Callers hold mu.
func (d *direction) admit(imp *Impairment, now time.Time, segs [][]byte, n int, csumValid bool, offload link.TxOffload, egress bool) {
	d.stats.Frames++
	if imp.Loss > 0 && d.rng.Float64() < imp.Loss {
		d.stats.Lost++
		return
	}
	copies := 1
	if imp.Duplicate > 0 && d.rng.Float64() < imp.Duplicate {
		d.stats.Duplicated++
		copies = 2
	}
	for range copies {
		// Draw everything this copy may use first: what happens to later
		// frames must not depend on timing (how full the queue is, whether
		// a reordered frame's hold ran out).
		r := d.draw(imp, n)
		limit := imp.Limit
		if limit == 0 {
			limit = defaultLimit
		}
		if d.queued() >= limit {
			d.stats.Overlimit++
			continue
		}
		p := &pending{buf: getBuf(n), n: n, csumValid: csumValid, offload: offload}
		off := 0
		for _, s := range segs {
			off += copy((*p.buf)[off:n], s)
		}
		d.patch(imp, p, egress, r)
		d.schedule(imp, now, p, r)
	}
}

// draws are the random choices for one frame copy.
type draws struct {
	corrupt bool
	bit     int // the bit to flip, counted from the IP header
	jitter  time.Duration
	reorder bool
}

// draw makes the random choices for a copy of an n-byte frame. Callers hold
// mu.
func (d *direction) draw(imp *Impairment, n int) draws {
	var r draws
	if imp.Corrupt > 0 && d.rng.Float64() < imp.Corrupt && n > frame.EthLen {
		r.corrupt, r.bit = true, d.rng.IntN((n-frame.EthLen)*8)
	}
	if imp.Jitter > 0 {
		r.jitter = time.Duration(d.rng.Int64N(2*int64(imp.Jitter)+1)) - imp.Jitter
	}
	r.reorder = imp.Reorder > 0 && d.rng.Float64() < imp.Reorder
	return r
}

// patch clamps the MSS and corrupts p as imp and r say.
func (d *direction) patch(imp *Impairment, p *pending, egress bool, r draws) {
	f := p.data()
	partial := (egress && p.offload.NeedsChecksum) || (!egress && p.csumValid)
	if imp.ClampMSS != 0 {
		if pkt, ok := frame.Parse(f); ok && pkt.Proto == frame.ProtoTCP {
			if egress && p.offload.NeedsChecksum {
				// The field holds the pseudo-header sum, which the options
				// do not enter: rewrite them, the link sums the rest.
				if clampOptions(f, pkt, imp.ClampMSS) {
					d.stats.Clamped++
				}
			} else if frame.ClampMSS(f, pkt, imp.ClampMSS) {
				d.stats.Clamped++
			}
		}
	}
	if !r.corrupt {
		return
	}
	if egress && p.offload.GSO != link.GSONone {
		return // its segments' checksums would cover the flip
	}
	if partial {
		// Complete the checksum as the receiver's NIC or the kernel would
		// have, so that the flip below makes it wrong.
		if egress {
			o := p.offload
			frame.CompletePartial(f, int(o.ChecksumStart), int(o.ChecksumOffset), len(f))
			p.offload = link.TxOffload{}
		} else if pkt, ok := frame.Parse(f); ok {
			frame.FixChecksum(f, pkt)
		}
	}
	p.csumValid = false
	f[frame.EthLen+r.bit/8] ^= 1 << (r.bit % 8)
	d.stats.Corrupted++
}

// clampOptions rewrites a SYN's MSS option without touching its checksum
// field (for frames whose checksum the link computes).
func clampOptions(f []byte, pkt frame.Packet, mss uint16) bool {
	t, ok := frame.ParseTCP(f, pkt)
	if !ok || !t.Has(frame.FlagSYN) || t.Options.MSS <= mss {
		return false
	}
	// ClampMSS recomputes the checksum; restore the partial sum after it.
	field := f[pkt.L4+16 : pkt.L4+18]
	saved := [2]byte{field[0], field[1]}
	changed := frame.ClampMSS(f, pkt, mss)
	field[0], field[1] = saved[0], saved[1]
	return changed
}

// schedule gives p its leave time and queues it, handling reordering.
// Callers hold mu.
func (d *direction) schedule(imp *Impairment, now time.Time, p *pending, r draws) {
	start := now
	if imp.Rate > 0 {
		start = later(now, d.busyUntil)
		d.busyUntil = start.Add(time.Duration(int64(p.n) * 8 * int64(time.Second) / imp.Rate))
		start = d.busyUntil
	}
	delay := max(imp.Delay+r.jitter, 0)
	p.at = later(start.Add(delay), d.lastLeave)
	if d.held == nil && r.reorder {
		hold := imp.ReorderHold
		if hold == 0 {
			hold = defaultReorderHold
		}
		d.held, d.heldUntil = p, p.at.Add(hold)
		d.stats.Reordered++
		return
	}
	d.push(p)
	if h := d.held; h != nil {
		// p overtakes the held frame, which leaves right after it.
		d.held = nil
		h.at = p.at
		d.push(h)
	}
}

func (d *direction) push(p *pending) {
	p.at = later(p.at, d.lastLeave)
	d.lastLeave = p.at
	d.waiting = append(d.waiting, p)
}

// releaseHeld queues a held frame whose hold is over. Callers hold mu.
func (d *direction) releaseHeld(now time.Time) {
	if d.held != nil && !now.Before(d.heldUntil) {
		h := d.held
		d.held = nil
		h.at = now
		d.push(h)
	}
}

// popDue removes and returns up to cap(out) frames due at now. Callers
// hold mu.
func (d *direction) popDue(now time.Time, out []*pending) []*pending {
	d.releaseHeld(now)
	if now.Before(d.blockedUntil) {
		return out
	}
	for len(out) < cap(out) && d.head < len(d.waiting) && !d.waiting[d.head].at.After(now) {
		out = append(out, d.waiting[d.head])
		d.waiting[d.head] = nil
		d.head++
	}
	if d.head == len(d.waiting) {
		d.waiting, d.head = d.waiting[:0], 0
	} else if d.head > 1024 && d.head > len(d.waiting)/2 {
		n := copy(d.waiting, d.waiting[d.head:])
		clear(d.waiting[n:])
		d.waiting, d.head = d.waiting[:n], 0
	}
	return out
}

// unpop puts frames popDue returned back at the head of the queue, in
// order, and holds the queue back for retryInterval: the wrapped link had
// no room for them. Callers hold mu.
func (d *direction) unpop(now time.Time, ps []*pending) {
	if d.head >= len(ps) {
		d.head -= len(ps)
		copy(d.waiting[d.head:], ps)
	} else {
		d.waiting = append(append([]*pending(nil), ps...), d.waiting[d.head:]...)
		d.head = 0
	}
	d.blockedUntil = now.Add(retryInterval)
}

// next returns when the first waiting frame (or the held one) is due, and
// false when none waits. Callers hold mu.
func (d *direction) next() (time.Time, bool) {
	var t time.Time
	ok := false
	if d.head < len(d.waiting) {
		t, ok = later(d.waiting[d.head].at, d.blockedUntil), true
	}
	if d.held != nil && (!ok || d.heldUntil.Before(t)) {
		t, ok = d.heldUntil, true
	}
	return t, ok
}

// drain drops everything waiting (at Close).
func (d *direction) drain() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, p := range d.waiting[d.head:] {
		putBuf(p.buf)
	}
	if d.held != nil {
		putBuf(d.held.buf)
		d.held = nil
	}
	d.waiting, d.head = nil, 0
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// Buffers come in three size classes so that a queue of small frames does
// not pin 64 KiB buffers.
var bufClasses = [...]int{2048, 16384, 1 << 17}

var bufPools [len(bufClasses)]sync.Pool

func getBuf(n int) *[]byte {
	for i, c := range bufClasses {
		if n <= c {
			if b, ok := bufPools[i].Get().(*[]byte); ok {
				return b
			}
			b := make([]byte, c)
			return &b
		}
	}
	b := make([]byte, n)
	return &b
}

func putBuf(b *[]byte) {
	for i, c := range bufClasses {
		if len(*b) == c {
			bufPools[i].Put(b)
			return
		}
	}
}
