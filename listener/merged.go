package listener

import (
	"errors"
	"net"
	"os"
	"sync"
	"time"

	"github.com/polarnet/polarnet/polarnet"
)

// merged is the listener of a wildcard listen on a stack that the kernel
// also accepts on (polarnet.Config.KernelListen): one net.Listener over the
// stack's listener and the kernel's, whose Accept returns a
// *polarnet.TCPConn or a *net.TCPConn, whichever arrived first. Each part
// has a goroutine that accepts one connection ahead and waits for an Accept
// to take it; the rest wait in the parts' backlogs.
type merged struct {
	network string
	addr    net.Addr
	stack   *polarnet.Stack
	parts   []net.Listener // the stack's, then the kernel's

	accepted chan acceptResult
	wg       sync.WaitGroup

	mu       sync.Mutex
	deadline time.Time
	moved    chan struct{} // closed and replaced when the deadline moves

	closeOnce sync.Once
	closed    chan struct{}
}

var _ polarnet.AnyTCPListener = (*merged)(nil)

type acceptResult struct {
	conn net.Conn
	err  error
}

// newMerged takes ownership of st's listener and the kernel's; the
// stack's address is the listener's.
func newMerged(network string, st *polarnet.Stack, stackPart net.Listener, kernelParts ...net.Listener) *merged {
	m := &merged{
		network:  network,
		addr:     stackPart.Addr(),
		stack:    st,
		parts:    append([]net.Listener{stackPart}, kernelParts...),
		accepted: make(chan acceptResult),
		moved:    make(chan struct{}),
		closed:   make(chan struct{}),
	}
	m.wg.Add(len(m.parts))
	for i, l := range m.parts {
		go m.acceptFrom(l, i > 0)
	}
	return m
}

// acceptFrom hands l's connections and errors to Accept until l fails for
// good or m closes. Errors are reported with m's address, as if one
// listener had them.
func (m *merged) acceptFrom(l net.Listener, kernel bool) {
	defer m.wg.Done()
	for {
		c, err := l.Accept()
		if c != nil && kernel {
			m.stack.CountKernelConn(true)
		}
		var temporary interface{ Temporary() bool }
		fatal := err != nil && !(errors.As(err, &temporary) && temporary.Temporary())
		select {
		case m.accepted <- acceptResult{c, withAddr(err, m.addr)}:
		case <-m.closed:
			if c != nil {
				c.Close()
			}
			return
		}
		if fatal {
			return
		}
	}
}

// Addr returns the address as Go's net reports a wildcard listener's:
// [::]:port, or 0.0.0.0:port for tcp4.
func (m *merged) Addr() net.Addr { return m.addr }

// Accept returns the next connection from the stack or the kernel.
func (m *merged) Accept() (net.Conn, error) {
	for {
		if m.isClosed() {
			return nil, m.opErr("accept", net.ErrClosed)
		}
		m.mu.Lock()
		deadline, moved := m.deadline, m.moved
		m.mu.Unlock()
		if !deadline.IsZero() && !time.Now().Before(deadline) {
			return nil, m.opErr("accept", os.ErrDeadlineExceeded)
		}
		if r, ok := m.wait(deadline, moved); ok {
			return r.conn, r.err
		}
	}
}

// wait returns the next result, or false once m closes, deadline passes or
// the deadline moves.
func (m *merged) wait(deadline time.Time, moved <-chan struct{}) (acceptResult, bool) {
	var expired <-chan time.Time
	if !deadline.IsZero() {
		t := time.NewTimer(time.Until(deadline))
		defer t.Stop()
		expired = t.C
	}
	select {
	case r := <-m.accepted:
		return r, true
	case <-m.closed:
	case <-expired:
	case <-moved:
	}
	return acceptResult{}, false
}

// Close closes every part; connections accepted ahead are closed too.
func (m *merged) Close() error {
	err := m.opErr("close", net.ErrClosed)
	m.closeOnce.Do(func() {
		err = nil
		close(m.closed)
		for _, l := range m.parts {
			l.Close()
		}
		m.wg.Wait()
	})
	return err
}

// SetDeadline sets the deadline for Accept; the zero time removes it. After
// Close it returns net.ErrClosed itself, as *net.TCPListener does.
func (m *merged) SetDeadline(t time.Time) error {
	if m.isClosed() {
		return net.ErrClosed
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.deadline = t
	close(m.moved)
	m.moved = make(chan struct{})
	return nil
}

func (m *merged) opErr(op string, err error) error {
	return &net.OpError{Op: op, Net: m.network, Addr: m.addr, Err: err}
}

func (m *merged) isClosed() bool {
	select {
	case <-m.closed:
		return true
	default:
		return false
	}
}
