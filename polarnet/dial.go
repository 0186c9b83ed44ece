package polarnet

import (
	"context"
	"math/rand/v2"
	"net"
	"net/netip"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv6"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
	"gvisor.dev/gvisor/pkg/waiter"
)

// DialTCP connects to raddr. network ("tcp", "tcp4" or "tcp6") only names
// the network in errors; the address family comes from raddr. laddr may be
// the zero value (any address, an ephemeral port). The context bounds the
// connection attempt only.
func (s *Stack) DialTCP(ctx context.Context, network string, laddr, raddr netip.AddrPort) (*TCPConn, error) {
	raddr = s.local(unmap(raddr))
	laddr = unmap(laddr)
	var src net.Addr
	if laddr.IsValid() {
		src = net.TCPAddrFromAddrPort(laddr)
	}
	dst := net.TCPAddrFromAddrPort(raddr)
	fail := func(err error) (*TCPConn, error) { return nil, opError("dial", network, src, dst, err) }
	if err := ctx.Err(); err != nil {
		return fail(ContextError(err))
	}
	if s.isClosed() {
		return fail(net.ErrClosed)
	}
	if !s.reserveConn() {
		return fail(errTooManyConns("socket"))
	}
	c, err := s.dialTCP(ctx, network, laddr, raddr)
	if err != nil {
		s.releaseConn()
		return fail(err)
	}
	return c, nil
}

// dialTCP connects within a reserved connection slot; errors are the
// *os.SyscallError or context error for DialTCP's *net.OpError.
func (s *Stack) dialTCP(ctx context.Context, network string, laddr, raddr netip.AddrPort) (*TCPConn, error) {
	sh := s.dialShard(ctx, laddr, raddr)
	wq := new(waiter.Queue)
	ep, terr := sh.stack.NewEndpoint(tcp.ProtocolNumber, netProto(raddr.Addr()), wq)
	if terr != nil {
		return nil, syscallErr("socket", terr)
	}
	if terr := s.bindForShard(ep, sh, laddr, raddr); terr != nil {
		ep.Close()
		return nil, syscallErr("bind", terr)
	}
	entry, connected := waiter.NewChannelEntry(waiter.WritableEvents | waiter.EventHUp | waiter.EventErr)
	wq.EventRegister(&entry)
	defer wq.EventUnregister(&entry)
	terr = ep.Connect(fullAddr(raddr))
	if _, ok := terr.(*tcpip.ErrConnectStarted); ok {
		select {
		case <-connected:
			terr = ep.LastError()
		case <-ctx.Done():
			ep.Close()
			return nil, ContextError(ctx.Err())
		}
	}
	if terr != nil {
		ep.Close()
		return nil, syscallErr("connect", terr)
	}
	return newTCPConn(ep, wq, network, sh), nil
}

type shardHintKey struct{}

// WithShard returns a context asking DialTCP to place the connection on
// shard i (modulo the number of shards) instead of the least loaded one.
func WithShard(ctx context.Context, i int) context.Context {
	return context.WithValue(ctx, shardHintKey{}, i)
}

// dialShard picks the shard for a new connection: the one a fixed local
// port steers to, the caller's hint, or the one with the fewest connections.
func (s *Stack) dialShard(ctx context.Context, laddr, raddr netip.AddrPort) *shard {
	n := len(s.shards)
	if n == 1 {
		return s.shards[0]
	}
	if laddr.Port() != 0 {
		return s.shards[s.flowOwner(s.sourceFor(laddr, raddr), laddr.Port(), tcpipAddr(raddr.Addr()), raddr.Port())]
	}
	if i, ok := ctx.Value(shardHintKey{}).(int); ok {
		return s.shards[(i%n+n)%n]
	}
	best := s.shards[rand.IntN(n)]
	for _, sh := range s.shards {
		if sh.conns.Load() < best.conns.Load() {
			best = sh
		}
	}
	return best
}

// bindForShard binds a dialing endpoint so that the peer's replies arrive on
// sh's queue: with several shards it picks the local port itself, among the
// ephemeral ports that steer to sh. A single shard leaves it to gVisor.
func (s *Stack) bindForShard(ep tcpip.Endpoint, sh *shard, laddr, raddr netip.AddrPort) tcpip.Error {
	if len(s.shards) == 1 || laddr.Port() != 0 {
		if !laddr.IsValid() {
			return nil
		}
		return ep.Bind(fullAddr(laddr))
	}
	src := s.sourceFor(laddr, raddr)
	remote := tcpipAddr(raddr.Addr())
	lo, hi := sh.stack.PortRange()
	var err tcpip.Error = &tcpip.ErrNoPortAvailable{}
	for range maxPortTries {
		port := lo + uint16(rand.IntN(int(hi-lo)+1))
		if s.flowOwner(src, port, remote, raddr.Port()) != sh.id {
			continue
		}
		bind := tcpip.FullAddress{Port: port}
		if laddr.Addr().IsValid() && !laddr.Addr().IsUnspecified() {
			bind.Addr = tcpipAddr(laddr.Addr())
		}
		if err = ep.Bind(bind); err == nil {
			return nil
		}
		if _, inUse := err.(*tcpip.ErrPortInUse); !inUse {
			return err
		}
	}
	return err
}

// maxPortTries bounds the search for a free local port that steers right.
const maxPortTries = 1024

// sourceFor is the local address a connection to raddr uses: laddr's, or
// the stack's first address of the family.
func (s *Stack) sourceFor(laddr, raddr netip.AddrPort) tcpip.Address {
	if a := laddr.Addr(); a.IsValid() && !a.IsUnspecified() {
		return tcpipAddr(a)
	}
	for _, p := range s.cfg.Addrs {
		if p.Addr().Is4() == raddr.Addr().Is4() {
			return tcpipAddr(p.Addr())
		}
	}
	return tcpip.Address{}
}

func tcpipAddr(a netip.Addr) tcpip.Address { return tcpip.AddrFromSlice(a.AsSlice()) }

// local replaces an unspecified destination by the stack's own address of
// the same family, as the kernel treats a connect to 0.0.0.0 or ::.
func (s *Stack) local(ap netip.AddrPort) netip.AddrPort {
	if !ap.Addr().IsUnspecified() {
		return ap
	}
	for _, p := range s.cfg.Addrs {
		if p.Addr().Is4() == ap.Addr().Is4() {
			return netip.AddrPortFrom(p.Addr(), ap.Port())
		}
	}
	return ap
}

// ListenTCP listens on laddr on every shard. An unspecified address with
// network "tcp" listens on IPv4 and IPv6, as Go's net does; port 0 picks a
// free port. backlog <= 0 takes 4096, like Linux's default somaxconn. The
// accept queue holds backlog+1 connections, as Linux's does, over all
// shards (acceptqueue.go).
func (s *Stack) ListenTCP(network string, laddr netip.AddrPort, backlog int, keepAlive net.KeepAliveConfig) (*TCPListener, error) {
	laddr = unmap(laddr)
	if backlog <= 0 {
		backlog = 4096
	}
	l := &TCPListener{
		network:   network,
		keepAlive: keepAlive,
		deadline:  newDeadline(nil),
		ready:     make(chan struct{}, 1),
		closed:    make(chan struct{}),
		stack:     s,
	}
	fail := func(err error) (*TCPListener, error) {
		l.mu.Lock()
		l.closeEndpoints()
		l.mu.Unlock()
		return nil, opError("listen", network, nil, net.TCPAddrFromAddrPort(laddr), err)
	}
	if s.isClosed() {
		return fail(net.ErrClosed)
	}
	proto, dualStack := listenProto(network, laddr.Addr())
	// gVisor takes Listen's argument as the accept queue's capacity; Linux
	// (and gVisor's own listen(2)) queues backlog+1. With several shards
	// each listener gets its share (acceptqueue.go).
	capacity := backlog + 1
	// mu keeps a spill (acceptqueue.go) from reading l.eps while they are
	// made.
	l.mu.Lock()
	for retries := ephemeralListenRetries; ; retries-- {
		if len(s.shards) > 1 {
			l.queue = s.accepts.newQueue(backlog+1, len(s.shards))
			capacity = l.queue.capacity
		}
		retry, err := s.listenOnShards(l, laddr, proto, dualStack, capacity)
		if err == nil {
			break
		}
		l.closeEndpoints()
		if !retry || retries == 0 {
			l.mu.Unlock()
			return fail(err)
		}
	}
	l.mu.Unlock()
	a, _ := l.eps[0].ep.GetLocalAddress()
	l.addr = net.TCPAddrFromAddrPort(boundAddr(a, proto))
	if l.queue != nil {
		l.queue.listen(boundTo(laddr), a.Port)
	}
	if !s.track(l) {
		return fail(net.ErrClosed)
	}
	return l, nil
}

// ephemeralListenRetries bounds ListenTCP's further attempts to find an
// ephemeral port free on every shard.
const ephemeralListenRetries = 16

// listenOnShards adds to l a listening endpoint on every shard, all on
// laddr's port or, for port 0, on the one the first shard picks. retry
// reports a failure worth another attempt: that pick was taken on a later
// shard, by one of its own conns.
func (s *Stack) listenOnShards(l *TCPListener, laddr netip.AddrPort, proto tcpip.NetworkProtocolNumber, dualStack bool, capacity int) (retry bool, err error) {
	port := laddr.Port()
	for _, sh := range s.shards {
		wq := new(waiter.Queue)
		ep, terr := sh.stack.NewEndpoint(tcp.ProtocolNumber, proto, wq)
		if terr != nil {
			return false, syscallErr("socket", terr)
		}
		idx := len(l.eps)
		entry := waiter.NewFunctionEntry(waiter.ReadableEvents|waiter.EventHUp, func(m waiter.EventMask) {
			// gVisor notifies a listener of exactly ReadableEvents once
			// for each connection it queues; closing adds EventHUp.
			if m == waiter.ReadableEvents && l.queue != nil {
				l.spillFrom(l.queue.queuedOn(idx))
			}
			l.notify()
		})
		wq.EventRegister(&entry)
		l.eps = append(l.eps, listenEndpoint{ep: ep, wq: wq, entry: &entry, shard: sh})
		if proto == ipv6.ProtocolNumber {
			ep.SocketOptions().SetV6Only(!dualStack)
		}
		bind := tcpip.FullAddress{Addr: boundTo(laddr), Port: port}
		if terr := ep.Bind(bind); terr != nil {
			_, inUse := terr.(*tcpip.ErrPortInUse)
			return inUse && laddr.Port() == 0 && len(l.eps) > 1, syscallErr("bind", terr)
		}
		if terr := ep.Listen(capacity); terr != nil {
			return false, syscallErr("listen", terr)
		}
		if port == 0 {
			// Every shard listens on the port the first one was given.
			a, _ := ep.GetLocalAddress()
			port = a.Port
		}
	}
	return false, nil
}

// boundTo is the address a listener on laddr binds: zero for any.
func boundTo(laddr netip.AddrPort) tcpip.Address {
	if !laddr.Addr().IsValid() || laddr.Addr().IsUnspecified() {
		return tcpip.Address{}
	}
	return tcpip.AddrFromSlice(laddr.Addr().AsSlice())
}

// track registers a listener so Stack.Close can close it; false if the stack
// is already closed.
func (s *Stack) track(l *TCPListener) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.listeners[l] = struct{}{}
	return true
}

func (s *Stack) untrack(l *TCPListener) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.listeners, l)
}

// listenProto picks the endpoint family for a listening or unconnected
// socket: IPv6 dual-stack for an unspecified "tcp"/"udp" address.
func listenProto(network string, a netip.Addr) (proto tcpip.NetworkProtocolNumber, dualStack bool) {
	last := network[len(network)-1]
	switch {
	case last == '4' || (a.IsValid() && a.Is4()):
		return ipv4.ProtocolNumber, false
	case last == '6':
		return ipv6.ProtocolNumber, false
	case a.IsValid() && !a.IsUnspecified():
		return ipv6.ProtocolNumber, false
	}
	return ipv6.ProtocolNumber, true
}

func netProto(a netip.Addr) tcpip.NetworkProtocolNumber {
	if a.Is4() {
		return ipv4.ProtocolNumber
	}
	return ipv6.ProtocolNumber
}

func fullAddr(ap netip.AddrPort) tcpip.FullAddress {
	fa := tcpip.FullAddress{Port: ap.Port()}
	if ap.Addr().IsValid() && !ap.Addr().IsUnspecified() {
		fa.Addr = tcpip.AddrFromSlice(ap.Addr().AsSlice())
	}
	return fa
}

func addrPort(a tcpip.FullAddress) netip.AddrPort {
	ip, _ := netip.AddrFromSlice(a.Addr.AsSlice())
	return netip.AddrPortFrom(ip.Unmap(), a.Port)
}

// boundAddr is the address an endpoint is bound to, with the wildcard
// spelled 0.0.0.0 or :: as Go's net reports it.
func boundAddr(a tcpip.FullAddress, proto tcpip.NetworkProtocolNumber) netip.AddrPort {
	ap := addrPort(a)
	if ap.Addr().IsValid() {
		return ap
	}
	if proto == ipv4.ProtocolNumber {
		return netip.AddrPortFrom(netip.IPv4Unspecified(), a.Port)
	}
	return netip.AddrPortFrom(netip.IPv6Unspecified(), a.Port)
}

var netipZero netip.AddrPort

func unmap(ap netip.AddrPort) netip.AddrPort {
	if !ap.IsValid() {
		return ap
	}
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}
