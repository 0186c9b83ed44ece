package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

const defaultStatURL = "http://127.0.0.1:9090/metrics"

func statCmd(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("stat", flag.ContinueOnError)
	fs.SetOutput(stderr)
	interval := fs.Duration("interval", time.Second, "time between scrapes")
	count := fs.Int("n", 0, "views to show before exiting (0: until interrupted)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	url := defaultStatURL
	if fs.NArg() > 0 {
		url = fs.Arg(0)
	}
	if *interval <= 0 || *count < 0 {
		fmt.Fprintln(stderr, "polarnet stat: -interval must be positive, -n not negative")
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	clear := false
	if f, ok := stdout.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			clear = true // a terminal: redraw in place
		}
	}
	if err := statLoop(ctx, url, *interval, *count, clear, stdout); err != nil {
		fmt.Fprintln(stderr, "polarnet stat:", err)
		return 1
	}
	return 0
}

// statLoop scrapes url every interval and prints a view of the rates
// between consecutive scrapes, count times (0: until ctx ends).
func statLoop(ctx context.Context, url string, interval time.Duration, count int, clear bool, w io.Writer) error {
	client := &http.Client{Timeout: max(interval, time.Second)}
	prev, err := scrapeURL(ctx, client, url)
	if err != nil {
		return err
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for shown := 0; count == 0 || shown < count; shown++ {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		cur, err := scrapeURL(ctx, client, url)
		if err != nil {
			return err
		}
		if clear {
			fmt.Fprint(w, "\x1b[H\x1b[2J")
		}
		renderStat(w, url, prev, cur)
		prev = cur
	}
	return nil
}

// scrape is one read of a metrics endpoint.
type scrape struct {
	at   time.Time
	fams map[string]*dto.MetricFamily
}

func scrapeURL(ctx context.Context, client *http.Client, url string) (scrape, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return scrape{}, err
	}
	// Ask for the text format: expfmt parses it without protobuf framing.
	req.Header.Set("Accept", "text/plain; version=0.0.4")
	resp, err := client.Do(req)
	if err != nil {
		return scrape{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return scrape{}, fmt.Errorf("%s: %s", url, resp.Status)
	}
	return parseScrape(resp.Body, time.Now())
}

func parseScrape(r io.Reader, at time.Time) (scrape, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return scrape{}, err
	}
	return scrape{at: at, fams: fams}, nil
}

func labelsOf(m *dto.Metric) map[string]string {
	out := map[string]string{}
	for _, l := range m.Label {
		out[l.GetName()] = l.GetValue()
	}
	return out
}

func valueOf(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Untyped != nil:
		return m.Untyped.GetValue()
	}
	return 0
}

// withStack returns v, prefixed with the series' stack and a space when it
// has the label stack: an endpoint serving several stacks of one process
// (prom.StacksHandler, rpcbench -metrics) tells them apart by it, and
// their shards, queues and drops are shown apart.
func withStack(l map[string]string, v string) string {
	if st := l["stack"]; st != "" {
		return st + " " + v
	}
	return v
}

// sumBy sums family name's series by the value of label key (within each
// stack), keeping only series whose labels match filter.
func (s scrape) sumBy(name, key string, filter map[string]string) map[string]float64 {
	return s.sumByFunc(name, func(l map[string]string) string { return withStack(l, l[key]) }, filter)
}

// sumByFunc sums family name's series by key(labels), keeping only series
// whose labels match filter.
func (s scrape) sumByFunc(name string, key func(map[string]string) string, filter map[string]string) map[string]float64 {
	out := map[string]float64{}
	f := s.fams[name]
	if f == nil {
		return out
	}
next:
	for _, m := range f.Metric {
		l := labelsOf(m)
		for k, v := range filter {
			if l[k] != v {
				continue next
			}
		}
		out[key(l)] += valueOf(m)
	}
	return out
}

// hist returns the histograms of family name by the value of label key
// (within each stack).
func (s scrape) hist(name, key string) map[string]*dto.Histogram {
	out := map[string]*dto.Histogram{}
	if f := s.fams[name]; f != nil {
		for _, m := range f.Metric {
			if m.Histogram != nil {
				l := labelsOf(m)
				out[withStack(l, l[key])] = m.Histogram
			}
		}
	}
	return out
}

// histDelta returns the count, sum and bucket counts observed between two
// snapshots of a histogram.
func histDelta(prev, cur *dto.Histogram) (count uint64, sum float64, bounds []float64, cum []uint64) {
	if cur == nil {
		return 0, 0, nil, nil
	}
	count, sum = cur.GetSampleCount(), cur.GetSampleSum()
	if prev != nil {
		count -= min(count, prev.GetSampleCount())
		sum -= prev.GetSampleSum()
	}
	for i, b := range cur.Bucket {
		c := b.GetCumulativeCount()
		if prev != nil && i < len(prev.Bucket) {
			c -= min(c, prev.Bucket[i].GetCumulativeCount())
		}
		bounds = append(bounds, b.GetUpperBound())
		cum = append(cum, c)
	}
	return count, sum, bounds, cum
}

// quantile estimates quantile q from cumulative bucket counts: the bound
// of the first bucket holding it (+Inf beyond the last).
func quantile(q float64, count uint64, bounds []float64, cum []uint64) float64 {
	if count == 0 {
		return math.NaN()
	}
	rank := uint64(math.Ceil(q * float64(count)))
	for i, c := range cum {
		if c >= rank {
			return bounds[i]
		}
	}
	return math.Inf(1)
}

// renderStat prints the rates between prev and cur.
func renderStat(w io.Writer, url string, prev, cur scrape) {
	dt := cur.at.Sub(prev.at).Seconds()
	if dt <= 0 {
		dt = 1
	}
	rateOf := func(a, b map[string]float64) map[string]float64 {
		out := map[string]float64{}
		for k, v := range b {
			out[k] = max(v-a[k], 0) / dt
		}
		return out
	}
	rate := func(name, key string, filter map[string]string) map[string]float64 {
		return rateOf(prev.sumBy(name, key, filter), cur.sumBy(name, key, filter))
	}
	var links []string
	for k := range cur.sumBy("polarnet_link_info", "link", nil) {
		links = append(links, k)
	}
	sort.Strings(links)
	link := "?"
	if len(links) > 0 {
		link = strings.Join(links, ", ")
	}
	fmt.Fprintf(w, "polarnet stat  %s  link %s  every %.1fs  %s\n\n", url, link, dt, cur.at.Format("15:04:05"))

	rxF, rxB := rate("polarnet_rx_frames_total", "shard", nil), rate("polarnet_rx_bytes_total", "shard", nil)
	txF, txB := rate("polarnet_tx_frames_total", "shard", nil), rate("polarnet_tx_bytes_total", "shard", nil)
	drops := rate("polarnet_drops_total", "shard", nil)
	hand := rate("polarnet_handoff_frames_total", "shard", map[string]string{"direction": "out"})
	retr := rate("polarnet_tcp_retransmits_total", "shard", nil)
	busy, ptime := rate("polarnet_poll_busy_seconds_total", "shard", nil), rate("polarnet_poll_seconds_total", "shard", nil)
	pollPrev, pollCur := prev.hist("polarnet_poll_iteration_seconds", "shard"), cur.hist("polarnet_poll_iteration_seconds", "shard")
	batchPrev, batchCur := prev.hist("polarnet_tx_batch_frames", "shard"), cur.hist("polarnet_tx_batch_frames", "shard")

	var shards []string
	for k := range cur.sumBy("polarnet_rx_frames_total", "shard", nil) {
		shards = append(shards, k)
	}
	sortNumeric(shards)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "shard/queue\trx pps\trx Mbit/s\ttx pps\ttx Mbit/s\tdrops/s\thandoff/s\tretrans/s\tbusy\tpoll p50\tpoll p99\ttx batch\t")
	// Totals per stack ("" for an endpoint of one unlabelled stack), in
	// the order of the rows.
	var stacks []string
	tot := map[string]*[7]float64{}
	nShards := map[string]int{}
	for _, s := range shards {
		busyPct := "-"
		if ptime[s] > 0 {
			busyPct = fmt.Sprintf("%.1f%%", 100*busy[s]/ptime[s])
		}
		n, _, bounds, cum := histDelta(pollPrev[s], pollCur[s])
		bn, bsum, _, _ := histDelta(batchPrev[s], batchCur[s])
		batch := "-"
		if bn > 0 {
			batch = fmt.Sprintf("%.1f", bsum/float64(bn))
		}
		stack, shard := splitStack(s)
		fmt.Fprintf(tw, "%s%s/%s\t%s\t%.1f\t%s\t%.1f\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", stackPrefix(stack), shard, shard,
			si(rxF[s]), rxB[s]*8/1e6, si(txF[s]), txB[s]*8/1e6, si(drops[s]), si(hand[s]), si(retr[s]),
			busyPct, dur(quantile(0.5, n, bounds, cum)), dur(quantile(0.99, n, bounds, cum)), batch)
		if tot[stack] == nil {
			stacks = append(stacks, stack)
			tot[stack] = new([7]float64)
		}
		nShards[stack]++
		for i, v := range []float64{rxF[s], rxB[s], txF[s], txB[s], drops[s], hand[s], retr[s]} {
			tot[stack][i] += v
		}
	}
	for _, st := range stacks {
		if t := tot[st]; nShards[st] > 1 {
			fmt.Fprintf(tw, "%sall\t%s\t%.1f\t%s\t%.1f\t%s\t%s\t%s\t\t\t\t\t\n", stackPrefix(st), si(t[0]), t[1]*8/1e6, si(t[2]), t[3]*8/1e6, si(t[4]), si(t[5]), si(t[6]))
		}
	}
	tw.Flush()

	// Drops by layer and reason (within each stack), where any moved.
	byReason := func(l map[string]string) string { return withStack(l, l["layer"]+"/"+l["reason"]) }
	var moved []string
	for k, r := range rateOf(prev.sumByFunc("polarnet_drops_total", byReason, nil), cur.sumByFunc("polarnet_drops_total", byReason, nil)) {
		if r > 0 {
			moved = append(moved, fmt.Sprintf("%s %s/s", k, si(r)))
		}
	}
	if len(moved) > 0 {
		sort.Strings(moved)
		fmt.Fprintf(w, "\ndrops: %s\n", strings.Join(moved, ", "))
	}

	// The link's own counters, per queue (or for the device).
	lrx, ltx := rate("polarnet_link_rx_frames_total", "queue", nil), rate("polarnet_link_tx_frames_total", "queue", nil)
	if len(lrx)+len(ltx) > 0 {
		var queues []string
		for q := range lrx {
			queues = append(queues, q)
		}
		sortNumeric(queues)
		ldrop := rate("polarnet_drops_total", "queue", map[string]string{"layer": "link"})
		fmt.Fprintln(w)
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "link queue\trx pps\ttx pps\tdrops/s\tpool free (min)\t")
		free, freeMin := cur.sumBy("polarnet_link_pool_free_buffers", "queue", nil), cur.sumBy("polarnet_link_pool_free_min_buffers", "queue", nil)
		for _, q := range queues {
			pool := "-"
			if v, ok := free[q]; ok {
				pool = fmt.Sprintf("%.0f (%.0f)", v, freeMin[q])
			}
			stack, queue := splitStack(q)
			fmt.Fprintf(tw, "%s%s\t%s\t%s\t%s\t%s\t\n", stackPrefix(stack), queue, si(lrx[q]), si(ltx[q]), si(ldrop[q]), pool)
		}
		tw.Flush()
	}
}

// splitStack splits a key of withStack into the stack ("" if none) and
// the label value.
func splitStack(key string) (stack, v string) {
	if i := strings.LastIndexByte(key, ' '); i >= 0 {
		return key[:i], key[i+1:]
	}
	return "", key
}

// stackPrefix is how a row names its stack: "client " or nothing.
func stackPrefix(stack string) string {
	if stack == "" {
		return ""
	}
	return stack + " "
}

// sortNumeric sorts keys of withStack by stack, then by label value,
// numerically where they are numbers.
func sortNumeric(s []string) {
	sort.Slice(s, func(i, j int) bool {
		stackI, vi := splitStack(s[i])
		stackJ, vj := splitStack(s[j])
		if stackI != stackJ {
			return stackI < stackJ
		}
		a, errA := strconv.Atoi(vi)
		b, errB := strconv.Atoi(vj)
		if errA == nil && errB == nil {
			return a < b
		}
		return vi < vj
	})
}

// si formats a rate with a k/M suffix.
func si(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.2fM", v/1e6)
	case v >= 1e4:
		return fmt.Sprintf("%.1fk", v/1e3)
	case v >= 100 || v == math.Trunc(v):
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.1f", v)
}

// dur formats seconds as a duration; "-" for no data.
func dur(s float64) string {
	switch {
	case math.IsNaN(s):
		return "-"
	case math.IsInf(s, 1):
		return ">2.1s" // beyond the last bucket (2^31 ns)
	}
	return time.Duration(s * 1e9).String()
}
