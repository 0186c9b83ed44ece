package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/polarnet/polarnet/cmd/polarnet/internal/doctor"
	"github.com/polarnet/polarnet/internal/netns"
	"github.com/polarnet/polarnet/internal/testenv"
	"github.com/polarnet/polarnet/link"
	"github.com/polarnet/polarnet/link/pipe"
	"github.com/polarnet/polarnet/link/tap"
	"github.com/polarnet/polarnet/metrics/prom"
	"github.com/polarnet/polarnet/polarnet"
)

func doctorOut(t *testing.T, args ...string) (string, int) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(append([]string{"doctor"}, args...), &out, &errb)
	t.Log(out.String() + errb.String())
	return out.String(), code
}

// On a host with root, TAP and AF_XDP work here and in CI (which runs as
// root with POLARNET_REQUIRE_PRIV set).
func TestDoctorTAPReady(t *testing.T) {
	testenv.RequirePriv(t)
	out, code := doctorOut(t, "tap")
	assert.Equal(t, 0, code)
	assert.Contains(t, out, "=> tap: ready")
	assert.Contains(t, out, "created a 2-queue TAP in a throwaway namespace")
}

func TestDoctorAFXDPReady(t *testing.T) {
	testenv.RequirePriv(t)
	out, code := doctorOut(t, "afxdp")
	assert.Equal(t, 0, code)
	assert.Contains(t, out, "=> afxdp: ready")
	assert.Contains(t, out, "AF_XDP copy      works on a veth pair")
	assert.Contains(t, out, "XDP native       works on a veth pair")
}

func TestDoctorRDMAExplainsNoDevice(t *testing.T) {
	if _, err := os.Stat("/sys/class/infiniband"); err == nil {
		t.Skip("this host has RDMA devices")
	}
	out, code := doctorOut(t, "rdma")
	assert.Equal(t, 1, code, "rdma cannot run without a device")
	assert.Contains(t, out, "FAIL  RDMA devices     no RDMA device: /sys/class/infiniband does not exist")
	assert.Contains(t, out, "=> rdma: NOT ready")
}

// doctor dpdk against the host's state as the test finds it by other means:
// libraries from pkg-config, hugepages from sysfs and /proc/mounts. CI runs
// it before scripts/ci-dpdk installs DPDK and reserves hugepages (the
// "without" state on a fresh machine); a host with both sees the other.
func TestDoctorDPDKReportsHostState(t *testing.T) {
	out, code := doctorOut(t, "-probe=false", "dpdk")
	libsOK := exec.Command("pkg-config", "--exists", "libdpdk").Run() == nil
	if libsOK {
		assert.Contains(t, out, "ok    DPDK libraries   libdpdk ")
	} else {
		assert.Contains(t, out, "FAIL  DPDK libraries")
	}
	// The verdict follows the libraries alone.
	assert.Equal(t, libsOK, strings.Contains(out, "=> dpdk: ready"))
	assert.Equal(t, libsOK, code == 0)

	reserved, free := 0, 0
	sizes, _ := filepath.Glob("/sys/kernel/mm/hugepages/hugepages-*")
	for _, d := range sizes {
		for file, sum := range map[string]*int{"nr_hugepages": &reserved, "free_hugepages": &free} {
			b, _ := os.ReadFile(filepath.Join(d, file))
			n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
			*sum += n
		}
	}
	mounts, _ := os.ReadFile("/proc/mounts")
	mounted := strings.Contains(string(mounts), " hugetlbfs ")
	t.Logf("host: libdpdk %v, %d hugepages reserved, %d free, hugetlbfs mounted %v", libsOK, reserved, free, mounted)
	switch {
	case reserved == 0 && !mounted:
		assert.Contains(t, out, "warn  hugepages        none reserved, hugetlbfs not mounted")
	case reserved > 0 && free > 0 && mounted:
		assert.Contains(t, out, "ok    hugepages        reserved ")
	default:
		assert.Contains(t, out, "warn  hugepages")
	}
}

func TestDoctorUsage(t *testing.T) {
	_, code := doctorOut(t, "ethernet")
	assert.Equal(t, 2, code)
	_, code = doctorOut(t, "tap", "dpdk")
	assert.Equal(t, 2, code)
}

func TestDoctorExitCodeWithFakeEnv(t *testing.T) {
	env := func(bool) *doctor.Env {
		return &doctor.Env{Root: t.TempDir(), RDMADevices: func() []string { return nil }}
	}
	var out bytes.Buffer
	assert.Equal(t, 1, runDoctor([]string{"all"}, &out, io.Discard, env))
	assert.Contains(t, out.String(), "=> tap: NOT ready")
	assert.Contains(t, out.String(), "=> rdma: NOT ready")
}

// startLoad runs two stacks over a pipe with request/response traffic and
// serves the client stack's metrics; it returns the URL.
func startLoad(t *testing.T) string {
	la, lb := pipe.New(pipe.Config{Queues: 2})
	mk := func(l link.Link, addr string) *polarnet.Stack {
		st, err := polarnet.New(polarnet.Config{Link: l, Addrs: []netip.Prefix{netip.MustParsePrefix(addr)}})
		require.NoError(t, err)
		t.Cleanup(func() { st.Close() })
		return st
	}
	a, b := mk(la, "198.18.0.1/24"), mk(lb, "198.18.0.2/24")
	srv := httptest.NewServer(prom.Handler(a))
	t.Cleanup(srv.Close)
	ln, err := b.ListenTCP("tcp", netip.MustParseAddrPort("198.18.0.2:7000"), 0, net.KeepAliveConfig{})
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); io.Copy(c, c) }()
		}
	}()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := a.DialTCP(ctx, "tcp", netip.AddrPort{}, netip.MustParseAddrPort("198.18.0.2:7000"))
			if err != nil {
				return
			}
			defer c.Close()
			msg := make([]byte, 1024)
			deadline := time.Now().Add(30 * time.Second)
			for ctx.Err() == nil && time.Now().Before(deadline) {
				if _, err := c.Write(msg); err != nil {
					return
				}
				if _, err := io.ReadFull(c, msg); err != nil {
					return
				}
			}
		}()
	}
	return srv.URL
}

func TestStatShowsRates(t *testing.T) {
	url := startLoad(t)
	var out bytes.Buffer
	require.NoError(t, statLoop(context.Background(), url, 200*time.Millisecond, 2, false, &out))
	s := out.String()
	t.Log(s)
	assert.Equal(t, 2, strings.Count(s, "polarnet stat  "+url), "two views")
	assert.Contains(t, s, "shard/queue")
	assert.Contains(t, s, "0/0")
	assert.Contains(t, s, "1/1")
	assert.Contains(t, s, "all")
	// The load moves the rates: find shard rows with a non-zero rx pps.
	var moving int
	for _, line := range strings.Split(s, "\n") {
		f := strings.Fields(line)
		if len(f) > 2 && (f[0] == "0/0" || f[0] == "1/1") && f[1] != "0" {
			moving++
		}
	}
	assert.NotZero(t, moving, "no shard shows traffic")
}

func TestStatParsesAndComputesRates(t *testing.T) {
	t0 := time.Unix(1000, 0)
	a, err := parseScrape(strings.NewReader(`polarnet_rx_frames_total{shard="0",queue="0"} 100
polarnet_rx_bytes_total{shard="0",queue="0"} 1000
polarnet_drops_total{shard="0",queue="0",layer="engine",reason="bad_frame"} 1
polarnet_poll_busy_seconds_total{shard="0",queue="0"} 1
polarnet_poll_seconds_total{shard="0",queue="0"} 10
polarnet_link_info{link="tap0"} 1
`), t0)
	require.NoError(t, err)
	b, err := parseScrape(strings.NewReader(`polarnet_rx_frames_total{shard="0",queue="0"} 300
polarnet_rx_bytes_total{shard="0",queue="0"} 126000
polarnet_drops_total{shard="0",queue="0",layer="engine",reason="bad_frame"} 5
polarnet_poll_busy_seconds_total{shard="0",queue="0"} 1.5
polarnet_poll_seconds_total{shard="0",queue="0"} 12
polarnet_link_info{link="tap0"} 1
`), t0.Add(2*time.Second))
	require.NoError(t, err)
	var out bytes.Buffer
	renderStat(&out, "u", a, b)
	s := out.String()
	assert.Contains(t, s, "link tap0")
	line := ""
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "0/0") {
			line = l
		}
	}
	f := strings.Fields(line)
	require.GreaterOrEqual(t, len(f), 9, s)
	assert.Equal(t, "100", f[1], "rx pps: 200 frames in 2 s")
	assert.Equal(t, "0.5", f[2], "rx Mbit/s: 125000 bytes in 2 s")
	assert.Equal(t, "2", f[5], "drops/s")
	assert.Equal(t, "25.0%", f[8], "busy: 0.5 s of 2 s")
	assert.Contains(t, s, "drops: engine/bad_frame 2/s")
}

// An endpoint serving several stacks of one process (prom.StacksHandler,
// rpcbench -metrics) labels them stack=...: their shards, histograms, drops
// and link queues are shown apart, not summed into one row.
func TestStatSplitsStacks(t *testing.T) {
	t0 := time.Unix(1000, 0)
	mk := func(at time.Time, cli, srv float64) scrape {
		var b strings.Builder
		for _, s := range []struct {
			name, link string
			frames     float64
			le         string
		}{{"client", "pipe1-a", cli, "8.192e-06"}, {"server", "pipe1-b", srv, "6.5536e-05"}} {
			fmt.Fprintf(&b, "polarnet_rx_frames_total{shard=\"0\",queue=\"0\",stack=%q} %g\n", s.name, s.frames)
			fmt.Fprintf(&b, "polarnet_drops_total{shard=\"0\",queue=\"0\",layer=\"engine\",reason=\"bad_frame\",stack=%q} %g\n", s.name, s.frames/100)
			fmt.Fprintf(&b, "polarnet_link_info{link=%q,stack=%q} 1\n", s.link, s.name)
			fmt.Fprintf(&b, "polarnet_link_rx_frames_total{queue=\"0\",stack=%q} %g\n", s.name, s.frames)
			fmt.Fprintf(&b, "polarnet_poll_iteration_seconds_bucket{shard=\"0\",queue=\"0\",stack=%q,le=%q} %g\n", s.name, s.le, s.frames)
			fmt.Fprintf(&b, "polarnet_poll_iteration_seconds_bucket{shard=\"0\",queue=\"0\",stack=%q,le=\"+Inf\"} %g\n", s.name, s.frames)
			fmt.Fprintf(&b, "polarnet_poll_iteration_seconds_sum{shard=\"0\",queue=\"0\",stack=%q} 0\n", s.name)
			fmt.Fprintf(&b, "polarnet_poll_iteration_seconds_count{shard=\"0\",queue=\"0\",stack=%q} %g\n", s.name, s.frames)
		}
		sc, err := parseScrape(strings.NewReader("# TYPE polarnet_poll_iteration_seconds histogram\n"+b.String()), at)
		require.NoError(t, err)
		return sc
	}
	var out bytes.Buffer
	renderStat(&out, "u", mk(t0, 0, 0), mk(t0.Add(time.Second), 100, 300))
	s := out.String()
	t.Log(s)
	assert.Contains(t, s, "link client pipe1-a, server pipe1-b")
	rows := map[string][]string{}
	for _, l := range strings.Split(s, "\n") {
		if f := strings.Fields(l); len(f) > 2 {
			rows[f[0]+" "+f[1]] = f[2:]
		}
	}
	require.Contains(t, rows, "client 0/0", s)
	require.Contains(t, rows, "server 0/0", s)
	assert.Equal(t, "100", rows["client 0/0"][0], "client rx pps")
	assert.Equal(t, "300", rows["server 0/0"][0], "server rx pps")
	assert.Equal(t, "8.192µs", rows["client 0/0"][8], "client poll p50")
	assert.Equal(t, "65.536µs", rows["server 0/0"][8], "server poll p50")
	assert.Contains(t, s, "drops: client engine/bad_frame 1/s, server engine/bad_frame 3/s")
	assert.Equal(t, "100", rows["client 0"][0], "client link queue 0 rx pps")
	assert.Equal(t, "300", rows["server 0"][0], "server link queue 0 rx pps")
}

func TestBenchRunsCompare(t *testing.T) {
	dir := t.TempDir()
	fake := filepath.Join(dir, "rpcbench")
	require.NoError(t, os.WriteFile(fake, []byte("#!/bin/sh\necho \"args: $*\"\nexit 3\n"), 0o755))
	var out bytes.Buffer
	code := run([]string{"bench", "-rpcbench", fake, "-repeat", "1", "-modes", "p2p-pipe"}, &out, io.Discard)
	assert.Equal(t, 3, code, "rpcbench's exit status is bench's")
	assert.Equal(t, "args: compare -repeat 1 -modes p2p-pipe\n", out.String())

	bin, rest, err := rpcbenchBinary([]string{"-out", "r/", "--rpcbench=/x/rb"}, nil, nil)
	require.NoError(t, err)
	assert.Equal(t, "/x/rb", bin)
	assert.Equal(t, []string{"-out", "r/"}, rest)
}

// TestDoctorEnvReportsABusyTAP: a second program given a single-queue TAP
// that another one holds would run on the kernel with one log line; doctor
// env names the link, the device and why.
func TestDoctorEnvReportsABusyTAP(t *testing.T) {
	testenv.RequirePriv(t)
	dev := netns.UniqueName("pnt")
	held, err := tap.New(tap.Config{Name: dev, Queues: 1})
	require.NoError(t, err)
	defer held.Close()
	vars := map[string]string{"POLARNET_LINK": "tap", "POLARNET_DEVICE": dev, "POLARNET_ADDR": "198.19.40.2/24"}
	var out, errb bytes.Buffer
	code := runDoctor([]string{"env"}, &out, &errb, func(probe bool) *doctor.Env {
		e := doctor.HostEnv(probe)
		e.Getenv = func(k string) string { return vars[k] }
		return e
	})
	t.Log(out.String() + errb.String())
	assert.Equal(t, 0, code, "under POLARNET_FALLBACK=kernel programs still run")
	assert.Contains(t, out.String(), fmt.Sprintf(`warn  stack            link tap on device %q: `, dev))
	assert.Contains(t, out.String(), "another file descriptor holds its only queue")
}
