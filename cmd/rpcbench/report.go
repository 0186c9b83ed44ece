package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

var nan = math.NaN()

// comparison is a compare command: rows (a mode on a case) run in
// interleaved rounds, so slow drifts of the machine spread over all rows.
type comparison struct {
	modes          []modeSpec
	cases, pinned  []testSpec
	ref            string
	repeat         int
	opts           *opts
	args           []string
	rows           []*row
	started, ended time.Time
}

// row is one mode on one case and its runs.
type row struct {
	mode     modeSpec
	test     testSpec
	results  []result
	attempts int
	err      error
}

func (c *comparison) buildRows() {
	for _, t := range c.cases {
		for _, m := range c.modes {
			c.rows = append(c.rows, &row{mode: m, test: t})
		}
		if !slices.Contains(c.pinned, t) {
			continue
		}
		for _, m := range c.modes {
			if !m.Pin {
				m.Pin = true
				c.rows = append(c.rows, &row{mode: m, test: t})
			}
		}
	}
}

// run runs every row repeat times. A row that fails is reported in the
// table and not run again; an interrupt ends the comparison.
func (c *comparison) run(ctx context.Context, progress io.Writer) error {
	c.buildRows()
	c.started = time.Now()
	total := len(c.rows) * c.repeat
	n := 0
	for round := range c.repeat {
		for _, r := range c.rows {
			n++
			if r.err != nil {
				continue
			}
			res, attempts, err := runRow(ctx, c.opts, r.mode, r.test, progressWriter(c.opts, progress))
			r.attempts += attempts
			if err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				r.err = err
				fmt.Fprintf(progress, "[%d/%d] %s %s: FAILED: %v\n", n, total, r.mode, r.test, err)
				continue
			}
			r.results = append(r.results, res)
			fmt.Fprintf(progress, "[%d/%d] round %d: %s\n", n, total, round+1, res.line())
		}
	}
	c.ended = time.Now()
	return nil
}

// stat is a median with the range around it.
type stat struct {
	med, lo, hi float64
	n           int
}

func statOf(vals []float64) stat {
	vals = slices.DeleteFunc(vals, math.IsNaN)
	if len(vals) == 0 {
		return stat{med: nan, lo: nan, hi: nan}
	}
	slices.Sort(vals)
	m := len(vals) / 2
	med := vals[m]
	if len(vals)%2 == 0 {
		med = (vals[m-1] + vals[m]) / 2
	}
	return stat{med: med, lo: vals[0], hi: vals[len(vals)-1], n: len(vals)}
}

func (r *row) metric(f func(*result) float64) stat {
	vals := make([]float64, len(r.results))
	for i := range r.results {
		vals[i] = f(&r.results[i])
	}
	return statOf(vals)
}

// The metrics of a row.
func (r *row) rate() stat {
	return r.metric(func(x *result) float64 {
		if r.test.Test == testStream {
			return x.gbps()
		}
		return x.opsPerSec()
	})
}

func (r *row) cpu(which func(*result) time.Duration) stat {
	return r.metric(func(x *result) float64 { return x.perOp(which(x)) })
}

func cpuClient(x *result) time.Duration { return x.CPUClient }
func cpuServer(x *result) time.Duration { return x.CPUServer }
func cpuTotal(x *result) time.Duration  { return x.CPUTotal }
func cpuSystem(x *result) time.Duration { return x.CPUSystem }

func (r *row) latency(q float64) stat {
	return r.metric(func(x *result) float64 {
		if x.Lat == nil {
			return nan
		}
		return float64(x.Lat.quantile(q)) / 1e3
	})
}

// most returns the largest client and server counts seen in any run.
func (r *row) most(counts func(*result) (client, server int64)) (client, server int64) {
	client, server = -1, -1
	for i := range r.results {
		c, s := counts(&r.results[i])
		client, server = max(client, c), max(server, s)
	}
	return client, server
}

// medianRun is the run with the median rate: its latency distribution is
// the one charted.
func (r *row) medianRun() *result {
	if len(r.results) == 0 {
		return nil
	}
	idx := make([]int, len(r.results))
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(a, b int) int {
		ra, rb := r.results[a].opsPerSec()+r.results[a].gbps(), r.results[b].opsPerSec()+r.results[b].gbps()
		switch {
		case ra < rb:
			return -1
		case ra > rb:
			return 1
		}
		return 0
	})
	return &r.results[idx[len(idx)/2]]
}

func (r *row) unit() string {
	switch r.test.Test {
	case testStream:
		return "Gbit/s"
	case testCRR:
		return "conn/s"
	}
	return "ops/s"
}

// summary is a row's figures on one line.
func (r *row) summary() string {
	rate := r.rate()
	s := fmt.Sprintf("%s %s", r.unit(), fmtStat(rate, r.test.Test == testStream))
	if r.test.Test == testStream {
		return s + fmt.Sprintf(", CPU s/GB %s", fmtStatPrec(r.cpu(cpuTotal), 3))
	}
	return s + fmt.Sprintf(", p50 %s µs, p99 %s µs, CPU µs/op %s", fmtStatPrec(r.latency(0.5), 1), fmtStatPrec(r.latency(0.99), 1), fmtStatPrec(r.cpu(cpuTotal), 1))
}

// refRow finds the reference row for r: the reference mode on the same
// case, pinned if r is.
func (c *comparison) refRow(r *row) *row {
	for _, x := range c.rows {
		if x.test == r.test && x.mode.Name == c.ref && x.mode.Pin == r.mode.Pin && len(x.results) > 0 {
			return x
		}
	}
	return nil
}

func ratio(a, b stat) string {
	if math.IsNaN(a.med) || math.IsNaN(b.med) || b.med == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f", a.med/b.med)
}

// write writes results.md, results.json and the charts into dir and prints
// the Markdown.
func (c *comparison) write(dir string, stdout io.Writer) error {
	var md bytes.Buffer
	c.markdown(&md)
	for _, t := range c.cases {
		if t.Test == testStream {
			continue
		}
		var series []chartSeries
		for _, r := range c.rows {
			if r.test == t {
				if mr := r.medianRun(); mr != nil && mr.Lat != nil {
					series = append(series, chartSeries{name: r.mode.String(), h: mr.Lat})
				}
			}
		}
		if len(series) == 0 {
			continue
		}
		var svg bytes.Buffer
		writeChart(&svg, "Latency by percentile: "+t.String(), t.Title(), series)
		if err := os.WriteFile(filepath.Join(dir, chartFile(t)), svg.Bytes(), 0o644); err != nil {
			return err
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "results.md"), md.Bytes(), 0o644); err != nil {
		return err
	}
	var failures bytes.Buffer
	for _, r := range c.rows {
		if r.err != nil {
			fmt.Fprintf(&failures, "== %s %s\n%v\n\n", r.mode, r.test, r.err)
		}
	}
	if failures.Len() > 0 {
		if err := os.WriteFile(filepath.Join(dir, "failures.txt"), failures.Bytes(), 0o644); err != nil {
			return err
		}
	}
	var all []result
	for _, r := range c.rows {
		all = append(all, r.results...)
	}
	js, err := json.MarshalIndent(all, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "results.json"), js, 0o644); err != nil {
		return err
	}
	_, err = stdout.Write(md.Bytes())
	fmt.Fprintf(stdout, "\n(written to %s: results.md, results.json, latency-*.svg)\n", dir)
	return err
}

func chartFile(t testSpec) string {
	return "latency-" + strings.ReplaceAll(t.String(), "/", "-") + ".svg"
}

func (c *comparison) markdown(w io.Writer) {
	o := c.opts
	fmt.Fprintf(w, "# rpcbench compare\n\n")
	fmt.Fprintf(w, "%s, %s, %d CPUs, %s; `rpcbench compare %s`.\n\n", c.started.Format("2006-01-02 15:04 MST"), kernelRelease(), runtime.NumCPU(), runtime.Version(), strings.Join(c.args, " "))
	fmt.Fprintf(w, "Medians of %d runs [min–max]; each run measures %v after %v of warmup, once the machine was "+
		"%.0f%% idle (waiting up to %v); a run during which other processes used more than %.2f CPU was repeated (up to %d times). "+
		"MTU %d unless the mode says otherwise (vanilla-pipe: always 1500); polarnet polls %s. "+
		"Rows marked pin ran both ends on CPU %d with GOMAXPROCS=1.\n\n",
		c.repeat, o.duration, o.warmup, o.quiet*100, o.quietWait, o.noise, o.retries, o.mtu, o.poll, o.pinCPU)
	fmt.Fprintf(w, "CPU is user+system time of each end's process per operation (per GB for streams); total is both ends; "+
		"machine is all busy CPU time on the host over the window (both ends, kernel threads, anything else; pinned rows: on their CPU). "+
		"segs/op: frames polarnet ends handed their link per operation, both ends (a TSO/GSO frame counts once; one end's where the other is not polarnet); "+
		"retx: TCP segments retransmitted, client/server, most in any run (– where not attributable); "+
		"spur: loss recoveries the end found needless (gVisor's SpuriousRecovery; the kernel's TcpExt undo counters and TCPSpuriousRTOs), client/server, most in any run; "+
		"drops: frames a polarnet or vanilla end's link had no room for (TX ring full), client/server, most in any run (– for kernel ends). "+
		"Ratios (×) are medians against %s on the same case.\n", c.ref)
	for _, t := range c.cases {
		c.caseTable(w, t)
	}
	c.ratioTable(w)
	var failed []string
	for _, r := range c.rows {
		if r.err != nil {
			failed = append(failed, fmt.Sprintf("- %s %s: `%s`", r.mode, r.test, firstLines(r.err.Error(), 3)))
		}
	}
	if len(failed) > 0 {
		fmt.Fprintf(w, "\n## Failed rows\n\nThe first lines of each error; failures.txt has them in full.\n\n%s\n", strings.Join(failed, "\n"))
	}
}

func (c *comparison) caseTable(w io.Writer, t testSpec) {
	fmt.Fprintf(w, "\n## %s\n\n", t.Title())
	stream := t.Test == testStream
	unit := (&row{test: t}).unit()
	if stream {
		fmt.Fprintf(w, "| mode | %s | × | CPU s/GB client | server | total | × | machine | retx | spur | drops | runs |\n|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n", unit)
	} else {
		fmt.Fprintf(w, "| mode | %s | × | p50 µs | p99 µs | p99.9 µs | CPU µs/op client | server | total | × | machine | segs/op | retx | spur | drops | runs |\n|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n", unit)
	}
	prec := 1
	if stream {
		prec = 3
	}
	for _, r := range c.rows {
		if r.test != t {
			continue
		}
		if len(r.results) == 0 {
			fmt.Fprintf(w, "| %s | failed |\n", r.mode)
			continue
		}
		ref := c.refRow(r)
		rate, total := r.rate(), r.cpu(cpuTotal)
		var rateX, cpuX string = "–", "–"
		if ref != nil {
			rateX, cpuX = ratio(rate, ref.rate()), ratio(total, ref.cpu(cpuTotal))
		}
		cells := []string{r.mode.String(), fmtStat(rate, stream), rateX}
		if !stream {
			cells = append(cells, fmtMed(r.latency(0.5), 1), fmtMed(r.latency(0.99), 1), fmtMed(r.latency(0.999), 1))
		}
		rc, rs := r.most(func(x *result) (int64, int64) { return x.RetransClient, x.RetransServer })
		sc, ss := r.most(func(x *result) (int64, int64) { return x.SpuriousClient, x.SpuriousServer })
		dc, ds := r.most(func(x *result) (int64, int64) { return x.DropsClient, x.DropsServer })
		cells = append(cells, fmtMed(r.cpu(cpuClient), prec), fmtMed(r.cpu(cpuServer), prec), fmtStatPrec(total, prec), cpuX,
			fmtMed(r.cpu(cpuSystem), prec))
		if !stream {
			cells = append(cells, r.segsCell())
		}
		cells = append(cells, fmtCount(rc)+"/"+fmtCount(rs), fmtCount(sc)+"/"+fmtCount(ss), fmtCount(dc)+"/"+fmtCount(ds), r.runs())
		fmt.Fprintf(w, "| %s |\n", strings.Join(cells, " | "))
	}
	if t.Test != testStream {
		fmt.Fprintf(w, "\n![latency by percentile](%s)\n", chartFile(t))
	}
}

// segsCell is the median of the frames polarnet ends sent per operation:
// both ends' sum, or the one polarnet end's, marked.
func (r *row) segsCell() string {
	seg := func(pick func(c, s, t float64) float64) stat {
		return r.metric(func(x *result) float64 { return pick(x.segsPerOp()) })
	}
	c := seg(func(c, _, _ float64) float64 { return c })
	s := seg(func(_, s, _ float64) float64 { return s })
	switch {
	case !math.IsNaN(c.med) && !math.IsNaN(s.med):
		return fmtFloat(seg(func(_, _, t float64) float64 { return t }).med, 2)
	case !math.IsNaN(c.med):
		return fmtFloat(c.med, 2) + " (client)"
	case !math.IsNaN(s.med):
		return fmtFloat(s.med, 2) + " (server)"
	}
	return "–"
}

// runs says how many runs a row has and how many attempts were disturbed.
func (r *row) runs() string {
	s := fmt.Sprint(len(r.results))
	disturbed := 0
	for _, x := range r.results {
		if x.Disturbed {
			disturbed++
		}
	}
	if extra := r.attempts - len(r.results); extra > 0 {
		s += fmt.Sprintf(" (+%d repeated)", extra)
	}
	if disturbed > 0 {
		s += fmt.Sprintf(" (%d noisy)", disturbed)
	}
	return s
}

func (c *comparison) ratioTable(w io.Writer) {
	fmt.Fprintf(w, "\n## Ratios against %s\n\nrate: ops/s, conn/s or Gbit/s (higher is better); CPU: per op or per GB, both ends (lower is better); p50/p99: latency (lower is better).\n\n", c.ref)
	fmt.Fprintf(w, "| case | mode | rate × | CPU × | p50 × | p99 × |\n|---|---|--:|--:|--:|--:|\n")
	for _, r := range c.rows {
		ref := c.refRow(r)
		if ref == nil || ref == r || len(r.results) == 0 {
			continue
		}
		p50, p99 := "–", "–"
		if r.test.Test != testStream {
			p50, p99 = ratio(r.latency(0.5), ref.latency(0.5)), ratio(r.latency(0.99), ref.latency(0.99))
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s |\n", r.test, r.mode, ratio(r.rate(), ref.rate()), ratio(r.cpu(cpuTotal), ref.cpu(cpuTotal)), p50, p99)
	}
}

// firstLines returns the first n non-empty lines of s, joined by " / ".
func firstLines(s string, n int) string {
	var out []string
	for line := range strings.Lines(s) {
		if line = strings.TrimSpace(line); line != "" {
			out = append(out, line)
		}
		if len(out) == n {
			break
		}
	}
	return strings.Join(out, " / ")
}

func kernelRelease() string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return "Linux"
	}
	return "Linux " + unix.ByteSliceToString(u.Release[:])
}

// Formatting.

// fmtStat is "median [min–max]", rates in k (or Gbit/s with two decimals).
func fmtStat(s stat, gbps bool) string {
	f := fmtRate
	if gbps {
		f = func(v float64) string { return fmt.Sprintf("%.2f", v) }
	}
	if s.n > 1 {
		return fmt.Sprintf("%s [%s–%s]", f(s.med), f(s.lo), f(s.hi))
	}
	return f(s.med)
}

func fmtRate(v float64) string {
	switch {
	case math.IsNaN(v):
		return "–"
	case v >= 1e6:
		return fmt.Sprintf("%.2fM", v/1e6)
	case v >= 1e4:
		return fmt.Sprintf("%.1fk", v/1e3)
	case v >= 1e3:
		return fmt.Sprintf("%.2fk", v/1e3)
	}
	return fmt.Sprintf("%.0f", v)
}

func fmtStatPrec(s stat, prec int) string {
	if s.n > 1 {
		return fmt.Sprintf("%s [%s–%s]", fmtFloat(s.med, prec), fmtFloat(s.lo, prec), fmtFloat(s.hi, prec))
	}
	return fmtFloat(s.med, prec)
}

func fmtMed(s stat, prec int) string { return fmtFloat(s.med, prec) }

func fmtFloat(v float64, prec int) string {
	if math.IsNaN(v) {
		return "–"
	}
	return fmt.Sprintf("%.*f", prec, v)
}

func fmtCount(n int64) string {
	if n < 0 {
		return "–"
	}
	return fmt.Sprint(n)
}

// fmtDur prints a latency in µs (ms from 1 ms).
func fmtDur(d time.Duration) string {
	if d >= time.Millisecond {
		return fmt.Sprintf("%.2fms", float64(d)/1e6)
	}
	return fmt.Sprintf("%.1fµs", float64(d)/1e3)
}
