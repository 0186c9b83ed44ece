package polarnet

import (
	"net"
	"os"
	"sync"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/waiter"
)

// TCPListener accepts TCP connections on a polarnet Stack. It listens on
// every shard and hands out their connections through one Accept, taking
// the shards in turn so none is starved.
type TCPListener struct {
	stack     *Stack
	network   string
	addr      *net.TCPAddr
	keepAlive net.KeepAliveConfig
	eps       []listenEndpoint
	// queue holds the shards' accept queues to one limit; nil with one
	// shard, whose gVisor listener keeps it.
	queue *sharedQueue
	// spill holds connections moved out of a shard's full listener while
	// the limit had room (acceptqueue.go), for Accept to take first;
	// guarded by mu.
	spill []spilledConn

	mu   sync.Mutex // guards next and the accept attempts
	next int

	ready     chan struct{} // signalled when any shard may have a connection
	deadline  *deadline
	closeOnce sync.Once
	closed    chan struct{}
}

// spilledConn is a connection taken from shard's listener for the spill.
type spilledConn struct {
	ep    tcpip.Endpoint
	wq    *waiter.Queue
	shard *shard
}

type listenEndpoint struct {
	ep    tcpip.Endpoint
	wq    *waiter.Queue
	entry *waiter.Entry // the one registered: unregistering takes its address
	shard *shard
}

var _ net.Listener = (*TCPListener)(nil)

func (l *TCPListener) notify() {
	select {
	case l.ready <- struct{}{}:
	default:
	}
}

// Addr returns the listener's address as a *net.TCPAddr.
func (l *TCPListener) Addr() net.Addr { return l.addr }

// Accept waits for and returns the next connection.
func (l *TCPListener) Accept() (net.Conn, error) {
	c, err := l.AcceptTCP()
	if err != nil {
		return nil, err
	}
	return c, nil
}

// AcceptTCP waits for and returns the next connection as a *TCPConn.
// Accepted connections have keep-alive configured as the listener's
// ListenConfig asked (on, with Go's defaults, unless disabled).
func (l *TCPListener) AcceptTCP() (*TCPConn, error) {
	expired := l.deadline.done()
	for {
		select {
		case <-l.closed:
			return nil, l.opErr(net.ErrClosed)
		default:
		}
		if isClosed(expired) {
			return nil, l.opErr(os.ErrDeadlineExceeded)
		}
		c, err := l.tryAccept()
		if c != nil || err != nil {
			return c, err
		}
		select {
		case <-l.ready:
		case <-expired:
		case <-l.closed:
		}
	}
}

func (l *TCPListener) tryAccept() (*TCPConn, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.eps) == 0 {
		return nil, nil
	}
	if !l.stack.reserveConn() {
		// Like a process out of descriptors: the connection stays in the
		// backlog and Accept reports a temporary error.
		return nil, l.opErr(errTooManyConns("accept"))
	}
	if len(l.spill) > 0 {
		c := l.spill[0]
		l.spill = l.spill[1:]
		l.spillFrom(l.queue.acceptedFrom(-1))
		l.notify()
		return l.newConn(c.ep, c.wq, c.shard), nil
	}
	for i := range l.eps {
		idx := (l.next + i) % len(l.eps)
		ep, wq, terr := l.eps[idx].ep.Accept(nil)
		switch terr.(type) {
		case nil:
			l.next = idx + 1
			if l.queue != nil {
				l.spillFrom(l.queue.acceptedFrom(idx))
			}
			// More may be queued on this shard: keep the signal alive.
			l.notify()
			return l.newConn(ep, wq, l.eps[idx].shard), nil
		case *tcpip.ErrWouldBlock:
		default:
			l.stack.releaseConn()
			if isClosed(l.closed) {
				return nil, l.opErr(net.ErrClosed)
			}
			return nil, l.opErr(syscallErr("accept", terr))
		}
	}
	l.stack.releaseConn()
	return nil, nil
}

func (l *TCPListener) newConn(ep tcpip.Endpoint, wq *waiter.Queue, sh *shard) *TCPConn {
	c := newTCPConn(ep, wq, l.network, sh)
	if l.keepAlive.Enable {
		c.SetKeepAliveConfig(l.keepAlive)
	}
	return c
}

// spillFrom moves, from a goroutine of its own, one connection out of shard
// i's listener to the spill (nothing for i -1): its listener is full while
// the shared queue has room. Callers hold mu or gVisor's locks.
func (l *TCPListener) spillFrom(i int) {
	if i < 0 {
		return
	}
	go func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		if i >= len(l.eps) {
			return // closed
		}
		ep, wq, terr := l.eps[i].ep.Accept(nil)
		if terr != nil {
			return // Accept took them meanwhile
		}
		l.spill = append(l.spill, spilledConn{ep: ep, wq: wq, shard: l.eps[i].shard})
		l.notify()
		l.spillFrom(l.queue.spilledFrom(i))
	}()
}

func (l *TCPListener) opErr(err error) error { return opError("accept", l.network, nil, l.addr, err) }

// Close stops listening; pending and later Accepts return net.ErrClosed.
// Connections already accepted stay open.
func (l *TCPListener) Close() error {
	var err error = opError("close", l.network, nil, l.addr, net.ErrClosed)
	l.closeOnce.Do(func() {
		err = nil
		close(l.closed)
		l.deadline.stop()
		l.stack.untrack(l)
		l.mu.Lock()
		l.closeEndpoints()
		l.mu.Unlock()
	})
	return err
}

func (l *TCPListener) closeEndpoints() {
	for i := range l.eps {
		l.eps[i].wq.EventUnregister(l.eps[i].entry)
		l.eps[i].ep.Close()
	}
	l.eps = nil
	if l.queue != nil {
		l.queue.close()
	}
	// Reset what waited in the spill, as gVisor resets what waits in a
	// listener's queue.
	for _, c := range l.spill {
		c.ep.Abort()
		c.ep.Close()
	}
	l.spill = nil
}

// SetDeadline sets the deadline for Accept; the zero time removes it. After
// Close it returns net.ErrClosed itself, as *net.TCPListener does.
func (l *TCPListener) SetDeadline(t time.Time) error {
	if isClosed(l.closed) {
		return net.ErrClosed
	}
	l.deadline.set(t)
	return nil
}
