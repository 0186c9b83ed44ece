package polarnet

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"

	"github.com/polarnet/polarnet/link"
)

// Stack is a userspace TCP/IP stack on one link: one shard (a gVisor stack
// with a poller) per link queue pair, all with the same addresses.
type Stack struct {
	cfg     Config
	shards  []*shard
	steerer link.Steerer // nil: the link's spread is unknown, PortSteering applies
	conns   atomic.Int64
	// kernelDials and kernelAccepts: see Stats.
	kernelDials, kernelAccepts atomic.Uint64
	// ownOrBroadcast: see the function of that name.
	ownOrBroadcast []netip.Addr
	// sacks follows the flows past their FIN, for every shard: a flow's
	// frames may arrive on a shard other than its own (finsack.go).
	sacks *finSACK
	// windows follows the flows whose peer closed its window, likewise
	// (closedwnd.go).
	windows *closedWindows
	// allowed tells the link the connections while it sheds stray
	// segments; nil when it cannot (shed.go).
	allowed *allowedFlows
	// accepts holds sharded listeners' accept queues to their limit
	// (acceptqueue.go).
	accepts acceptQueues

	mu        sync.Mutex
	closed    bool
	listeners map[*TCPListener]struct{}
	closeOnce sync.Once
	closeErr  error
}

// New builds a stack on cfg.Link, one shard per queue pair of the link, and
// starts their pollers. On error the link is closed.
func New(cfg Config) (*Stack, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		if cfg.Link != nil {
			cfg.Link.Close()
		}
		return nil, err
	}
	queues := cfg.Link.Queues()
	if len(queues) == 0 {
		cfg.Link.Close()
		return nil, fmt.Errorf("polarnet: link %q has no queues", cfg.Link.Info().Name)
	}
	s := &Stack{cfg: cfg, listeners: make(map[*TCPListener]struct{}), ownOrBroadcast: ownOrBroadcast(cfg.Addrs), sacks: newFinSACK(), windows: newClosedWindows()}
	if l, ok := queues[0].(link.StrayShedder); ok {
		s.allowed = &allowedFlows{link: l}
	}
	s.steerer, _ = cfg.Link.(link.Steerer)
	for i, q := range queues {
		sh, err := newShard(s, i, q)
		if err != nil {
			for _, prev := range s.shards {
				prev.stack.Destroy()
			}
			cfg.Link.Close()
			return nil, err
		}
		s.shards = append(s.shards, sh)
	}
	for _, sh := range s.shards {
		sh.start()
	}
	return s, nil
}

// Shutdown closes the listeners, then waits until the application has
// closed every connection or ctx is done, and then closes the stack (which
// resets the connections left). It returns ctx's error if it had to reset
// any.
func (s *Stack) Shutdown(ctx context.Context) error {
	s.closeListeners()
	tick := time.NewTicker(shutdownPollInterval)
	defer tick.Stop()
	for s.conns.Load() > 0 {
		select {
		case <-ctx.Done():
			s.Close()
			return ctx.Err()
		case <-tick.C:
		}
	}
	return s.Close()
}

// shutdownPollInterval is how often Shutdown looks for remaining conns.
const shutdownPollInterval = 10 * time.Millisecond

func (s *Stack) closeListeners() {
	s.mu.Lock()
	listeners := make([]*TCPListener, 0, len(s.listeners))
	for l := range s.listeners {
		listeners = append(listeners, l)
	}
	s.mu.Unlock()
	for _, l := range listeners {
		l.Close()
	}
}

// Close closes the stack's listeners, resets its connections, stops the
// pollers and closes the link. It waits until every goroutine the stack
// started has ended.
func (s *Stack) Close() error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		s.mu.Unlock()
		s.closeListeners()
		// Abort endpoints while pollers still run, so resets reach peers.
		for _, sh := range s.shards {
			sh.closeStack()
		}
		for _, sh := range s.shards {
			sh.stop()
		}
		if s.allowed != nil {
			s.allowed.wg.Wait()
		}
		for _, sh := range s.shards {
			sh.drainHandoffs()
		}
		s.closeErr = s.cfg.Link.Close()
		for _, sh := range s.shards {
			sh.stack.Wait()
		}
	})
	return s.closeErr
}

// reserveConn counts a connection about to open; false when MaxConns are.
func (s *Stack) reserveConn() bool {
	if s.conns.Add(1) > int64(s.cfg.MaxConns) {
		s.conns.Add(-1)
		return false
	}
	return true
}

func (s *Stack) releaseConn() { s.conns.Add(-1) }

// errTooManyConns is what a dial or accept beyond Config.MaxConns returns,
// the errno of a process out of file descriptors.
func errTooManyConns(call string) error { return os.NewSyscallError(call, syscall.EMFILE) }

// Addrs returns the stack's addresses.
func (s *Stack) Addrs() []netip.Prefix { return append([]netip.Prefix(nil), s.cfg.Addrs...) }

// MTU returns the IP MTU the stack uses.
func (s *Stack) MTU() int { return s.cfg.MTU }

func (s *Stack) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// addrOf returns the host address of prefix p (as configured, not masked).
func (cfg *Config) addrOf(masked netip.Prefix) netip.Addr {
	for _, p := range cfg.Addrs {
		if p.Masked() == masked {
			return p.Addr()
		}
	}
	return masked.Addr()
}

func netMask(p netip.Prefix) []byte {
	bits := p.Addr().BitLen()
	mask := make([]byte, bits/8)
	for i := range p.Bits() {
		mask[i/8] |= 0x80 >> (i % 8)
	}
	return mask
}

func applyTCPOptions(st *stack.Stack, t *TCPConfig) error {
	sack := tcpip.TCPSACKEnabled(true)
	cc := tcpip.CongestionControlOption(t.CongestionControl)
	if cc == "" {
		cc = ccByPath
	}
	recovery := tcpip.TCPRecovery(0)
	if t.Recovery == RecoveryRACK {
		recovery = tcpip.TCPRACKLossDetection | tcpip.TCPRACKStaticReoWnd
	}
	moderate := tcpip.TCPModerateReceiveBufferOption(true)
	minRTO := tcpip.TCPMinRTOOption(t.MinRTO)
	send := tcpip.TCPSendBufferSizeRangeOption{Min: t.SendBuffer.Min, Default: t.SendBuffer.Default, Max: t.SendBuffer.Max}
	recv := tcpip.TCPReceiveBufferSizeRangeOption{Min: t.ReceiveBuffer.Min, Default: t.ReceiveBuffer.Default, Max: t.ReceiveBuffer.Max}
	opts := []tcpip.SettableTransportProtocolOption{&sack, &cc, &recovery, &moderate, &minRTO, &send, &recv}
	for _, o := range opts {
		if err := st.SetTransportProtocolOption(tcp.ProtocolNumber, o); err != nil {
			return fmt.Errorf("polarnet: TCP option %T: %s", o, err)
		}
	}
	return nil
}
