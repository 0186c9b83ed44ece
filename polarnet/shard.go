package polarnet

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"gvisor.dev/gvisor/pkg/buffer"
	gvsync "gvisor.dev/gvisor/pkg/sync"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/network/arp"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv6"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/transport/icmp"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
	"gvisor.dev/gvisor/pkg/tcpip/transport/udp"

	"github.com/polarnet/polarnet/link"
)

const (
	// rxBurstSize is how many frames one ReadBurst may return.
	rxBurstSize = 32
	// pollErrorBackoff is how long a poller pauses after a failed wait.
	pollErrorBackoff = 10 * time.Millisecond
	// nicID is the only NIC of each shard's stack.
	nicID tcpip.NICID = 1
)

// shard is one queue pair of the link with its own gVisor stack and poller.
// Shards share nothing on the packet path.
type shard struct {
	id      int
	owner   *Stack
	stack   *stack.Stack
	clock   *shardClock
	queue   link.Queue
	ep      *nicEndpoint
	tx      *txQueue
	stats   shardCounters
	maxRx   int
	rxSize  int
	mode    PollMode
	spin    time.Duration
	cpu     int // pinned to this CPU; -1: not pinned
	rx      []link.RxFrame
	rxViews []*buffer.View
	// rxHdrs are the headers of the frames in rx, parsed once a burst by
	// parseBurst (rxheaders.go).
	rxHdrs []rxHeaders
	gro    *rxGRO // gro.go; nil when Config.DisableGRO
	// flowKeys are the TCP flows of a burst's frames (parseBurst), lone
	// which of them are alone in it (markLone, gro.go).
	flowKeys []uint64
	lone     []bool
	done     chan struct{}
	stopped  atomic.Bool

	// superseded marks a burst's pure ACKs that a later segment of their
	// flow carries (rxack.go); verified, the frames whose checksum that
	// check verified.
	superseded, verified []bool

	// in holds one ring per other shard for frames steered here in
	// software; woken lists the shards this burst handed frames to.
	in    []*handoffRing
	woken []bool
	// conns counts open connections, for choosing the least loaded shard.
	conns atomic.Int64
	shed  shedding // shed.go
	// peerPolls: the link's peer polls its rings (link.PolledPeer).
	peerPolls bool
	// unsettled: frames were delivered since the last settle; the
	// poller's alone.
	unsettled bool
	// stackMu orders settle before the stack's close: a pause of a closed
	// stack's TCP processors would never end.
	stackMu     sync.Mutex
	stackClosed bool
}

// shardCounters are a shard's own counters, written by its poller and TX path.
type shardCounters struct {
	rxFrames, rxBytes                  atomic.Uint64
	rxBadFrame, rxOversize, rxChecksum atomic.Uint64
	rxNoDispatcher, rxMartian          atomic.Uint64
	rxShed, rxSuperseded               atomic.Uint64
	handoffOut, handoffIn, handoffDrop atomic.Uint64
	shareOut                           atomic.Uint64
	txFrames, txBytes, txBursts        atomic.Uint64
	txRingFull, txRetried, txErrors    atomic.Uint64
	ackFiltered, ackHeld               atomic.Uint64
	// The engine's own resends, and the tail-loss probes it held back:
	// all, those it sent later and those an ACK showed needless
	// (rtxprobe.go, probehold.go).
	resent                                     atomic.Uint64
	probesHeld, probesReleased, probesNeedless atomic.Uint64
	pollWakeups, pollErrors                    atomic.Uint64
	m                                          shardMetrics // metrics.go
}

func newShard(st *Stack, id int, q link.Queue) (*shard, error) {
	cfg := &st.cfg
	info := cfg.Link.Info()
	s := &shard{
		id:     id,
		owner:  st,
		queue:  q,
		mode:   cfg.Poll,
		spin:   cfg.SpinBudget,
		cpu:    -1,
		rxSize: info.RxFrameSize,
		maxRx:  cfg.MTU + header.EthernetMinimumSize,
		done:   make(chan struct{}),
	}
	if l, ok := q.(link.PolledPeer); ok {
		s.peerPolls = l.PeerPolls()
	}
	if l, ok := q.(link.SYNShedder); ok {
		s.shed.syns.turn, s.shed.syns.shed = l.ShedSYNs, l.SYNsShed
	}
	if l, ok := q.(link.StrayShedder); ok && st.allowed != nil {
		s.shed.strays.turn, s.shed.strays.shed = l.ShedStrays, l.StraysShed
	}
	if info.Caps&link.CapGSO != 0 {
		// A link that segments for us may also hand us coalesced frames.
		s.maxRx = info.RxFrameSize
	}
	if len(cfg.CPUs) > 0 {
		s.cpu = cfg.CPUs[id%len(cfg.CPUs)]
	}
	s.clock = newShardClock(func() {
		if !s.tx.pollerAwake.Load() {
			q.Interrupt()
		}
	})
	s.clock.protocolFloor = max(cfg.TCP.MinRecoveryTimer, 0)
	s.shed.syns.clock, s.shed.strays.clock = s.clock, s.clock
	s.tx = newTxQueue(q, info.Caps, cfg.MTU, &s.stats, cfg.ACK, s.clock, st.sacks, st.windows, func(proto tcpip.NetworkProtocolNumber, flow flowKey) bool {
		return finWait1(s.stack, proto, flow)
	})
	s.clock.probeDue = s.tx.probeDue
	s.clock.settle = s.settle
	s.tx.logWriteError = s.logTxError
	s.ep = newNICEndpoint(info, cfg.MTU, s.tx)
	if !cfg.DisableGRO {
		s.gro = newRxGRO(s.ep, &s.stats.rxNoDispatcher)
	}
	s.stack = stack.New(stack.Options{
		NetworkProtocols:   []stack.NetworkProtocolFactory{ipv4.NewProtocol, ipv6.NewProtocol, arp.NewProtocol},
		TransportProtocols: []stack.TransportProtocolFactory{tcp.NewProtocol, udp.NewProtocol, icmp.NewProtocol4, icmp.NewProtocol6},
		HandleLocal:        true,
		Clock:              s.clock,
	})
	s.shed.cookies = s.stack.Stats().TCP.ListenOverflowSynCookieSent
	if err := s.configure(cfg); err != nil {
		s.stack.Destroy()
		return nil, err
	}
	s.rx = make([]link.RxFrame, rxBurstSize)
	s.rxViews = make([]*buffer.View, rxBurstSize)
	s.rxHdrs = make([]rxHeaders, rxBurstSize)
	s.flowKeys, s.lone = make([]uint64, rxBurstSize), make([]bool, rxBurstSize)
	s.superseded, s.verified = make([]bool, rxBurstSize), make([]bool, rxBurstSize)
	for i := range s.rx {
		s.refill(i)
	}
	n := len(cfg.Link.Queues())
	s.in = make([]*handoffRing, n)
	for i := range s.in {
		if i != id {
			s.in[i] = new(handoffRing)
		}
	}
	s.woken = make([]bool, n)
	return s, nil
}

func (s *shard) configure(cfg *Config) error {
	if err := s.stack.CreateNICWithOptions(nicID, s.ep, stack.NICOptions{Name: fmt.Sprintf("shard%d", s.id), QDisc: s.tx}); err != nil {
		return fmt.Errorf("polarnet: creating NIC: %s", err)
	}
	var routes []tcpip.Route
	for _, p := range cfg.Addrs {
		p = p.Masked()
		addr := tcpip.AddrFromSlice(cfg.addrOf(p).AsSlice())
		proto := ipv4.ProtocolNumber
		if p.Addr().Is6() {
			proto = ipv6.ProtocolNumber
		}
		pa := tcpip.ProtocolAddress{
			Protocol:          proto,
			AddressWithPrefix: tcpip.AddressWithPrefix{Address: addr, PrefixLen: p.Bits()},
		}
		if err := s.stack.AddProtocolAddress(nicID, pa, stack.AddressProperties{}); err != nil {
			return fmt.Errorf("polarnet: adding address %v: %s", p, err)
		}
		subnet, err := tcpip.NewSubnet(tcpip.AddrFromSlice(p.Addr().AsSlice()), tcpip.MaskFromBytes(netMask(p)))
		if err != nil {
			return fmt.Errorf("polarnet: subnet %v: %w", p, err)
		}
		routes = append(routes, tcpip.Route{Destination: subnet, NIC: nicID})
	}
	if gw := cfg.Gateway4; gw.IsValid() {
		routes = append(routes, tcpip.Route{Destination: header.IPv4EmptySubnet, Gateway: tcpip.AddrFromSlice(gw.AsSlice()), NIC: nicID})
	}
	if gw := cfg.Gateway6; gw.IsValid() {
		routes = append(routes, tcpip.Route{Destination: header.IPv6EmptySubnet, Gateway: tcpip.AddrFromSlice(gw.AsSlice()), NIC: nicID})
	}
	s.stack.SetRouteTable(routes)
	return applyTCPOptions(s.stack, &cfg.TCP)
}

// refill gives RX slot i a fresh buffer of the link's frame size. Buffers
// gVisor pools (up to buffer.MaxChunkSize) are views a frame can keep;
// larger ones are plain memory reused for every burst, since gVisor would
// allocate and collect an unpooled view for each frame handed over.
func (s *shard) refill(i int) {
	if s.rxSize > buffer.MaxChunkSize {
		if s.rx[i].Buf == nil {
			s.rx[i] = link.RxFrame{Buf: make([]byte, s.rxSize)}
		}
		return
	}
	v := buffer.NewViewSize(s.rxSize)
	s.rxViews[i] = v
	s.rx[i] = link.RxFrame{Buf: v.AsSlice()}
}

// payload turns the frame in RX slot i into a packet payload, its first
// headers bytes (if any) in a view of their own (see rxheaders.go). A frame
// that fills at least half of a pooled view keeps it (the link's write was
// the only copy); any other frame is copied into views of its own size, so
// a small frame does not pin a large buffer in a socket's receive queue.
func (s *shard) payload(i, length, headers int) buffer.Buffer {
	frame := s.rx[i].Buf[:length]
	var b buffer.Buffer
	if headers > 0 {
		b.Append(buffer.NewViewWithData(frame[:headers]))
		frame = frame[headers:]
	}
	if v := s.rxViews[i]; v != nil && 2*length >= s.rxSize {
		v.CapLength(length)
		v.TrimFront(headers)
		s.refill(i)
		b.Append(v)
		return b
	}
	for len(frame) > 0 {
		n := min(len(frame), buffer.MaxChunkSize)
		b.Append(buffer.NewViewWithData(frame[:n]))
		frame = frame[n:]
	}
	return b
}

func (s *shard) start() { go s.poll() }

// stop ends the poller, then sends what is still queued: the poller may
// leave its loop between an enqueue and its next flush, and the resets of
// Stack.Close must reach the peers. The link must still be open.
func (s *shard) stop() {
	s.stopped.Store(true)
	s.queue.Interrupt()
	<-s.done
	s.tx.flush()
}

// poll is the shard's loop: RX burst, deliver, flush TX; when the queue is
// empty it spins, sleeps or yields according to the poll mode.
func (s *shard) poll() {
	defer close(s.done)
	defer s.releaseRx()
	defer s.clock.detach()
	if s.cpu >= 0 {
		// Never unlocked: the runtime retires the thread, whose affinity
		// we changed, when the poller exits.
		pinThread(s.cpu)
	}
	s.tx.pollerAwake.Store(true)
	s.pollerStarted()
	var idleSince int64 // when the queue went empty; 0: it is not
	spinning := false   // holds one of adaptiveSpinners' slots
	defer adaptiveSpinners.leave(&spinning)
	limit, yieldCPU := spinLimit(s.peerPolls)
	budget := s.spin // grows and shrinks with the sleeps (nextSpin)
	for !s.stopped.Load() {
		n, err := s.queue.ReadBurst(s.rx)
		// The iteration's one clock reading: metrics, timers, spin budget,
		// and gVisor's clock until the next iteration (see shardClock).
		now := s.clock.read()
		s.clock.freeze(now)
		start := s.burstStart(n, now)
		// gVisor's due timers run before this burst reaches gVisor, once
		// the TCP processors have handled the frames delivered before
		// (settle). A tail-loss probe they send is held back until the
		// burst is delivered (probehold.go).
		s.clock.run(now)
		// What a burst of one flow (or none) wakes, a TCP processor or
		// the peer's poller, runs next on this P when we yield or sleep
		// below: no idle P is woken for it. Otherwise the woken P takes
		// over the next hop of a one-connection round trip every few
		// round trips, each move costing cache misses, and its thread
		// waits for a vCPU that spinning pollers hold (docs/benchmarks.md).
		// Bursts of several flows wake idle Ps as usual, to spread the
		// work they bring.
		oneFlow := n > 0 && s.parseBurst(n)
		local := n <= 1 || oneFlow
		if local {
			keepWakeupsLocal()
		}
		backlog := s.shed.backlog(n, len(s.rx))
		flood := n > 0 && s.deliver(n, backlog)
		n += s.receiveHandoffs()
		s.unsettled = s.unsettled || n > 0
		if s.gro != nil {
			s.gro.flush()
		}
		if flood {
			// gVisor queues a connection's bare segments without bound
			// (tcp's segmentQueue admits any segment without data), so a
			// flood of them on a connection a TCP processor falls behind
			// would grow the heap for as long as it lasts. Until the
			// processors have handled this burst the flood waits in the
			// link's ring, which drops what it cannot hold.
			s.settle()
		}
		s.tx.flush()
		if local {
			releaseWakeups()
		}
		s.burstDone(start, n, err)
		if err != nil {
			if errors.Is(err, link.ErrClosed) {
				return
			}
			s.stats.pollErrors.Add(1)
		}
		if n > 0 {
			idleSince = 0
			adaptiveSpinners.leave(&spinning)
			// Let the goroutines this burst woke (TCP processors,
			// applications) run before polling again: what they send
			// leaves with the next flush, and on a busy P the next poll
			// would mostly come back empty. Goyield queues us on this P
			// (runtime.Gosched queues globally, where an idle P takes the
			// poller and with it the stack's work to another vCPU).
			gvsync.Goyield()
			continue
		}
		switch s.mode {
		case PollBusy:
			gvsync.Goyield()
			continue
		case PollAdaptive:
			if idleSince == 0 {
				idleSince = now
				adaptiveSpinners.claim(limit, &spinning)
			}
			if spinning && time.Duration(now-idleSince) < budget {
				gvsync.Goyield()
				if yieldCPU {
					// One P: the peer may be waiting for our CPU.
					handOver()
				}
				continue
			}
		}
		adaptiveSpinners.leave(&spinning)
		if !s.sleep() {
			return
		}
		budget = nextSpin(budget, s.spin, time.Duration(s.clock.read()-now))
		idleSince = 0
		limit, yieldCPU = spinLimit(s.peerPolls)
	}
}

// settle waits until gVisor's TCP processors have handled every frame
// delivered since the last settle; the clock calls it before gVisor's due
// timers. gVisor runs a timer's callback on an endpoint's state without
// first processing the segments queued for it (tcp.timerHandler), and the
// frames of a burst wait in those queues until a processor runs: a probe,
// retransmission or reordering timer fired against an ACK that had arrived
// before it was due, and the flow entered a spurious recovery
// (docs/benchmarks.md). A pause of the processors ends once their queues
// are empty (tcp's dispatcher.pause).
func (s *shard) settle() {
	if !s.unsettled {
		return
	}
	s.unsettled = false
	s.stackMu.Lock()
	defer s.stackMu.Unlock()
	if !s.stackClosed {
		s.stack.Pause()
		s.stack.Resume()
	}
}

// closeStack aborts the shard's endpoints and stops its TCP processors.
func (s *shard) closeStack() {
	s.stackMu.Lock()
	s.stackClosed = true
	s.stackMu.Unlock()
	s.stack.Close()
}

// sleep waits for RX frames. From the moment pollerAwake is cleared, writers
// flush their own packets; the flush after it catches any packet enqueued
// just before. It reports false when the link is gone.
func (s *shard) sleep() bool {
	s.tx.pollerAwake.Store(false)
	s.tx.flush()
	// A shard that hands us a frame, or a timer that comes due, wakes us
	// only if it sees us asleep: look once more now that we are. Packets
	// waiting for room in a full TX ring keep us awake too.
	if s.handoffsPending() || s.clock.earliest.Load() <= s.clock.read() || s.tx.backlogged() {
		s.tx.pollerAwake.Store(true)
		return true
	}
	s.clock.thaw()
	err := s.queue.WaitRead()
	s.tx.pollerAwake.Store(true)
	s.stats.pollWakeups.Add(1)
	if err != nil {
		if errors.Is(err, link.ErrClosed) {
			return false
		}
		// A device in trouble (deleted, carrier lost) may fail every wait:
		// back off instead of spinning, and try again.
		s.stats.pollErrors.Add(1)
		time.Sleep(pollErrorBackoff)
	}
	return !s.stopped.Load()
}

// parseBurst parses the headers of a burst's n frames, in rx, once for
// every check that follows, and hashes their TCP flows (flowKeys). It
// reports whether the frames are all segments of one flow.
func (s *shard) parseBurst(n int) (oneFlow bool) {
	// One atomic add per burst, not per frame, for what every frame counts.
	var bytes uint64
	oneFlow = true
	for i := range n {
		bytes += uint64(s.rx[i].Len)
		h := &s.rxHdrs[i]
		h.parseFrame(&s.rx[i])
		s.flowKeys[i] = tcpFlowHash(h)
		oneFlow = oneFlow && s.flowKeys[i] != 0 && s.flowKeys[i] == s.flowKeys[0]
	}
	s.stats.rxFrames.Add(uint64(n))
	s.stats.rxBytes.Add(bytes)
	return oneFlow
}

// deliver passes the n frames of a burst, in rx, to the stack or to the
// shards that own them, reading the headers parseBurst parsed. backlog:
// the link queue holds more than the poller keeps up with; from a backlog
// that looks like a flood, bare segments for no connection are shed
// (shed.go). It reports whether the burst was such a flood's.
func (s *shard) deliver(n int, backlog bool) (flood bool) {
	sharded := len(s.owner.shards) > 1
	supersededACKs(s.rxHdrs[:n], s.flowKeys[:n], s.superseded[:n], s.deliverable)
	for i, gone := range s.superseded[:n] {
		if gone {
			s.flowKeys[i] = 0 // no partner in GRO for the frames of its flow
		}
	}
	if s.gro != nil {
		markLone(s.flowKeys[:n], s.lone[:n])
	}
	// Shed only from a backlog that looks like a flood: bare segments for
	// the most part (shed.go).
	suspect := backlog && s.floodLike(n)
	admit, requests, strays := 1, 0, 0
	shedRequests := s.shed.answering(s.clock.now()) && suspect
	for i := range n {
		f := &s.rx[i]
		verified := s.verified[i]
		s.verified[i] = false
		if s.superseded[i] {
			s.stats.rxSuperseded.Add(1)
			continue
		}
		length := f.Len
		if bad := s.badLength(f); bad != nil {
			bad.Add(1)
			continue
		}
		h := &s.rxHdrs[i]
		if !f.ChecksumValid && !verified && !verifyTransportChecksum(h) {
			s.stats.rxChecksum.Add(1)
			continue
		}
		if s.owner.martian(h) {
			s.stats.rxMartian.Add(1)
			continue
		}
		s.owner.windows.received(h)
		if sacks := s.owner.sacks; sacks.watching.Load() != 0 {
			sacks.received(h, s.clock.now())
		}
		dst := toReceiver
		if sharded {
			dst = s.owner.owner(h)
		}
		th := h.validTCP()
		if th != nil && s.owner.accepts.overflow(s.shardOf(dst).stack, h, th) {
			continue
		}
		if suspect && th != nil && bare(h, th) && forNoConnection(s.shardOf(dst).stack, h, th) {
			if request := connectionRequest(th); !request || shedRequests {
				if request {
					requests++
				} else {
					strays++
				}
				if admit == 0 {
					s.stats.rxShed.Add(1)
					continue
				}
				admit--
			}
		}
		var rebuilt []byte
		if th != nil {
			if dsack, needless := s.shardOf(dst).tx.received(h, th, !f.ChecksumValid); needless {
				rebuilt = withDSACK(f.Buf[:length], h, th, dsack, !f.ChecksumValid)
			}
		}
		proto := h.ethType
		var payload buffer.Buffer
		if rebuilt != nil {
			payload = buffer.MakeWithData(rebuilt)
		} else {
			payload = s.payload(i, length, headerSplit(h))
		}
		switch dst {
		case toReceiver, s.id:
			s.deliverPayload(proto, payload, !s.lone[i])
		case toAll:
			for _, peer := range s.owner.shards {
				if peer != s {
					s.handOff(peer, proto, payload.Clone(), &s.stats.shareOut)
				}
			}
			s.deliverPayload(proto, payload, !s.lone[i])
		default:
			s.handOff(s.owner.shards[dst], proto, payload, &s.stats.handoffOut)
		}
	}
	if sharded {
		s.wakePeers()
	}
	switch {
	case 2*requests >= n:
		// Most of a backlog is connection requests: a SYN flood.
		s.shed.syns.start()
	case 2*strays >= n && s.shed.strays.turn != nil && !s.shed.strays.on:
		// Most of it is bare segments for no connection: an ACK flood.
		if now := s.clock.now(); s.owner.allowed.engage(s.owner, now) {
			s.shed.strays.start()
		}
	}
	return suspect
}

// deliverable reports whether deliver will hand frame j of the burst on, as
// far as its length and checksum go; a checksum verified here is not
// verified again.
func (s *shard) deliverable(j int) bool {
	f := &s.rx[j]
	if s.badLength(f) != nil {
		return false
	}
	if f.ChecksumValid || s.verified[j] {
		return true
	}
	s.verified[j] = verifyTransportChecksum(&s.rxHdrs[j])
	return s.verified[j]
}

// badLength returns the counter of what is wrong with f's length: too short
// for an Ethernet header or longer than its buffer (rxBadFrame), longer
// than the MTU allows (rxOversize); nil when nothing is.
func (s *shard) badLength(f *link.RxFrame) *atomic.Uint64 {
	switch {
	case f.Len < header.EthernetMinimumSize || f.Len > len(f.Buf):
		return &s.stats.rxBadFrame
	case f.Len > s.maxRx:
		return &s.stats.rxOversize
	}
	return nil
}

// shardOf returns the shard dst (owner's answer), whose flows are the
// frame's.
func (s *shard) shardOf(dst int) *shard {
	if dst < 0 {
		return s
	}
	return s.owner.shards[dst]
}

// deliverPayload hands a received frame to the stack; through GRO if the
// shard has it and mayCoalesce.
func (s *shard) deliverPayload(proto tcpip.NetworkProtocolNumber, payload buffer.Buffer, mayCoalesce bool) {
	pkt := stack.NewPacketBuffer(stack.PacketBufferOptions{Payload: payload})
	if _, ok := pkt.LinkHeader().Consume(header.EthernetMinimumSize); !ok {
		s.stats.rxBadFrame.Add(1)
	} else if s.gro != nil && mayCoalesce {
		s.gro.enqueue(proto, pkt)
	} else if !s.ep.deliver(proto, pkt) {
		s.stats.rxNoDispatcher.Add(1)
	}
	pkt.DecRef()
}

// handOff queues a frame for the shard that owns it (software steering).
func (s *shard) handOff(peer *shard, proto tcpip.NetworkProtocolNumber, payload buffer.Buffer, count *atomic.Uint64) {
	if !peer.in[s.id].push(handoff{proto: proto, payload: payload}) {
		payload.Release()
		s.stats.handoffDrop.Add(1)
		return
	}
	count.Add(1)
	s.woken[peer.id] = true
}

// wakePeers wakes the sleeping shards this burst handed frames to.
func (s *shard) wakePeers() {
	for id, woken := range s.woken {
		if !woken {
			continue
		}
		s.woken[id] = false
		if peer := s.owner.shards[id]; !peer.tx.pollerAwake.Load() {
			peer.queue.Interrupt()
		}
	}
}

// receiveHandoffs delivers the frames other shards steered here.
func (s *shard) receiveHandoffs() int {
	n := 0
	for _, r := range s.in {
		if r == nil {
			continue
		}
		for range rxBurstSize {
			h, ok := r.pop()
			if !ok {
				break
			}
			s.deliverPayload(h.proto, h.payload, true)
			n++
		}
	}
	s.stats.handoffIn.Add(uint64(n))
	return n
}

func (s *shard) handoffsPending() bool {
	for _, r := range s.in {
		if r != nil && !r.empty() {
			return true
		}
	}
	return false
}

// drainHandoffs releases frames still queued once every poller has stopped.
func (s *shard) drainHandoffs() {
	for _, r := range s.in {
		if r == nil {
			continue
		}
		for {
			h, ok := r.pop()
			if !ok {
				break
			}
			h.payload.Release()
		}
	}
}

func (s *shard) releaseRx() {
	for i, v := range s.rxViews {
		if v != nil {
			v.Release()
		}
		s.rxViews[i] = nil
		s.rx[i] = link.RxFrame{}
	}
	clear(s.rxHdrs)
}
