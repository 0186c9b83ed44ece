package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"
)

// opts are the settings shared by run and compare.
type opts struct {
	warmup, duration time.Duration
	mtu              int
	poll             string
	pinCPU           int
	quiet            float64       // idle fraction that counts as a quiet machine
	quietWait        time.Duration // how long to wait for one
	noise            float64       // CPUs other processes may use during a run before it is repeated
	retries          int           // extra attempts for disturbed runs, per row
	verbose          bool
	metrics          string // -metrics: where polarnet ends serve their metrics
	exe              string
}

// result is one run.
type result struct {
	Mode    string    `json:"mode"`
	Case    string    `json:"case"`
	Started time.Time `json:"started"`
	loadResult
	// CPU per end over the window, -1 where both ends share one process
	// (then only Total is known).
	CPUClient time.Duration `json:"cpu_client_ns"`
	CPUServer time.Duration `json:"cpu_server_ns"`
	CPUTotal  time.Duration `json:"cpu_total_ns"`
	// CPUSystem is the machine's busy time over the window (/proc/stat):
	// both ends, the kernel's softirq threads, and anything else running;
	// for pinned runs, that of their CPU.
	CPUSystem     time.Duration `json:"cpu_system_ns"`
	RetransClient int64         `json:"retrans_client"`
	RetransServer int64         `json:"retrans_server"`
	// SpuriousClient and SpuriousServer count loss recoveries each end
	// found needless (-1: not attributable, as for retransmits).
	SpuriousClient int64 `json:"spurious_client"`
	SpuriousServer int64 `json:"spurious_server"`
	// DropsClient and DropsServer count frames a polarnet or vanilla end's
	// link had no room for (-1: a kernel end).
	DropsClient int64 `json:"link_drops_client"`
	DropsServer int64 `json:"link_drops_server"`
	// SegsClient and SegsServer count frames a polarnet end's stack
	// handed its link over the window (-1: not a polarnet end).
	SegsClient int64 `json:"tx_frames_client"`
	SegsServer int64 `json:"tx_frames_server"`
	// Others is the CPU (in CPUs) used by other processes during the
	// window, Steal the CPU the hypervisor took; IdleBefore the idle
	// fraction seen just before the run (-1: not looked), Quiet whether
	// it met -quiet. Pinned runs count their own CPU only.
	Others     float64 `json:"others_cpus"`
	Steal      float64 `json:"steal_cpus"`
	IdleBefore float64 `json:"idle_before"`
	Quiet      bool    `json:"quiet"`
	Disturbed  bool    `json:"disturbed"`
}

// opsPerSec is operations (rr requests, crr connections) per second.
func (r *result) opsPerSec() float64 { return float64(r.Ops) / r.Elapsed.Seconds() }

// gbps is the stream rate in Gbit/s.
func (r *result) gbps() float64 { return float64(r.Bytes) * 8 / r.Elapsed.Seconds() / 1e9 }

// perOp returns CPU time d per operation in µs, or per GB in seconds for
// streams; NaN when unknown.
func (r *result) perOp(d time.Duration) float64 {
	switch {
	case d < 0:
		return nan
	case r.Bytes > 0 && r.Ops == 0:
		return d.Seconds() / (float64(r.Bytes) / 1e9)
	case r.Ops > 0:
		return float64(d.Nanoseconds()) / 1e3 / float64(r.Ops)
	}
	return nan
}

// segsPerOp returns the frames each polarnet end sent per operation, and
// their sum when both ends are polarnet; NaN where not known.
func (r *result) segsPerOp() (client, server, total float64) {
	per := func(n int64) float64 {
		if n < 0 || r.Ops == 0 {
			return nan
		}
		return float64(n) / float64(r.Ops)
	}
	client, server = per(r.SegsClient), per(r.SegsServer)
	return client, server, client + server
}

// runOnce sets up a mode, runs one measurement and tears everything down.
func runOnce(ctx context.Context, o *opts, m modeSpec, t testSpec) (res result, err error) {
	def := modes[m.Name]
	name := m.String()
	if m.MTU == 0 {
		m.MTU = o.mtu
	}
	if m.Poll == "" {
		m.Poll = o.poll
	}
	r := &runCfg{test: t, mode: m, def: def, pinCPU: o.pinCPU, exe: o.exe, verbose: o.verbose, metrics: o.metrics}
	td := newTeardown()
	defer func() { err = errors.Join(err, td.run()) }()
	srv, cli, err := def.setup(ctx, r, td)
	if err != nil {
		return res, fmt.Errorf("%s: setup: %w", name, err)
	}
	if err := cli.Connect(ctx, srv.Addr()); err != nil {
		return res, fmt.Errorf("%s: connect: %w", name, err)
	}
	res = result{Mode: name, Case: t.String(), Started: time.Now()}
	// A pinned run looks at its own CPU only: the other one is free for
	// other processes.
	statCPU := -1
	if m.Pin {
		statCPU = o.pinCPU
	}
	if res.IdleBefore, res.Quiet, err = waitQuiet(ctx, statCPU, o.quiet, o.quietWait); err != nil {
		return res, err
	}
	maxRun := o.warmup + o.duration + childCallTimeout
	if err := cli.Go(ctx, maxRun); err != nil {
		return res, err
	}
	if err := sleep(ctx, o.warmup); err != nil {
		return res, err
	}
	var before, after marks
	if before, err = takeMarks(ctx, srv, cli, statCPU); err != nil {
		return res, err
	}
	if err := sleep(ctx, o.duration); err != nil {
		return res, err
	}
	if after, err = takeMarks(ctx, srv, cli, statCPU); err != nil {
		return res, err
	}
	if res.loadResult, err = cli.Finish(ctx); err != nil {
		return res, fmt.Errorf("%s: %w", name, err)
	}
	final, err := srv.Snap(ctx)
	if err != nil {
		return res, err
	}
	if final.Errors > 0 {
		return res, fmt.Errorf("%s: %d server connections failed: %s", name, final.Errors, final.LastErr)
	}
	if t.Test == testStream {
		// What arrived, rather than what the client's writes handed to
		// its send buffer: exact at the window's edges, and not lumped
		// into whole writes.
		res.Bytes = after.server.Received - before.server.Received
	}
	res.account(def, before, after, o.noise)
	if res.Ops == 0 && res.Bytes == 0 {
		return res, fmt.Errorf("%s: no operation completed in %v", name, o.duration)
	}
	return res, nil
}

// marks are the counters at one end of the window.
type marks struct {
	client, server snap
	self           time.Duration
	machine        cpuTimes
}

// takeMarks switches the client's phase and reads every counter, the
// client's first, since its switch is what the window is timed by; machine
// times are those of statCPU (all CPUs if negative).
func takeMarks(ctx context.Context, srv serverEnd, cli clientEnd, statCPU int) (m marks, err error) {
	if m.client, err = cli.Mark(ctx); err != nil {
		return m, err
	}
	if m.server, err = srv.Snap(ctx); err != nil {
		return m, err
	}
	m.self = selfCPU()
	m.machine, err = readCPUTimes(statCPU)
	return m, err
}

// account fills the CPU and retransmit figures from the two marks.
func (r *result) account(def *modeDef, a, b marks, noise float64) {
	r.CPUClient = b.client.CPU - a.client.CPU
	r.CPUServer = b.server.CPU - a.server.CPU
	ours := r.CPUClient + r.CPUServer + (b.self - a.self)
	r.CPUTotal = r.CPUClient + r.CPUServer
	if def.shared {
		// One process: both ends report the same CPU time.
		r.CPUTotal = r.CPUClient
		r.CPUClient, r.CPUServer = -1, -1
		ours = r.CPUTotal + (b.self - a.self)
	}
	r.RetransClient = delta(a.client.Retrans, b.client.Retrans)
	r.RetransServer = delta(a.server.Retrans, b.server.Retrans)
	r.SpuriousClient = delta(a.client.Spurious, b.client.Spurious)
	r.SpuriousServer = delta(a.server.Spurious, b.server.Spurious)
	r.DropsClient = delta(a.client.Drops, b.client.Drops)
	r.DropsServer = delta(a.server.Drops, b.server.Drops)
	r.SegsClient = delta(a.client.TxFrames, b.client.TxFrames)
	r.SegsServer = delta(a.server.TxFrames, b.server.TxFrames)
	machine := b.machine.sub(a.machine)
	r.CPUSystem = machine.busy
	secs := max(r.Elapsed.Seconds(), 1e-9)
	r.Others = max(0, (machine.busy-ours).Seconds()/secs)
	r.Steal = machine.steal.Seconds() / secs
	r.Disturbed = r.Others > noise || r.Steal > noise
}

func delta(a, b int64) int64 {
	if a < 0 || b < 0 {
		return -1
	}
	return b - a
}

// runRow runs one mode on one case until a run is not disturbed by other
// processes, at most 1+retries times; when every attempt was disturbed it
// returns the least disturbed one (marked). progress, if not nil, hears
// about every attempt.
func runRow(ctx context.Context, o *opts, m modeSpec, t testSpec, progress io.Writer) (best result, attempts int, err error) {
	for attempts < 1+o.retries {
		attempts++
		res, err := runOnce(ctx, o, m, t)
		if err != nil {
			return res, attempts, err
		}
		if progress != nil {
			fmt.Fprintln(progress, res.line())
		}
		if attempts == 1 || res.Others < best.Others {
			best = res
		}
		if !res.Disturbed {
			return res, attempts, nil
		}
	}
	return best, attempts, nil
}

// line is a one-line summary of a run, for progress output.
func (r *result) line() string {
	s := fmt.Sprintf("%-26s %-24s ", r.Mode, r.Case)
	if r.Lat == nil {
		s += fmt.Sprintf("%7.2f Gbit/s  %6.2f CPU-s/GB", r.gbps(), r.perOp(r.CPUTotal))
	} else {
		s += fmt.Sprintf("%9.0f ops/s  p50 %s p99 %s  %6.1f CPU-µs/op", r.opsPerSec(), fmtDur(r.Lat.quantile(0.5)), fmtDur(r.Lat.quantile(0.99)), r.perOp(r.CPUTotal))
		if _, _, segs := r.segsPerOp(); !math.IsNaN(segs) {
			s += fmt.Sprintf("  %.2f segs/op", segs)
		}
	}
	s += fmt.Sprintf("  retx %s/%s  spurious %s/%s  others %.2f CPU", fmtCount(r.RetransClient), fmtCount(r.RetransServer),
		fmtCount(r.SpuriousClient), fmtCount(r.SpuriousServer), r.Others)
	if !r.Quiet {
		s += fmt.Sprintf(" (not quiet before: %.0f%% idle)", r.IdleBefore*100)
	}
	if r.Disturbed {
		s += " DISTURBED"
	}
	return s
}

// teardown runs cleanup functions in reverse order, once, and remembers
// itself in a process-wide list so that a second interrupt can still clean
// up while a run is stuck.
type teardown struct {
	mu   sync.Mutex
	fns  []func() error
	done bool
}

var (
	liveMu        sync.Mutex
	liveTeardowns = map[*teardown]struct{}{}
)

func newTeardown() *teardown {
	td := &teardown{}
	liveMu.Lock()
	liveTeardowns[td] = struct{}{}
	liveMu.Unlock()
	return td
}

func (td *teardown) add(fn func() error) {
	td.mu.Lock()
	defer td.mu.Unlock()
	td.fns = append(td.fns, fn)
}

func (td *teardown) run() error {
	td.mu.Lock()
	defer td.mu.Unlock()
	if td.done {
		return nil
	}
	td.done = true
	var errs []error
	for i := len(td.fns) - 1; i >= 0; i-- {
		errs = append(errs, td.fns[i]())
	}
	liveMu.Lock()
	delete(liveTeardowns, td)
	liveMu.Unlock()
	return errors.Join(errs...)
}

// interruptible returns a context cancelled by SIGINT or SIGTERM. The runs
// then end and tear down as on any error. If that takes more than
// abandonAfter, or a second signal comes, the remaining teardowns run here
// and the process exits.
func interruptible() (context.Context, func()) {
	ctx, cancel := context.WithCancel(context.Background())
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		select {
		case <-sigs:
		case <-ctx.Done():
			return
		}
		fmt.Fprintln(os.Stderr, "rpcbench: interrupted, cleaning up")
		cancel()
		select {
		case <-sigs:
		case <-time.After(abandonAfter):
		}
		liveMu.Lock()
		tds := make([]*teardown, 0, len(liveTeardowns))
		for td := range liveTeardowns {
			tds = append(tds, td)
		}
		liveMu.Unlock()
		for _, td := range tds {
			if err := td.run(); err != nil {
				fmt.Fprintln(os.Stderr, "rpcbench:", err)
			}
		}
		os.Exit(130)
	}()
	return ctx, func() { signal.Stop(sigs); cancel() }
}

const abandonAfter = 15 * time.Second
