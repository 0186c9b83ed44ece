package main

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/polarnet/polarnet/internal/netns"
	"github.com/polarnet/polarnet/polarnet"
)

// p2k-afxdp and k2p-afxdp: a polarnet end on an AF_XDP link against a
// kernel end, over a veth pair between two namespaces of their own (created
// across both at once, so nothing is left in the host's when they go):
//
//	namespace P: polarnet end ── veth end, no address, IPv6 off
//	    ══ veth ══
//	namespace K: kernel end ── veth end, 198.18.4.1/24
//
// The polarnet end is an ordinary child (`rpcbench server|client -net
// polarnet`) whose stack comes from the POLARNET_* environment, the drop-in
// way a program is switched to AF_XDP: POLARNET_LINK=afxdp, the device,
// POLARNET_ADDR=198.18.4.2/24 (which the XDP program redirects), the mode's
// MTU and poll mode, and POLARNET_FALLBACK=fail, so that a failing link
// fails the run instead of measuring the kernel. The kernel end keeps the
// offloads the kernel gives a veth, as a production peer has them: its
// checksums arrive partial (the link accepts them) and its segmentation
// offload is turned off by the kernel itself when the XDP program attaches
// in native mode, so its TCP sends MTU-sized frames.
var (
	afxdpKernel = netip.MustParsePrefix("198.18.4.1/24")
	afxdpStack  = netip.MustParsePrefix("198.18.4.2/24")
)

// afxdpUpWait bounds the wait for both ends of the veth pair to be up.
const afxdpUpWait = 5 * time.Second

func setupP2KAFXDP(ctx context.Context, r *runCfg, td *teardown) (serverEnd, clientEnd, error) {
	return setupAFXDP(ctx, r, td, false)
}

func setupK2PAFXDP(ctx context.Context, r *runCfg, td *teardown) (serverEnd, clientEnd, error) {
	return setupAFXDP(ctx, r, td, true)
}

// setupAFXDP builds the veth pair and starts the ends: the polarnet one as
// the server if stackServer, else as the client.
func setupAFXDP(ctx context.Context, r *runCfg, td *teardown, stackServer bool) (serverEnd, clientEnd, error) {
	nsP, err := r.newNS(td)
	if err != nil {
		return nil, nil, err
	}
	nsK, err := r.newNS(td)
	if err != nil {
		return nil, nil, err
	}
	p, k := netns.UniqueName("pnx"), netns.UniqueName("pnx")
	if out, err := nsP.Exec("ip", "link", "add", "dev", p, "type", "veth", "peer", "name", k, "netns", nsK.Name); err != nil {
		return nil, nil, fmt.Errorf("veth: %w: %s", err, out)
	}
	if err := nsP.Do(func() error {
		return os.WriteFile("/proc/sys/net/ipv6/conf/"+p+"/disable_ipv6", []byte("1"), 0)
	}); err != nil {
		return nil, nil, err
	}
	if err := errors.Join(nsP.Configure(p, r.mode.MTU), nsK.Configure(k, r.mode.MTU, afxdpKernel)); err != nil {
		return nil, nil, err
	}
	if err := errors.Join(afxdpWaitUp(nsP, p), afxdpWaitUp(nsK, k)); err != nil {
		return nil, nil, err
	}
	env := []string{
		polarnet.EnvLink + "=afxdp",
		polarnet.EnvDevice + "=" + p,
		polarnet.EnvAddr + "=" + afxdpStack.String(),
		polarnet.EnvMTU + "=" + strconv.Itoa(r.mode.MTU),
		polarnet.EnvPoll + "=" + r.mode.Poll,
		polarnet.EnvFallback + "=fail",
	}
	if stackServer {
		srv, err := r.startEnvChild(ctx, td, nsP, "afxdp server", env,
			append(r.childArgs("server", "-net", netPolarnet, "-listen", netip.AddrPortFrom(afxdpStack.Addr(), 0).String()), r.metricsArgs(0)...))
		if err != nil {
			return nil, nil, err
		}
		cli, err := r.startClient(ctx, td, nsK, netKernel, true)
		return remoteServer{srv}, cli, err
	}
	srv, err := r.startServer(ctx, td, nsK, netKernel, netip.AddrPortFrom(afxdpKernel.Addr(), 0).String())
	if err != nil {
		return nil, nil, err
	}
	cli, err := r.startEnvChild(ctx, td, nsP, "afxdp client", env,
		append(r.childArgs("client", "-net", netPolarnet, "-case", r.test.String(), "-retrans=true"), r.metricsArgs(0)...))
	if err != nil {
		return nil, nil, err
	}
	return srv, remoteClient{cli}, nil
}

// startEnvChild starts a child in ns with env added to its environment.
// env(1) execs, so the child is still the process startChild watches.
func (r *runCfg) startEnvChild(ctx context.Context, td *teardown, ns *netns.NS, name string, env, args []string) (*child, error) {
	envPath, err := exec.LookPath("env")
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	c, err := startChild(ctx, envPath, ns, name, r.echo(), append(append(env, r.exe), args...)...)
	if err != nil {
		return nil, err
	}
	td.add(c.Close)
	return c, nil
}

// afxdpWaitUp waits until the kernel has processed dev's carrier
// (linkwatch, up to a second late): until then its queueing discipline is
// the no-op one, which drops every frame sent.
func afxdpWaitUp(ns *netns.NS, dev string) error {
	deadline := time.Now().Add(afxdpUpWait)
	for {
		out, err := ns.Exec("ip", "-o", "link", "show", "dev", dev)
		if err != nil {
			return err
		}
		if strings.Contains(out, "state UP") {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not up after %v: %s", dev, afxdpUpWait, strings.TrimSpace(out))
		}
		time.Sleep(10 * time.Millisecond)
	}
}
