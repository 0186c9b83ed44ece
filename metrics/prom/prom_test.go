package prom_test

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/polarnet/polarnet/link/linktest"
	"github.com/polarnet/polarnet/metrics/prom"
	"github.com/polarnet/polarnet/polarnet"
)

func newStack(t *testing.T, l polarnet.Link, addr string) *polarnet.Stack {
	t.Helper()
	st, err := polarnet.New(polarnet.Config{Link: l, Addrs: []netip.Prefix{netip.MustParsePrefix(addr)}})
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	return st
}

func scrape(t *testing.T, url string) (map[string]*dto.MetricFamily, string) {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(string(body)))
	require.NoError(t, err)
	return fams, string(body)
}

// value returns the value of the series of family name with the labels.
func value(t *testing.T, fams map[string]*dto.MetricFamily, name string, labels map[string]string) float64 {
	t.Helper()
	f := fams[name]
	require.NotNil(t, f, "no family %s", name)
next:
	for _, m := range f.Metric {
		got := map[string]string{}
		for _, l := range m.Label {
			got[l.GetName()] = l.GetValue()
		}
		for k, v := range labels {
			if got[k] != v {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue()
		case m.Gauge != nil:
			return m.Gauge.GetValue()
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount())
		}
	}
	t.Fatalf("no series %s%v", name, labels)
	return 0
}

func TestHandlerServesMetrics(t *testing.T) {
	la, lb := linktest.Pipe(linktest.PipeConfig{Queues: 2})
	a := newStack(t, la, "198.18.0.1/24")
	b := newStack(t, lb, "198.18.0.2/24")
	srv := httptest.NewServer(prom.Handler(a))
	defer srv.Close()

	ln, err := b.ListenTCP("tcp", netip.MustParseAddrPort("198.18.0.2:0"), 0, net.KeepAliveConfig{})
	require.NoError(t, err)
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); io.Copy(c, c) }()
		}
	}()
	for range 4 {
		c, err := a.DialTCP(t.Context(), "tcp", netip.AddrPort{}, ln.Addr().(interface{ AddrPort() netip.AddrPort }).AddrPort())
		require.NoError(t, err)
		msg := make([]byte, 4096)
		for range 16 {
			_, err := c.Write(msg)
			require.NoError(t, err)
			_, err = io.ReadFull(c, msg)
			require.NoError(t, err)
		}
		c.Close()
	}
	time.Sleep(50 * time.Millisecond) // let the last FIN exchange settle
	st := a.Stats()
	fams, body := scrape(t, srv.URL)

	for i, sh := range st.Shards {
		id := string(rune('0' + i))
		l := map[string]string{"shard": id, "queue": id}
		assert.InDelta(t, float64(sh.RxFrames), value(t, fams, "polarnet_rx_frames_total", l), 4, "shard %d", i)
		assert.InDelta(t, float64(sh.TxBytes), value(t, fams, "polarnet_tx_bytes_total", l), 1000)
	}
	assert.Zero(t, value(t, fams, "polarnet_drops_total", map[string]string{"shard": "0", "layer": "engine", "reason": "bad_frame"}))
	assert.Equal(t, 4.0, value(t, fams, "polarnet_tcpip_tcp_active_connection_openings_total", nil))
	assert.Equal(t, 2.0, value(t, fams, "polarnet_link_info", map[string]string{"link": la.Info().Name}))

	// Histograms come with buckets, a sum and a count.
	h := fams["polarnet_poll_iteration_seconds"]
	require.NotNil(t, h)
	assert.Equal(t, dto.MetricType_HISTOGRAM, h.GetType())
	var count uint64
	for _, m := range h.Metric {
		count += m.Histogram.GetSampleCount()
		require.NotEmpty(t, m.Histogram.Bucket)
	}
	assert.NotZero(t, count)
	for _, s := range []string{
		`polarnet_poll_iteration_seconds_bucket{queue="0",shard="0",le="2.56e-07"}`,
		`polarnet_poll_iteration_seconds_sum{queue="0",shard="0"}`,
		`polarnet_tx_batch_frames_bucket{queue="1",shard="1",le="64"}`,
		`# TYPE polarnet_rx_frames_total counter`,
		`# TYPE polarnet_tx_queue_packets gauge`,
		`go_goroutines`,
	} {
		assert.Contains(t, body, s)
	}
}

func TestRegisterWithConstLabels(t *testing.T) {
	la, _ := linktest.Pipe(linktest.PipeConfig{})
	a := newStack(t, la, "198.18.0.1/24")
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, prom.Register(reg, a, prometheus.Labels{"stack": "a"}))
	fams, err := reg.Gather()
	require.NoError(t, err, "the pedantic registry checks every metric against its description")
	require.NotEmpty(t, fams)
	for _, f := range fams {
		for _, m := range f.Metric {
			found := false
			for _, l := range m.Label {
				found = found || (l.GetName() == "stack" && l.GetValue() == "a")
			}
			assert.True(t, found, f.GetName())
		}
	}
}
