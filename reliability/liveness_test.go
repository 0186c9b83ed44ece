package reliability

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/polarnet/polarnet/internal/kpeer"
	"github.com/polarnet/polarnet/internal/leakcheck"
	"github.com/polarnet/polarnet/internal/taptopo"
	"github.com/polarnet/polarnet/internal/xfer"
	"github.com/polarnet/polarnet/link"
	"github.com/polarnet/polarnet/link/impair"
	"github.com/polarnet/polarnet/link/pipe"
	"github.com/polarnet/polarnet/polarnet"
)

// livenessScale multiplies the number of runs of every liveness row: CI
// runs the suite once at scale 1 without the race detector (scripts/test);
// a report of 1,000 runs at MTU 1500 is -liveness=10.
var livenessScale = flag.Int("liveness", 1, "multiplies the runs of every TestLiveness row")

// liveSize is what each run moves each way: enough for receive windows to
// fill and drain many times over.
const liveSize = 32 << 20

// liveBound bounds one run: a run that has not moved its bytes by then has
// stalled (an unloaded run takes well under a second, the race detector's
// a few).
const liveBound = 90 * time.Second

// A livePattern moves data between the ends of a connection and checks
// every byte. It returns the first error, a deadline's for a stall.
type livePattern struct {
	name string
	run  func(client, server net.Conn, data []byte) error
}

// livePatterns are the ways real programs use a connection that have
// stalled TCP implementations: a one-goroutine io.Copy echo (which reads
// only while it is not blocked writing), two independent pumps, and
// request/response with messages larger than the receive window.
var livePatterns = []livePattern{
	{"echo", liveEcho},
	{"pump", livePump},
	{"rr", liveRR},
}

// liveEcho: the server is io.CopyN(c, c, n); the client writes everything
// while it reads the echo back.
func liveEcho(client, server net.Conn, data []byte) error {
	n := int64(len(data))
	echoed := goErr(func() error { _, err := io.CopyN(server, server, n); return err })
	written := goErr(func() error { _, err := client.Write(data); return err })
	return errors.Join(readCompare(client, data, "echo"), <-written, <-echoed)
}

// livePump: each end writes and reads in goroutines of their own.
func livePump(client, server net.Conn, data []byte) error {
	up := goErr(func() error { _, err := client.Write(data); return err })
	down := goErr(func() error { _, err := server.Write(data); return err })
	atServer := goErr(func() error { return readCompare(server, data, "client to server") })
	return errors.Join(readCompare(client, data, "server to client"), <-up, <-down, <-atServer)
}

// liveRRMessage is the request (and response) size of liveRR: larger than
// the largest receive window, polarnet's (8 MiB) and the kernel's here.
const liveRRMessage = 9 << 20

// liveRR: the client sends a request, the server reads all of it and sends
// it back, the client reads all of the response, and so on.
func liveRR(client, server net.Conn, data []byte) error {
	served := goErr(func() error {
		buf := make([]byte, liveRRMessage)
		for off := 0; off < len(data); off += liveRRMessage {
			req := buf[:min(liveRRMessage, len(data)-off)]
			if _, err := io.ReadFull(server, req); err != nil {
				return fmt.Errorf("server reading request at %d: %w", off, err)
			}
			if _, err := server.Write(req); err != nil {
				return fmt.Errorf("server writing response at %d: %w", off, err)
			}
		}
		return nil
	})
	for off := 0; off < len(data); off += liveRRMessage {
		req := data[off:min(off+liveRRMessage, len(data))]
		if _, err := client.Write(req); err != nil {
			return errors.Join(fmt.Errorf("client writing request at %d: %w", off, err), <-served)
		}
		if err := readCompare(client, req, fmt.Sprintf("response at %d", off)); err != nil {
			return errors.Join(err, <-served)
		}
	}
	return <-served
}

// goErr runs f in a goroutine; the channel yields its error.
func goErr(f func() error) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- f() }()
	return ch
}

// readCompare reads len(want) bytes from c and compares them with want.
func readCompare(c net.Conn, want []byte, what string) error {
	got := make([]byte, len(want))
	n, err := io.ReadFull(c, got)
	if err != nil {
		return fmt.Errorf("%s: %d of %d bytes: %w", what, n, len(want), err)
	}
	if i := firstDiff(got, want); i >= 0 {
		return fmt.Errorf("%s: byte %d differs", what, i)
	}
	return nil
}

func firstDiff(a, b []byte) int {
	if bytes.Equal(a, b) {
		return -1
	}
	for i := range a {
		if a[i] != b[i] {
			return i
		}
	}
	return len(a)
}

// liveRow is one configuration of TestLiveness.
type liveRow struct {
	mtu, queues int
	imp         impair.Impairment
	runs        int // per pattern, at scale 1 without the race detector
	size        int
}

func (r liveRow) name() string {
	s := fmt.Sprintf("mtu=%d/queues=%d", r.mtu, r.queues)
	switch {
	case r.imp.Loss > 0:
		s += fmt.Sprintf("/loss=%g%%", 100*r.imp.Loss)
	case r.imp.Reorder > 0:
		s += fmt.Sprintf("/reorder=%g%%", 100*r.imp.Reorder)
	}
	return s
}

// TestLiveness moves data between two polarnet stacks over the in-memory
// pipe, in each livePattern, at MTUs 1500, 9000 and 65535 with one and
// two queues (a shard per queue), lossless and through link/impair with
// loss and reordering: every run must move all its bytes, exact, within
// liveBound. A run that does not is a stall; the test reports the stacks'
// counters for it. Under the race detector each row runs once per
// pattern.
func TestLiveness(t *testing.T) {
	rows := []liveRow{
		{mtu: 1500, queues: 1, runs: 34, size: liveSize},
		{mtu: 1500, queues: 2, runs: 10, size: liveSize},
		{mtu: 9000, queues: 1, runs: 5, size: liveSize},
		{mtu: 9000, queues: 2, runs: 5, size: liveSize},
		{mtu: 65535, queues: 1, runs: 5, size: liveSize},
		{mtu: 65535, queues: 2, runs: 5, size: liveSize},
		// Lossy rows move less: each loss costs a recovery, and at 5% a
		// 32 MiB transfer at MTU 1500 is mostly recovering.
		{mtu: 1500, queues: 1, imp: impair.Impairment{Loss: 0.01}, runs: 3, size: 4 << 20},
		{mtu: 1500, queues: 1, imp: impair.Impairment{Loss: 0.05}, runs: 3, size: 1 << 20},
		{mtu: 1500, queues: 1, imp: impair.Impairment{Reorder: 0.25}, runs: 3, size: 4 << 20},
		{mtu: 9000, queues: 2, imp: impair.Impairment{Loss: 0.01}, runs: 3, size: 4 << 20},
	}
	data, err := io.ReadAll(xfer.Pattern(liveSize, 24))
	require.NoError(t, err)
	for _, row := range rows {
		runs := row.runs * *livenessScale
		if raceEnabled {
			runs = 1
		}
		for _, p := range livePatterns {
			t.Run(row.name()+"/"+p.name, func(t *testing.T) {
				stalls := 0
				for run := range runs {
					if err := liveRun(t, row, p, data[:row.size], uint64(run)); err != nil {
						stalls++
						t.Errorf("run %d of %d: %v", run+1, runs, err)
					}
				}
				assert.Zero(t, stalls, "runs that did not complete, of %d", runs)
			})
		}
	}
}

// liveRun makes two stacks for row and one connection between them, and
// moves data in pattern p. It returns the pattern's error, with both
// stacks' counters; it leaves no goroutine or fd behind.
func liveRun(t *testing.T, row liveRow, p livePattern, data []byte, seed uint64) error {
	la, lb := pipe.New(pipe.Config{MTU: row.mtu, Queues: row.queues})
	var a, b link.Link = la, lb
	if row.imp != (impair.Impairment{}) {
		a, b = impair.New(la, impair.Symmetric(row.imp, seed)), impair.New(lb, impair.Config{})
	}
	leaks := leakcheck.Take()
	defer leaks.Check(t)
	var open closers
	defer open.close()
	client, server, sa, sb := livePair(t, &open, a, b)
	deadline(liveBound, client, server)
	if err := p.run(client, server, data); err != nil {
		return fmt.Errorf("%w\nclient stack: %+v\nserver stack: %+v", err, sa.Stats().Total, sb.Stats().Total)
	}
	return nil
}

// The addresses of the liveness stacks: a pipe links only the two.
var (
	liveClient = netip.MustParsePrefix("198.18.101.1/24")
	liveServer = netip.MustParsePrefix("198.18.101.2/24")
)

// livePair returns two stacks on la and lb (a shard per queue) and a
// connection between them: client on the first, server on the second. All
// four go to open, to be closed by the caller, even when t fails.
func livePair(t *testing.T, open *closers, la, lb link.Link) (client, server *polarnet.TCPConn, sa, sb *polarnet.Stack) {
	t.Helper()
	var err error
	sa, err = polarnet.New(polarnet.Config{Link: la, Addrs: []netip.Prefix{liveClient}})
	require.NoError(t, err)
	open.add(sa)
	sb, err = polarnet.New(polarnet.Config{Link: lb, Addrs: []netip.Prefix{liveServer}})
	require.NoError(t, err)
	open.add(sb)
	ln, err := sb.ListenTCP("tcp", netip.AddrPortFrom(liveServer.Addr(), 0), 0, net.KeepAliveConfig{})
	require.NoError(t, err)
	defer ln.Close()
	accepted := goErr(func() (err error) { server, err = ln.AcceptTCP(); return err })
	client, err = sa.DialTCP(t.Context(), "tcp", netip.AddrPort{}, ln.Addr().(*net.TCPAddr).AddrPort())
	require.NoError(t, err)
	open.add(client)
	require.NoError(t, <-accepted)
	open.add(server)
	return client, server, sa, sb
}

// closers closes what was added to it, last first. Its methods take a
// pointer so that `defer open.close()` closes what is added after the
// defer statement, not the nothing there was when it ran.
type closers []io.Closer

func (c *closers) add(x io.Closer) { *c = append(*c, x) }

func (c *closers) close() {
	for i := len(*c) - 1; i >= 0; i-- {
		(*c)[i].Close()
	}
}

// liveTAPRuns is how many runs TestLivenessTAP makes each way (polarnet
// client to kernel server, and back), spread over the patterns.
const liveTAPRuns = 50

// TestLivenessTAP runs the liveness patterns between a polarnet stack and
// the kernel over TAP, with polarnet as the client (p2k) and as the server
// (k2p): every run moves all its bytes, exact.
func TestLivenessTAP(t *testing.T) {
	e := newEnv(t, taptopo.Options{})
	ln, err := e.Stack.ListenTCP("tcp", netip.AddrPortFrom(stack4, 0), 0, net.KeepAliveConfig{})
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	kln := kpeer.Listen(t, e.NS, kernel4)
	data, err := io.ReadAll(xfer.Pattern(liveSize, 25))
	require.NoError(t, err)
	runs := liveTAPRuns * *livenessScale
	if raceEnabled {
		runs = len(livePatterns)
	}
	for _, way := range []string{"p2k", "k2p"} {
		t.Run(way, func(t *testing.T) {
			for run := range runs {
				p := livePatterns[run%len(livePatterns)]
				var client, server net.Conn
				if way == "p2k" {
					client, server = e.dial(t, kln)
				} else {
					client, server = e.accept(t, ln)
				}
				deadline(liveBound, client, server)
				err := p.run(client, server, data)
				client.Close()
				server.Close()
				assert.NoError(t, err, "run %d of %d (%s): stack %+v", run+1, runs, p.name, e.Stack.Stats().Total)
			}
		})
	}
}
