package polarnet

import (
	"slices"
	"sync"
	"sync/atomic"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
)

// sharedQueue is the accept queue a listener's shards share, held to
// backlog+1 connections as Linux holds one listener's. Each shard's gVisor
// listener gets an equal share of it (rounded up) as its capacity, which
// also bounds its half-open connections (gVisor answers with SYN cookies
// beyond capacity-1), so together they hold about one backlog of them, as
// Linux does. The limit over all shards is kept here: while the shards hold
// backlog+1, the poller drops connection requests and the ACKs that would
// complete a handshake before gVisor sees them, so peers retransmit; and a
// shard's listener is never left full while the limit has room: one of its
// connections is moved out, to the listener's spill (TCPListener.spill),
// since the link, not the listener, chooses which shard a flow reaches.
type sharedQueue struct {
	owner    *acceptQueues
	limit    int
	capacity int           // each shard's listener's
	addr     tcpip.Address // zero: any address
	port     uint16

	full atomic.Bool // queued >= limit, read by every poller

	mu     sync.Mutex
	queued int   // connections established and not yet accepted, in all
	shards []int // of those, in each shard's listener
	closed bool
}

// acceptQueues holds the stack's shared accept queues.
type acceptQueues struct {
	// full counts the queues that are full: while it is zero, a poller
	// looks no further.
	full atomic.Int32

	mu     sync.Mutex
	queues atomic.Pointer[[]*sharedQueue] // replaced whole under mu
}

// newQueue returns a shared queue of limit connections over shards; it
// holds no segments back until listen tells it its listener's address.
func (a *acceptQueues) newQueue(limit, shards int) *sharedQueue {
	return &sharedQueue{owner: a, limit: limit, capacity: (limit + shards - 1) / shards, shards: make([]int, shards)}
}

// listen makes q the queue of the listener on addr (zero: any) and port.
func (q *sharedQueue) listen(addr tcpip.Address, port uint16) {
	q.addr, q.port = addr, port
	a := q.owner
	a.mu.Lock()
	defer a.mu.Unlock()
	var list []*sharedQueue
	if cur := a.queues.Load(); cur != nil {
		list = slices.Clone(*cur)
	}
	list = append(list, q)
	a.queues.Store(&list)
}

// close removes q; it counts nothing more.
func (q *sharedQueue) close() {
	q.mu.Lock()
	q.closed = true
	if q.full.Swap(false) {
		q.owner.full.Add(-1)
	}
	q.mu.Unlock()
	a := q.owner
	a.mu.Lock()
	defer a.mu.Unlock()
	if cur := a.queues.Load(); cur != nil {
		list := slices.DeleteFunc(slices.Clone(*cur), func(o *sharedQueue) bool { return o == q })
		a.queues.Store(&list)
	}
}

// queuedOn counts a connection queued in shard's listener.
func (q *sharedQueue) queuedOn(shard int) (spill int) { return q.add(shard, 1, 1) }

// acceptedFrom counts a connection Accept took from shard's listener, or
// from the spill (shard -1).
func (q *sharedQueue) acceptedFrom(shard int) (spill int) {
	if shard < 0 {
		return q.add(-1, 0, -1)
	}
	return q.add(shard, -1, -1)
}

// spilledFrom counts a connection moved from shard's listener to the spill.
func (q *sharedQueue) spilledFrom(shard int) (spill int) { return q.add(shard, -1, 0) }

// add changes the count of shard (if not -1) by n and the total by total,
// and returns a shard whose listener is full while the limit has room
// (-1: none).
func (q *sharedQueue) add(shard, n, total int) (spill int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return -1
	}
	if shard >= 0 {
		q.shards[shard] += n
	}
	q.queued += total
	full := q.queued >= q.limit
	if q.full.Swap(full) != full {
		if full {
			q.owner.full.Add(1)
		} else {
			q.owner.full.Add(-1)
		}
	}
	if !full {
		for i, held := range q.shards {
			if held >= q.capacity {
				return i
			}
		}
	}
	return -1
}

// find returns the queue of the listener that gets segments for dst and
// port: one bound to dst before one bound to any address.
func (a *acceptQueues) find(dst tcpip.Address, port uint16) *sharedQueue {
	list := a.queues.Load()
	if list == nil {
		return nil // full before its listener's address was known
	}
	var anyAddr *sharedQueue
	for _, q := range *list {
		switch {
		case q.port != port:
		case q.addr == dst:
			return q
		case q.addr.BitLen() == 0:
			anyAddr = q
		}
	}
	return anyAddr
}

// overflow reports whether the segment th, received with h and bound for
// st, is to be dropped because its listener's shared queue is full: a
// connection request, or an ACK that would complete a handshake (one that
// finds the listener, carrying a SYN cookie, or a connection in SYN-RCVD).
// The drop is counted as gVisor counts its own.
func (a *acceptQueues) overflow(st *stack.Stack, h *rxHeaders, th header.TCP) bool {
	if a.full.Load() == 0 {
		return false
	}
	request := connectionRequest(th)
	if !request && th.Flags()&(header.TCPFlagSyn|header.TCPFlagAck|header.TCPFlagRst) != header.TCPFlagAck {
		return false
	}
	if q := a.find(h.dst, th.DestinationPort()); q == nil || !q.full.Load() {
		return false
	}
	stats := st.Stats().TCP
	if request {
		stats.ListenOverflowSynDrop.Increment()
		return true
	}
	e := endpointFor(st, h, th)
	if e == nil {
		return false
	}
	switch e.EndpointState() {
	case tcp.StateListen, tcp.StateSynRecv:
		stats.ListenOverflowAckDrop.Increment()
		return true
	}
	return false
}
