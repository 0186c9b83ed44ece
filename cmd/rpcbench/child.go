package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/polarnet/polarnet/internal/netns"
)

// Ends in child processes. The orchestrator re-executes its own binary as
// `rpcbench server -control ...` or `rpcbench client -control ...`, inside
// a network namespace with `ip netns exec` where the end is a kernel one, so
// that every end's CPU time is its own process's (getrusage in the child,
// reported at each mark); `rpcbench pair -control ...` holds both ends of a
// pipe mode. The child answers requests, one JSON object per
// line on stdin, with one JSON reply per line on stdout; its first line is
// a hello with its address and device. It exits when stdin closes, and is
// killed when the orchestrator dies (parent-death signal) or deletes its
// namespace.

// childEnv is set in a child's environment. Test binaries check it to run
// the rpcbench command line instead of their tests.
const childEnv = "RPCBENCH_CHILD"

// ctlRequest is a request to a child.
type ctlRequest struct {
	Cmd    string        `json:"cmd"` // snap (server); connect, go, mark, finish (client)
	Addr   string        `json:"addr,omitempty"`
	MaxRun time.Duration `json:"max_run_ns,omitempty"`
}

// ctlReply is a child's reply, and its hello.
type ctlReply struct {
	Err    string      `json:"err,omitempty"`
	Addr   string      `json:"addr,omitempty"`
	Dev    string      `json:"dev,omitempty"`
	Snap   *snap       `json:"snap,omitempty"`
	Result *loadResult `json:"result,omitempty"`
}

// Bounds on the control protocol.
const (
	childStartTimeout = 15 * time.Second
	childCallTimeout  = 30 * time.Second
	childExitTimeout  = 5 * time.Second
)

// child is a running child process.
type child struct {
	name    string
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	enc     *json.Encoder
	replies chan ctlReply // closed when stdout ends
	stderr  *tailWriter
	hello   ctlReply

	closeOnce sync.Once
	closeErr  error
}

// startChild runs this program with args in namespace ns (the current one
// if nil) and waits for its hello.
//
// With echo set, the child's stderr is copied there as well.
func startChild(ctx context.Context, exe string, ns *netns.NS, name string, echo io.Writer, args ...string) (*child, error) {
	var cmd *exec.Cmd
	if ns != nil {
		cmd = exec.Command("ip", append([]string{"netns", "exec", ns.Name, exe}, args...)...)
	} else {
		cmd = exec.Command(exe, args...)
	}
	cmd.Env = append(os.Environ(), childEnv+"=1")
	// Its own process group: a terminal's ^C reaches the orchestrator only,
	// which tears the run down in order. Pdeathsig: it dies with us.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	c := &child{name: name, cmd: cmd, replies: make(chan ctlReply, 1), stderr: &tailWriter{max: 4 << 10, echo: echo}}
	cmd.Stderr = c.stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	c.stdin, c.enc = stdin, json.NewEncoder(stdin)
	go func() {
		defer close(c.replies)
		dec := json.NewDecoder(bufio.NewReader(stdout))
		for {
			var r ctlReply
			if err := dec.Decode(&r); err != nil {
				return
			}
			c.replies <- r
		}
	}()
	hello, err := c.receive(ctx, childStartTimeout)
	if err != nil {
		return nil, errors.Join(err, c.Close())
	}
	c.hello = hello
	return c, nil
}

// call sends a request and waits for the reply.
func (c *child) call(ctx context.Context, req ctlRequest) (ctlReply, error) {
	if err := c.enc.Encode(req); err != nil {
		return ctlReply{}, fmt.Errorf("%s: sending %s: %w%s", c.name, req.Cmd, err, c.stderr.suffix())
	}
	return c.receive(ctx, childCallTimeout)
}

func (c *child) receive(ctx context.Context, timeout time.Duration) (ctlReply, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case r, ok := <-c.replies:
		if !ok {
			return r, fmt.Errorf("%s exited%s", c.name, c.stderr.suffix())
		}
		if r.Err != "" {
			return r, fmt.Errorf("%s: %s", c.name, r.Err)
		}
		return r, nil
	case <-t.C:
		return ctlReply{}, fmt.Errorf("%s: no reply within %v%s", c.name, timeout, c.stderr.suffix())
	case <-ctx.Done():
		return ctlReply{}, ctx.Err()
	}
}

// Close closes the child's stdin, which makes it shut down, and kills it if
// it has not exited within childExitTimeout.
func (c *child) Close() error {
	c.closeOnce.Do(func() {
		c.stdin.Close()
		exited := make(chan error, 1)
		go func() { exited <- c.cmd.Wait() }()
		select {
		case err := <-exited:
			if err != nil {
				c.closeErr = fmt.Errorf("%s: %w%s", c.name, err, c.stderr.suffix())
			}
		case <-time.After(childExitTimeout):
			c.cmd.Process.Kill()
			<-exited
			c.closeErr = fmt.Errorf("%s did not exit within %v; killed%s", c.name, childExitTimeout, c.stderr.suffix())
		}
	})
	return c.closeErr
}

// remoteServer is a server end in a child.
type remoteServer struct{ *child }

func (s remoteServer) Addr() string { return s.hello.Addr }

func (s remoteServer) Snap(ctx context.Context) (snap, error) { return s.callSnap(ctx, "snap") }

// callSnap sends a command answered with counters.
func (c *child) callSnap(ctx context.Context, cmd string) (snap, error) {
	r, err := c.call(ctx, ctlRequest{Cmd: cmd})
	if err != nil {
		return snap{}, err
	}
	if r.Snap == nil {
		return snap{}, fmt.Errorf("%s: %s reply without counters", c.name, cmd)
	}
	return *r.Snap, nil
}

// remoteClient is a client end in a child.
type remoteClient struct{ *child }

func (c remoteClient) Connect(ctx context.Context, addr string) error {
	_, err := c.call(ctx, ctlRequest{Cmd: "connect", Addr: addr})
	return err
}

func (c remoteClient) Go(ctx context.Context, maxRun time.Duration) error {
	_, err := c.call(ctx, ctlRequest{Cmd: "go", MaxRun: maxRun})
	return err
}

func (c remoteClient) Mark(ctx context.Context) (snap, error) { return c.callSnap(ctx, "mark") }

func (c remoteClient) Finish(ctx context.Context) (loadResult, error) {
	r, err := c.call(ctx, ctlRequest{Cmd: "finish"})
	if err != nil {
		return loadResult{}, err
	}
	if r.Result == nil {
		return loadResult{}, fmt.Errorf("%s: finish reply without a result", c.name)
	}
	return *r.Result, nil
}

// controlLoop is the child's side: it sends hello, then answers requests
// with handle until stdin ends.
func controlLoop(in io.Reader, out io.Writer, hello ctlReply, handle func(ctlRequest) ctlReply) error {
	enc := json.NewEncoder(out)
	if err := enc.Encode(hello); err != nil {
		return err
	}
	dec := json.NewDecoder(bufio.NewReader(in))
	for {
		var req ctlRequest
		if err := dec.Decode(&req); err != nil {
			if err == io.EOF {
				return nil
			}
			return err
		}
		if err := enc.Encode(handle(req)); err != nil {
			return err
		}
	}
}

// errReply turns an error into a reply.
func errReply(err error) ctlReply {
	if err == nil {
		return ctlReply{}
	}
	return ctlReply{Err: err.Error()}
}

// tailWriter keeps the first and the last max bytes written to it (a
// child's stderr, for error messages: a panic's message and first stack
// come first, the latest complaints last), and copies everything to echo if
// set.
type tailWriter struct {
	mu         sync.Mutex
	max        int
	head, tail []byte
	cut        bool // bytes were dropped between head and tail
	echo       io.Writer
}

func (w *tailWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.echo != nil {
		w.echo.Write(p)
	}
	rest := p
	if n := min(w.max-len(w.head), len(rest)); n > 0 {
		w.head = append(w.head, rest[:n]...)
		rest = rest[n:]
	}
	w.tail = append(w.tail, rest...)
	if over := len(w.tail) - w.max; over > 0 {
		w.tail = append(w.tail[:0], w.tail[over:]...)
		w.cut = true
	}
	return len(p), nil
}

// suffix is what was kept, as the end of an error message, or "".
func (w *tailWriter) suffix() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := string(w.head)
	if w.cut {
		s += "\n[...]\n"
	}
	s = strings.TrimSpace(s + string(w.tail))
	if s == "" {
		return ""
	}
	return "; its stderr: " + s
}
