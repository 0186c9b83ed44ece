package polarnet

import (
	"errors"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"

	"github.com/polarnet/polarnet/link"
)

// Shedding keeps established connections moving under a flood of SYNs or
// of segments for no connection (ACKs guessing at SYN cookies). A poller
// that falls behind leaves frames in its link's ring, and a full ring drops
// the established connections' frames with the flood's: gVisor answers a
// SYN in several microseconds (a processor goroutine wakes, a SYN-ACK is
// written), while a kernel-to-kernel flood is throttled by the receiving
// kernel's own cost. So while the link queue holds a backlog whose bursts
// are mostly bare segments (no data: SYNs, ACKs), the shard passes gVisor
// at most one bare segment per burst bound for a listener or for no
// endpoint and drops the rest (ShardStats.RxShed): SYN cookies still answer
// some, and a client that retries gets through. Connection requests are
// shed only while the shard's listeners answer with SYN cookies (a SYN
// queue is full): until then each one is a handshake a listener may
// complete, and the flood must find the cookies engaged as it would on
// Linux. While such a backlog holds connection requests for the most part,
// a link that can drop them before its ring (link.SYNShedder: TAP's filter
// program) is told to, and keeps on for another hold each time it dropped
// a flood's worth in the last (floodPerHold): the flood is seen going on
// without being let into the ring to look. While it holds stray segments
// (bare, for no connection) for the most part, a link that can drop those
// of flows it has not been told of (link.StrayShedder) is told of the
// stack's connections (allowedFlows), then to shed, the same way.

const (
	// backlogBursts full bursts in a row, 1,024 frames (a common ring
	// size), show the poller behind its queue rather than descheduled for a
	// moment.
	backlogBursts = 32
	// shedHold is how long the link sheds before the shard reads what it
	// dropped to see whether the flood goes on.
	shedHold = 50 * time.Millisecond
	// floodPerHold is what the link must have dropped in a hold for the
	// flood to count as going on: a backlog's worth, which let in would
	// put the poller behind its queue again within the hold.
	floodPerHold = backlogBursts * rxBurstSize
	// cookieMemory is how long after the last SYN cookie the shard's
	// listeners count as answering with cookies.
	cookieMemory = time.Second
)

// shedding is a shard's state of it, the poller's only (its timers run on
// the poller too).
type shedding struct {
	full   int // full bursts in a row
	syns   linkShedding
	strays linkShedding

	// cookies counts the SYN cookies the shard's stack sent; seen is its
	// value when last read, at seenAt (0: never moved).
	cookies *tcpip.StatCounter
	seen    uint64
	seenAt  int64
}

// linkShedding is one kind of shedding in a queue's link, and the hold
// the shard keeps it on for.
type linkShedding struct {
	turn  func(on bool) error // nil: the queue cannot
	shed  func() uint64       // what the queue dropped so far
	clock *shardClock
	end   tcpip.Timer // ends a hold; nil until it first goes on
	on    bool        // the link sheds
	seen  uint64      // shed() when the hold began
}

// answering reports whether the shard's listeners answer connection
// requests with SYN cookies, reading the count at now; the poller calls it
// once a burst.
func (sh *shedding) answering(now int64) bool {
	if n := sh.cookies.Value(); n != sh.seen {
		sh.seen, sh.seenAt = n, now
	}
	return sh.seenAt != 0 && time.Duration(now-sh.seenAt) < cookieMemory
}

// backlog notes a burst of n frames from a queue that returns up to max
// and says whether the queue holds a backlog.
func (sh *shedding) backlog(n, max int) bool {
	if n < max {
		sh.full = 0
		return false
	}
	sh.full++
	return sh.full >= backlogBursts
}

// start turns the link's shedding on, a backlog having held what it sheds.
func (l *linkShedding) start() {
	if l.turn == nil || l.on || !l.set(true) {
		return
	}
	l.on, l.seen = true, l.shed()
	if l.end == nil {
		l.end = l.clock.afterFuncExact(shedHold, l.look)
	} else {
		l.end.Reset(shedHold)
	}
}

// look ends a hold: the link sheds for another if it dropped a flood's
// worth in this one, and stops otherwise.
func (l *linkShedding) look() {
	if n := l.shed(); n >= l.seen+floodPerHold {
		l.seen = n
		l.end.Reset(shedHold)
		return
	}
	if l.turn != nil {
		l.set(false)
	}
	l.on = false
}

// set switches the link's shedding, forgetting a link that cannot.
func (l *linkShedding) set(on bool) bool {
	err := l.turn(on)
	if errors.Is(err, link.ErrNotSupported) {
		l.turn = nil
	}
	return err == nil
}

// allowedFlows tells a link that sheds stray segments
// (link.StrayShedder) the stack's connections: while any shard has the link
// shed them, and for allowMemory after, each connection as it is made;
// when a shard begins and that time had passed, the connections there are,
// from a goroutine of its own (reading an endpoint's ends takes the
// endpoint's lock, which a poller must not wait for). The link sheds only
// once they are told.
type allowedFlows struct {
	link link.StrayShedder
	mu   sync.Mutex
	// until is when to stop telling the link of new connections (shard
	// clock); told, whether it knows those there were at the start.
	until atomic.Int64
	told  bool
	wg    sync.WaitGroup
}

// allowMemory is how long after a shard last began to shed strays new
// connections are told to the link: while it sheds, and for a while after,
// should the flood come back.
const allowMemory = 10 * time.Second

// engage notes at now that a shard is about to shed strays and reports
// whether the link knows the stack's connections.
func (a *allowedFlows) engage(st *Stack, now int64) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.until.Swap(now+int64(allowMemory)) < now {
		a.told = false
		a.wg.Go(func() {
			err := a.link.AllowFlows(st.connections())
			a.mu.Lock()
			a.told = err == nil
			a.mu.Unlock()
		})
	}
	return a.told
}

// made tells the link of a connection made at now, if shedding strays
// began within allowMemory.
func (a *allowedFlows) made(now int64, local, remote netip.AddrPort) {
	if a.until.Load() >= now {
		a.link.AllowFlows([]link.Flow{{Local: local, Remote: remote}})
	}
}

// connections returns the ends of the stack's TCP connections.
func (s *Stack) connections() []link.Flow {
	var flows []link.Flow
	for _, sh := range s.shards {
		for _, ep := range sh.stack.RegisteredEndpoints() {
			e, ok := ep.(*tcp.Endpoint)
			if !ok {
				continue
			}
			id := e.Info().(*stack.TransportEndpointInfo).ID
			if id.RemotePort == 0 {
				continue // a listener
			}
			flows = append(flows, link.Flow{
				Local:  addrPort(tcpip.FullAddress{Addr: id.LocalAddress, Port: id.LocalPort}),
				Remote: addrPort(tcpip.FullAddress{Addr: id.RemoteAddress, Port: id.RemotePort}),
			})
		}
	}
	return flows
}

// floodLike reports whether most of the burst's n frames are bare TCP
// segments: only then does the shard look up where they go, which a
// backlog of a busy poller's ordinary traffic would pay for nothing.
func (s *shard) floodLike(n int) bool {
	bares := 0
	for i := range n {
		h := &s.rxHdrs[i]
		if th := h.validTCP(); th != nil && bare(h, th) {
			bares++
		}
	}
	return 2*bares >= n
}

// bare reports whether a received TCP segment, whose headers are h and
// valid TCP header th, carries no data.
func bare(h *rxHeaders, th header.TCP) bool {
	return h.end-h.netLen-int(th.DataOffset()) <= 0
}

// connectionRequest reports whether th opens a connection: SYN without ACK.
func connectionRequest(th header.TCP) bool {
	return th.Flags()&(header.TCPFlagSyn|header.TCPFlagAck) == header.TCPFlagSyn
}

// forNoConnection reports whether st has no connection for th, received
// with h: a connection request, or a segment that finds a listener or no
// endpoint.
func forNoConnection(st *stack.Stack, h *rxHeaders, th header.TCP) bool {
	if connectionRequest(th) {
		return true
	}
	e := endpointFor(st, h, th)
	return e == nil || e.EndpointState() == tcp.StateListen
}

// endpointFor returns the endpoint of st that th, received with h, finds
// (a connection's, or its listener's); nil if none.
func endpointFor(st *stack.Stack, h *rxHeaders, th header.TCP) *tcp.Endpoint {
	ep := st.FindTransportEndpoint(h.ethType, tcp.ProtocolNumber, stack.TransportEndpointID{
		LocalPort: th.DestinationPort(), LocalAddress: h.dst,
		RemotePort: th.SourcePort(), RemoteAddress: h.src,
	}, nicID)
	e, _ := ep.(*tcp.Endpoint)
	return e
}
