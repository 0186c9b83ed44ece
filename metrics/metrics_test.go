package metrics_test

import (
	"encoding/json"
	"expvar"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/polarnet/polarnet/dialer"
	"github.com/polarnet/polarnet/link"
	"github.com/polarnet/polarnet/link/pipe"
	"github.com/polarnet/polarnet/listener"
	"github.com/polarnet/polarnet/metrics"
	"github.com/polarnet/polarnet/polarnet"
)

func newStack(t *testing.T, l link.Link, addr string) *polarnet.Stack {
	t.Helper()
	st, err := polarnet.New(polarnet.Config{Link: l, Addrs: []netip.Prefix{netip.MustParsePrefix(addr)}})
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	return st
}

func TestSnakeNames(t *testing.T) {
	names := map[string]bool{}
	for _, d := range metrics.Protocol() {
		names[d.Name] = true
	}
	for _, want := range []string{
		"polarnet_tcpip_tcp_retransmits_total",
		"polarnet_tcpip_tcp_sack_recovery_total",
		"polarnet_tcpip_tcp_tlp_recovery_total",
		"polarnet_tcpip_nics_malformed_l4_rcvd_packets_total",
		"polarnet_tcpip_ip_ip_tables_input_dropped_total",
		"polarnet_tcpip_dropped_packets_total",
		"polarnet_tcpip_udp_receive_buffer_errors_total",
		"polarnet_tcpip_tcp_current_established", // a gauge
	} {
		assert.True(t, names[want], "missing %s", want)
	}
	// Every name is unique and valid.
	seen := map[string]bool{}
	for _, d := range append(metrics.Engine(), metrics.Protocol()...) {
		assert.False(t, seen[d.Name], "duplicate %s", d.Name)
		seen[d.Name] = true
		assert.Regexp(t, `^polarnet_[a-z0-9_]+$`, d.Name)
		assert.Equal(t, d.Type == metrics.Counter, strings.HasSuffix(d.Name, "_total"), d.Name)
	}
}

// expvarRuns names each run's variable: expvar publishes a name once per
// process, and -count runs the test again in the same one.
var expvarRuns int

func TestExpvarPublishes(t *testing.T) {
	expvarRuns++
	name := "polarnet_test_stack_" + strconv.Itoa(expvarRuns)
	la, lb := pipe.New(pipe.Config{})
	a := newStack(t, la, "198.18.0.1/24")
	newStack(t, lb, "198.18.0.2/24")
	require.NoError(t, metrics.PublishExpvar(name, a))
	require.Error(t, metrics.PublishExpvar(name, a), "a name is published once")

	var snap metrics.ExpvarSnapshot
	require.NoError(t, json.Unmarshal([]byte(expvar.Get(name).String()), &snap))
	assert.Equal(t, la.Info().Name, snap.Link)
	require.Len(t, snap.Shards, 1)
	assert.Contains(t, snap.TCPIP, "TCP.Retransmits")
	assert.Contains(t, snap.TCPIP, "IP.PacketsReceived")
	// The JSON carries the embedded counters flat.
	raw := expvar.Get(name).String()
	for _, f := range []string{`"RxFrames"`, `"PollLatency"`, `"TxBatch"`, `"BusyRatio"`, `"StackChecksum"`} {
		assert.Contains(t, raw, f)
	}
}

// Every metric is documented in the metrics reference.
func TestMetricsDocumented(t *testing.T) {
	doc, err := os.ReadFile("../docs/metrics.md")
	require.NoError(t, err)
	for _, d := range metrics.Engine() {
		assert.Contains(t, string(doc), "`"+d.Name+"`", "docs/metrics.md does not describe %s", d.Name)
	}
	for _, r := range metrics.DropReasons() {
		assert.Contains(t, string(doc), "`"+r[1]+"`", "drop reason %s/%s undocumented", r[0], r[1])
	}
}

// The exported histograms have finite, ascending bounds: the log2
// histogram's unbounded last bucket is only in +Inf, not exported as a
// bucket of 2^64 ns.
func TestHistogramBounds(t *testing.T) {
	la, lb := pipe.New(pipe.Config{})
	a := newStack(t, la, "198.18.0.1/24")
	newStack(t, lb, "198.18.0.2/24")
	last := map[string]float64{}
	metrics.Collect(a, func(s metrics.Sample) {
		if s.Hist == nil {
			return
		}
		prev := 0.0
		for _, b := range s.Hist.Buckets {
			assert.Greater(t, b.UpperBound, prev, s.Desc.Name)
			prev = b.UpperBound
		}
		last[s.Desc.Name] = prev
	})
	assert.Equal(t, 256.0, last["polarnet_tx_batch_frames"])
	assert.Equal(t, float64(1<<31)/1e9, last["polarnet_poll_iteration_seconds"], "2^31 ns")
}

// The conns of each path are exported: a stack conn, a loopback dial and
// the kernel's accept of it on a wildcard listen, which are Go's net's.
func TestConnsByPath(t *testing.T) {
	la, lb := pipe.New(pipe.Config{})
	client := newStack(t, la, "198.18.0.1/24")
	server := newStack(t, lb, "198.18.0.2/24")
	ln, err := (&listener.ListenConfig{Stack: server}).Listen(t.Context(), "tcp", ":0")
	require.NoError(t, err)
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port

	for _, d := range []struct {
		st   *polarnet.Stack
		host string
	}{{client, "198.18.0.2"}, {server, "127.0.0.1"}} {
		c, err := (&dialer.Dialer{Stack: d.st}).Dial("tcp", net.JoinHostPort(d.host, strconv.Itoa(port)))
		require.NoError(t, err)
		defer c.Close()
		s, err := ln.Accept()
		require.NoError(t, err)
		defer s.Close()
	}

	got := map[string]float64{}
	metrics.Collect(server, func(s metrics.Sample) {
		if s.Desc == metrics.TCPConns || s.Desc == metrics.KernelConns {
			got[s.Desc.Name+strings.Join(s.LabelValues, ",")] = s.Value
		}
	})
	assert.Equal(t, map[string]float64{
		"polarnet_tcp_conns":                1,
		"polarnet_kernel_conns_totaldial":   1,
		"polarnet_kernel_conns_totalaccept": 1,
	}, got)

	snap := metrics.Snapshot(server)
	assert.EqualValues(t, 1, snap.Conns)
	assert.EqualValues(t, 1, snap.KernelDials)
	assert.EqualValues(t, 1, snap.KernelAccepts)
}

// Every family Collect reports is one Engine or Protocol lists: exporters
// describe the families from those lists, and one left out broke the
// Prometheus output of every shard after it.
func TestCollectedFamiliesListed(t *testing.T) {
	la, lb := pipe.New(pipe.Config{Queues: 2})
	t.Cleanup(func() { lb.Close() })
	st := newStack(t, la, "198.18.0.1/24")
	listed := map[*metrics.Desc]bool{}
	for _, d := range append(metrics.Engine(), metrics.Protocol()...) {
		listed[d] = true
	}
	seen := map[string]bool{}
	metrics.Collect(st, func(s metrics.Sample) {
		seen[s.Desc.Name] = true
		assert.True(t, listed[s.Desc], "%s is collected but neither Engine nor Protocol lists it", s.Desc.Name)
	})
	assert.NotEmpty(t, seen)
}
