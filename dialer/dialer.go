// Package dialer is the drop-in replacement for net.Dial: the same functions
// and a Dialer with net.Dialer's fields, running over a polarnet Stack when
// one is configured and over Go's net otherwise.
//
// With a stack, each dial goes where the kernel interop policy sends it:
// localhost and loopback addresses, and destinations the stack cannot route
// or that polarnet.Config.KernelRoutes names (see Stack.ViaKernel), are
// dialed with Go's net, everything else through the stack. A name that
// resolves to both kinds of address may be dialed on both paths. Errors
// have net's shapes on either path. A TCP conn is a *net.TCPConn or a
// *polarnet.TCPConn: assert polarnet.AnyTCPConn to reach the methods both
// have (SetLinger, CloseWrite, SetNoDelay, ...), and polarnet.AnyUDPConn
// for UDP.
package dialer

import (
	"cmp"
	"context"
	"net"
	"net/netip"
	"syscall"
	"time"

	"github.com/polarnet/polarnet/internal/netaddr"
	// Every link registers itself for POLARNET_LINK (see package link,
	// Registration); DPDK and RDMA are real in builds with their tag.
	_ "github.com/polarnet/polarnet/link/afxdp"
	_ "github.com/polarnet/polarnet/link/dpdk"
	_ "github.com/polarnet/polarnet/link/rdma"
	_ "github.com/polarnet/polarnet/link/tap"
	"github.com/polarnet/polarnet/polarnet"
)

// Dialer mirrors net.Dialer. Its zero value dials through the default stack
// (polarnet.Default: SetDefault or the POLARNET_* environment), or through
// Go's net when there is none.
type Dialer struct {
	// Timeout bounds the whole dial, name resolution included. Zero: none
	// (the operating system's, with Go's net).
	Timeout time.Duration
	// Deadline is an absolute time after which dials fail.
	Deadline time.Time
	// LocalAddr is the local address to dial from, a *net.TCPAddr or
	// *net.UDPAddr matching the network. Nil: chosen automatically.
	LocalAddr net.Addr
	// KeepAlive is the keep-alive period of TCP conns: zero means 15s,
	// negative disables keep-alive unless KeepAliveConfig.Enable is set.
	KeepAlive time.Duration
	// KeepAliveConfig, when Enable is true, configures keep-alive in full;
	// zero fields take KeepAlive or the defaults (15s, 15s, 9).
	KeepAliveConfig net.KeepAliveConfig
	// Resolver resolves host names. Nil: the stack's (Stack.Resolver), or
	// net.DefaultResolver for Go's net.
	Resolver *net.Resolver
	// FallbackDelay is how long a TCP dial to a name with addresses of
	// both families waits for the first family before racing the other
	// (RFC 6555, Happy Eyeballs). Zero: 300ms; negative: no racing, the
	// addresses are tried one after another.
	FallbackDelay time.Duration
	// DualStack is ignored, as in net.Dialer: Happy Eyeballs is on unless
	// FallbackDelay is negative.
	//
	// Deprecated: as net.Dialer.DualStack.
	DualStack bool
	// Control and ControlContext are called on the kernel path only, as
	// net.Dialer calls them: a polarnet conn has no file descriptor to
	// hand them.
	Control        func(network, address string, c syscall.RawConn) error
	ControlContext func(ctx context.Context, network, address string, c syscall.RawConn) error
	// Stack is the stack to dial through. Nil: polarnet.Default().
	Stack *polarnet.Stack

	mptcp *bool // SetMultipathTCP's choice; nil: Go's default
}

// MultipathTCP reports whether MPTCP will be used, as
// net.Dialer.MultipathTCP: never on a stack (gVisor has no MPTCP).
func (d *Dialer) MultipathTCP() bool {
	if st, _ := d.stack(); st != nil {
		return false
	}
	return d.kernel().MultipathTCP()
}

// SetMultipathTCP asks Go's net for MPTCP on the kernel path; a stack has
// no MPTCP and ignores it.
func (d *Dialer) SetMultipathTCP(use bool) { d.mptcp = &use }

// stack is the stack to dial through: nil for Go's net.
func (d *Dialer) stack() (*polarnet.Stack, error) {
	if d.Stack != nil {
		return d.Stack, nil
	}
	return polarnet.Default()
}

// defaultFallbackDelay is net.Dialer's.
const defaultFallbackDelay = 300 * time.Millisecond

// Dial connects to address on the named network through the default stack.
func Dial(network, address string) (net.Conn, error) {
	var d Dialer
	return d.Dial(network, address)
}

// DialTimeout is Dial with a timeout.
func DialTimeout(network, address string, timeout time.Duration) (net.Conn, error) {
	d := Dialer{Timeout: timeout}
	return d.Dial(network, address)
}

// DialContext is Dial with a context.
func DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	var d Dialer
	return d.DialContext(ctx, network, address)
}

// Dial connects to address on the named network.
func (d *Dialer) Dial(network, address string) (net.Conn, error) {
	return d.DialContext(context.Background(), network, address)
}

// DialContext connects to address on the named network (tcp, tcp4, tcp6,
// udp, udp4, udp6) within ctx. Errors are *net.OpError as with net.Dialer.
func (d *Dialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	st, err := d.stack()
	if err != nil {
		return nil, &net.OpError{Op: "dial", Net: network, Err: err}
	}
	if st == nil {
		return d.kernel().DialContext(ctx, network, address)
	}
	if netaddr.IsLocalhost(address) {
		return d.dialKernel(ctx, st, network, address)
	}
	n, err := netaddr.ParseNetwork(network)
	if err != nil {
		return nil, &net.OpError{Op: "dial", Net: network, Err: err}
	}
	if deadline, ok := d.deadline(time.Now()); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline)
		defer cancel()
	}
	var laddr netip.AddrPort
	if d.LocalAddr != nil {
		var ok bool
		if laddr, ok = netaddr.AddrPortOf(d.LocalAddr, n.Proto); !ok {
			return nil, &net.OpError{Op: "dial", Net: network, Source: d.LocalAddr, Err: &net.AddrError{Err: "mismatched local address type", Addr: d.LocalAddr.String()}}
		}
	}
	resolver := d.Resolver
	if resolver == nil {
		resolver = st.Resolver()
	}
	addrs, err := netaddr.Resolve(ctx, resolver, n, address, localAddrs(st))
	if err != nil {
		return nil, &net.OpError{Op: "dial", Net: network, Err: mapResolveErr(err)}
	}
	primaries, fallbacks := byFamily(addrs)
	if n.Proto == "tcp" && len(fallbacks) > 0 && d.FallbackDelay >= 0 {
		return d.dialParallel(ctx, st, n, laddr, primaries, fallbacks)
	}
	return d.dialSerial(ctx, st, n, laddr, addrs)
}

// byFamily splits addrs into those of the first one's family and the rest,
// keeping their order.
func byFamily(addrs []netip.AddrPort) (primaries, fallbacks []netip.AddrPort) {
	for _, a := range addrs {
		if a.Addr().Is4() == addrs[0].Addr().Is4() {
			primaries = append(primaries, a)
		} else {
			fallbacks = append(fallbacks, a)
		}
	}
	return primaries, fallbacks
}

// dialParallel races the fallback family against the primary one once the
// primary has failed or FallbackDelay has passed; the first conn wins and
// the other attempt is cancelled (closed, should it connect too). When both
// fail, the primary's error is reported, as net does.
func (d *Dialer) dialParallel(ctx context.Context, st *polarnet.Stack, n netaddr.Network, laddr netip.AddrPort, primaries, fallbacks []netip.AddrPort) (net.Conn, error) {
	type result struct {
		conn    net.Conn
		err     error
		primary bool
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	results := make(chan result, 2) // never blocks a racer
	race := func(primary bool, addrs []netip.AddrPort) {
		c, err := d.dialSerial(ctx, st, n, laddr, addrs)
		results <- result{c, err, primary}
	}
	go race(true, primaries)
	fallback := time.NewTimer(cmp.Or(d.FallbackDelay, defaultFallbackDelay))
	defer fallback.Stop()
	racing, fallbackStarted := 1, false
	startFallback := func() {
		if !fallbackStarted {
			fallbackStarted = true
			racing++
			go race(false, fallbacks)
		}
	}
	var primaryErr, fallbackErr error
	for {
		select {
		case <-fallback.C:
			startFallback()
		case r := <-results:
			racing--
			if r.err == nil {
				if racing > 0 {
					go func() {
						if r := <-results; r.conn != nil {
							r.conn.Close()
						}
					}()
				}
				return r.conn, nil
			}
			if r.primary {
				primaryErr = r.err
				startFallback()
			} else {
				fallbackErr = r.err
			}
			if racing == 0 {
				return nil, cmp.Or(primaryErr, fallbackErr)
			}
		}
	}
}

// dialSerial tries addrs in order and reports the first error when none
// connects.
func (d *Dialer) dialSerial(ctx context.Context, st *polarnet.Stack, n netaddr.Network, laddr netip.AddrPort, addrs []netip.AddrPort) (net.Conn, error) {
	var first error
	for _, raddr := range addrs {
		c, err := d.dialOne(ctx, st, n, laddr, raddr)
		if err == nil {
			return c, nil
		}
		if first == nil {
			first = err
		}
		if ctx.Err() != nil {
			break
		}
	}
	return nil, first
}

func (d *Dialer) dialOne(ctx context.Context, st *polarnet.Stack, n netaddr.Network, laddr, raddr netip.AddrPort) (net.Conn, error) {
	if st.ViaKernel(raddr.Addr()) {
		return d.dialKernel(ctx, st, n.Name, raddr.String())
	}
	if n.Proto == "udp" {
		return st.DialUDP(n.Name, laddr, raddr)
	}
	c, err := st.DialTCP(ctx, n.Name, laddr, raddr)
	if err != nil {
		return nil, err
	}
	if ka, ok := netaddr.KeepAlive(d.KeepAlive, d.KeepAliveConfig); ok {
		c.SetKeepAliveConfig(ka)
	}
	return c, nil
}

// dialKernel dials with Go's net for st, counting the conn in its Stats.
func (d *Dialer) dialKernel(ctx context.Context, st *polarnet.Stack, network, address string) (net.Conn, error) {
	c, err := d.kernel().DialContext(ctx, network, address)
	if err == nil {
		st.CountKernelConn(false)
	}
	return c, err
}

// deadline is the earlier of Deadline and now+Timeout, as in net.Dialer.
func (d *Dialer) deadline(now time.Time) (time.Time, bool) {
	var earliest time.Time
	if d.Timeout != 0 {
		earliest = now.Add(d.Timeout)
	}
	if !d.Deadline.IsZero() && (earliest.IsZero() || d.Deadline.Before(earliest)) {
		earliest = d.Deadline
	}
	return earliest, !earliest.IsZero()
}

func (d *Dialer) kernel() *net.Dialer {
	k := &net.Dialer{
		Timeout:         d.Timeout,
		Deadline:        d.Deadline,
		LocalAddr:       d.LocalAddr,
		KeepAlive:       d.KeepAlive,
		KeepAliveConfig: d.KeepAliveConfig,
		Resolver:        d.Resolver,
		FallbackDelay:   d.FallbackDelay,
		Control:         d.Control,
		ControlContext:  d.ControlContext,
	}
	if d.mptcp != nil {
		k.SetMultipathTCP(*d.mptcp)
	}
	return k
}

// localAddrs are what an empty host means for a dial: the stack itself.
func localAddrs(st *polarnet.Stack) []netip.Addr {
	var out []netip.Addr
	for _, p := range st.Addrs() {
		out = append(out, p.Addr())
	}
	return out
}

// mapResolveErr reports a context that ended during resolution as net does.
func mapResolveErr(err error) error {
	switch err {
	case context.Canceled, context.DeadlineExceeded:
		return polarnet.ContextError(err)
	}
	return err
}
