// Rpcbench measures TCP request/response, bulk and connection-rate
// performance of polarnet against the kernel and against vanilla gVisor, each
// end on either Go's net (kernel) or polarnet. It builds the topology of
// every mode itself (network namespaces, veth pairs, TAP devices, in-memory
// pipes) and always removes it again.
//
//	rpcbench run -mode p2k-tap -case rr/4k-write/c1/d1     one mode, one case
//	rpcbench compare -repeat 3 -out results/                modes side by side
//	rpcbench server -net kernel -listen :7100               a server for another host
//	rpcbench client -net polarnet -connect HOST:7100 -case rr/4k-read/c64/d8
//	rpcbench modes                                          what each mode means
//
// See README.md for the modes, the measurements and how to read them.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/polarnet/polarnet/polarnet"
)

func main() { os.Exit(cli(os.Args[1:], os.Stdout, os.Stderr)) }

const usage = `usage: rpcbench COMMAND [flags]

commands:
  run       one mode on one case, with full detail
  compare   several modes on several cases, repeated; writes a Markdown table and SVG charts
  server    serve the benchmark protocol (for a client on another host)
  client    load a server started with 'rpcbench server'
  modes     list the modes

'rpcbench COMMAND -h' lists a command's flags.
`

// cli runs the command line args and returns the exit status.
func cli(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	var err error
	switch args[0] {
	case "run":
		err = cmdRun(args[1:], stdout, stderr)
	case "compare":
		err = cmdCompare(args[1:], stdout, stderr)
	case "server":
		err = cmdServer(args[1:], stdout, stderr)
	case "client":
		err = cmdClient(args[1:], stdout, stderr)
	case "pair":
		err = cmdPair(args[1:], stdout, stderr)
	case "modes":
		printModes(stdout)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
	default:
		fmt.Fprintf(stderr, "rpcbench: unknown command %q\n%s", args[0], usage)
		return 2
	}
	switch {
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		return 2
	case err != nil:
		fmt.Fprintln(stderr, "rpcbench:", err)
		return 1
	}
	return 0
}

// errUsage reports a command line mistake already explained to the user.
var errUsage = errors.New("usage")

func printModes(w io.Writer) {
	fmt.Fprintln(w, "mode          client    server    link                              root")
	for _, name := range modeOrder {
		m := modes[name]
		root := ""
		if m.priv {
			root = "yes"
		}
		fmt.Fprintf(w, "%-13s %-9s %-9s %-33s %s\n", m.name, m.client, m.server, m.link, root)
	}
	fmt.Fprintln(w, "\noptions: MODE:mtu=N (link MTU), MODE:poll=adaptive|busy|blocking (polarnet ends),")
	fmt.Fprintln(w, "         MODE:ring=N (pipe frames per direction, default 1024), MODE:pin (both ends on one CPU, GOMAXPROCS=1),")
	fmt.Fprintln(w, "         MODE:ack=off (polarnet ends' ACK filter off), MODE:procs=N (GOMAXPROCS of polarnet ends' processes)")
}

// addOpts registers the flags every measuring command shares.
func addOpts(fs *flag.FlagSet) *opts {
	o := &opts{}
	fs.DurationVar(&o.duration, "duration", 3*time.Second, "measured time of each run")
	fs.DurationVar(&o.warmup, "warmup", 500*time.Millisecond, "load before the measured time of each run")
	fs.IntVar(&o.mtu, "mtu", 1500, "MTU of the veth, TAP and pipe links (vanilla-pipe stays at 1500, loopback at lo's)")
	fs.StringVar(&o.poll, "poll", "adaptive", "polarnet poll mode: adaptive, busy or blocking")
	fs.IntVar(&o.pinCPU, "pin-cpu", runtime.NumCPU()-1, "the CPU pinned runs use")
	fs.Float64Var(&o.quiet, "quiet", 0.9, "idle fraction of all CPUs (over 200 ms) to wait for before each run")
	fs.DurationVar(&o.quietWait, "quiet-wait", 10*time.Second, "how long to wait for a quiet machine before running anyway")
	fs.Float64Var(&o.noise, "noise", 0.2, "CPUs other processes may use during a run before it is repeated")
	fs.IntVar(&o.retries, "retries", 2, "extra attempts of a run disturbed by other processes")
	fs.BoolVar(&o.verbose, "v", false, "print every attempt")
	fs.StringVar(&o.metrics, "metrics", "", "HOST:PORT where the polarnet ends serve their metrics while a run lasts: Prometheus at /metrics (label stack=client|server), expvar at /debug/vars (p2p-memif's client: the next port; AF_XDP modes: in the end's namespace)")
	return o
}

// caseFlags build a case from separate flags, for run and client.
type caseFlags struct {
	spec, test, preset string
	req, resp          int
	conns, depth       int
}

func addCaseFlags(fs *flag.FlagSet) *caseFlags {
	c := &caseFlags{}
	fs.StringVar(&c.spec, "case", "", "the case as one string, e.g. rr/4k-write/c64/d8, stream/c4, crr/c16 (overrides the flags below)")
	fs.StringVar(&c.test, "test", testRR, "rr, stream or crr")
	fs.StringVar(&c.preset, "preset", "4k-write", "request/response sizes: 4k-write (4096/64) or 4k-read (64/4096)")
	fs.IntVar(&c.req, "req", 0, "request bytes (overrides the preset; with -resp)")
	fs.IntVar(&c.resp, "resp", 0, "response bytes (overrides the preset; with -req)")
	fs.IntVar(&c.conns, "conns", 1, "connections (crr: parallel connectors)")
	fs.IntVar(&c.depth, "depth", 1, "rr: outstanding requests per connection")
	return c
}

func (c *caseFlags) parse() (testSpec, error) {
	if c.spec != "" {
		return parseTest(c.spec)
	}
	s := c.test
	if c.test != testStream {
		if c.req > 0 || c.resp > 0 {
			s += fmt.Sprintf("/%dx%d", c.req, c.resp)
		} else {
			s += "/" + c.preset
		}
	}
	s += fmt.Sprintf("/c%d", c.conns)
	if c.test == testRR {
		s += fmt.Sprintf("/d%d", c.depth)
	}
	return parseTest(s)
}

func newFlagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}

func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(fs.Output(), "unexpected arguments: %q\n", fs.Args())
		return errUsage
	}
	return nil
}

// checkOpts validates shared options and finds this program's binary.
func (o *opts) check(needPriv bool) error {
	if _, err := parsePoll(o.poll); err != nil {
		return err
	}
	if o.mtu < 576 || o.mtu > 65535 {
		return fmt.Errorf("-mtu %d outside 576..65535", o.mtu)
	}
	if o.duration <= 0 || o.warmup < 0 || o.duration > time.Hour {
		return errors.New("-duration must be in (0, 1h] and -warmup not negative")
	}
	if err := checkMetricsAddr(o.metrics); err != nil {
		return err
	}
	if needPriv && os.Geteuid() != 0 {
		return errors.New("this mode needs root (network namespaces, veth and TAP devices)")
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding this program's binary to start its peers: %w", err)
	}
	o.exe = exe
	return nil
}

func cmdRun(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("run", stderr)
	o := addOpts(fs)
	cf := addCaseFlags(fs)
	modeFlag := fs.String("mode", "p2p-pipe", "the mode: "+strings.Join(modeOrder, ", ")+" (options: see 'rpcbench modes')")
	pin := fs.Bool("pin", false, "pinned: both ends on one CPU (-pin-cpu) with GOMAXPROCS=1")
	repeat := fs.Int("repeat", 1, "runs")
	jsonOut := fs.Bool("json", false, "print the results as JSON instead of text")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	t, err := cf.parse()
	if err != nil {
		return err
	}
	m, err := parseMode(*modeFlag)
	if err != nil {
		return err
	}
	m.Pin = m.Pin || *pin
	if err := o.check(modes[m.Name].priv); err != nil {
		return err
	}
	o.announceMetrics(stderr)
	ctx, stop := interruptible()
	defer stop()
	var results []result
	for i := range max(*repeat, 1) {
		res, attempts, err := runRow(ctx, o, m, t, progressWriter(o, stderr))
		if err != nil {
			return err
		}
		results = append(results, res)
		if !*jsonOut {
			fmt.Fprintf(stdout, "run %d of %d (%s)\n", i+1, max(*repeat, 1), plural(attempts, "attempt"))
			printResult(stdout, &res, t)
		}
	}
	if *jsonOut {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(results)
	}
	if len(results) > 1 {
		row := &row{mode: m, test: t, results: results}
		fmt.Fprintf(stdout, "medians of %d runs [min–max]: %s\n", len(results), row.summary())
	}
	return nil
}

// announceMetrics says where -metrics serves, if set.
func (o *opts) announceMetrics(w io.Writer) {
	if o.metrics != "" {
		fmt.Fprintf(w, "rpcbench: polarnet ends serve their metrics at http://%s/metrics while each run lasts\n", o.metrics)
	}
}

func progressWriter(o *opts, w io.Writer) io.Writer {
	if o.verbose {
		return w
	}
	return nil
}

// printResult prints one run in full.
func printResult(w io.Writer, r *result, t testSpec) {
	fmt.Fprintf(w, "  %s — %s\n", r.Mode, t.Title())
	if r.Lat == nil {
		fmt.Fprintf(w, "  throughput   %.2f Gbit/s (%d bytes in %v)\n", r.gbps(), r.Bytes, r.Elapsed.Round(time.Millisecond))
		fmt.Fprintf(w, "  CPU s/GB     client %s  server %s  total %s  (machine-wide %s)\n",
			fmtFloat(r.perOp(r.CPUClient), 3), fmtFloat(r.perOp(r.CPUServer), 3), fmtFloat(r.perOp(r.CPUTotal), 3), fmtFloat(r.perOp(r.CPUSystem), 3))
	} else {
		what := "ops/s"
		if t.Test == testCRR {
			what = "conn/s"
		}
		fmt.Fprintf(w, "  %-12s %.0f (%d in %v)\n", what, r.opsPerSec(), r.Ops, r.Elapsed.Round(time.Millisecond))
		fmt.Fprintf(w, "  latency      p50 %s  p99 %s  p99.9 %s  max %s  mean %s\n",
			fmtDur(r.Lat.quantile(0.5)), fmtDur(r.Lat.quantile(0.99)), fmtDur(r.Lat.quantile(0.999)), fmtDur(time.Duration(r.Lat.Max)), fmtDur(r.Lat.mean()))
		fmt.Fprintf(w, "  CPU µs/op    client %s  server %s  total %s  (machine-wide %s)\n",
			fmtFloat(r.perOp(r.CPUClient), 1), fmtFloat(r.perOp(r.CPUServer), 1), fmtFloat(r.perOp(r.CPUTotal), 1), fmtFloat(r.perOp(r.CPUSystem), 1))
	}
	if r.Lat != nil && (r.SegsClient >= 0 || r.SegsServer >= 0) {
		c, s, total := r.segsPerOp()
		fmt.Fprintf(w, "  segments/op  client %s  server %s  total %s  (frames polarnet ends sent)\n", fmtFloat(c, 2), fmtFloat(s, 2), fmtFloat(total, 2))
	}
	fmt.Fprintf(w, "  retransmits  client %s  server %s   spurious recoveries client %s  server %s   link drops (TX ring full) client %s  server %s\n",
		fmtCount(r.RetransClient), fmtCount(r.RetransServer), fmtCount(r.SpuriousClient), fmtCount(r.SpuriousServer),
		fmtCount(r.DropsClient), fmtCount(r.DropsServer))
	if r.CPUSystem < 0 {
		return // a standalone client sees one end only
	}
	idle := "not checked"
	if r.IdleBefore >= 0 {
		idle = fmt.Sprintf("%.0f%% idle", r.IdleBefore*100)
	}
	fmt.Fprintf(w, "  machine      before the run %s; during it others used %.2f CPU, steal %.2f CPU", idle, r.Others, r.Steal)
	if r.Disturbed {
		fmt.Fprint(w, " — DISTURBED, other processes ran")
	}
	fmt.Fprintln(w)
}

func cmdCompare(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("compare", stderr)
	o := addOpts(fs)
	modesFlag := fs.String("modes", strings.Join(modeOrder, ","), "modes to compare, comma-separated, with options (see 'rpcbench modes')")
	casesFlag := fs.String("cases", strings.Join(defaultCases, ","), "cases, comma-separated (see 'rpcbench run -h' for -case)")
	pinCases := fs.String("pin-cases", "rr/4k-write/c1/d1", "cases that also get a pinned row per mode (both ends on one CPU)")
	repeat := fs.Int("repeat", 3, "runs of every row; medians are reported")
	ref := fs.String("ref", "k2k-veth", "the mode ratios are taken against")
	out := fs.String("out", "rpcbench-out", "directory for results.md, results.json and the latency charts")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	cmp := &comparison{ref: *ref, repeat: max(*repeat, 1), opts: o, args: args}
	var err error
	if cmp.modes, err = mapList(splitList(*modesFlag), parseMode); err != nil {
		return err
	}
	if cmp.cases, err = mapList(splitList(*casesFlag), parseTest); err != nil {
		return err
	}
	if cmp.pinned, err = mapList(splitList(*pinCases), parseTest); err != nil {
		return err
	}
	if err := o.check(false); err != nil {
		return err
	}
	if os.Geteuid() != 0 {
		cmp.modes = slices.DeleteFunc(cmp.modes, func(m modeSpec) bool {
			if modes[m.Name].priv {
				fmt.Fprintf(stderr, "rpcbench: skipping %s: needs root\n", m)
				return true
			}
			return false
		})
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	o.announceMetrics(stderr)
	ctx, stop := interruptible()
	defer stop()
	if err := cmp.run(ctx, stderr); err != nil {
		return err
	}
	return cmp.write(*out, stdout)
}

// defaultCases are compare's cases: latency (1 outstanding), 64 connections and
// IOPS (512 outstanding, as Polar-TCP reports it) for 4 KiB writes,
// bulk on one and four connections, and connection rate.
var defaultCases = []string{"rr/4k-write/c1/d1", "rr/4k-write/c64/d1", "rr/4k-write/c64/d8", "stream/c1", "stream/c4", "crr/4k-write/c64"}

func mapList[T any](items []string, parse func(string) (T, error)) ([]T, error) {
	var out []T
	for _, s := range items {
		v, err := parse(strings.TrimSpace(s))
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

// endFlags are the flags of server and client.
type endFlags struct {
	net     string
	control bool
	mtu     int
	poll    string
	ack     string
	procs   int
	queues  int
	pin     int
	metrics string
}

func addEndFlags(fs *flag.FlagSet) *endFlags {
	e := &endFlags{}
	fs.StringVar(&e.net, "net", netKernel, "kernel (Go's net) or polarnet (the stack the POLARNET_* environment describes; see the main README)")
	fs.BoolVar(&e.control, "control", false, "internal: driven by an orchestrating rpcbench over stdin/stdout")
	fs.IntVar(&e.mtu, "mtu", 1500, "internal: MTU of a TAP device created with -net polarnet-tap")
	fs.StringVar(&e.poll, "poll", "adaptive", "internal: poll mode of a -net polarnet-tap stack")
	fs.StringVar(&e.ack, "ack", "on", "internal: off turns the ACK filter of a -net polarnet-tap stack off")
	fs.IntVar(&e.queues, "queues", 0, "internal: queue pairs (so shards) of a -net polarnet-tap stack's TAP device, or of a pipe mode's pipe (0: the link's default, a queue per CPU for TAP, one for the pipe)")
	fs.IntVar(&e.procs, "procs", 0, "GOMAXPROCS of a polarnet end (0: Go's default; -pin makes it 1)")
	fs.IntVar(&e.pin, "pin", -1, "run on this CPU only, with GOMAXPROCS=1")
	fs.StringVar(&e.metrics, "metrics", "", "HOST:PORT where a polarnet end serves its stack's metrics: Prometheus at /metrics, expvar at /debug/vars")
	return e
}

// open pins the process if asked and opens the end's network.
func (e *endFlags) open(retrans bool) (*netEnd, error) {
	if e.net != netKernel {
		if err := e.setProcs(); err != nil {
			return nil, err
		}
	}
	if e.pin >= 0 {
		if _, err := pinSelf(e.pin); err != nil {
			return nil, err
		}
	}
	switch e.net {
	case netKernel:
		return kernelNet(retrans), nil
	case netPolarnet:
		return envNet()
	case netPolarnetTAP:
		poll, err := parsePoll(e.poll)
		if err != nil {
			return nil, err
		}
		return tapNet(e.mtu, poll, e.ack == "off", e.queues)
	}
	return nil, fmt.Errorf("-net %q: want kernel or polarnet", e.net)
}

// setProcs applies -procs (before any stack exists: gVisor sizes its TCP
// processors by GOMAXPROCS) and checks -ack.
func (e *endFlags) setProcs() error {
	switch {
	case e.ack != "on" && e.ack != "off":
		return fmt.Errorf("-ack %q: want on or off", e.ack)
	case e.ack == "off" && e.net == netPolarnet:
		return errors.New("-ack off: the POLARNET_* environment has no setting for the ACK filter")
	case e.procs < 0:
		return fmt.Errorf("-procs %d: want 0 or more", e.procs)
	case e.procs > 0:
		runtime.GOMAXPROCS(e.procs)
	}
	return nil
}

func cmdServer(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("server", stderr)
	ef := addEndFlags(fs)
	listen := fs.String("listen", ":7100", "address to listen on")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	ne, err := ef.open(true)
	if err != nil {
		return err
	}
	defer ne.close()
	stopMetrics, err := serveMetrics(ef.metrics, map[string]*polarnet.Stack{"server": ne.stack})
	if err != nil {
		return err
	}
	defer stopMetrics()
	srv, err := newLocalServer(ne, *listen)
	if err != nil {
		return err
	}
	defer srv.Close()
	if ef.control {
		return controlLoop(os.Stdin, stdout, ctlReply{Addr: srv.Addr(), Dev: ne.dev}, func(req ctlRequest) ctlReply {
			if req.Cmd != "snap" {
				return errReply(fmt.Errorf("server: unknown command %q", req.Cmd))
			}
			return serverSnap(srv)
		})
	}
	fmt.Fprintf(stdout, "rpcbench server (%s) listening on %s; ^C to stop\n", ef.net, srv.Addr())
	ctx, stop := interruptible()
	defer stop()
	<-ctx.Done()
	n, last := srv.srv.errors()
	if n > 0 {
		return fmt.Errorf("%d connections failed; the last: %s", n, last)
	}
	return nil
}

func cmdClient(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("client", stderr)
	ef := addEndFlags(fs)
	cf := addCaseFlags(fs)
	connect := fs.String("connect", "", "server address (not with -control)")
	retrans := fs.Bool("retrans", true, "internal: report this end's retransmits")
	duration := fs.Duration("duration", 3*time.Second, "measured time")
	warmup := fs.Duration("warmup", 500*time.Millisecond, "load before the measured time")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	t, err := cf.parse()
	if err != nil {
		return err
	}
	if !ef.control && *connect == "" {
		fmt.Fprintln(stderr, "client: -connect is required")
		return errUsage
	}
	ne, err := ef.open(*retrans)
	if err != nil {
		return err
	}
	defer ne.close()
	stopMetrics, err := serveMetrics(ef.metrics, map[string]*polarnet.Stack{"client": ne.stack})
	if err != nil {
		return err
	}
	defer stopMetrics()
	cli := &localClient{ne: ne, test: t}
	defer cli.Close()
	if ef.control {
		return controlLoop(os.Stdin, stdout, ctlReply{Dev: ne.dev}, func(req ctlRequest) ctlReply {
			return clientCommand(cli, req)
		})
	}
	ctx, stop := interruptible()
	defer stop()
	return standaloneClient(ctx, cli, *connect, t, *warmup, *duration, stdout)
}

// cmdPair is the child of the pipe modes: both ends in one process, driven
// over stdin and stdout (internal).
func cmdPair(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("pair", stderr)
	ef := addEndFlags(fs)
	cf := addCaseFlags(fs)
	mode := fs.String("mode", "p2p-pipe", "p2p-pipe or vanilla-pipe")
	ring := fs.Int("ring", 0, "pipe frames per direction (0: linktest's default)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	t, err := cf.parse()
	if err != nil {
		return err
	}
	poll, err := parsePoll(ef.poll)
	if err != nil {
		return err
	}
	if !ef.control {
		return errors.New("pair: only for an orchestrating rpcbench (-control)")
	}
	if err := ef.setProcs(); err != nil {
		return err
	}
	if ef.pin >= 0 {
		if _, err := pinSelf(ef.pin); err != nil {
			return err
		}
	}
	p, err := openPipePair(*mode, ef.mtu, *ring, ef.queues, poll, ef.ack == "off", t)
	if err != nil {
		return err
	}
	defer p.Close()
	stopMetrics, err := serveMetrics(ef.metrics, map[string]*polarnet.Stack{"server": p.srvNet.stack, "client": p.cliNet.stack})
	if err != nil {
		return err
	}
	defer stopMetrics()
	return controlLoop(os.Stdin, stdout, ctlReply{Addr: p.srv.Addr()}, func(req ctlRequest) ctlReply {
		if req.Cmd == "snap" {
			return serverSnap(p.srv)
		}
		return clientCommand(p.cli, req)
	})
}

// serverSnap answers a snap request.
func serverSnap(srv *localServer) ctlReply {
	s, err := srv.Snap(context.Background())
	if err != nil {
		return errReply(err)
	}
	return ctlReply{Snap: &s}
}

// clientCommand carries out one control request on a client.
func clientCommand(cli *localClient, req ctlRequest) ctlReply {
	ctx, cancel := context.WithTimeout(context.Background(), childCallTimeout-5*time.Second)
	defer cancel()
	switch req.Cmd {
	case "connect":
		return errReply(cli.Connect(ctx, req.Addr))
	case "go":
		return errReply(cli.Go(ctx, req.MaxRun))
	case "mark":
		s, err := cli.Mark(ctx)
		if err != nil {
			return errReply(err)
		}
		return ctlReply{Snap: &s}
	case "finish":
		res, err := cli.Finish(ctx)
		if err != nil {
			return errReply(err)
		}
		return ctlReply{Result: &res}
	}
	return errReply(fmt.Errorf("client: unknown command %q", req.Cmd))
}

// standaloneClient measures against a server on another host: the
// server's CPU is not known here.
func standaloneClient(ctx context.Context, cli *localClient, addr string, t testSpec, warmup, duration time.Duration, w io.Writer) error {
	if err := cli.Connect(ctx, addr); err != nil {
		return err
	}
	if err := cli.Go(ctx, warmup+duration+childCallTimeout); err != nil {
		return err
	}
	if err := sleep(ctx, warmup); err != nil {
		return err
	}
	a, _ := cli.Mark(ctx)
	if err := sleep(ctx, duration); err != nil {
		return err
	}
	b, _ := cli.Mark(ctx)
	lr, err := cli.Finish(ctx)
	if err != nil {
		return err
	}
	res := result{Mode: "client → " + addr, Case: t.String(), loadResult: lr,
		CPUClient: b.CPU - a.CPU, CPUServer: -1, CPUTotal: -1, CPUSystem: -1,
		RetransClient: delta(a.Retrans, b.Retrans), RetransServer: -1,
		SpuriousClient: delta(a.Spurious, b.Spurious), SpuriousServer: -1,
		DropsClient: delta(a.Drops, b.Drops), DropsServer: -1,
		SegsClient: delta(a.TxFrames, b.TxFrames), SegsServer: -1, Quiet: true}
	printResult(w, &res, t)
	return nil
}
