//go:build dpdk && linux && cgo

package main

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/polarnet/polarnet/link/dpdk"
)

// p2p-memif: polarnet on both ends, each in a process of its own, joined by
// DPDK's net_memif (shared memory between the two processes: no kernel on
// the data path). Built only with -tags dpdk (DPDK 22.11, cgo); without the
// tag the mode exists but says how to build it (dpdk_stub.go).
//
// Each end is an ordinary child (`rpcbench server|client -net polarnet`)
// whose stack comes from the POLARNET_* environment, the drop-in way an
// unmodified program is switched to DPDK (link/dpdk registers itself for
// POLARNET_LINK=dpdk when imported, as here):
//
//	server  POLARNET_DEVICE=net_memif0,role=server,socket-abstract=no,socket=DIR/memif.sock
//	        POLARNET_ADDR=198.18.3.1/24
//	client  POLARNET_DEVICE=net_memif0,role=client,...same socket
//	        POLARNET_ADDR=198.18.3.2/24, link option waitup=10s (the
//	        client's link is down until the server accepts it)
//
// Both: POLARNET_LINK=dpdk, POLARNET_FALLBACK=fail (a DPDK failure fails
// the run instead of measuring the kernel), POLARNET_MTU and POLARNET_POLL
// from the mode, and link options skipcsum=on (frames never leave the
// host: checksums are trusted and left partial, as over loopback), EAL
// in memory with --no-pci, on hugepages when 256 MiB are free (else
// nohuge with 512 MiB), EAL's lcore on the pinned CPU for :pin rows.
// Each process runs its own EAL (in memory: no shared runtime files).
func init() {
	modeOrder = append(modeOrder, "p2p-memif")
}

// memifNet is the subnet of p2p-memif.
var (
	memifServer = netip.MustParsePrefix("198.18.3.1/24")
	memifClient = netip.MustParsePrefix("198.18.3.2/24")
)

// memifWaitUp bounds the client's wait for its memif link to come up.
const memifWaitUp = "10s"

func setupMemif(ctx context.Context, r *runCfg, td *teardown) (serverEnd, clientEnd, error) {
	if r.mode.MTU > 65517 {
		return nil, nil, fmt.Errorf("p2p-memif: MTU %d: net_memif carries frames of at most 65535 bytes (MTU 65517)", r.mode.MTU)
	}
	envPath, err := exec.LookPath("env")
	if err != nil {
		return nil, nil, fmt.Errorf("p2p-memif: %w", err)
	}
	dir, err := os.MkdirTemp("", "rpcbench-memif")
	if err != nil {
		return nil, nil, err
	}
	td.add(func() error { return os.RemoveAll(dir) })
	sock := filepath.Join(dir, "memif.sock")
	r.logf("memif socket %s", sock)

	opts := []string{"skipcsum=on", "loglevel=*:error"}
	if free, err := dpdk.FreeHugepageBytes(); err != nil || free < 256<<20 {
		opts = append(opts, "nohuge=on", "mem=512")
	}
	if r.mode.Pin {
		opts = append(opts, "lcores="+strconv.Itoa(r.pinCPU))
	}
	env := func(role string, addr netip.Prefix, extra ...string) []string {
		return []string{
			"POLARNET_LINK=dpdk",
			"POLARNET_FALLBACK=fail",
			"POLARNET_DEVICE=net_memif0,role=" + role + ",socket-abstract=no,socket=" + sock,
			"POLARNET_ADDR=" + addr.String(),
			"POLARNET_MTU=" + strconv.Itoa(r.mode.MTU),
			"POLARNET_POLL=" + r.mode.Poll,
			"POLARNET_LINK_OPTIONS=" + strings.Join(append(append([]string{}, opts...), extra...), ","),
		}
	}
	// env(1) runs this program with the end's environment; it execs, so
	// the child is still the process startChild watches and kills.
	start := func(name string, envs []string, args []string) (*child, error) {
		argv := append(append(envs, r.exe), args...)
		c, err := startChild(ctx, envPath, nil, name, r.echo(), argv...)
		if err != nil {
			return nil, err
		}
		td.add(c.Close)
		return c, nil
	}
	srv, err := start("memif server", env("server", memifServer),
		append(r.childArgs("server", "-net", netPolarnet, "-listen", netip.AddrPortFrom(memifServer.Addr(), 0).String()), r.metricsArgs(0)...))
	if err != nil {
		return nil, nil, fmt.Errorf("p2p-memif: %w", err)
	}
	cli, err := start("memif client", env("client", memifClient, "waitup="+memifWaitUp),
		append(r.childArgs("client", "-net", netPolarnet, "-case", r.test.String(), "-retrans=true"), r.metricsArgs(1)...))
	if err != nil {
		return nil, nil, fmt.Errorf("p2p-memif: %w", err)
	}
	return remoteServer{srv}, remoteClient{cli}, nil
}
