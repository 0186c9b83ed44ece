package polarnet

import (
	"bytes"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/waiter"
)

// sock is what TCPConn and UDPConn share: the endpoint, one persistent waiter
// per direction (so blocking allocates nothing), deadlines and close.
type sock struct {
	ep      tcpip.Endpoint
	wq      *waiter.Queue
	network string
	laddr   net.Addr
	raddr   net.Addr // nil for an unconnected UDP socket

	readEntry, writeEntry waiter.Entry
	readReady, writeReady chan struct{}
	reader                atomic.Int32 // readerRunning, readerParked or readerWoken

	readMu   sync.Mutex
	readBuf  tcpip.SliceWriter
	writeMu  sync.Mutex
	writeBuf bytes.Reader

	readDeadline, writeDeadline *deadline

	closeOnce sync.Once
	closed    chan struct{}
	onClose   func() // if set, runs once when the socket closes
}

func (s *sock) init(ep tcpip.Endpoint, wq *waiter.Queue, network string, extra waiter.EventMask) {
	s.ep, s.wq, s.network = ep, wq, network
	s.closed = make(chan struct{})
	s.readReady = make(chan struct{}, 1)
	s.readEntry = waiter.NewFunctionEntry(waiter.ReadableEvents|waiter.EventErr|extra, func(waiter.EventMask) { s.wakeReader() })
	s.writeEntry, s.writeReady = waiter.NewChannelEntry(waiter.WritableEvents | waiter.EventErr | extra)
	s.readDeadline = newDeadline(func() { signal(s.readReady) })
	s.writeDeadline = newDeadline(func() { signal(s.writeReady) })
	wq.EventRegister(&s.readEntry)
	wq.EventRegister(&s.writeEntry)
}

func (s *sock) opErr(op string, err error) error {
	return opError(op, s.network, s.laddr, s.raddr, err)
}

func (s *sock) isClosed() bool { return isClosed(s.closed) }

// waitRead blocks until the endpoint may be readable or the read deadline
// moved; it returns the error to report when the socket was closed
// meanwhile. The caller checks its deadline again. The endpoint, the
// deadline and Close all signal the one channel (ops on one channel are
// serialized by readMu or writeMu, so one token wakes the only waiter):
// a receive costs less than a select over three channels, once per op.
func (s *sock) waitRead() error {
	s.reader.Store(readerParked)
	err := s.wait(s.readReady, "read")
	if s.reader.Swap(readerRunning) == readerWoken {
		readerWokenLocally.CompareAndSwap(s, nil)
	}
	return err
}

// The states of a socket's reader. Only a parked reader is marked woken
// locally, by a compare-and-swap that fails once it runs again, so the mark
// is cleared by the reader that it was set for, never left behind.
const (
	readerRunning int32 = iota
	readerParked
	readerWoken // parked, and readerWokenLocally points at the socket
)

// readerWokenLocally is the socket whose parked reader was last woken on
// the waker's P (see keepWakeupsLocal), until that reader has run: the
// goroutine that makes a socket readable (a TCP processor, mostly) goes on
// to other sockets or to sleep, so the first reader it wakes runs next on
// its P, but a second one would wait behind the first while a P idles, and
// is woken the usual way. One socket for the process, not one per P: the
// runtime does not tell us our P.
var readerWokenLocally atomic.Pointer[sock]

func (s *sock) wakeReader() {
	if s.reader.Load() == readerParked && readerWokenLocally.CompareAndSwap(nil, s) {
		if s.reader.CompareAndSwap(readerParked, readerWoken) {
			keepWakeupsLocal()
			signal(s.readReady)
			releaseWakeups()
			return
		}
		// The reader ran meanwhile: it will not clear the mark.
		readerWokenLocally.CompareAndSwap(s, nil)
	}
	signal(s.readReady)
}

func (s *sock) waitWrite() error { return s.wait(s.writeReady, "write") }

func (s *sock) wait(ready chan struct{}, op string) error {
	<-ready
	if s.isClosed() {
		return s.opErr(op, net.ErrClosed)
	}
	return nil
}

// Close closes the socket; closing twice returns net.ErrClosed, as net does.
func (s *sock) Close() error {
	err := s.opErr("close", net.ErrClosed)
	s.closeOnce.Do(func() {
		err = nil
		close(s.closed)
		readerWokenLocally.CompareAndSwap(s, nil)
		signal(s.readReady)
		signal(s.writeReady)
		s.wq.EventUnregister(&s.readEntry)
		s.wq.EventUnregister(&s.writeEntry)
		s.readDeadline.stop()
		s.writeDeadline.stop()
		s.ep.Close()
		if s.onClose != nil {
			s.onClose()
		}
	})
	return err
}

// SetDeadline sets the read and write deadlines; the zero time removes them.
func (s *sock) SetDeadline(t time.Time) error {
	if s.isClosed() {
		return s.closedLocal()
	}
	s.readDeadline.set(t)
	s.writeDeadline.set(t)
	return nil
}

// SetReadDeadline sets the deadline for reads, current and future.
func (s *sock) SetReadDeadline(t time.Time) error {
	if s.isClosed() {
		return s.closedLocal()
	}
	s.readDeadline.set(t)
	return nil
}

// SetWriteDeadline sets the deadline for writes, current and future.
func (s *sock) SetWriteDeadline(t time.Time) error {
	if s.isClosed() {
		return s.closedLocal()
	}
	s.writeDeadline.set(t)
	return nil
}

// closedLocal is what the deadline and buffer setters of a closed socket
// return: net names the local address alone there, where the TCP options'
// setters name both ends.
func (s *sock) closedLocal() error {
	return opError("set", s.network, nil, s.laddr, net.ErrClosed)
}

// SetReadBuffer sets the size of the receive buffer, within the stack's
// range (Config.TCP.ReceiveBuffer for TCP), as the kernel keeps SO_RCVBUF
// within net.core.rmem_max: no application can take more memory than the
// stack allows a connection.
func (s *sock) SetReadBuffer(bytes int) error {
	if s.isClosed() {
		return s.closedLocal()
	}
	return s.setOpt(func(o *tcpip.SocketOptions) {
		lo, hi := o.ReceiveBufferLimits()
		o.SetReceiveBufferSize(min(max(int64(bytes), lo), hi), true)
	})
}

// SetWriteBuffer sets the size of the send buffer, within the stack's range
// (Config.TCP.SendBuffer for TCP), as SetReadBuffer does.
func (s *sock) SetWriteBuffer(bytes int) error {
	if s.isClosed() {
		return s.closedLocal()
	}
	return s.setOpt(func(o *tcpip.SocketOptions) {
		lo, hi := o.SendBufferLimits()
		o.SetSendBufferSize(min(max(int64(bytes), lo), hi), true)
	})
}

func (s *sock) setOpt(set func(*tcpip.SocketOptions)) error {
	if s.isClosed() {
		return s.opErr("set", net.ErrClosed)
	}
	set(s.ep.SocketOptions())
	return nil
}
