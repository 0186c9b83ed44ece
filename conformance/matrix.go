package conformance

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"
)

// Status is the result of one run.
type Status string

const (
	Pass Status = "pass"
	Fail Status = "fail"
	// KnownFail is a failure the suite expects (an engine bug with an open
	// issue): reported with its reason, not failing the suite.
	KnownFail Status = "known-fail"
	// Skipped runs did not run.
	Skipped Status = "skipped"
	// Running marks a run in progress: a matrix on disk that still shows
	// it comes from a suite that died during that run (an engine panic).
	Running Status = "running"
)

// Result is one cell of the matrix.
type Result struct {
	Scenario  string        `json:"scenario"`
	Direction Direction     `json:"direction"`
	Link      string        `json:"link"`
	Status    Status        `json:"status"`
	Duration  time.Duration `json:"duration_ns"`
	// Reason is what went wrong (the first failed assertion), or why a
	// known failure did not run or passed.
	Reason string `json:"reason,omitempty"`
	// Known is the engine bug the run is listed for in knownFailures.
	Known string `json:"known,omitempty"`
	// Detail holds what the run measured, for the record.
	Detail string `json:"detail,omitempty"`
	// Pcap is the capture written for a failed run.
	Pcap string `json:"pcap,omitempty"`
	// Retransmits counts the TCP segments polarnet's stacks retransmitted
	// during the run (comparable across -ack=on and -ack=off).
	Retransmits uint64 `json:"retransmits"`
}

// Matrix collects results; it is safe for concurrent use.
type Matrix struct {
	mu      sync.Mutex
	Link    string    `json:"link"`
	Started time.Time `json:"started"`
	// Elapsed is the suite's wall time.
	Elapsed time.Duration `json:"elapsed_ns"`
	Results []Result      `json:"results"`
	order   []string
}

// NewMatrix starts an empty matrix for a link kind.
func NewMatrix(link string) *Matrix {
	return &Matrix{Link: link, Started: time.Now()}
}

// Add records a result, replacing the one of the same scenario, direction
// and link (a Running marker); scenarios keep the order they were first
// added in.
func (m *Matrix) Add(r Result) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !containsString(m.order, r.Scenario) {
		m.order = append(m.order, r.Scenario)
	}
	for i := range m.Results {
		if x := &m.Results[i]; x.Scenario == r.Scenario && x.Direction == r.Direction && x.Link == r.Link {
			*x = r
			return
		}
	}
	m.Results = append(m.Results, r)
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// Counts returns how many results have each status.
func (m *Matrix) Counts() map[Status]int {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := map[Status]int{}
	for _, r := range m.Results {
		c[r.Status]++
	}
	return c
}

// cell renders a result for the Markdown table; note is its footnote
// number (0: none).
func cell(r *Result, note int) string {
	if r == nil {
		return "—"
	}
	ref := ""
	if note > 0 {
		ref = fmt.Sprintf(" [%d]", note)
	}
	d := r.Duration.Round(10 * time.Millisecond).Seconds()
	switch r.Status {
	case Pass:
		return fmt.Sprintf("✅ %.2fs%s", d, ref)
	case Fail:
		return fmt.Sprintf("❌ %.2fs%s", d, ref)
	case KnownFail:
		if r.Duration == 0 {
			return "⚠️ not run" + ref
		}
		return fmt.Sprintf("⚠️ %.2fs%s", d, ref)
	case Running:
		return "💥 died here"
	}
	return "⏭" + ref
}

// mdEscape makes text safe for a Markdown table cell.
func mdEscape(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "\n", " "), "|", "\\|")
}

// WriteMarkdown writes the matrix as Markdown: one row per scenario, one
// column per direction; numbered notes give each engine bug (or unexpected
// failure) once, and a table what every failed run observed.
func (m *Matrix) WriteMarkdown(w io.Writer) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	byKey := map[string]*Result{}
	for i := range m.Results {
		r := &m.Results[i]
		byKey[r.Scenario+"\x00"+string(r.Direction)] = r
	}
	count := map[Status]int{}
	var retransmits uint64
	for _, r := range m.Results {
		count[r.Status]++
		retransmits += r.Retransmits
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Conformance over `%s`, %s: %d runs in %s, %d ✅ pass, %d ❌ fail, %d ⚠️ known engine bug; polarnet retransmitted %d segments in all (— not applicable; times are per run, building the topology included; [n]: notes below).\n\n",
		m.Link, m.Started.UTC().Format("2006-01-02 15:04 UTC"), len(m.Results), m.Elapsed.Round(time.Second), count[Pass], count[Fail], count[KnownFail], retransmits)
	b.WriteString("| scenario |")
	for _, d := range Directions {
		fmt.Fprintf(&b, " %s |", d.Title())
	}
	b.WriteString("\n|---|")
	for range Directions {
		b.WriteString("---|")
	}
	b.WriteString("\n")
	var notes []string
	noteOf := func(r *Result) int {
		text := r.Known
		switch {
		case r.Status == Fail:
			text = "unexpected failure: " + r.Reason
		case text == "":
			return 0
		}
		for i, n := range notes {
			if n == text {
				return i + 1
			}
		}
		notes = append(notes, text)
		return len(notes)
	}
	var observed []*Result
	for _, s := range m.order {
		fmt.Fprintf(&b, "| %s |", s)
		for _, d := range Directions {
			r := byKey[s+"\x00"+string(d)]
			note := 0
			if r != nil {
				note = noteOf(r)
				if r.Status != Pass && r.Status != Running && r.Reason != "" {
					observed = append(observed, r)
				}
			}
			fmt.Fprintf(&b, " %s |", cell(r, note))
		}
		b.WriteString("\n")
	}
	if len(notes) > 0 {
		b.WriteString("\nNotes (a ✅ with a note passed although the run is listed as a known failure):\n\n")
		for i, n := range notes {
			fmt.Fprintf(&b, "%d. %s\n", i+1, mdEscape(n))
		}
	}
	if len(observed) > 0 {
		b.WriteString("\n| scenario | direction | observed | capture |\n|---|---|---|---|\n")
		for _, r := range observed {
			capture := ""
			if r.Pcap != "" {
				capture = "`" + filepath.Base(r.Pcap) + "`"
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", r.Scenario, r.Direction, mdEscape(r.Reason), capture)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteJSON writes the matrix as indented JSON.
func (m *Matrix) WriteJSON(w io.Writer) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	sorted := append([]Result(nil), m.Results...)
	rank := map[string]int{}
	for i, s := range m.order {
		rank[s] = i
	}
	dirRank := map[Direction]int{}
	for i, d := range Directions {
		dirRank[d] = i
	}
	sort.SliceStable(sorted, func(i, j int) bool {
		a, b := sorted[i], sorted[j]
		if rank[a.Scenario] != rank[b.Scenario] {
			return rank[a.Scenario] < rank[b.Scenario]
		}
		return dirRank[a.Direction] < dirRank[b.Direction]
	})
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(struct {
		Link    string        `json:"link"`
		Started time.Time     `json:"started"`
		Elapsed time.Duration `json:"elapsed_ns"`
		Results []Result      `json:"results"`
	}{m.Link, m.Started, m.Elapsed, sorted})
}

// WriteFiles writes matrix.md and matrix.json into dir, creating it.
func (m *Matrix) WriteFiles(dir string) (mdPath, jsonPath string, err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", "", err
	}
	mdPath, jsonPath = filepath.Join(dir, "matrix.md"), filepath.Join(dir, "matrix.json")
	for _, f := range []struct {
		path  string
		write func(io.Writer) error
	}{{mdPath, m.WriteMarkdown}, {jsonPath, m.WriteJSON}} {
		out, err := os.Create(f.path)
		if err != nil {
			return "", "", err
		}
		werr := f.write(out)
		if cerr := out.Close(); werr == nil {
			werr = cerr
		}
		if werr != nil {
			return "", "", werr
		}
	}
	return mdPath, jsonPath, nil
}
