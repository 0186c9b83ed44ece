package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"slices"
	"strconv"

	"github.com/polarnet/polarnet/internal/netns"
	"github.com/polarnet/polarnet/link/pipe"
	"github.com/polarnet/polarnet/polarnet"
)

// A mode is a client kind, a server kind and the link between them.
//
//	k2k-veth      kernel ↔ kernel over a veth pair between two namespaces
//	k2k-loopback  kernel ↔ kernel over lo (in a namespace of its own as root)
//	p2k-tap       polarnet client on a TAP device ↔ kernel server in a namespace
//	k2p-tap       kernel client in a namespace ↔ polarnet server on a TAP device
//	p2p-pipe      polarnet ↔ polarnet over pipe.New, one process, no kernel
//	vanilla-pipe  gVisor with gonet ↔ the same, over the same pipe (baseline)
type modeDef struct {
	name   string
	client string // kernel, polarnet or vanilla
	server string
	link   string
	priv   bool // needs root (namespaces, TAP)
	// shared: both ends run in one process, so their CPU time is one
	// figure.
	shared bool
	setup  func(ctx context.Context, r *runCfg, td *teardown) (serverEnd, clientEnd, error)
}

var modes = map[string]*modeDef{
	"k2k-veth":     {name: "k2k-veth", client: "kernel", server: "kernel", link: "veth between two namespaces", priv: true, setup: setupVeth},
	"k2k-loopback": {name: "k2k-loopback", client: "kernel", server: "kernel", link: "loopback", setup: setupLoopback},
	"p2k-tap":      {name: "p2k-tap", client: "polarnet", server: "kernel", link: "TAP, kernel side in a namespace", priv: true, setup: setupP2K},
	"k2p-tap":      {name: "k2p-tap", client: "kernel", server: "polarnet", link: "TAP, kernel side in a namespace", priv: true, setup: setupK2P},
	"p2k-afxdp":    {name: "p2k-afxdp", client: "polarnet", server: "kernel", link: "AF_XDP, veth between namespaces", priv: true, setup: setupP2KAFXDP},
	"k2p-afxdp":    {name: "k2p-afxdp", client: "kernel", server: "polarnet", link: "AF_XDP, veth between namespaces", priv: true, setup: setupK2PAFXDP},
	"p2p-pipe":     {name: "p2p-pipe", client: "polarnet", server: "polarnet", link: "in-memory pipe (pipe.New)", shared: true, setup: setupPipe},
	"vanilla-pipe": {name: "vanilla-pipe", client: "vanilla", server: "vanilla", link: "in-memory pipe, gonet, MTU 1500", shared: true, setup: setupPipe},
	"p2p-memif":    {name: "p2p-memif", client: "polarnet", server: "polarnet", link: "DPDK net_memif, two processes", priv: true, setup: setupMemif}, // -tags dpdk: listed by dpdk.go
}

// modeOrder is the order modes are listed and run in.
var modeOrder = []string{"k2k-veth", "k2k-loopback", "p2k-tap", "k2p-tap", "p2k-afxdp", "k2p-afxdp", "p2p-pipe", "vanilla-pipe"}

func modeNames() []string { return slices.Clone(modeOrder) }

// Addresses (all in 198.18.0.0/15).
var (
	tapKernel  = netip.MustParsePrefix("198.18.0.1/24")
	tapStack   = netip.MustParsePrefix("198.18.0.2/24")
	vethServer = netip.MustParsePrefix("198.18.1.1/24")
	vethClient = netip.MustParsePrefix("198.18.1.2/24")
	pipeServer = netip.MustParsePrefix("198.18.2.1/24")
	pipeClient = netip.MustParsePrefix("198.18.2.2/24")
)

// runCfg is everything one run needs.
type runCfg struct {
	test    testSpec
	mode    modeSpec // options resolved: MTU and Poll set
	def     *modeDef
	pinCPU  int // the CPU pinned runs use
	exe     string
	verbose bool
	metrics string // -metrics
}

// childArgs are a child's command line: role, what, and the flags every
// child gets.
func (r *runCfg) childArgs(role string, what ...string) []string {
	args := append([]string{role, "-control"}, what...)
	args = append(args, "-mtu", strconv.Itoa(r.mode.MTU), "-poll", r.mode.Poll)
	if r.mode.ACKOff {
		args = append(args, "-ack", "off")
	}
	if r.mode.Queues > 0 {
		args = append(args, "-queues", strconv.Itoa(r.mode.Queues))
	}
	if r.mode.Procs > 0 {
		args = append(args, "-procs", strconv.Itoa(r.mode.Procs))
	}
	if r.mode.Pin {
		args = append(args, "-pin", strconv.Itoa(r.pinCPU))
	}
	return args
}

func (r *runCfg) startServer(ctx context.Context, td *teardown, ns *netns.NS, net, listen string) (remoteServer, error) {
	args := r.childArgs("server", "-net", net, "-listen", listen)
	if net != netKernel {
		args = append(args, r.metricsArgs(0)...)
	}
	c, err := startChild(ctx, r.exe, ns, net+" server", r.echo(), args...)
	if err != nil {
		return remoteServer{}, err
	}
	td.add(c.Close)
	return remoteServer{c}, nil
}

func (r *runCfg) startClient(ctx context.Context, td *teardown, ns *netns.NS, net string, retrans bool) (remoteClient, error) {
	args := r.childArgs("client", "-net", net, "-case", r.test.String(), "-retrans="+strconv.FormatBool(retrans))
	if net != netKernel {
		args = append(args, r.metricsArgs(0)...)
	}
	c, err := startChild(ctx, r.exe, ns, net+" client", r.echo(), args...)
	if err != nil {
		return remoteClient{}, err
	}
	td.add(c.Close)
	return remoteClient{c}, nil
}

// logf reports what a run sets up and tears down, with -v.
func (r *runCfg) logf(format string, args ...any) {
	if r.verbose {
		fmt.Fprintf(os.Stderr, "rpcbench: "+format+"\n", args...)
	}
}

// echo is where children's stderr is copied: ours with -v.
func (r *runCfg) echo() io.Writer {
	if r.verbose {
		return os.Stderr
	}
	return nil
}

// plugKernelSide moves TAP device dev into ns, the kernel's end, at
// tapKernel with the given MTU.
func plugKernelSide(ns *netns.NS, dev string, mtu int) error {
	if err := ns.MoveLink(dev); err != nil {
		return err
	}
	return ns.Configure(dev, mtu, tapKernel)
}

// newNS creates a namespace that td deletes, tuned for many short
// connections (crr): the full ephemeral port range and TIME_WAIT reuse.
func (r *runCfg) newNS(td *teardown) (*netns.NS, error) {
	ns, err := netns.Create()
	if err != nil {
		return nil, fmt.Errorf("creating a network namespace: %w", err)
	}
	r.logf("created namespace %s", ns.Name)
	td.add(func() error {
		r.logf("deleting namespace %s", ns.Name)
		return ns.Delete()
	})
	err = ns.Do(func() error {
		return errors.Join(
			os.WriteFile("/proc/sys/net/ipv4/ip_local_port_range", []byte("1024 65535"), 0),
			os.WriteFile("/proc/sys/net/ipv4/tcp_tw_reuse", []byte("1"), 0),
		)
	})
	return ns, err
}

func setupVeth(ctx context.Context, r *runCfg, td *teardown) (serverEnd, clientEnd, error) {
	nsS, err := r.newNS(td)
	if err != nil {
		return nil, nil, err
	}
	nsC, err := r.newNS(td)
	if err != nil {
		return nil, nil, err
	}
	a, b := netns.UniqueName("pnv"), netns.UniqueName("pnv")
	// Created across the two namespaces at once: nothing is left in the
	// host's when they are deleted.
	if out, err := nsS.Exec("ip", "link", "add", "dev", a, "type", "veth", "peer", "name", b, "netns", nsC.Name); err != nil {
		return nil, nil, fmt.Errorf("veth: %w: %s", err, out)
	}
	if err := errors.Join(nsS.Configure(a, r.mode.MTU, vethServer), nsC.Configure(b, r.mode.MTU, vethClient)); err != nil {
		return nil, nil, err
	}
	srv, err := r.startServer(ctx, td, nsS, netKernel, netip.AddrPortFrom(vethServer.Addr(), 0).String())
	if err != nil {
		return nil, nil, err
	}
	cli, err := r.startClient(ctx, td, nsC, netKernel, true)
	return srv, cli, err
}

func setupLoopback(ctx context.Context, r *runCfg, td *teardown) (serverEnd, clientEnd, error) {
	var ns *netns.NS
	if os.Geteuid() == 0 {
		var err error
		if ns, err = r.newNS(td); err != nil {
			return nil, nil, err
		}
	}
	srv, err := r.startServer(ctx, td, ns, netKernel, "127.0.0.1:0")
	if err != nil {
		return nil, nil, err
	}
	// Both ends share the namespace's counters: the server reports them.
	cli, err := r.startClient(ctx, td, ns, netKernel, false)
	return srv, cli, err
}

func setupP2K(ctx context.Context, r *runCfg, td *teardown) (serverEnd, clientEnd, error) {
	ns, err := r.newNS(td)
	if err != nil {
		return nil, nil, err
	}
	cli, err := r.startClient(ctx, td, nil, netPolarnetTAP, true)
	if err != nil {
		return nil, nil, err
	}
	if err := plugKernelSide(ns, cli.hello.Dev, r.mode.MTU); err != nil {
		return nil, nil, err
	}
	srv, err := r.startServer(ctx, td, ns, netKernel, netip.AddrPortFrom(tapKernel.Addr(), 0).String())
	return srv, cli, err
}

func setupK2P(ctx context.Context, r *runCfg, td *teardown) (serverEnd, clientEnd, error) {
	ns, err := r.newNS(td)
	if err != nil {
		return nil, nil, err
	}
	srv, err := r.startServer(ctx, td, nil, netPolarnetTAP, netip.AddrPortFrom(tapStack.Addr(), 0).String())
	if err != nil {
		return nil, nil, err
	}
	if err := plugKernelSide(ns, srv.hello.Dev, r.mode.MTU); err != nil {
		return nil, nil, err
	}
	cli, err := r.startClient(ctx, td, ns, netKernel, true)
	return srv, cli, err
}

// setupPipe runs both ends of a pipe mode in one child process (the pipe
// is memory, so they must share one), whose CPU time is then the total.
func setupPipe(ctx context.Context, r *runCfg, td *teardown) (serverEnd, clientEnd, error) {
	args := append(r.childArgs("pair", "-mode", r.def.name, "-case", r.test.String()), "-ring", strconv.Itoa(r.mode.Ring))
	if r.def.client == "polarnet" { // not vanilla-pipe
		args = append(args, r.metricsArgs(0)...)
	}
	c, err := startChild(ctx, r.exe, nil, r.def.name+" pair", r.echo(), args...)
	if err != nil {
		return nil, nil, err
	}
	td.add(c.Close)
	return remoteServer{c}, remoteClient{c}, nil
}

// pipePair is the two ends of a pipe mode, built in the pair child.
type pipePair struct {
	srvNet, cliNet *netEnd
	srv            *localServer
	cli            *localClient
}

// openPipePair builds mode's two stacks joined by a pipe of the given
// queues (so polarnet shards), a server on one and a client for test on the
// other; ackOff turns polarnet's ACK filter off.
func openPipePair(mode string, mtu, ring, queues int, poll polarnet.PollMode, ackOff bool, test testSpec) (*pipePair, error) {
	open := func(l *pipe.Link, addr netip.Prefix) (*netEnd, error) {
		st, err := polarnet.New(polarnet.Config{Link: l, Addrs: []netip.Prefix{addr}, Poll: poll, ACK: polarnet.ACKConfig{DisableFilter: ackOff}})
		if err != nil {
			return nil, err
		}
		return stackNet(st), nil
	}
	switch mode {
	case "p2p-pipe":
	case "vanilla-pipe":
		mtu = vanillaMTU
		open = func(l *pipe.Link, addr netip.Prefix) (*netEnd, error) {
			v, err := newVanillaStack(l, addr)
			if err != nil {
				return nil, err
			}
			return vanillaNet(v), nil
		}
	default:
		return nil, fmt.Errorf("pair: %q is not a pipe mode", mode)
	}
	// Each stack owns (and closes) its end of the pipe, also when building
	// it fails.
	a, b := pipe.New(pipe.Config{MTU: mtu, RingSize: ring, Queues: queues})
	p := &pipePair{}
	var err error
	if p.srvNet, err = open(b, pipeServer); err != nil {
		a.Close()
		return nil, err
	}
	if p.cliNet, err = open(a, pipeClient); err != nil {
		return nil, errors.Join(err, p.srvNet.close())
	}
	if p.srv, err = newLocalServer(p.srvNet, netip.AddrPortFrom(pipeServer.Addr(), 0).String()); err != nil {
		return nil, errors.Join(err, p.Close())
	}
	p.cli = &localClient{ne: p.cliNet, test: test}
	return p, nil
}

func (p *pipePair) Close() error {
	var errs []error
	if p.cli != nil {
		errs = append(errs, p.cli.Close())
	}
	if p.srv != nil {
		errs = append(errs, p.srv.Close())
	}
	return errors.Join(append(errs, p.cliNet.close(), p.srvNet.close())...)
}
