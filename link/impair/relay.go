package impair

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/polarnet/polarnet/internal/frame"
	"github.com/polarnet/polarnet/link"
)

// relayBurst is how many frames the relay moves per ReadBurst.
const relayBurst = 32

// A relay retries a link without room relayRetries times, relayRetryWait
// apart, before it drops what did not fit.
const (
	relayRetries   = 100
	relayRetryWait = 100 * time.Microsecond
)

// relayErrorBackoff is how long a relay direction pauses after a failed
// read, so that a link in trouble is not polled in a busy loop.
const relayErrorBackoff = 10 * time.Millisecond

// Relay joins two links like a cable: every frame received on a is sent on
// b and the other way round, until Close. Queue i of one link feeds queue
// i (modulo the count) of the other.
//
// The relay is user space in the middle of a path, so it must leave frames
// as a wire would:
//   - a frame received marked ChecksumValid may carry a partial checksum (a
//     CHECKSUM_PARTIAL frame of the local kernel, which the receiving
//     kernel would otherwise drop): the relay completes its transport
//     checksum in software before sending it on;
//   - a frame longer than the other link's MTU (plus the Ethernet header)
//     is dropped and counted, as a switch drops an oversized frame. Links
//     that hand over coalesced frames (a TAP device with offloads) should
//     be opened without offloads, or their large frames are lost.
//
// To impair the path, wrap one of the links with New before joining them.
type Relay struct {
	a, b    link.Link
	stop    atomic.Bool
	wg      sync.WaitGroup
	once    sync.Once
	err     error
	ab, ba  relayCounters
	readers []link.Queue
}

// RelayStats counts what a Relay forwarded, per direction.
type RelayStats struct {
	AtoB, BtoA RelayDirectionStats
}

// RelayDirectionStats are the counters of one direction.
type RelayDirectionStats struct {
	// Frames and Bytes count frames sent on.
	Frames, Bytes uint64
	// Oversize counts frames dropped for being longer than the far link's
	// MTU allows; Refused frames the far link did not accept (an error, or
	// no room for 10ms: ring full, carrier down).
	Oversize, Refused uint64
	// Errors counts failed reads and writes.
	Errors uint64
}

type relayCounters struct {
	frames, bytes, oversize, refused, errors atomic.Uint64
}

func (c *relayCounters) snapshot() RelayDirectionStats {
	return RelayDirectionStats{
		Frames:   c.frames.Load(),
		Bytes:    c.bytes.Load(),
		Oversize: c.oversize.Load(),
		Refused:  c.refused.Load(),
		Errors:   c.errors.Load(),
	}
}

// NewRelay starts forwarding between a and b; the Relay owns both links and
// closes them in Close.
func NewRelay(a, b link.Link) (*Relay, error) {
	if len(a.Queues()) == 0 || len(b.Queues()) == 0 {
		return nil, errors.Join(fmt.Errorf("impair: relay between %s and %s: a link without queues", a.Info().Name, b.Info().Name), a.Close(), b.Close())
	}
	r := &Relay{a: a, b: b}
	r.start(a, b, &r.ab)
	r.start(b, a, &r.ba)
	return r, nil
}

// start runs one goroutine per receiving queue of from.
func (r *Relay) start(from, to link.Link, c *relayCounters) {
	outs := to.Queues()
	locks := make([]sync.Mutex, len(outs))
	maxLen := to.Info().MTU + frame.EthLen
	bufSize := from.Info().RxFrameSize
	for i, in := range from.Queues() {
		r.readers = append(r.readers, in)
		r.wg.Add(1)
		go r.forward(in, outs[i%len(outs)], &locks[i%len(outs)], maxLen, bufSize, c)
	}
}

// forward moves frames from in to out until the relay stops or in closes.
func (r *Relay) forward(in, out link.Queue, outMu *sync.Mutex, maxLen, bufSize int, c *relayCounters) {
	defer r.wg.Done()
	rx := make([]link.RxFrame, relayBurst)
	for i := range rx {
		rx[i].Buf = make([]byte, bufSize)
	}
	tx := make([]link.TxFrame, 0, relayBurst)
	segs := make([][]byte, relayBurst)
	for !r.stop.Load() {
		n, err := in.ReadBurst(rx)
		tx = tx[:0]
		for i := range rx[:n] {
			f := rx[i].Buf[:rx[i].Len]
			if len(f) > maxLen {
				c.oversize.Add(1)
				continue
			}
			if rx[i].ChecksumValid {
				if p, ok := frame.Parse(f); ok {
					frame.FixChecksum(f, p)
				}
			}
			segs[len(tx)] = f
			tx = append(tx, link.TxFrame{Segs: segs[len(tx) : len(tx)+1 : len(tx)+1]})
		}
		r.send(out, outMu, tx, c)
		switch {
		case errors.Is(err, link.ErrClosed):
			return
		case err != nil:
			c.errors.Add(1)
			time.Sleep(relayErrorBackoff)
		case n == 0:
			if werr := in.WaitRead(); errors.Is(werr, link.ErrClosed) {
				return
			} else if werr != nil {
				c.errors.Add(1)
				time.Sleep(relayErrorBackoff)
			}
		}
	}
}

// send writes tx to out. A link without room (a full ring) is given a few
// milliseconds to drain, as the relay's own queue would, so that the relay
// pushes back on its source rather than dropping at once.
func (r *Relay) send(out link.Queue, outMu *sync.Mutex, tx []link.TxFrame, c *relayCounters) {
	for try := 0; len(tx) > 0; try++ {
		outMu.Lock()
		m, err := out.WriteBurst(tx)
		outMu.Unlock()
		for _, f := range tx[:m] {
			c.frames.Add(1)
			c.bytes.Add(uint64(f.Len()))
		}
		tx = tx[m:]
		switch {
		case err != nil:
			c.errors.Add(1)
			c.refused.Add(uint64(len(tx)))
			return
		case len(tx) == 0:
			return
		case try == relayRetries || r.stop.Load():
			c.refused.Add(uint64(len(tx)))
			return
		}
		time.Sleep(relayRetryWait)
	}
}

// Stats returns the relay's counters.
func (r *Relay) Stats() RelayStats {
	return RelayStats{AtoB: r.ab.snapshot(), BtoA: r.ba.snapshot()}
}

// Close stops forwarding, waits for the relay's goroutines and closes both
// links. Closing again returns the first result.
func (r *Relay) Close() error {
	r.once.Do(func() {
		r.stop.Store(true)
		for _, q := range r.readers {
			q.Interrupt()
		}
		r.wg.Wait()
		r.err = errors.Join(r.a.Close(), r.b.Close())
	})
	return r.err
}
