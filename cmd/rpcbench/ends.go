package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/polarnet/polarnet/dialer"
	"github.com/polarnet/polarnet/internal/netns"
	"github.com/polarnet/polarnet/link/tap"
	"github.com/polarnet/polarnet/listener"
	"github.com/polarnet/polarnet/polarnet"
)

// The two ends of a benchmark. They run in child processes driven over their
// stdin and stdout (child.go): each end in a process of its own, or both in
// one for the in-memory pipe modes, where both stacks must share a process.
// The orchestrator itself never runs engine code, so a crashing stack fails
// its row, not the whole comparison. The local types here are what the
// children run.

// snap is what an end reports at a mark: counters of its own process and
// stack, subtracted between the two marks.
type snap struct {
	// CPU is the user and system CPU time of the end's process.
	CPU time.Duration `json:"cpu_ns"`
	// Retrans counts TCP segments the end's stack retransmitted; -1 when
	// the end cannot tell its own apart (see -retrans in child.go).
	Retrans int64 `json:"retrans"`
	// Spurious counts loss recoveries the end's stack found needless
	// (gVisor's SpuriousRecovery, the kernel's undo counters); -1 as for
	// Retrans.
	Spurious int64 `json:"spurious"`
	// Drops counts frames the end's link had no room for (TX ring full);
	// -1 for kernel ends.
	Drops int64 `json:"link_drops"`
	// TxFrames counts frames a polarnet end's stack handed its link (a
	// TSO/GSO frame once); -1 for other ends.
	TxFrames int64 `json:"tx_frames"`
	// Errors counts server connections that failed verification, and
	// LastErr says how the last one failed.
	Errors  int64  `json:"errors"`
	LastErr string `json:"last_error,omitempty"`
	// Received counts the stream bytes a server received intact.
	Received uint64 `json:"received"`
}

type serverEnd interface {
	Addr() string
	Snap(ctx context.Context) (snap, error)
	Close() error
}

type clientEnd interface {
	// Connect opens the test's connections to the server at addr.
	Connect(ctx context.Context, addr string) error
	// Go starts the load (warmup); connections are failed after maxRun.
	Go(ctx context.Context, maxRun time.Duration) error
	// Mark starts, then stops, the measured window.
	Mark(ctx context.Context) (snap, error)
	// Finish waits for the load to drain and returns what was measured.
	Finish(ctx context.Context) (loadResult, error)
	Close() error
}

// netEnd is one side's network: kernel sockets, or a stack.
type netEnd struct {
	listen   func(addr string) (net.Listener, error)
	dialer   func(addr string) (dialFunc, error)
	retrans  func() int64
	spurious func() int64    // nil: not known
	drops    func() int64    // nil: not known (kernel)
	frames   func() int64    // TX frames; nil: not known (kernel, vanilla)
	dev      string          // a TAP device the end created, for the orchestrator to plug
	stack    *polarnet.Stack // nil: not a polarnet end
	close    func() error
}

// Kinds of network an end can use (-net).
const (
	netKernel      = "kernel"       // Go's net
	netPolarnet    = "polarnet"     // dialer/listener: POLARNET_* environment, else the kernel
	netPolarnetTAP = "polarnet-tap" // a stack on a TAP device of its own (children of p2k, k2p)
)

// kernelNet is Go's net in this process's namespace. With retrans false the
// end reports no retransmits (its namespace's counters also hold the peer's).
func kernelNet(retrans bool) *netEnd {
	r, sp := kernelRetrans, kernelSpurious
	if !retrans {
		r, sp = func() int64 { return -1 }, nil
	}
	return &netEnd{
		listen: func(addr string) (net.Listener, error) {
			var lc net.ListenConfig
			return lc.Listen(context.Background(), "tcp", addr)
		},
		dialer: func(addr string) (dialFunc, error) {
			var d net.Dialer
			return func(ctx context.Context) (net.Conn, error) { return d.DialContext(ctx, "tcp", addr) }, nil
		},
		retrans:  r,
		spurious: sp,
		close:    func() error { return nil },
	}
}

// envNet is polarnet's drop-in dialer and listener on the stack the
// POLARNET_* environment describes (Go's net when it describes none).
func envNet() (*netEnd, error) {
	st, err := polarnet.Default()
	if err != nil {
		return nil, err
	}
	if st != nil {
		ne := stackNet(st)
		ne.listen = func(addr string) (net.Listener, error) { return listener.Listen("tcp", addr) }
		ne.dialer = envDialer
		ne.close = func() error { return nil } // the default stack lives as long as the process
		return ne, nil
	}
	return &netEnd{
		listen:   func(addr string) (net.Listener, error) { return listener.Listen("tcp", addr) },
		dialer:   envDialer,
		retrans:  kernelRetrans,
		spurious: kernelSpurious,
		close:    func() error { return nil },
	}, nil
}

func envDialer(addr string) (dialFunc, error) {
	var d dialer.Dialer
	return func(ctx context.Context) (net.Conn, error) { return d.DialContext(ctx, "tcp", addr) }, nil
}

// stackNet is a polarnet stack; closing the end closes it.
func stackNet(st *polarnet.Stack) *netEnd {
	return &netEnd{
		listen: func(addr string) (net.Listener, error) {
			ap, err := netip.ParseAddrPort(addr)
			if err != nil {
				return nil, err
			}
			return st.ListenTCP("tcp4", ap, 0, net.KeepAliveConfig{})
		},
		dialer: func(addr string) (dialFunc, error) {
			ap, err := netip.ParseAddrPort(addr)
			if err != nil {
				return nil, err
			}
			return func(ctx context.Context) (net.Conn, error) {
				return st.DialTCP(ctx, "tcp4", netip.AddrPort{}, ap)
			}, nil
		},
		retrans:  func() int64 { return stackRetrans(st) },
		spurious: func() int64 { return int64(st.Stats().Total.SpuriousRecovery) },
		drops:    func() int64 { return int64(st.Stats().Total.TxRingFull) },
		frames:   func() int64 { return int64(st.Stats().Total.TxFrames) },
		stack:    st,
		close:    st.Close,
	}
}

// vanillaNet is a vanilla gVisor stack with gonet conns.
func vanillaNet(v *vanillaStack) *netEnd {
	return &netEnd{
		listen: func(addr string) (net.Listener, error) {
			ap, err := netip.ParseAddrPort(addr)
			if err != nil {
				return nil, err
			}
			return v.listen(ap)
		},
		dialer: func(addr string) (dialFunc, error) {
			ap, err := netip.ParseAddrPort(addr)
			if err != nil {
				return nil, err
			}
			return v.dialer(ap), nil
		},
		retrans:  v.retrans,
		spurious: func() int64 { return int64(v.st.Stats().TCP.SpuriousRecovery.Value()) },
		drops:    v.ep.drops.Load,
		close:    v.Close,
	}
}

// tapNet creates a TAP device in this process's namespace (the host's) with
// a polarnet stack on it at tapStack; the orchestrator moves the device's
// kernel side into the peer's namespace (plugKernelSide).
// ackOff turns the stack's ACK filter off; queues is the device's queue
// pairs, so the stack's shards.
func tapNet(mtu int, poll polarnet.PollMode, ackOff bool, queues int) (*netEnd, error) {
	link, err := tap.New(tap.Config{Name: netns.UniqueName("pnb"), MTU: mtu, Queues: queues})
	if err != nil {
		return nil, err
	}
	dev := link.Info().Name
	st, err := polarnet.New(polarnet.Config{
		Link:  link,
		Addrs: []netip.Prefix{tapStack},
		Poll:  poll,
		ACK:   polarnet.ACKConfig{DisableFilter: ackOff},
	})
	if err != nil {
		return nil, err
	}
	ne := stackNet(st)
	ne.dev = dev
	return ne, nil
}

// snap reads this process's CPU time and the end's counters.
func (ne *netEnd) snap() snap {
	s := snap{CPU: selfCPU(), Retrans: ne.retrans(), Spurious: -1, Drops: -1, TxFrames: -1}
	if ne.spurious != nil {
		s.Spurious = ne.spurious()
	}
	if ne.drops != nil {
		s.Drops = ne.drops()
	}
	if ne.frames != nil {
		s.TxFrames = ne.frames()
	}
	return s
}

// stackRetrans sums the TCP segments a stack's shards retransmitted on
// the wire.
func stackRetrans(st *polarnet.Stack) int64 {
	return int64(st.Stats().Total.Retransmits)
}

// localServer serves on a netEnd in this process.
type localServer struct {
	ne   *netEnd
	srv  *server
	addr string
}

func newLocalServer(ne *netEnd, addr string) (*localServer, error) {
	ln, err := ne.listen(addr)
	if err != nil {
		return nil, err
	}
	return &localServer{ne: ne, srv: serve(ln), addr: ln.Addr().String()}, nil
}

func (s *localServer) Addr() string { return s.addr }

func (s *localServer) Snap(context.Context) (snap, error) {
	n, last := s.srv.errors()
	sn := s.ne.snap()
	sn.Errors, sn.LastErr = n, last
	sn.Received = s.srv.received.Load()
	return sn, nil
}

// Close stops serving; the netEnd stays open (its owner closes it).
func (s *localServer) Close() error { return s.srv.Close() }

// localClient runs a load generator on a netEnd in this process.
type localClient struct {
	ne   *netEnd
	test testSpec
	gen  *loadGen
}

func (c *localClient) Connect(ctx context.Context, addr string) error {
	d, err := c.ne.dialer(addr)
	if err != nil {
		return err
	}
	c.gen = newLoadGen(c.test, d)
	return c.gen.Connect(ctx)
}

func (c *localClient) Go(_ context.Context, maxRun time.Duration) error {
	if c.gen == nil {
		return errors.New("go before connect")
	}
	c.gen.Go(maxRun)
	return nil
}

func (c *localClient) Mark(context.Context) (snap, error) {
	if c.gen == nil {
		return snap{}, errors.New("mark before connect")
	}
	c.gen.Mark()
	return c.ne.snap(), nil
}

func (c *localClient) Finish(ctx context.Context) (loadResult, error) {
	if c.gen == nil {
		return loadResult{}, errors.New("finish before connect")
	}
	return c.gen.Finish(ctx)
}

func (c *localClient) Close() error {
	if c.gen != nil {
		c.gen.Close()
	}
	return nil
}

// parsePoll parses a polarnet poll mode name.
func parsePoll(s string) (polarnet.PollMode, error) {
	for _, m := range []polarnet.PollMode{polarnet.PollAdaptive, polarnet.PollBusy, polarnet.PollBlocking} {
		if m.String() == s {
			return m, nil
		}
	}
	return 0, fmt.Errorf("unknown poll mode %q (adaptive, busy or blocking)", s)
}
