package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/polarnet/polarnet/internal/xfer"
)

// dialFunc opens one connection to the server.
type dialFunc func(ctx context.Context) (net.Conn, error)

// Phases of a load generator. The orchestrator moves it along with Go and
// Mark: only what completes while measuring is counted.
const (
	phaseIdle int32 = iota
	phaseWarmup
	phaseMeasure
	phaseDrain
)

// dialTimeout bounds each connection attempt.
const dialTimeout = 10 * time.Second

// loadResult is what a client measured between its two marks.
type loadResult struct {
	Ops     uint64        `json:"ops"`
	Bytes   uint64        `json:"bytes"`
	Elapsed time.Duration `json:"elapsed_ns"`
	Lat     *hist         `json:"latency,omitempty"`
}

// loadGen drives one test (rr, stream or crr) against a server.
type loadGen struct {
	spec  testSpec
	dial  dialFunc
	conns []net.Conn

	phase       atomic.Int32
	start, stop time.Time
	deadline    time.Time // no connection outlives it

	workers []*workerStats
	wg      sync.WaitGroup
	done    chan struct{} // closed when every worker has returned
	quit    chan struct{} // closed on the first failure
	ctx     context.Context
	cancel  context.CancelFunc // on the first failure: ends crr dials

	mu      sync.Mutex
	err     error
	crrOpen connSet // crr connections in use, closed on failure
}

// workerStats belong to one worker goroutine until it returns.
type workerStats struct {
	ops, bytes uint64
	lat        *hist
}

func newLoadGen(s testSpec, dial dialFunc) *loadGen {
	ctx, cancel := context.WithCancel(context.Background())
	return &loadGen{spec: s, dial: dial, done: make(chan struct{}), quit: make(chan struct{}), ctx: ctx, cancel: cancel}
}

// Connect opens the connections of rr and stream tests and says hello on
// each; crr opens its own per operation.
func (g *loadGen) Connect(ctx context.Context) error {
	if g.spec.Test == testCRR {
		return nil
	}
	kind := byte(kindRR)
	if g.spec.Test == testStream {
		kind = kindStr
	}
	h := hello(kind, g.spec.Req, g.spec.Resp)
	for i := range g.spec.Conns {
		c, err := g.dialOne(ctx)
		if err != nil {
			return fmt.Errorf("connection %d of %d: %w", i+1, g.spec.Conns, err)
		}
		g.conns = append(g.conns, c)
		if _, err := c.Write(h); err != nil {
			return fmt.Errorf("connection %d: hello: %w", i+1, err)
		}
	}
	return nil
}

func (g *loadGen) dialOne(ctx context.Context) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	return g.dial(ctx)
}

// Go starts the workers in the warmup phase. No connection stays open
// longer than maxRun from now: a stalled peer fails the run instead of
// hanging it.
func (g *loadGen) Go(maxRun time.Duration) {
	g.deadline = time.Now().Add(maxRun)
	for _, c := range g.conns {
		c.SetDeadline(g.deadline)
	}
	g.phase.Store(phaseWarmup)
	workers := g.spec.Conns
	for i := range workers {
		ws := &workerStats{lat: newHist()}
		g.workers = append(g.workers, ws)
		g.wg.Add(1)
		go func() {
			defer g.wg.Done()
			var err error
			switch {
			case g.spec.Test == testStream:
				err = g.stream(g.conns[i], ws)
			case g.spec.Test == testCRR:
				err = g.crr(ws)
			case g.spec.Depth > 1:
				err = g.rrPipelined(g.conns[i], ws)
			default:
				err = g.rr(g.conns[i], ws)
			}
			if err != nil {
				g.fail(err)
			}
		}()
	}
	go func() {
		g.wg.Wait()
		close(g.done)
	}()
}

// Mark moves from warmup to measuring, or from measuring to draining, and
// returns the time of the switch.
func (g *loadGen) Mark() time.Time {
	now := time.Now()
	if g.phase.Load() == phaseWarmup {
		g.start = now
		g.phase.Store(phaseMeasure)
	} else {
		g.stop = now
		g.phase.Store(phaseDrain)
	}
	return now
}

// measuring reports whether an operation completing now counts.
func (g *loadGen) measuring() bool { return g.phase.Load() == phaseMeasure }

// draining reports whether workers should stop issuing operations.
func (g *loadGen) draining() bool { return g.phase.Load() >= phaseDrain }

// fail records the first error and closes every connection, which ends all
// workers promptly.
func (g *loadGen) fail(err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.err != nil {
		return
	}
	g.err = err
	close(g.quit)
	g.cancel()
	for _, c := range g.conns {
		c.Close()
	}
	g.crrOpen.closeAll()
}

// Finish stops the workers, waits for them (at most until ctx ends), closes
// the connections and returns what was measured.
func (g *loadGen) Finish(ctx context.Context) (loadResult, error) {
	if g.phase.Load() < phaseDrain {
		g.Mark()
	}
	if g.phase.Load() != phaseIdle {
		select {
		case <-g.done:
		case <-ctx.Done():
			g.fail(errors.New("workers did not finish in time"))
			select {
			case <-g.done:
			case <-time.After(5 * time.Second):
				return loadResult{}, errors.New("workers stuck after their connections were closed")
			}
		}
	}
	for _, c := range g.conns {
		c.Close()
	}
	g.cancel()
	g.mu.Lock()
	err := g.err
	g.mu.Unlock()
	if err != nil {
		return loadResult{}, err
	}
	res := loadResult{Elapsed: g.stop.Sub(g.start), Lat: newHist()}
	for _, ws := range g.workers {
		res.Ops += ws.ops
		res.Bytes += ws.bytes
		res.Lat.merge(ws.lat)
	}
	if g.spec.Test == testStream {
		res.Lat = nil
	}
	return res, nil
}

// Close releases the connections without measuring (for failed setups).
func (g *loadGen) Close() {
	g.fail(errors.New("closed"))
	if g.phase.Load() != phaseIdle {
		<-g.done
	}
}

// rr runs request/response with one request outstanding: write, read, check.
func (g *loadGen) rr(c net.Conn, ws *workerStats) error {
	req, respT := message(g.spec.Req, seedReq), message(g.spec.Resp, seedResp)
	in := make([]byte, g.spec.Resp)
	for seq := uint64(0); !g.draining(); seq++ {
		binary.LittleEndian.PutUint64(req, seq)
		t0 := time.Now()
		if _, err := c.Write(req); err != nil {
			return fmt.Errorf("request %d: %w", seq, err)
		}
		if err := g.response(c, in, respT, seq, t0, ws); err != nil {
			return err
		}
	}
	return nil
}

// response reads and checks response seq to a request sent at t0, and
// counts it if measuring.
func (g *loadGen) response(c net.Conn, in, template []byte, seq uint64, t0 time.Time, ws *workerStats) error {
	if _, err := io.ReadFull(c, in); err != nil {
		return fmt.Errorf("response %d: %w", seq, err)
	}
	lat := time.Since(t0)
	if err := checkMessage(in, template, seq); err != nil {
		return err
	}
	if g.measuring() {
		ws.ops++
		ws.lat.record(lat)
	}
	return nil
}

// rrPipelined keeps up to Depth requests outstanding on one connection: a
// writer sends while credits last, and passes each send time to the reader,
// which returns a credit per response.
func (g *loadGen) rrPipelined(c net.Conn, ws *workerStats) error {
	depth := g.spec.Depth
	credits := make(chan struct{}, depth)
	for range depth {
		credits <- struct{}{}
	}
	sent := make(chan time.Time, depth) // never full: credits bound it
	werr := make(chan error, 1)
	go func() {
		defer close(sent)
		req := message(g.spec.Req, seedReq)
		for seq := uint64(0); !g.draining(); seq++ {
			select {
			case <-credits:
			case <-g.quit:
				werr <- nil
				return
			}
			binary.LittleEndian.PutUint64(req, seq)
			t0 := time.Now()
			if _, err := c.Write(req); err != nil {
				werr <- fmt.Errorf("request %d: %w", seq, err)
				return
			}
			sent <- t0
		}
		werr <- nil
	}()
	respT := message(g.spec.Resp, seedResp)
	in := make([]byte, g.spec.Resp)
	rerr := func() error {
		for seq := uint64(0); ; seq++ {
			t0, ok := <-sent
			if !ok {
				return nil
			}
			if err := g.response(c, in, respT, seq, t0, ws); err != nil {
				return err
			}
			credits <- struct{}{}
		}
	}()
	if rerr != nil {
		g.fail(rerr) // unblocks the writer
	}
	return errors.Join(rerr, <-werr)
}

// stream sends the pattern until draining, then half-closes and checks the
// server's count of what arrived intact.
func (g *loadGen) stream(c net.Conn, ws *workerStats) error {
	hc, ok := c.(xfer.HalfCloser)
	if !ok {
		return fmt.Errorf("stream needs a conn with CloseWrite, have %T", c)
	}
	block := pattern(streamBlock, seedStream)
	var total uint64
	for !g.draining() {
		n, err := c.Write(block)
		total += uint64(n)
		if g.measuring() {
			ws.bytes += uint64(n)
		}
		if err != nil {
			return fmt.Errorf("stream after %d bytes: %w", total, err)
		}
	}
	if err := hc.CloseWrite(); err != nil {
		return fmt.Errorf("stream CloseWrite: %w", err)
	}
	var count [8]byte
	if _, err := io.ReadFull(c, count[:]); err != nil {
		return fmt.Errorf("stream count: %w", err)
	}
	if got := binary.LittleEndian.Uint64(count[:]); got != total {
		return fmt.Errorf("%w: server received %d stream bytes, %d sent", errCorrupt, got, total)
	}
	return nil
}

// crr connects, sends one request with the hello, reads the response and
// closes, once per operation.
func (g *loadGen) crr(ws *workerStats) error {
	h := hello(kindRR, g.spec.Req, g.spec.Resp)
	req := append(h, message(g.spec.Req, seedReq)...)
	respT := message(g.spec.Resp, seedResp)
	in := make([]byte, g.spec.Resp)
	ctx, cancel := context.WithDeadline(g.ctx, g.deadline)
	defer cancel()
	for n := 0; !g.draining(); n++ {
		t0 := time.Now()
		c, err := g.dialOne(ctx)
		if err != nil {
			return fmt.Errorf("crr connection %d: %w", n, err)
		}
		if !g.crrOpen.add(c) {
			return nil // failed elsewhere
		}
		err = g.crrOne(c, req, respT, in)
		g.crrOpen.remove(c)
		if err != nil {
			return fmt.Errorf("crr connection %d: %w", n, err)
		}
		lat := time.Since(t0)
		if g.measuring() {
			ws.ops++
			ws.lat.record(lat)
		}
	}
	return nil
}

func (g *loadGen) crrOne(c net.Conn, req, respT, in []byte) error {
	c.SetDeadline(g.deadline)
	if _, err := c.Write(req); err != nil {
		return err
	}
	if _, err := io.ReadFull(c, in); err != nil {
		return err
	}
	return checkMessage(in, respT, 0)
}
