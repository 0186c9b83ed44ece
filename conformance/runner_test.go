package conformance

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/polarnet/polarnet/internal/testenv"
	"github.com/polarnet/polarnet/polarnet"
)

// The suite's flags. `go test ./conformance/ -link=tap` runs it over TAP.
var (
	linkFlag   = flag.String("link", envOr("POLARNET_CONFORMANCE_LINK", "tap"), "link kind to run polarnet over (env POLARNET_CONFORMANCE_LINK)")
	matrixFlag = flag.String("matrix", envOr("POLARNET_CONFORMANCE_MATRIX", filepath.Join(os.TempDir(), "polarnet-conformance")), "directory for matrix.md, matrix.json and the captures of failed runs (env POLARNET_CONFORMANCE_MATRIX)")
	strictFlag = flag.Bool("strict", false, "fail on known engine failures too (and on known failures that pass)")
	seedFlag   = flag.Uint64("seed", 1, "seed of the impairments (every run of a scenario uses the same)")
	queuesFlag = flag.Int("queues", 1, "queue pairs of polarnet's links, so shards of its stacks")
	ackFlag    = flag.String("ack", "on", "polarnet's ACK filter and delayed ACK: on (the default config) or off")
)

// variant applies -queues and -ack to a scenario's spec.
func variant(spec Spec) (Spec, error) {
	spec.Queues = *queuesFlag
	switch *ackFlag {
	case "on":
	case "off":
		stack := spec.Stack
		spec.Stack = func(c *polarnet.Config) {
			if stack != nil {
				stack(c)
			}
			c.ACK.DisableFilter = true
		}
	default:
		return spec, fmt.Errorf("conformance: -ack=%q: want on or off", *ackFlag)
	}
	return spec, nil
}

// variantName says how the stacks differ from the defaults, for the matrix.
func variantName() string {
	name := *linkFlag
	if *queuesFlag > 1 {
		name += fmt.Sprintf(", %d queues/shards", *queuesFlag)
	}
	if *ackFlag == "off" {
		name += ", ACK filter off"
	}
	return name
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// Timing bounds derived from the reference measured in the same run. The
// machine is small and noisy, so they are generous: they catch a stall, a
// timer off by an order of magnitude or a collapse of throughput, not a
// percentage.
const (
	// An elapsed time (a transfer, a loop of connections) may take up to
	// elapsedFactor times the reference's, plus elapsedSlack.
	elapsedFactor = 10
	elapsedSlack  = 2 * time.Second
	// A timer (a deadline, a keep-alive, a dial timeout) must fire within
	// [ref/timerFactor - timerSlack, ref*timerFactor + timerSlack].
	timerFactor = 2
	timerSlack  = 500 * time.Millisecond
)

var (
	matrix *Matrix
	kind   Kind

	// created records the namespaces and devices the suite made, so that
	// TestMain can check that teardown removed them all.
	createdMu   sync.Mutex
	createdNS   []string
	createdDevs []string
)

func TestMain(m *testing.M) {
	flag.Parse()
	if raceEnabled && !testing.Short() {
		fmt.Println("conformance: the race detector is on: running in short mode")
		flag.Set("test.short", "true")
	}
	var err error
	if kind, err = Lookup(*linkFlag); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	matrix = NewMatrix(variantName())
	code := m.Run()
	matrix.Elapsed = time.Since(matrix.Started)
	if len(matrix.Results) > 0 {
		md, js, err := matrix.WriteFiles(*matrixFlag)
		if err != nil {
			fmt.Fprintln(os.Stderr, "conformance: writing the matrix:", err)
			code = 1
		} else {
			fmt.Printf("\n")
			matrix.WriteMarkdown(os.Stdout)
			fmt.Printf("\nmatrix written to %s and %s\n", md, js)
		}
	}
	if leftovers := leftovers(); leftovers != "" {
		fmt.Fprintln(os.Stderr, "conformance: teardown left behind:", leftovers)
		code = 1
	}
	os.Exit(code)
}

// leftovers lists namespaces, devices and child processes the suite made
// that still exist.
func leftovers() string {
	createdMu.Lock()
	defer createdMu.Unlock()
	var left []string
	if len(createdNS) > 0 {
		out, _ := exec.Command("ip", "netns", "list").Output()
		for _, ns := range createdNS {
			for _, line := range strings.Split(string(out), "\n") {
				if f := strings.Fields(line); len(f) > 0 && f[0] == ns {
					left = append(left, "namespace "+ns)
				}
			}
		}
	}
	for _, dev := range createdDevs {
		if exec.Command("ip", "link", "show", "dev", dev).Run() == nil {
			left = append(left, "device "+dev)
		}
	}
	left = append(left, childProcesses()...)
	return strings.Join(left, ", ")
}

// childProcesses lists the processes whose parent is this one.
func childProcesses() []string {
	ents, _ := os.ReadDir("/proc")
	self := strconv.Itoa(os.Getpid())
	var out []string
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so cut at ')'.
		s := string(stat)
		if i := strings.LastIndexByte(s, ')'); i >= 0 {
			if f := strings.Fields(s[i+1:]); len(f) > 1 && f[1] == self {
				out = append(out, "process "+e.Name()+" "+s[:i+1])
			}
		}
	}
	return out
}

// T is the *testing.T a scenario gets. It records failures so that the
// matrix can give the reason, and, for a known engine failure, reports
// them as a skip with the reason instead of failing the suite.
type T struct {
	*testing.T
	known    string
	ref      *Outcome
	mu       sync.Mutex
	failures []string
}

func (t *T) record(msg string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.failures = append(t.failures, msg)
}

// Bound returns the longest the elapsed time key may take in this run: the
// bound derived from the reference when there is one, def otherwise (the
// reference itself). Scenarios set their deadlines with it, so that a run
// that is going to fail its bound stops there instead of running on.
func (t *T) Bound(key string, def time.Duration) time.Duration {
	if t.ref == nil {
		return def
	}
	r, ok := t.ref.Times[key]
	if !ok || r.Kind != Elapsed {
		return def
	}
	return min(def, elapsedFactor*r.D+elapsedSlack+time.Second)
}

// Errorf records a failure.
func (t *T) Errorf(format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	t.record(msg)
	if t.known != "" && !*strictFlag {
		t.T.Log("known failure: " + msg)
		return
	}
	t.T.Error(msg)
}

// Error records a failure.
func (t *T) Error(args ...any) {
	t.Helper()
	t.Errorf("%s", fmt.Sprint(args...))
}

// Fatalf records a failure and ends the run.
func (t *T) Fatalf(format string, args ...any) {
	t.Helper()
	t.Errorf(format, args...)
	t.FailNow()
}

// Fatal records a failure and ends the run.
func (t *T) Fatal(args ...any) {
	t.Helper()
	t.Errorf("%s", fmt.Sprint(args...))
	t.FailNow()
}

// Fail records a failure.
func (t *T) Fail() {
	t.Helper()
	t.Errorf("failed")
}

// FailNow ends the run; for a known failure the run ends as skipped.
func (t *T) FailNow() {
	if t.known != "" && !*strictFlag {
		t.T.SkipNow()
	}
	t.T.FailNow()
}

// Failed reports whether the run failed so far.
func (t *T) Failed() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.failures) > 0 || t.T.Failed()
}

func (t *T) firstFailure() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.failures) == 0 {
		return ""
	}
	return firstLines(t.failures[0], 3)
}

// firstLines keeps the first n non-empty lines of a (testify) message.
func firstLines(s string, n int) string {
	var keep []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "Error Trace:") && !strings.HasPrefix(l, "Test:") {
			keep = append(keep, l)
		}
		if len(keep) == n {
			break
		}
	}
	return strings.Join(keep, " ")
}

// Scenario is one behaviour checked in every applicable direction.
type Scenario struct {
	Name string
	Spec Spec
	// Dirs lists the polarnet directions the scenario applies to (the
	// reference always runs); nil means all three.
	Dirs []Direction
	// Budget bounds one run (zero: a minute).
	Budget time.Duration
	// Run plays the scenario on tp and returns what it observed. It fails
	// t for what is wrong whatever the reference says (data corrupted);
	// the runner then compares the outcome with the reference's.
	Run func(t *T, tp *Topology, ctx context.Context) *Outcome
}

func (sc *Scenario) applies(d Direction) bool {
	if d == KernelKernel || sc.Dirs == nil {
		return true
	}
	for _, x := range sc.Dirs {
		if x == d {
			return true
		}
	}
	return false
}

// Outcome is what a run observed: facts that must equal the reference's,
// and times that must lie within bounds derived from the reference's.
type Outcome struct {
	Facts  map[string]string
	Times  map[string]Timing
	Detail []string
}

// TimingKind says how a time is bounded by the reference's.
type TimingKind uint8

const (
	// Elapsed times are bounded above only.
	Elapsed TimingKind = iota
	// Timer times are bounded on both sides.
	Timer
)

// Timing is a measured time.
type Timing struct {
	D    time.Duration
	Kind TimingKind
}

func newOutcome() *Outcome {
	return &Outcome{Facts: map[string]string{}, Times: map[string]Timing{}}
}

// Fact records an observable result.
func (o *Outcome) Fact(key string, v any) { o.Facts[key] = fmt.Sprint(v) }

// Elapsed records a time bounded above by the reference's.
func (o *Outcome) Elapsed(key string, d time.Duration) { o.Times[key] = Timing{d, Elapsed} }

// Timer records a time bounded on both sides by the reference's.
func (o *Outcome) Timer(key string, d time.Duration) { o.Times[key] = Timing{d, Timer} }

// Note adds a line to the run's detail.
func (o *Outcome) Note(format string, args ...any) {
	o.Detail = append(o.Detail, fmt.Sprintf(format, args...))
}

// compare fails t where got differs from the reference.
func compare(t *T, ref, got *Outcome) {
	t.Helper()
	for _, k := range sortedKeys(ref.Facts) {
		want := ref.Facts[k]
		if g, ok := got.Facts[k]; !ok || g != want {
			t.Errorf("%s = %q; the kernel reference gives %q", k, g, want)
		}
	}
	for _, k := range sortedKeys(ref.Times) {
		r := ref.Times[k]
		g, ok := got.Times[k]
		if !ok {
			t.Errorf("%s: not measured", k)
			continue
		}
		switch r.Kind {
		case Elapsed:
			if hi := elapsedFactor*r.D + elapsedSlack; g.D > hi {
				t.Errorf("%s took %v, over the bound %v (reference %v)", k, g.D.Round(time.Millisecond), hi.Round(time.Millisecond), r.D.Round(time.Millisecond))
			}
		case Timer:
			lo, hi := r.D/timerFactor-timerSlack, timerFactor*r.D+timerSlack
			if g.D < lo || g.D > hi {
				t.Errorf("%s fired after %v, outside [%v, %v] (reference %v)", k, g.D.Round(time.Millisecond), lo.Round(time.Millisecond), hi.Round(time.Millisecond), r.D.Round(time.Millisecond))
			}
		}
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// runScenarios runs each scenario in every applicable direction, the
// reference first, and records the results in the matrix.
func runScenarios(t *testing.T, scenarios []*Scenario) {
	testenv.RequirePriv(t)
	testenv.RequireCommand(t, "ip")
	for _, sc := range scenarios {
		t.Run(sc.Name, func(t *testing.T) {
			var ref *Outcome
			refRan := false
			for _, dir := range Directions {
				if !sc.applies(dir) {
					continue
				}
				t.Run(string(dir), func(t *testing.T) {
					if _, single := kind.(SingleLink); single && dir == StackStack {
						matrix.Add(Result{Scenario: sc.Name, Direction: dir, Link: kind.Name(), Status: Skipped})
						t.Skipf("%s attaches one link at a time; p2p needs two", kind.Name())
					}
					if dir == KernelKernel {
						ref, refRan = runOne(t, sc, dir, nil), true
						return
					}
					if !refRan {
						// -run left the reference out: run it first,
						// as part of this run.
						t.Logf("running the kernel reference first")
						ref, refRan = runOne(t, sc, KernelKernel, nil), true
					}
					runOne(t, sc, dir, ref)
				})
			}
		})
	}
}

// runOne plays sc in direction dir, compares with ref (when there is one)
// and records the result. It returns the outcome of a passing run.
func runOne(t *testing.T, sc *Scenario, dir Direction, ref *Outcome) (out *Outcome) {
	// Short mode names carry a suffix, " (short: ...)": the known lists
	// use the full names.
	base, _, _ := strings.Cut(sc.Name, " (")
	key := base + "/" + string(dir)
	known := knownFailures[key]
	if reason, ok := knownShardedFailures[key]; ok && *queuesFlag > 1 {
		known = reason
	}
	tt := &T{T: t, known: known, ref: ref}
	res := Result{Scenario: sc.Name, Direction: dir, Link: kind.Name()}
	// On disk the run shows as running until it ends: if an engine panic
	// kills the suite, the matrix says where.
	matrix.Add(Result{Scenario: sc.Name, Direction: dir, Link: kind.Name(), Status: Running})
	matrix.WriteFiles(*matrixFlag)
	start := time.Now()
	var tp *Topology
	defer func() {
		res.Duration = time.Since(start)
		if tp != nil {
			res.Retransmits = polarnetRetransmits(tp)
		}
		if out != nil {
			res.Detail = strings.Join(out.Detail, "; ")
		}
		switch {
		case tt.Failed():
			res.Status, res.Reason = Fail, tt.firstFailure()
			if tt.known != "" {
				res.Status, res.Known = KnownFail, tt.known
			}
			if tp != nil {
				path := filepath.Join(*matrixFlag, "pcap", fileName(sc.Name+"_"+string(dir))+".pcap")
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err == nil && tp.Capture.WriteFile(path) == nil {
					res.Pcap = path
					t.Logf("capture of the failed run: %s", path)
				}
			}
			out = nil
		case t.Skipped():
			res.Status = Skipped
		default:
			res.Status = Pass
			if tt.known != "" {
				res.Known = tt.known
				res.Reason = "passed although listed in knownFailures (within the bound this time, or fixed: then remove it)"
				if *strictFlag {
					t.Error(res.Reason)
					res.Status = Fail
				}
			}
		}
		matrix.Add(res)
		matrix.WriteFiles(*matrixFlag)
	}()
	spec, err := variant(sc.Spec)
	if err != nil {
		tt.Fatal(err)
	}
	tp, err = Build(t, kind, dir, spec)
	if tp != nil {
		createdMu.Lock()
		createdNS = append(createdNS, tp.Namespaces...)
		createdDevs = append(createdDevs, tp.Devices...)
		createdMu.Unlock()
	}
	if err != nil {
		tt.Fatalf("building the topology: %v", err)
	}
	budget := sc.Budget
	if budget == 0 {
		budget = time.Minute
	}
	ctx, cancel := context.WithTimeout(context.Background(), budget)
	defer cancel()
	out = sc.Run(tt, tp, ctx)
	if out == nil {
		out = newOutcome()
	}
	if ctx.Err() != nil {
		tt.Errorf("the run overran its budget of %v", budget)
	}
	if ref != nil && !tt.Failed() {
		compare(tt, ref, out)
	} else if ref == nil && dir != KernelKernel {
		out.Note("not compared: the reference failed")
	}
	if tt.known != "" && tt.Failed() && !*strictFlag {
		t.Skipf("known engine failure: %s", tt.known)
	}
	return out
}

// fileName makes a scenario name usable as a file name.
func fileName(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_', r == '.':
			return r
		}
		return '_'
	}, s)
}

// polarnetRetransmits sums the TCP retransmits of the run's polarnet stacks.
func polarnetRetransmits(tp *Topology) uint64 {
	var n uint64
	for _, h := range []Host{tp.Near, tp.Far} {
		if h != nil && h.Stack() != nil {
			n += h.Stack().Stats().Total.Retransmits
		}
	}
	return n
}
