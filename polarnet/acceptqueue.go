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

// sharedQueue is the accept queue a listener's shards share. Each shard's
// gVisor listener may queue all of backlog+1 itself, since its flows are
// whichever the link steers to it; the shards' queues together are held
// to backlog+1 here, in the poller, as Linux holds one listener's: while
// they hold that many, connection requests and the ACKs that would complete
// a handshake are dropped before they reach gVisor, so peers retransmit.
type sharedQueue struct {
	owner *acceptQueues
	limit int
	addr  tcpip.Address // zero: any address
	port  uint16

	full atomic.Bool // queued >= limit, read by every poller

	mu     sync.Mutex
	queued int // connections established and not yet accepted, every shard's
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

// newQueue returns a shared queue of limit connections; it holds no
// segments back until listen tells it its listener's address.
func (a *acceptQueues) newQueue(limit int) *sharedQueue {
	return &sharedQueue{owner: a, limit: limit}
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

// add counts n connections established (n > 0) or accepted (n < 0).
func (q *sharedQueue) add(n int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return
	}
	q.queued += n
	full := q.queued >= q.limit
	if q.full.Swap(full) != full {
		if full {
			q.owner.full.Add(1)
		} else {
			q.owner.full.Add(-1)
		}
	}
}

// find returns the queue of the listener that gets segments for dst and
// port: one bound to dst before one bound to any address.
func (a *acceptQueues) find(dst tcpip.Address, port uint16) *sharedQueue {
	var anyAddr *sharedQueue
	for _, q := range *a.queues.Load() {
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
