// Package xfer moves verifiable data over connections for tests: a
// deterministic byte stream, checked on arrival by its hash or against the
// stream made again, and a two-way exchange whose ends compare SHA-256
// hashes of what was sent and what arrived.
package xfer

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"net"
)

// Pattern returns a reader of n deterministic pseudo-random bytes; the same
// seed gives the same bytes, however the reads are sized. Each xorshift step
// yields eight bytes: the tests that move gigabytes share the CPU with the
// stack they test, so the generator has to stay cheap.
func Pattern(n int64, seed uint64) io.Reader {
	return &pattern{n: n, state: seed*0x9e3779b97f4a7c15 | 1, used: 8}
}

type pattern struct {
	n     int64
	state uint64
	word  [8]byte // the last step's bytes; word[used:] not yet read
	used  int
}

func (p *pattern) next() uint64 {
	p.state ^= p.state << 13
	p.state ^= p.state >> 7
	p.state ^= p.state << 17
	return p.state
}

func (p *pattern) Read(b []byte) (int, error) {
	if p.n <= 0 {
		return 0, io.EOF
	}
	if int64(len(b)) > p.n {
		b = b[:p.n]
	}
	i := copy(b, p.word[p.used:])
	p.used += i
	for ; len(b)-i >= 8; i += 8 {
		binary.LittleEndian.PutUint64(b[i:], p.next())
	}
	if i < len(b) {
		binary.LittleEndian.PutUint64(p.word[:], p.next())
		p.used = copy(b[i:], p.word[:])
		i = len(b)
	}
	p.n -= int64(i)
	return i, nil
}

// Hash reads r to EOF and returns the SHA-256 of what it read and its length.
func Hash(r io.Reader) (sum [32]byte, n int64, err error) {
	h := sha256.New()
	n, err = io.Copy(h, r)
	copy(sum[:], h.Sum(nil))
	return sum, n, err
}

// Verify reads r to EOF and checks that what it read is the start of the
// pattern of seed (Pattern), every byte in order, at the cost of making the
// pattern again and comparing: several times cheaper than hashing, for the
// tests whose streams share the CPUs with the stack they measure. It
// returns how many bytes it read, and an error naming the first byte that
// differs, if one does.
func Verify(r io.Reader, seed uint64) (int64, error) {
	want := Pattern(math.MaxInt64, seed)
	got, exp := make([]byte, 32<<10), make([]byte, 32<<10)
	var n int64
	for {
		k, err := r.Read(got)
		if k > 0 {
			want.Read(exp[:k])
			if !bytes.Equal(got[:k], exp[:k]) {
				i := 0
				for got[i] == exp[i] {
					i++
				}
				return n + int64(i), fmt.Errorf("xfer: byte %d is not the pattern's", n+int64(i))
			}
			n += int64(k)
		}
		switch {
		case err == io.EOF:
			return n, nil
		case err != nil:
			return n, err
		}
	}
}

// HalfCloser is a conn whose writing side can be shut down alone.
type HalfCloser interface {
	net.Conn
	CloseWrite() error
}

// Exchange sends size bytes from client to server and, once the server has
// read them all (the client's CloseWrite tells it), size other bytes back;
// each side half-closes after sending. It returns an error unless both
// directions arrived complete and byte-exact.
func Exchange(client, server HalfCloser, size int64) error {
	upWant, _, _ := Hash(Pattern(size, 1))
	downWant, _, _ := Hash(Pattern(size, 2))
	serverErr := make(chan error, 1)
	go func() {
		sum, n, err := Hash(server)
		switch {
		case err != nil:
		case n != size || sum != upWant:
			err = fmt.Errorf("server received %d bytes (want %d), hash match %v", n, size, sum == upWant)
		default:
			if _, err = io.Copy(server, Pattern(size, 2)); err == nil {
				err = server.CloseWrite()
			}
		}
		serverErr <- err
	}()
	if _, err := io.Copy(client, Pattern(size, 1)); err != nil {
		return fmt.Errorf("client send: %w", err)
	}
	if err := client.CloseWrite(); err != nil {
		return fmt.Errorf("client CloseWrite: %w", err)
	}
	sum, n, err := Hash(client)
	if err != nil {
		return fmt.Errorf("client receive: %w", err)
	}
	if err := <-serverErr; err != nil {
		return fmt.Errorf("server: %w", err)
	}
	if n != size || sum != downWant {
		return fmt.Errorf("client received %d bytes (want %d), hash match %v", n, size, sum == downWant)
	}
	return nil
}

// Send moves n pattern bytes (of seed) one way: it writes them to from and
// half-closes it, while it reads to to EOF. It returns an error unless to
// delivered exactly those bytes. Deadlines on both conns bound it.
func Send(from HalfCloser, to io.Reader, n int64, seed uint64) error {
	wrote := make(chan error, 1)
	go func() {
		_, err := io.Copy(from, Pattern(n, seed))
		if err == nil {
			err = from.CloseWrite()
		}
		wrote <- err
	}()
	got, m, readErr := Hash(to)
	if err := <-wrote; err != nil {
		return fmt.Errorf("sending: %w", err)
	}
	if readErr != nil {
		return fmt.Errorf("receiving: %w", readErr)
	}
	if want, _, _ := Hash(Pattern(n, seed)); m != n || got != want {
		return fmt.Errorf("received %d bytes (want %d), hash match %v", m, n, got == want)
	}
	return nil
}
