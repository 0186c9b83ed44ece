package polarnet

import (
	"errors"
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
// program) is told to, for a hold that doubles while the flood is still
// there when it ends.

const (
	// backlogBursts full bursts in a row, 1,024 frames (a common ring
	// size), show the poller behind its queue rather than descheduled for a
	// moment.
	backlogBursts = 32
	// shedHoldMin and shedHoldMax bound how long the link sheds before the
	// shard turns it off to see whether the flood has ended: each look lets
	// the flood fill the ring once.
	shedHoldMin = 50 * time.Millisecond
	shedHoldMax = 2 * time.Second
	// cookieMemory is how long after the last SYN cookie the shard's
	// listeners count as answering with cookies.
	cookieMemory = time.Second
)

// shedding is a shard's state of it, the poller's only (its timer runs on
// the poller too).
type shedding struct {
	link  link.SYNShedder // nil: the queue cannot shed
	clock *shardClock
	end   tcpip.Timer   // turns link shedding off; nil until it first goes on
	full  int           // full bursts in a row
	on    bool          // the link sheds
	off   int64         // when it last stopped
	hold  time.Duration // how long it shed last

	// cookies counts the SYN cookies the shard's stack sent; seen is its
	// value when last read, at seenAt (0: never moved).
	cookies *tcpip.StatCounter
	seen    uint64
	seenAt  int64
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

// flood turns link shedding on at now, a backlog having held connection
// requests: for twice the last hold if the flood came back within it after
// the last look, for shedHoldMin otherwise.
func (sh *shedding) flood(now int64) {
	if sh.link == nil || sh.on {
		return
	}
	if sh.hold == 0 || time.Duration(now-sh.off) > sh.hold {
		sh.hold = shedHoldMin
	} else {
		sh.hold = min(2*sh.hold, shedHoldMax)
	}
	if !sh.set(true) {
		return
	}
	sh.on = true
	if sh.end == nil {
		sh.end = sh.clock.afterFuncExact(sh.hold, sh.stop)
	} else {
		sh.end.Reset(sh.hold)
	}
}

// stop turns link shedding off once its hold has passed.
func (sh *shedding) stop() {
	if sh.link != nil {
		sh.set(false)
	}
	sh.on, sh.off = false, sh.clock.now()
}

// set switches the link's shedding, forgetting a link that cannot.
func (sh *shedding) set(on bool) bool {
	err := sh.link.ShedSYNs(on)
	if errors.Is(err, link.ErrNotSupported) {
		sh.link = nil
	}
	return err == nil
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
	ep := st.FindTransportEndpoint(h.ethType, tcp.ProtocolNumber, stack.TransportEndpointID{
		LocalPort: th.DestinationPort(), LocalAddress: h.dst,
		RemotePort: th.SourcePort(), RemoteAddress: h.src,
	}, nicID)
	if ep == nil {
		return true
	}
	e, ok := ep.(*tcp.Endpoint)
	return ok && e.EndpointState() == tcp.StateListen
}
