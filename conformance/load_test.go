package conformance

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/polarnet/polarnet/internal/frame"
)

// loadScenarios put many connections on the stacks, and an attacker's
// SYNs.
func loadScenarios() []*Scenario {
	concurrent, sequential := 1000, 10000
	concName, seqName := "concurrent-1000", "sequential-10000"
	if testing.Short() {
		concurrent, sequential = 200, 1000
		concName, seqName = concName+" (short: 200)", seqName+" (short: 1000)"
	}
	return []*Scenario{
		{Name: concName, Budget: 3 * time.Minute, Run: func(t *T, tp *Topology, ctx context.Context) *Outcome {
			return concurrentConns(t, tp, ctx, concurrent)
		}},
		{Name: seqName, Budget: 4 * time.Minute, Run: func(t *T, tp *Topology, ctx context.Context) *Outcome {
			return sequentialConns(t, tp, ctx, sequential)
		}},
		{Name: "listen-backlog-overflow", Run: backlogOverflow},
		{Name: "syn-flood", Dirs: []Direction{StackServer}, Budget: 2 * time.Minute, Run: synFlood},
	}
}

// echoServer accepts connections on ln and echoes each until EOF, until ln
// is closed; wait returns once every handler has ended.
func echoServer(ln net.Listener) (wait func()) {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				c.SetDeadline(time.Now().Add(2 * time.Minute))
				io.Copy(c, c)
			}()
		}
	}()
	return wg.Wait
}

// echo writes msg on c and reads it back.
func echo(c net.Conn, msg []byte) error {
	if _, err := c.Write(msg); err != nil {
		return err
	}
	back := make([]byte, len(msg))
	if _, err := io.ReadFull(c, back); err != nil {
		return err
	}
	if string(back) != string(msg) {
		return fmt.Errorf("echo came back different")
	}
	return nil
}

// concurrentConns holds n connections open at once, each echoing a
// message, then closes them all.
func concurrentConns(t *T, tp *Topology, ctx context.Context, n int) *Outcome {
	o := newOutcome()
	ln, err := tp.Server.Listen(false, ListenOptions{})
	require.NoError(t, err)
	wait := echoServer(ln)
	defer wait()
	defer ln.Close()
	addr := addrOf(ln)
	start := time.Now()
	conns := make([]TCPConn, n)
	errs := make([]error, n)
	// Dials run 32 at a time: a kernel dial holds an OS thread switched
	// into its namespace for its duration.
	sem := make(chan struct{}, 32)
	var wg sync.WaitGroup
	for i := range conns {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			dctx, cancel := context.WithTimeout(ctx, ioTimeout)
			defer cancel()
			conns[i], errs[i] = tp.Client.Dial(dctx, addr, DialOptions{})
		}()
	}
	wg.Wait()
	defer func() {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
	}()
	established := 0
	for _, err := range errs {
		if err == nil {
			established++
		}
	}
	o.Fact("established", established)
	// All open at once: each echoes, concurrently.
	var echoed sync.WaitGroup
	okCount := make(chan struct{}, n)
	for i, c := range conns {
		if c == nil {
			continue
		}
		echoed.Add(1)
		go func() {
			defer echoed.Done()
			c.SetDeadline(time.Now().Add(time.Minute))
			msg := make([]byte, 100)
			binary.BigEndian.PutUint64(msg, uint64(i))
			if echo(c, msg) == nil {
				okCount <- struct{}{}
			}
		}()
	}
	echoed.Wait()
	o.Fact("echoed", len(okCount))
	o.Elapsed("open and echo", time.Since(start))
	if established < n {
		t.Errorf("%d of %d dials failed; first: %v", n-established, n, firstErr(errs))
	}
	return o
}

func firstErr(errs []error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// sequentialConns connects and closes n times in a row, the client closing
// first (so its side holds TIME_WAIT), and checks the ports never repeat.
func sequentialConns(t *T, tp *Topology, ctx context.Context, n int) *Outcome {
	o := newOutcome()
	ln, err := tp.Server.Listen(false, ListenOptions{})
	require.NoError(t, err)
	defer ln.Close()
	ports := map[uint16]bool{}
	start := time.Now()
	done := 0
	var failure error
	for i := 0; i < n && ctx.Err() == nil; i++ {
		c, s, err := dialAccept(ctx, tp.Client, ln, DialOptions{})
		if err != nil {
			failure = fmt.Errorf("connection %d: %w", i, err)
			break
		}
		local, _ := portsOf(c)
		ports[local] = true
		c.Close()
		s.SetReadDeadline(time.Now().Add(ioTimeout))
		_, err = s.Read(make([]byte, 1))
		s.Close()
		if err != io.EOF {
			failure = fmt.Errorf("connection %d: server read %v, want EOF", i, err)
			break
		}
		done++
	}
	require.NoError(t, failure)
	o.Fact("completed", done)
	o.Fact("distinct client ports", yesNo(len(ports) == done))
	d := time.Since(start)
	o.Elapsed("connect and close", d)
	o.Note("%d connections in %v (%.0f/s)", done, d.Round(time.Millisecond), float64(done)/d.Seconds())
	return o
}

// backlogOverflow listens with a backlog of 2 without accepting: the accept
// queue takes backlog+1 connections and further SYNs are dropped (dials
// time out); once the server accepts, new dials succeed and every accepted
// connection works.
func backlogOverflow(t *T, tp *Topology, ctx context.Context) *Outcome {
	o := newOutcome()
	ln, err := tp.Server.Listen(false, ListenOptions{Backlog: 2})
	require.NoError(t, err)
	defer ln.Close()
	addr := addrOf(ln)
	var clients []TCPConn
	defer func() {
		for _, c := range clients {
			c.Close()
		}
	}()
	results := ""
	for range 6 {
		c, err := tp.Client.Dial(ctx, addr, DialOptions{Timeout: 300 * time.Millisecond})
		if err == nil {
			clients = append(clients, c)
			results += "+"
		} else {
			results += "-"
		}
		// Let the handshake land in the accept queue before the next SYN.
		time.Sleep(20 * time.Millisecond)
	}
	o.Fact("dials while nobody accepts (+ connected, - timed out)", results)
	// Accept what is queued, then dial again.
	queued := 0
	for range len(clients) {
		ln.SetDeadline(time.Now().Add(ioTimeout))
		s, err := ln.Accept()
		require.NoError(t, err)
		defer s.Close()
		go func() { s.SetDeadline(time.Now().Add(time.Minute)); io.Copy(s, s) }()
		queued++
	}
	o.Fact("accepted from the full queue", queued)
	for _, c := range clients {
		c.SetDeadline(time.Now().Add(ioTimeout))
		require.NoError(t, echo(c, []byte("queued")))
	}
	later := 0
	for range 3 {
		c, s, err := dialAccept(ctx, tp.Client, ln, DialOptions{})
		require.NoError(t, err)
		setDeadline(ioTimeout, c, s)
		go io.Copy(s, s)
		if echo(c, []byte("later")) == nil {
			later++
		}
		c.Close()
		s.Close()
	}
	o.Fact("dials after accepting", later)
	return o
}

// synFlood sends SYNs with spoofed sources (hosts of the subnet that do not
// exist, so SYN-ACKs go nowhere) from the client's namespace to the server:
// its SYN queue fills, SYN cookies must engage, and both an established
// connection and a new one keep working.
func synFlood(t *T, tp *Topology, ctx context.Context) *Outcome {
	o := newOutcome()
	const backlog, syns = 128, 5000
	ln, err := tp.Server.Listen(false, ListenOptions{Backlog: backlog})
	require.NoError(t, err)
	defer ln.Close()
	c, s, err := dialAccept(ctx, tp.Client, ln, DialOptions{})
	require.NoError(t, err)
	defer c.Close()
	defer s.Close()
	setDeadline(time.Minute, c, s)
	go io.Copy(s, s)
	require.NoError(t, echo(c, []byte("before")))

	clientNS := tp.Client.NS()
	require.NotNil(t, clientNS, "the flood comes from the client's kernel")
	raw, err := openRaw(clientNS, false)
	require.NoError(t, err)
	defer raw.close()
	dst := addrOf(ln)
	rng := rand.New(rand.NewPCG(*seedFlag, 0))
	start := time.Now()
	for i := range syns {
		src := netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 18, 0, byte(100 + i%100)}), uint16(1024+rng.IntN(60000)))
		f := frame.TCPFrame(frame.TCPSpec{Src: src, Dst: dst, Seq: rng.Uint32(), Flags: frame.FlagSYN, Window: 64240, Options: frame.MSSOption(1460)})
		require.NoError(t, raw.send(f[frame.EthLen:], dst.Addr()))
	}
	o.Note("%d SYNs sent in %v", syns, time.Since(start).Round(time.Millisecond))
	o.Fact("established connection during the flood", classify(echo(c, []byte("during"))))
	c2, s2, err := dialAccept(ctx, tp.Client, ln, DialOptions{})
	o.Fact("new connection during the flood", classify(err))
	if err == nil {
		defer c2.Close()
		defer s2.Close()
		setDeadline(ioTimeout, c2, s2)
		go io.Copy(s2, s2)
		o.Fact("new connection echoes", classify(echo(c2, []byte("new"))))
	}
	cookies, err := synCookiesSent(tp.Server)
	require.NoError(t, err)
	o.Fact("SYN cookies sent", yesNo(cookies > 0))
	o.Note("%d SYN cookies sent", cookies)
	return o
}

// synCookiesSent reads a host's count of SYN cookies sent.
func synCookiesSent(h Host) (int64, error) {
	if st := h.Stack(); st != nil {
		n, _ := st.ProtocolCounter("TCP.ListenOverflowSynCookieSent")
		return int64(n), nil
	}
	return netstat(h.NS(), "TcpExt", "SyncookiesSent")
}
