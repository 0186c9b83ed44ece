package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/polarnet/polarnet/internal/testenv"
	"github.com/polarnet/polarnet/link/tap"
	"github.com/polarnet/polarnet/metrics"
	"github.com/polarnet/polarnet/polarnet"
)

// TestMetricsEndpoint runs modes with -metrics and scrapes their polarnet
// ends while the load runs: each stack's series are there, told apart by
// the label stack, their frame counters and poll-iteration histograms grow
// between two scrapes, expvar serves the stacks too, and the endpoint goes
// away with the run. p2p-pipe serves both stacks from its one child; in the
// TAP modes (root) the polarnet end is a child of its own.
func TestMetricsEndpoint(t *testing.T) {
	// A mode's ends take their link's default queues: the pipe's one, a
	// TAP device's one per CPU (the child's GOMAXPROCS is ours).
	for _, tc := range []struct {
		mode   string
		stacks []string
		shards int
	}{
		{"p2p-pipe", []string{"client", "server"}, 1},
		{"p2k-tap", []string{"client"}, tap.DefaultQueues()},
		{"k2p-tap", []string{"server"}, tap.DefaultQueues()},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			if modes[tc.mode].priv {
				testenv.RequirePriv(t)
				testenv.RequireCommand(t, "ip")
			}
			testMetricsEndpoint(t, tc.mode, tc.stacks, tc.shards)
		})
	}
}

func testMetricsEndpoint(t *testing.T, mode string, stacks []string, shards int) {
	o := smokeOpts(t)
	o.warmup, o.duration = 300*time.Millisecond, 1500*time.Millisecond
	o.metrics = freeAddr(t)
	tc, err := parseTest("rr/4k-write/c1/d1")
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() {
		_, err := runOnce(t.Context(), o, modeSpec{Name: mode}, tc)
		done <- err
	}()
	url := "http://" + o.metrics

	// An end serves from before it connects: wait for it and for frames
	// both ways on every stack (a server counts the SYN it received before
	// it sends the SYN-ACK).
	framesOnAll := func(fams map[string]*dto.MetricFamily) bool {
		for _, stack := range stacks {
			if sumSeries(fams, "polarnet_rx_frames_total", stack) == 0 || sumSeries(fams, "polarnet_tx_frames_total", stack) == 0 {
				return false
			}
		}
		return true
	}
	var first map[string]*dto.MetricFamily
	deadline := time.Now().Add(15 * time.Second)
	for {
		select {
		case err := <-done:
			t.Fatalf("the run ended before a scrape showed frames on %v: %v", stacks, err)
		default:
		}
		if fams, err := scrapeMetrics(url + "/metrics"); err == nil && framesOnAll(fams) {
			first = fams
			break
		}
		require.True(t, time.Now().Before(deadline), "no scrape of %s showed frames on %v", url, stacks)
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(400 * time.Millisecond)
	second, err := scrapeMetrics(url + "/metrics")
	require.NoError(t, err, "scraping mid-run")

	for _, stack := range stacks {
		for _, name := range []string{"polarnet_rx_frames_total", "polarnet_tx_frames_total", "polarnet_rx_bytes_total", "polarnet_poll_iteration_seconds"} {
			a, b := sumSeries(first, name, stack), sumSeries(second, name, stack)
			assert.Positive(t, a, "%s{stack=%q} in the first scrape", name, stack)
			assert.Greater(t, b, a, "%s{stack=%q} grows under load", name, stack)
		}
		assert.Equal(t, float64(shards), sumSeries(second, "polarnet_link_info", stack), "shards of stack %s", stack)
	}
	var labelled []string
	for _, m := range second["polarnet_rx_frames_total"].GetMetric() {
		for _, l := range m.Label {
			if l.GetName() == "stack" && !slices.Contains(labelled, l.GetValue()) {
				labelled = append(labelled, l.GetValue())
			}
		}
	}
	assert.ElementsMatch(t, stacks, labelled, "the stacks this mode's end serves, and no other")
	assert.NotNil(t, second["go_goroutines"], "the Go runtime's metrics")

	resp, err := http.Get(url + "/debug/vars")
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	var vars map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(body, &vars))
	for _, stack := range stacks {
		name := "polarnet_" + stack
		require.Contains(t, vars, name)
		var snap metrics.ExpvarSnapshot
		require.NoError(t, json.Unmarshal(vars[name], &snap), name)
		assert.Positive(t, snap.Total.RxFrames, name)
		assert.Positive(t, snap.TCPIP["TCP.ActiveConnectionOpenings"]+snap.TCPIP["TCP.PassiveConnectionOpenings"], name)
	}

	require.NoError(t, <-done)
	_, err = http.Get(url + "/metrics")
	assert.Error(t, err, "the endpoint is gone with the run")
}

// TestMetricsOnlyOnPolarnetEnds: with -metrics, modes without a polarnet
// stack (kernel and vanilla ends) run as before, and an end without one
// refuses to serve.
func TestMetricsOnlyOnPolarnetEnds(t *testing.T) {
	o := smokeOpts(t)
	o.metrics = freeAddr(t)
	tc, err := parseTest("rr/4k-write/c1/d1")
	require.NoError(t, err)
	for _, name := range []string{"vanilla-pipe", "k2k-loopback"} {
		_, err := runOnce(t.Context(), o, modeSpec{Name: name}, tc)
		require.NoError(t, err, name)
	}
	_, err = serveMetrics(o.metrics, map[string]*polarnet.Stack{"server": nil})
	assert.ErrorContains(t, err, "no polarnet stack")
}

func TestMetricsFlag(t *testing.T) {
	r := &runCfg{metrics: "127.0.0.1:9464"}
	assert.Equal(t, []string{"-metrics", "127.0.0.1:9464"}, r.metricsArgs(0))
	assert.Equal(t, []string{"-metrics", "127.0.0.1:9465"}, r.metricsArgs(1), "a second process: the next port")
	r.metrics = "[::1]:0"
	assert.Equal(t, []string{"-metrics", "[::1]:0"}, r.metricsArgs(1), "port 0 stays any port")
	assert.Nil(t, (&runCfg{}).metricsArgs(0))

	for _, ok := range []string{"", ":9464", "127.0.0.1:9464", "[::1]:0"} {
		assert.NoError(t, checkMetricsAddr(ok), ok)
	}
	for _, bad := range []string{"9464", "127.0.0.1", "host:http", "127.0.0.1:65535", "127.0.0.1:-1"} {
		assert.Error(t, checkMetricsAddr(bad), bad)
	}
}

// freeAddr returns a loopback address with a port nobody listens on now.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

func scrapeMetrics(url string) (map[string]*dto.MetricFamily, error) {
	resp, err := http.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", url, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(resp.Body)
}

// sumSeries sums family name's series of one stack; a histogram counts its
// observations.
func sumSeries(fams map[string]*dto.MetricFamily, name, stack string) float64 {
	var sum float64
	for _, m := range fams[name].GetMetric() {
		var mine bool
		for _, l := range m.Label {
			mine = mine || (l.GetName() == "stack" && l.GetValue() == stack)
		}
		switch {
		case !mine:
		case m.Counter != nil:
			sum += m.Counter.GetValue()
		case m.Gauge != nil:
			sum += m.Gauge.GetValue()
		case m.Histogram != nil:
			sum += float64(m.Histogram.GetSampleCount())
		}
	}
	return sum
}
