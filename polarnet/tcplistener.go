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

	mu   sync.Mutex // guards next and the accept attempts
	next int

	ready     chan struct{} // signalled when any shard may have a connection
	deadline  *deadline
	closeOnce sync.Once
	closed    chan struct{}
}

type listenEndpoint struct {
	ep    tcpip.Endpoint
	wq    *waiter.Queue
	entry waiter.Entry
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
	for i := range l.eps {
		idx := (l.next + i) % len(l.eps)
		ep, wq, terr := l.eps[idx].ep.Accept(nil)
		switch terr.(type) {
		case nil:
			l.next = idx + 1
			if l.queue != nil {
				l.queue.add(-1)
			}
			// More may be queued on this shard: keep the signal alive.
			l.notify()
			c := newTCPConn(ep, wq, l.network, l.eps[idx].shard)
			if l.keepAlive.Enable {
				c.SetKeepAliveConfig(l.keepAlive)
			}
			return c, nil
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
		l.eps[i].wq.EventUnregister(&l.eps[i].entry)
		l.eps[i].ep.Close()
	}
	l.eps = nil
	if l.queue != nil {
		l.queue.close()
	}
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
