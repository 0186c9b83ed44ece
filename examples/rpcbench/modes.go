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
	"github.com/polarnet/polarnet/internal/taptopo"
	"github.com/polarnet/polarnet/link/linktest"
	"github.com/polarnet/polarnet/polarnet"
)

// A mode is a client kind, a server kind and the link between them.
//
//	k2k-veth      kernel ↔ kernel over a veth pair between two namespaces
//	k2k-loopback  kernel ↔ kernel over lo (in a namespace of its own as root)
//	p2k-tap       polarnet client on a TAP device ↔ kernel server in a namespace
//	k2p-tap       kernel client in a namespace ↔ polarnet server on a TAP device
//	p2p-pipe      polarnet ↔ polarnet over linktest.Pipe, one process, no kernel
//	vanilla-pipe  gVisor with gonet ↔ the same, over the same pipe (baseline)
type modeDef struct {
	name   string
	client string // kernel, polarnet or vanilla
	server string
	link   string
	priv   bool // needs root (namespaces, TAP)
	// shared: both ends run in the orchestrating process, so their CPU
	// time is one figure.
	shared bool
	setup  func(ctx context.Context, r *runCfg, td *teardown) (serverEnd, clientEnd, error)
}

var modes = map[string]*modeDef{
	"k2k-veth":     {name: "k2k-veth", client: "kernel", server: "kernel", link: "veth between two namespaces", priv: true, setup: setupVeth},
	"k2k-loopback": {name: "k2k-loopback", client: "kernel", server: "kernel", link: "loopback", setup: setupLoopback},
	"p2k-tap":      {name: "p2k-tap", client: "polarnet", server: "kernel", link: "TAP, kernel side in a namespace", priv: true, setup: setupP2K},
	"k2p-tap":      {name: "k2p-tap", client: "kernel", server: "polarnet", link: "TAP, kernel side in a namespace", priv: true, setup: setupK2P},
	"p2p-pipe":     {name: "p2p-pipe", client: "polarnet", server: "polarnet", link: "in-memory pipe (linktest.Pipe)", shared: true, setup: setupP2P},
	"vanilla-pipe": {name: "vanilla-pipe", client: "vanilla", server: "vanilla", link: "in-memory pipe, gonet, MTU 1500", shared: true, setup: setupVanilla},
}

// modeOrder is the order modes are listed and run in.
var modeOrder = []string{"k2k-veth", "k2k-loopback", "p2k-tap", "k2p-tap", "p2p-pipe", "vanilla-pipe"}

func modeNames() []string { return slices.Clone(modeOrder) }

// Addresses (all in 198.18.0.0/15). The TAP modes use taptopo's.
var (
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
}

func (r *runCfg) poll() polarnet.PollMode {
	p, _ := parsePoll(r.mode.Poll) // checked when parsed
	return p
}

// childArgs are the flags every child gets.
func (r *runCfg) childArgs(role, net string) []string {
	args := []string{role, "-control", "-net", net, "-mtu", strconv.Itoa(r.mode.MTU), "-poll", r.mode.Poll}
	if r.mode.Pin {
		args = append(args, "-pin", strconv.Itoa(r.pinCPU))
	}
	return args
}

func (r *runCfg) startServer(ctx context.Context, td *teardown, ns *netns.NS, net, listen string) (remoteServer, error) {
	args := append(r.childArgs("server", net), "-listen", listen)
	c, err := startChild(ctx, r.exe, ns, net+" server", r.echo(), args...)
	if err != nil {
		return remoteServer{}, err
	}
	td.add(c.Close)
	return remoteServer{c}, nil
}

func (r *runCfg) startClient(ctx context.Context, td *teardown, ns *netns.NS, net string, retrans bool) (remoteClient, error) {
	args := append(r.childArgs("client", net), "-case", r.test.String(), "-retrans="+strconv.FormatBool(retrans))
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
	if err := taptopo.PlugKernelSide(ns, cli.hello.Dev, r.mode.MTU); err != nil {
		return nil, nil, err
	}
	srv, err := r.startServer(ctx, td, ns, netKernel, netip.AddrPortFrom(taptopo.Kernel4, 0).String())
	return srv, cli, err
}

func setupK2P(ctx context.Context, r *runCfg, td *teardown) (serverEnd, clientEnd, error) {
	ns, err := r.newNS(td)
	if err != nil {
		return nil, nil, err
	}
	srv, err := r.startServer(ctx, td, nil, netPolarnetTAP, netip.AddrPortFrom(taptopo.Stack4, 0).String())
	if err != nil {
		return nil, nil, err
	}
	if err := taptopo.PlugKernelSide(ns, srv.hello.Dev, r.mode.MTU); err != nil {
		return nil, nil, err
	}
	cli, err := r.startClient(ctx, td, ns, netKernel, true)
	return srv, cli, err
}

func setupP2P(ctx context.Context, r *runCfg, td *teardown) (serverEnd, clientEnd, error) {
	return setupPair(r, td, r.mode.MTU, func(l *linktest.PipeLink, addr netip.Prefix) (*netEnd, error) {
		st, err := polarnet.New(polarnet.Config{Link: l, Addrs: []netip.Prefix{addr}, Poll: r.poll()})
		if err != nil {
			return nil, err
		}
		return stackNet(st), nil
	})
}

func setupVanilla(ctx context.Context, r *runCfg, td *teardown) (serverEnd, clientEnd, error) {
	return setupPair(r, td, vanillaMTU, func(l *linktest.PipeLink, addr netip.Prefix) (*netEnd, error) {
		v, err := newVanillaStack(l, addr)
		if err != nil {
			return nil, err
		}
		return vanillaNet(v), nil
	})
}

// setupPair builds two stacks in this process joined by a pipe; each stack
// owns (and closes) its end of the pipe, also when building it fails.
func setupPair(r *runCfg, td *teardown, mtu int, open func(*linktest.PipeLink, netip.Prefix) (*netEnd, error)) (serverEnd, clientEnd, error) {
	a, b := linktest.Pipe(linktest.PipeConfig{MTU: mtu, RingSize: r.mode.Ring})
	srvNet, err := open(b, pipeServer)
	if err != nil {
		a.Close()
		return nil, nil, err
	}
	td.add(srvNet.close)
	cliNet, err := open(a, pipeClient)
	if err != nil {
		return nil, nil, err
	}
	td.add(cliNet.close)
	srv, err := newLocalServer(srvNet, netip.AddrPortFrom(pipeServer.Addr(), 0).String())
	if err != nil {
		return nil, nil, err
	}
	td.add(srv.Close)
	cli := &localClient{ne: cliNet, test: r.test}
	td.add(cli.Close)
	return srv, cli, nil
}
