package rdma

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync"
	"syscall"

	"github.com/polarnet/polarnet/internal/frame"
)

// fakeWire is a segment of Ethernet between fake devices: a frame one sends
// reaches every other device on the wire, whose flow rules decide where it
// goes (a receive QP, the kernel, or both).
//
// With pause set the wire has flow control, like Ethernet pause frames: a
// frame whose receive queue has no buffer posted waits in the sender's send
// queue (which then fills up) instead of being dropped. Without, the
// receiving device drops it, as a NIC does.
//
// One mutex guards the wire and every device on it: the fake is for tests,
// where simple beats fast.
type fakeWire struct {
	mu    sync.Mutex
	pause bool
	devs  []*fakeDevice
}

func newFakeWire(pause bool) *fakeWire { return &fakeWire{pause: pause} }

// fakeDevice is an RDMA device in memory implementing device.
type fakeDevice struct {
	wire  *fakeWire
	name  string
	capsV deviceCaps

	plan   *setupPlan
	region []byte
	qps    []*fakeQP
	rules  []flowRule // by priority
	spread *rssSpread
	closed bool

	// Counters: frames the kernel got (no rule trapped them), and frames
	// dropped for want of a posted buffer.
	kernel  int
	dropped int
	// kernelFrames keeps the frames the kernel got.
	kernelFrames [][]byte

	// Injections.
	setupErr error
	sqDepth  int // send work requests a queue takes (0: the plan's txDepth)
}

var _ device = (*fakeDevice)(nil)

func (w *fakeWire) newDevice(name string) *fakeDevice {
	d := &fakeDevice{wire: w, name: name, capsV: deviceCaps{
		maxQueueDepth: 1 << 15, maxCQE: 1 << 16, rss: true, maxRSSTable: 512, maxWQs: 64, rxChecksum: true,
	}}
	w.mu.Lock()
	w.devs = append(w.devs, d)
	w.mu.Unlock()
	return d
}

func (d *fakeDevice) caps() deviceCaps { return d.capsV }

func (d *fakeDevice) setup(p *setupPlan) ([]byte, []queuePair, error) {
	d.wire.mu.Lock()
	defer d.wire.mu.Unlock()
	if d.setupErr != nil {
		return nil, nil, d.setupErr
	}
	d.plan = p
	d.region = make([]byte, p.buffers()*p.frameSize)
	d.rules = slices.Clone(p.flows)
	slices.SortStableFunc(d.rules, func(a, b flowRule) int { return int(a.Priority) - int(b.Priority) })
	if p.rss != nil {
		var err error
		if d.spread, err = newRSSSpread(p.rss); err != nil {
			return nil, nil, err
		}
	}
	qps := make([]queuePair, p.queues)
	for i := range qps {
		qp := &fakeQP{dev: d, index: i, event: make(chan struct{}, 1), wake: make(chan struct{}, 1),
			sqDepth: p.txDepth, rqDepth: p.rxDepth}
		if d.sqDepth > 0 {
			qp.sqDepth = d.sqDepth
		}
		d.qps = append(d.qps, qp)
		qps[i] = qp
	}
	return d.region, qps, nil
}

func (d *fakeDevice) close() error {
	d.wire.mu.Lock()
	defer d.wire.mu.Unlock()
	if d.closed {
		return errors.New("fake device closed twice")
	}
	d.closed = true
	d.wire.pumpLocked() // senders waiting for this device's buffers go on
	return nil
}

// outstanding counts the work requests the device holds (posted receives
// and unfinished sends) and the completions not reaped yet.
func (d *fakeDevice) outstanding() (rq, sq, rcq, scq int) {
	d.wire.mu.Lock()
	defer d.wire.mu.Unlock()
	for _, qp := range d.qps {
		rq += len(qp.rq)
		sq += len(qp.sq)
		rcq += len(qp.rcq)
		scq += len(qp.scq)
	}
	return
}

// do runs fn under the wire's lock, for tests to inject faults.
func (d *fakeDevice) do(fn func()) {
	d.wire.mu.Lock()
	defer d.wire.mu.Unlock()
	fn()
	d.wire.pumpLocked()
}

// fakeQP is one queue of a fake device.
type fakeQP struct {
	dev   *fakeDevice
	index int

	rq      []uint32 // posted receive buffers, oldest first
	rqDepth int
	rcq     []completion
	armed   bool
	event   chan struct{} // a notification of the armed receive CQ
	wake    chan struct{}
	broken  bool // in the error state (both queues)

	sq      []sendWR // posted sends not transmitted yet
	sqDepth int
	scq     []completion

	// Injections.
	postRecvErrs int  // the next postRecv calls fail
	recvErrs     int  // the next received frames complete with an error
	sendErrs     int  // the next sends complete with an error
	holdSend     bool // sends stay in the queue
	staleRecv    int  // the next pollRecv returns a completion of a buffer never posted
	flushAllTx   bool // stop completes unsignaled sends too
	restartErr   error
	stops        int
	restarts     int
}

var errFakeFull = syscall.ENOMEM

func (qp *fakeQP) postRecv(bufs []uint32) (int, error) {
	w := qp.dev.wire
	w.mu.Lock()
	defer w.mu.Unlock()
	if qp.postRecvErrs > 0 {
		qp.postRecvErrs--
		return 0, errFakeFull
	}
	n := 0
	for _, b := range bufs {
		if qp.broken {
			// A queue in the error state flushes what is posted to it.
			qp.pushRecv(completion{id: uint64(b), status: wcFlushed, code: wcCodeFlushErr})
			n++
			continue
		}
		if len(qp.rq) >= qp.rqDepth {
			break
		}
		qp.rq = append(qp.rq, b)
		n++
	}
	w.pumpLocked()
	if n < len(bufs) {
		return n, errFakeFull
	}
	return n, nil
}

func (qp *fakeQP) pollRecv(wcs []completion) (int, error) {
	qp.dev.wire.mu.Lock()
	defer qp.dev.wire.mu.Unlock()
	if qp.staleRecv > 0 && len(wcs) > 0 {
		qp.staleRecv--
		wcs[0] = completion{id: 1 << 40, length: 60}
		return 1, nil
	}
	n := copy(wcs, qp.rcq)
	qp.rcq = qp.rcq[n:]
	return n, nil
}

func (qp *fakeQP) postSend(wrs []sendWR) (int, error) {
	w := qp.dev.wire
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, wr := range wrs {
		if qp.broken {
			if wr.signaled {
				qp.scq = append(qp.scq, completion{id: uint64(wr.buf), status: wcFlushed, code: wcCodeFlushErr})
			}
			n++
			continue
		}
		if len(qp.sq) >= qp.sqDepth {
			break
		}
		qp.sq = append(qp.sq, wr)
		n++
	}
	w.pumpLocked()
	if n < len(wrs) {
		return n, errFakeFull
	}
	return n, nil
}

func (qp *fakeQP) pollSend(wcs []completion) (int, error) {
	qp.dev.wire.mu.Lock()
	defer qp.dev.wire.mu.Unlock()
	n := copy(wcs, qp.scq)
	qp.scq = qp.scq[n:]
	return n, nil
}

func (qp *fakeQP) armRecv() error {
	qp.dev.wire.mu.Lock()
	defer qp.dev.wire.mu.Unlock()
	qp.armed = true
	return nil
}

func (qp *fakeQP) waitRecv(interrupted func() bool) error {
	if interrupted() {
		return nil
	}
	select {
	case <-qp.event:
	case <-qp.wake:
	}
	return nil
}

func (qp *fakeQP) wakeRecv() {
	select {
	case qp.wake <- struct{}{}:
	default:
	}
}

func (qp *fakeQP) stop() error {
	qp.dev.wire.mu.Lock()
	defer qp.dev.wire.mu.Unlock()
	qp.stops++
	qp.broken = true
	for _, b := range qp.rq {
		qp.pushRecv(completion{id: uint64(b), status: wcFlushed, code: wcCodeFlushErr})
	}
	qp.rq = nil
	for _, wr := range qp.sq {
		if wr.signaled || qp.flushAllTx {
			qp.scq = append(qp.scq, completion{id: uint64(wr.buf), status: wcFlushed, code: wcCodeFlushErr})
		}
	}
	qp.sq = nil
	return nil
}

func (qp *fakeQP) restart() error {
	qp.dev.wire.mu.Lock()
	defer qp.dev.wire.mu.Unlock()
	qp.restarts++
	if qp.restartErr != nil {
		return qp.restartErr
	}
	qp.broken = false
	qp.rq, qp.sq = nil, nil
	return nil
}

// pushRecv adds a receive completion and fires an armed notification.
func (qp *fakeQP) pushRecv(wc completion) {
	qp.rcq = append(qp.rcq, wc)
	if qp.armed {
		qp.armed = false
		select {
		case qp.event <- struct{}{}:
		default:
		}
	}
}

// pumpLocked transmits what the send queues hold, in order per queue,
// until a queue has nothing left or (with pause) its head frame waits for a
// receive buffer.
func (w *fakeWire) pumpLocked() {
	for progress := true; progress; {
		progress = false
		for _, d := range w.devs {
			if d.closed {
				continue
			}
			for _, qp := range d.qps {
				for len(qp.sq) > 0 && !qp.holdSend && !qp.broken {
					wr := qp.sq[0]
					if qp.sendErrs > 0 {
						// The frame is not sent; the queue goes to the
						// error state and holds the rest until stopped.
						qp.sendErrs--
						qp.sq = qp.sq[1:]
						qp.scq = append(qp.scq, completion{id: uint64(wr.buf), status: wcError, code: wcCodeLocQPOp})
						qp.broken = true
						break
					}
					f := d.region[int(wr.buf)*d.plan.frameSize:][:wr.length]
					if !w.transmitLocked(d, f) {
						break
					}
					qp.sq = qp.sq[1:]
					progress = true
					if wr.signaled {
						qp.scq = append(qp.scq, completion{id: uint64(wr.buf)})
					}
				}
			}
		}
	}
}

// transmitLocked hands frame f from device from to the others; it reports
// false when pause holds it back.
func (w *fakeWire) transmitLocked(from *fakeDevice, f []byte) bool {
	type target struct {
		d  *fakeDevice
		qp *fakeQP // nil: the kernel
	}
	var targets []target
	for _, d := range w.devs {
		if d == from || d.closed || d.plan == nil {
			continue
		}
		qps, kernel := d.steer(f)
		for _, qp := range qps {
			if w.pause && len(qp.rq) == 0 && !qp.broken {
				return false
			}
			targets = append(targets, target{d, qp})
		}
		if kernel {
			targets = append(targets, target{d, nil})
		}
	}
	for _, t := range targets {
		if t.qp == nil {
			t.d.kernel++
			t.d.kernelFrames = append(t.d.kernelFrames, bytes.Clone(f))
			continue
		}
		t.qp.receive(f)
	}
	return true
}

// steer applies the device's flow rules to f: the receive QPs that get it,
// and whether the kernel does (no rule trapped it).
func (d *fakeDevice) steer(f []byte) (qps []*fakeQP, kernel bool) {
	for _, r := range d.rules {
		if !r.matches(f) {
			continue
		}
		qps = append(qps, d.qps[d.queueFor(r.Class, f)])
		if !r.DontTrap {
			return qps, false
		}
	}
	return qps, true
}

// queueFor is the queue the hashing QP of class c picks for f.
func (d *fakeDevice) queueFor(c rxClass, f []byte) int {
	if d.spread == nil || c == classOther {
		return 0
	}
	p, ok := frame.Parse(f)
	if !ok || p.Fragment || p.End < p.L4+4 {
		return 0
	}
	sport, dport := binary.BigEndian.Uint16(f[p.L4:]), binary.BigEndian.Uint16(f[p.L4+2:])
	return d.spread.queue(netip.AddrPortFrom(p.Src, sport), netip.AddrPortFrom(p.Dst, dport))
}

// matches applies a flow rule as the NIC would.
func (r flowRule) matches(f []byte) bool {
	if len(f) < ethHdrLen || !bytes.Equal(f[:6], r.DstMAC) {
		return false
	}
	if r.EtherType != 0 && binary.BigEndian.Uint16(f[12:]) != r.EtherType {
		return false
	}
	if !r.DstIP.IsValid() && r.Proto == 0 {
		return true
	}
	p, ok := frame.Parse(f)
	if !ok {
		return false
	}
	return (!r.DstIP.IsValid() || p.Dst == r.DstIP) && (r.Proto == 0 || p.Proto == r.Proto)
}

// receive puts f into the next posted buffer, or drops it.
func (qp *fakeQP) receive(f []byte) {
	d := qp.dev
	if qp.broken {
		return
	}
	if len(qp.rq) == 0 {
		d.dropped++
		return
	}
	b := qp.rq[0]
	qp.rq = qp.rq[1:]
	wc := completion{id: uint64(b), length: uint32(len(f))}
	switch {
	case len(f) > d.plan.frameSize:
		wc = completion{id: uint64(b), status: wcError, code: wcCodeLocLen}
	case qp.recvErrs > 0:
		qp.recvErrs--
		wc = completion{id: uint64(b), status: wcError, code: wcCodeLocProt}
	default:
		copy(d.region[int(b)*d.plan.frameSize:], f)
		if p, ok := frame.Parse(f); ok && d.capsV.rxChecksum {
			wc.csumOK = frame.ChecksumOK(f, p)
		}
	}
	if wc.status != wcOK {
		qp.broken = true
		// The error state flushes the rest of the receive queue.
		qp.pushRecv(wc)
		for _, b := range qp.rq {
			qp.pushRecv(completion{id: uint64(b), status: wcFlushed, code: wcCodeFlushErr})
		}
		qp.rq = nil
		return
	}
	qp.pushRecv(wc)
}

// fakePort is the port a fake link is built on.
func fakePort(name string, mac net.HardwareAddr, mtu int) Port {
	return Port{Device: name, Port: 1, Netdev: name, Driver: "fake", LinkLayer: "Ethernet", State: "ACTIVE", MAC: mac, MTU: mtu}
}

// macN is a locally administered address ending in n.
func macN(n byte) net.HardwareAddr { return net.HardwareAddr{0x02, 0x52, 0x44, 0x4d, 0x41, n} }

// String names the fake in failures.
func (d *fakeDevice) String() string { return fmt.Sprintf("fake device %s", d.name) }
