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

	"github.com/polarnet/polarnet/link"
	"github.com/polarnet/polarnet/link/pipe"
	"github.com/polarnet/polarnet/metrics/prom"
	"github.com/polarnet/polarnet/polarnet"
)

func newStack(t *testing.T, l link.Link, addr string) *polarnet.Stack {
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
	la, lb := pipe.New(pipe.Config{Queues: 2})
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
	la, _ := pipe.New(pipe.Config{})
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

// TestStacksHandler: two stacks of one process on one endpoint, each
// series labelled with its stack and holding that stack's own counters.
func TestStacksHandler(t *testing.T) {
	la, lb := pipe.New(pipe.Config{})
	a := newStack(t, la, "198.18.0.1/24")
	b := newStack(t, lb, "198.18.0.2/24")
	srv := httptest.NewServer(prom.StacksHandler(map[string]*polarnet.Stack{"client": a, "server": b}))
	defer srv.Close()

	ln, err := b.ListenTCP("tcp", netip.MustParseAddrPort("198.18.0.2:0"), 0, net.KeepAliveConfig{})
	require.NoError(t, err)
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		io.Copy(c, c)
	}()
	c, err := a.DialTCP(t.Context(), "tcp", netip.AddrPort{}, ln.Addr().(interface{ AddrPort() netip.AddrPort }).AddrPort())
	require.NoError(t, err)
	msg := make([]byte, 1000)
	for range 8 {
		_, err := c.Write(msg)
		require.NoError(t, err)
		_, err = io.ReadFull(c, msg)
		require.NoError(t, err)
	}
	time.Sleep(20 * time.Millisecond) // the last ACK
	fams, _ := scrape(t, srv.URL)
	for name, st := range map[string]*polarnet.Stack{"client": a, "server": b} {
		l := map[string]string{"stack": name, "shard": "0"}
		assert.InDelta(t, float64(st.Stats().Total.RxFrames), value(t, fams, "polarnet_rx_frames_total", l), 2, name)
		assert.InDelta(t, float64(st.Stats().Total.TxFrames), value(t, fams, "polarnet_tx_frames_total", l), 2, name)
	}
	assert.Equal(t, 1.0, value(t, fams, "polarnet_tcpip_tcp_active_connection_openings_total", map[string]string{"stack": "client"}))
	assert.Equal(t, 0.0, value(t, fams, "polarnet_tcpip_tcp_active_connection_openings_total", map[string]string{"stack": "server"}))
	assert.Equal(t, 1.0, value(t, fams, "polarnet_tcpip_tcp_passive_connection_openings_total", map[string]string{"stack": "server"}))
	assert.NotNil(t, fams["go_goroutines"])
	c.Close()
}

// series maps every sample of the polarnet_* families of one stack to its
// value (histograms: their count), keyed by name and labels.
func series(fams map[string]*dto.MetricFamily, stack string) map[string]float64 {
	out := map[string]float64{}
	for name, f := range fams {
		if !strings.HasPrefix(name, "polarnet_") {
			continue
		}
		for _, m := range f.Metric {
			key, mine := name, false
			for _, l := range m.Label {
				mine = mine || (l.GetName() == "stack" && l.GetValue() == stack)
				key += "," + l.GetName() + "=" + l.GetValue()
			}
			if !mine {
				continue
			}
			switch {
			case m.Counter != nil:
				out[key] = m.Counter.GetValue()
			case m.Gauge != nil:
				out[key] = m.Gauge.GetValue()
			case m.Histogram != nil:
				out[key] = float64(m.Histogram.GetSampleCount())
			}
		}
	}
	return out
}

// moved returns the series of stack that changed between two scrapes, by
// how much.
func moved(a, b map[string]*dto.MetricFamily, stack string) map[string]float64 {
	before, after := series(a, stack), series(b, stack)
	out := map[string]float64{}
	for k, v := range after {
		if d := v - before[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}

// pollSeries are the poller's own clocks and wakeups: they move with time,
// traffic or not.
func pollSeries(key string) bool {
	for _, p := range []string{"polarnet_poll_", "polarnet_rx_bursts_total"} {
		if strings.HasPrefix(key, p) {
			return true
		}
	}
	return false
}

// TestScrapeCountsExactly checks the counters as a scrape shows them,
// through the whole export path: N datagrams sent are N frames and N*len
// bytes out of the sender and into the receiver, with no drop; one
// malformed frame moves the bad-frame drop counter and the RX frame and
// byte counters by one, and nothing else.
func TestScrapeCountsExactly(t *testing.T) {
	la, lb := pipe.New(pipe.Config{})
	a := newStack(t, la, "198.18.0.1/24")
	b := newStack(t, lb, "198.18.0.2/24")
	lc, raw := pipe.New(pipe.Config{})
	c := newStack(t, lc, "198.18.0.3/24")
	t.Cleanup(func() { raw.Close() })
	srv := httptest.NewServer(prom.StacksHandler(map[string]*polarnet.Stack{"a": a, "b": b, "c": c}))
	defer srv.Close()

	dst := netip.MustParseAddrPort("198.18.0.2:7000")
	rx, err := b.ListenUDP("udp4", dst)
	require.NoError(t, err)
	defer rx.Close()
	tx, err := a.DialUDP("udp4", netip.AddrPort{}, dst)
	require.NoError(t, err)
	defer tx.Close()
	const payload = 100
	frameLen := 14 + 20 + 8 + payload // Ethernet, IPv4, UDP
	buf := make([]byte, 2*payload)
	recv := func(n int) {
		for range n {
			require.NoError(t, rx.SetReadDeadline(time.Now().Add(5*time.Second)))
			m, err := rx.Read(buf)
			require.NoError(t, err)
			require.Equal(t, payload, m)
		}
	}
	// One datagram first: ARP resolves, so the window holds UDP only.
	_, err = tx.Write(make([]byte, payload))
	require.NoError(t, err)
	recv(1)
	settle := func() {
		require.Eventually(t, func() bool {
			return a.Stats().Total.TxFrames == b.Stats().Total.RxFrames && b.Stats().Total.TxFrames == a.Stats().Total.RxFrames
		}, 5*time.Second, time.Millisecond)
	}
	settle()
	first, _ := scrape(t, srv.URL)

	const n = 200
	for range n {
		_, err := tx.Write(make([]byte, payload))
		require.NoError(t, err)
	}
	recv(n)
	settle()
	second, _ := scrape(t, srv.URL)

	sent, got := moved(first, second, "a"), moved(first, second, "b")
	l := ",queue=0,shard=0,stack="
	assert.Equal(t, float64(n), sent["polarnet_tx_frames_total"+l+"a"], "frames sent: %v", sent)
	assert.Equal(t, float64(n*frameLen), sent["polarnet_tx_bytes_total"+l+"a"])
	assert.Equal(t, float64(n), sent["polarnet_tcpip_udp_packets_sent_total,stack=a"])
	assert.Equal(t, float64(n), got["polarnet_rx_frames_total"+l+"b"], "frames received: %v", got)
	assert.Equal(t, float64(n*frameLen), got["polarnet_rx_bytes_total"+l+"b"])
	assert.Equal(t, float64(n), got["polarnet_tcpip_udp_packets_received_total,stack=b"])
	for k := range got {
		assert.NotContains(t, k, "polarnet_tx_", "the receiver sent nothing: %s", k)
	}
	for _, m := range []map[string]float64{sent, got} {
		for k := range m {
			assert.NotContains(t, k, "drop", "no drop: %s", k)
		}
	}

	// One malformed frame (shorter than an Ethernet header) into c.
	third, _ := scrape(t, srv.URL)
	w, err := raw.Queues()[0].WriteBurst([]link.TxFrame{{Segs: [][]byte{{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}}}})
	require.NoError(t, err)
	require.Equal(t, 1, w)
	require.Eventually(t, func() bool { return c.Stats().Total.RxBadFrame == 1 }, 5*time.Second, time.Millisecond)
	fourth, _ := scrape(t, srv.URL)
	bad := moved(third, fourth, "c")
	badFrame := "polarnet_drops_total,layer=engine,queue=0,reason=bad_frame,shard=0,stack=c" // labels sorted
	assert.Equal(t, 1.0, bad[badFrame], "%v", bad)
	assert.Equal(t, 1.0, bad["polarnet_rx_frames_total"+l+"c"])
	assert.Equal(t, 10.0, bad["polarnet_rx_bytes_total"+l+"c"])
	for k := range bad {
		switch {
		case pollSeries(k), k == badFrame,
			k == "polarnet_rx_frames_total"+l+"c", k == "polarnet_rx_bytes_total"+l+"c":
		default:
			t.Errorf("%s moved by %v; only the bad-frame drop and the RX counters should", k, bad[k])
		}
	}
	for _, s := range []string{"a", "b"} {
		for k := range moved(third, fourth, s) {
			if !pollSeries(k) {
				t.Errorf("stack %s: %s moved with a frame sent to c", s, k)
			}
		}
	}
}
