package rdma

import (
	"errors"
	"fmt"
	"net"
	"sync/atomic"

	"github.com/polarnet/polarnet/link"
)

// Link is a polarnet link over an RDMA port: raw Ethernet frames through
// raw packet queue pairs. It implements link.Steerer: RxQueue predicts
// the spread when the link hashes flows over its queues with RSS.
type Link struct {
	info   link.Info
	setup  Setup
	dev    device
	queues []*queue
	pq     []link.Queue
	spread *rssSpread // nil: queue 0 receives everything

	closed   atomic.Bool
	done     chan struct{} // closed by Close
	closeErr error
}

var (
	_ link.Link    = (*Link)(nil)
	_ link.Steerer = (*Link)(nil)
)

// Setup is what New settled on.
type Setup struct {
	// Port is the RDMA port and its interface.
	Port Port
	// Queues is the number of queue pairs; RxRing and TxRing the buffers
	// of each; FrameSize the bytes of one buffer.
	Queues, RxRing, TxRing, FrameSize int
	// RSS reports that received flows are spread over the queues by the
	// device's Toeplitz hash (the link then steers: RxQueue answers);
	// RSSTable is the indirection table's length.
	RSS      bool
	RSSTable int
	// RxChecksum reports that the device verifies received checksums.
	RxChecksum bool
	// FlowRules describe the flow steering rules, one line each.
	FlowRules []string
}

// Setup reports what New settled on.
func (l *Link) Setup() Setup { return l.setup }

// Stats are a link's counters.
type Stats struct {
	Queues []QueueStats
}

// QueueStats are one queue pair's counters.
type QueueStats struct {
	RxFrames, RxBursts uint64
	// RxErrors counts failed receive completions.
	RxErrors uint64
	// RefillShort counts the times the device took fewer receive buffers
	// than offered; Posted is how many are posted now (the ring is
	// exhausted at 0: the NIC drops what arrives).
	RefillShort uint64
	Posted      int
	TxFrames    uint64
	TxBursts    uint64
	// TxFull counts frames not accepted: no free send buffer, or the send
	// queue refused them.
	TxFull uint64
	// TxErrors counts failed send completions.
	TxErrors uint64
	// Restarts counts recoveries from the error state; Forced the buffers
	// taken back without a completion when a queue stopped.
	Restarts, Forced uint64
	// Sleeps counts WaitRead calls that parked.
	Sleeps uint64
	// LastError is the last error the queue recovered from or reported.
	LastError error
}

// queueCounters are a queue's counters, read by Stats from any goroutine.
type queueCounters struct {
	rxFrames, rxBursts, rxErrors, refillShort atomic.Uint64
	txFrames, txBursts, txFull, txErrors      atomic.Uint64
	restarts, forced, sleeps                  atomic.Uint64
	lastError                                 atomic.Value // errorBox
}

// errorBox lets atomic.Value hold errors of any type.
type errorBox struct{ err error }

// Stats returns the link's counters.
func (l *Link) Stats() Stats {
	st := Stats{Queues: make([]QueueStats, len(l.queues))}
	for i, q := range l.queues {
		c := &q.stats
		s := &st.Queues[i]
		s.RxFrames, s.RxBursts, s.RxErrors = c.rxFrames.Load(), c.rxBursts.Load(), c.rxErrors.Load()
		s.RefillShort = c.refillShort.Load()
		s.TxFrames, s.TxBursts, s.TxFull, s.TxErrors = c.txFrames.Load(), c.txBursts.Load(), c.txFull.Load(), c.txErrors.Load()
		s.Restarts, s.Forced, s.Sleeps = c.restarts.Load(), c.forced.Load(), c.sleeps.Load()
		if b, ok := c.lastError.Load().(errorBox); ok {
			s.LastError = b.err
		}
		q.mu.Lock()
		s.Posted = q.posted
		q.mu.Unlock()
	}
	return st
}

// build sets the link up on an opened device, which it owns from then on
// (it closes it on failure).
func build(cfg Config, port Port, dev device) (*Link, error) {
	p, err := cfg.plan(port, dev.caps())
	if err != nil {
		return nil, errors.Join(err, dev.close())
	}
	region, qps, err := dev.setup(p)
	if err == nil && (len(qps) != p.queues || len(region) < p.buffers()*p.frameSize) {
		err = fmt.Errorf("rdma: device set up %d queues and %d bytes; asked for %d and %d", len(qps), len(region), p.queues, p.buffers()*p.frameSize)
	}
	if err != nil {
		return nil, errors.Join(err, dev.close())
	}
	name := port.Netdev
	if name == "" {
		name = fmt.Sprintf("%s/%d", port.Device, p.port)
	}
	caps := dev.caps()
	l := &Link{
		info: link.Info{
			Name:        name,
			MAC:         net.HardwareAddr(append([]byte(nil), p.mac...)),
			MTU:         mtuOf(cfg, port),
			RxFrameSize: p.frameSize,
			Caps:        link.CapTXChecksum,
		},
		setup: Setup{
			Port:       port,
			Queues:     p.queues,
			RxRing:     p.rxDepth,
			TxRing:     p.txDepth,
			FrameSize:  p.frameSize,
			RxChecksum: caps.rxChecksum,
		},
		dev:  dev,
		done: make(chan struct{}),
	}
	if caps.rxChecksum {
		l.info.Caps |= link.CapRXChecksum
	}
	if p.rss != nil {
		if l.spread, err = newRSSSpread(p.rss); err != nil {
			l.Close()
			return nil, err
		}
		l.setup.RSS, l.setup.RSSTable = true, len(p.rss.table)
	}
	for _, r := range p.flows {
		l.setup.FlowRules = append(l.setup.FlowRules, r.String())
	}
	for i, qp := range qps {
		q := newQueue(l, i, qp, region, p)
		l.queues = append(l.queues, q)
		l.pq = append(l.pq, q)
	}
	for _, q := range l.queues {
		q.mu.Lock()
		q.refillLocked()
		q.mu.Unlock()
	}
	return l, nil
}

// mtuOf is the link's MTU: the one asked for, else the interface's, else
// 1500.
func mtuOf(cfg Config, port Port) int {
	switch {
	case cfg.MTU != 0:
		return cfg.MTU
	case port.MTU != 0:
		return port.MTU
	}
	return 1500
}

// Info implements link.Link.
func (l *Link) Info() link.Info { return l.info }

// Queues implements link.Link.
func (l *Link) Queues() []link.Queue { return l.pq }

// Close implements link.Link: it wakes the waiting pollers, waits for
// the bursts in progress, moves every queue to the error state, collects
// the buffers and destroys the flow rules, queue pairs, work queues,
// completion queues, memory region and protection domain. Closing again
// returns nil.
func (l *Link) Close() error {
	if !l.closed.CompareAndSwap(false, true) {
		return nil
	}
	close(l.done)
	for _, q := range l.queues {
		q.Interrupt()
	}
	for _, q := range l.queues {
		q.waitMu.Lock()
		q.mu.Lock()
		q.shutdownLocked()
	}
	l.closeErr = l.dev.close()
	for _, q := range l.queues {
		q.mu.Unlock()
		q.waitMu.Unlock()
	}
	return l.closeErr
}
