package main

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"

	"github.com/polarnet/polarnet/internal/xfer"
)

// The wire protocol. A connection opens with a 16-byte hello:
//
//	magic "RPB1" | kind (1 rr/crr, 2 stream) | 3 zero bytes | req u32 | resp u32
//
// rr (and crr, which is rr with one request per connection): every request is
// req bytes, every response resp bytes; both start with the request's
// sequence number (u64, little endian, counting from 0 on each connection)
// followed by a body that is the same deterministic pattern on every message
// (xfer.Pattern). The receiver of each message checks the sequence number and
// compares the body with the pattern, so a lost, reordered, duplicated or
// corrupted byte fails the run; the sender pays nothing per message but
// stamping the sequence number. The server answers in order and flushes its
// responses when no further complete request is buffered.
//
// stream: the client sends a repeating 64 KiB pattern until it half-closes;
// the server compares every byte with the pattern, then answers with the
// byte count (u64) and closes. The client compares the count with what it
// sent.
const (
	helloLen  = 16
	seqLen    = 8
	magic     = "RPB1"
	kindRR    = 1
	kindStr   = 2
	maxMsgLen = 16 << 20
	// streamBlock is the period of the stream pattern and the size of the
	// client's writes.
	streamBlock = 64 << 10
)

// Pattern seeds of the request body, the response body and the stream.
const (
	seedReq = iota + 1
	seedResp
	seedStream
)

var errCorrupt = errors.New("rpcbench: data corrupted")

// pattern returns n bytes of xfer.Pattern(seed).
func pattern(n int, seed uint64) []byte {
	b := make([]byte, n)
	io.ReadFull(xfer.Pattern(int64(n), seed), b) // an in-memory reader: cannot fail
	return b
}

// message returns a template message of n bytes: room for the sequence
// number, then the body pattern.
func message(n int, seed uint64) []byte {
	b := pattern(n, seed)
	clear(b[:seqLen])
	return b
}

func hello(kind byte, req, resp int) []byte {
	h := make([]byte, helloLen)
	copy(h, magic)
	h[4] = kind
	binary.LittleEndian.PutUint32(h[8:], uint32(req))
	binary.LittleEndian.PutUint32(h[12:], uint32(resp))
	return h
}

func parseHello(h []byte) (kind byte, req, resp int, err error) {
	if string(h[:4]) != magic {
		return 0, 0, 0, fmt.Errorf("rpcbench: bad hello %x", h)
	}
	kind = h[4]
	req, resp = int(binary.LittleEndian.Uint32(h[8:])), int(binary.LittleEndian.Uint32(h[12:]))
	switch {
	case kind != kindRR && kind != kindStr:
		return 0, 0, 0, fmt.Errorf("rpcbench: unknown kind %d in hello", kind)
	case kind == kindRR && (req < seqLen || resp < seqLen || req > maxMsgLen || resp > maxMsgLen):
		return 0, 0, 0, fmt.Errorf("rpcbench: message sizes %d/%d outside %d..%d", req, resp, seqLen, maxMsgLen)
	}
	return kind, req, resp, nil
}

// checkMessage verifies a received message against its template and the
// expected sequence number.
func checkMessage(got, template []byte, seq uint64) error {
	if s := binary.LittleEndian.Uint64(got); s != seq {
		return fmt.Errorf("%w: sequence %d, want %d", errCorrupt, s, seq)
	}
	if !bytes.Equal(got[seqLen:], template[seqLen:]) {
		return fmt.Errorf("%w: body of message %d differs from the pattern", errCorrupt, seq)
	}
	return nil
}

// server serves the protocol on a listener, one goroutine per connection,
// and counts connections that ended in a protocol error.
type server struct {
	ln       net.Listener
	received atomic.Uint64 // stream bytes received intact
	errs     atomic.Int64
	lastErr  atomic.Pointer[error]
	wg       sync.WaitGroup

	conns connSet
}

func serve(ln net.Listener) *server {
	s := &server{ln: ln}
	s.wg.Add(1)
	go s.accept()
	return s
}

func (s *server) accept() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return // closed
		}
		if !s.conns.add(c) {
			return // closed
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer s.conns.remove(c)
			if err := serveConn(c, &s.received); err != nil {
				s.errs.Add(1)
				s.lastErr.Store(&err)
			}
		}()
	}
}

// errors returns how many connections failed and the last failure.
func (s *server) errors() (int64, string) {
	n := s.errs.Load()
	if p := s.lastErr.Load(); p != nil {
		return n, (*p).Error()
	}
	return n, ""
}

// Close stops accepting, closes the open connections and waits for their
// goroutines.
func (s *server) Close() error {
	err := s.ln.Close()
	s.conns.closeAll()
	s.wg.Wait()
	return err
}

// connSet is a set of open connections that can all be closed at once, for
// prompt shutdowns: once closeAll has run, add closes what it is given.
type connSet struct {
	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
}

// add adds c, or closes it and returns false after closeAll.
func (s *connSet) add(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		c.Close()
		return false
	}
	if s.conns == nil {
		s.conns = make(map[net.Conn]struct{})
	}
	s.conns[c] = struct{}{}
	return true
}

// remove closes c and forgets it.
func (s *connSet) remove(c net.Conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
	c.Close()
}

func (s *connSet) closeAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	for c := range s.conns {
		c.Close()
	}
}

// serveConn serves one connection until the client closes it, adding the
// stream bytes it receives to received. A clean end (EOF at a message
// boundary) returns nil.
func serveConn(c net.Conn, received *atomic.Uint64) error {
	h := make([]byte, helloLen)
	if _, err := io.ReadFull(c, h); err != nil {
		if err == io.EOF {
			return nil
		}
		return fmt.Errorf("reading hello: %w", err)
	}
	kind, req, resp, err := parseHello(h)
	if err != nil {
		return err
	}
	if kind == kindStr {
		return serveStream(c, received)
	}
	return serveRR(c, req, resp)
}

func serveRR(c net.Conn, reqLen, respLen int) error {
	reqT, out := message(reqLen, seedReq), message(respLen, seedResp)
	in := make([]byte, reqLen)
	r := bufio.NewReaderSize(c, max(64<<10, reqLen))
	w := bufio.NewWriterSize(c, max(64<<10, respLen))
	for seq := uint64(0); ; seq++ {
		if _, err := io.ReadFull(r, in); err != nil {
			if err == io.EOF {
				return nil
			}
			return fmt.Errorf("request %d: %w", seq, err)
		}
		if err := checkMessage(in, reqT, seq); err != nil {
			return err
		}
		binary.LittleEndian.PutUint64(out, seq)
		if _, err := w.Write(out); err != nil {
			return fmt.Errorf("response %d: %w", seq, err)
		}
		if r.Buffered() < reqLen {
			if err := w.Flush(); err != nil {
				return fmt.Errorf("response %d: %w", seq, err)
			}
		}
	}
}

func serveStream(c net.Conn, received *atomic.Uint64) error {
	want := pattern(streamBlock, seedStream)
	buf := make([]byte, 256<<10)
	var total uint64
	for {
		n, err := c.Read(buf)
		if !matchesStream(buf[:n], want, total) {
			return fmt.Errorf("%w: stream bytes %d..%d differ from the pattern", errCorrupt, total, total+uint64(n))
		}
		total += uint64(n)
		received.Add(uint64(n))
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("stream after %d bytes: %w", total, err)
		}
	}
	var count [8]byte
	binary.LittleEndian.PutUint64(count[:], total)
	if _, err := c.Write(count[:]); err != nil {
		return fmt.Errorf("stream count: %w", err)
	}
	return nil
}

// matchesStream reports whether b is the stream pattern (period want) from
// offset off.
func matchesStream(b, want []byte, off uint64) bool {
	for len(b) > 0 {
		i := int(off % uint64(len(want)))
		n := min(len(b), len(want)-i)
		if !bytes.Equal(b[:n], want[i:i+n]) {
			return false
		}
		b, off = b[n:], off+uint64(n)
	}
	return true
}
