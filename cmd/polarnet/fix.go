package main

import (
	"cmp"
	"errors"
	"flag"
	"fmt"
	"go/format"
	"go/token"
	"io"
	"os"
	"slices"

	"golang.org/x/tools/go/analysis"
	"golang.org/x/tools/go/analysis/checker"
	"golang.org/x/tools/go/packages"

	"github.com/polarnet/polarnet/cmd/polarnet/internal/fix"
)

// fixCmd runs the fix analyzer on packages, prints every rewrite and every
// place it could not rewrite, and applies the rewrites unless -n. Its exit
// status is 1 when packages fail to load or a file to be written, 3 when
// places are left to change by hand, 0 otherwise.
func fixCmd(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("fix", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dryRun := fs.Bool("n", false, "print what would change, change nothing")
	tests := fs.Bool("test", true, "also rewrite the packages' test files")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	patterns := fs.Args()
	if len(patterns) == 0 {
		patterns = []string{"."}
	}
	pkgs, err := packages.Load(&packages.Config{Mode: packages.LoadSyntax, Tests: *tests}, patterns...)
	if err == nil && packages.PrintErrors(pkgs) > 0 {
		err = errors.New("packages have errors")
	}
	if err != nil {
		fmt.Fprintf(stderr, "polarnet fix: %v\n", err)
		return 1
	}
	graph, err := checker.Analyze([]*analysis.Analyzer{fix.Analyzer}, pkgs, nil)
	if err != nil {
		fmt.Fprintf(stderr, "polarnet fix: %v\n", err)
		return 1
	}
	// A package and its test variant share files: each diagnostic and
	// edit counts once.
	type report struct {
		pos    token.Position
		msg    string
		manual bool
	}
	seen := map[report]bool{}
	var reports []report
	edits := map[string][]edit{}
	for _, act := range graph.Roots {
		for _, d := range act.Diagnostics {
			r := report{act.Package.Fset.Position(d.Pos), d.Message, len(d.SuggestedFixes) == 0}
			if seen[r] {
				continue
			}
			seen[r] = true
			reports = append(reports, r)
			for _, sf := range d.SuggestedFixes {
				for _, te := range sf.TextEdits {
					tf := act.Package.Fset.File(te.Pos)
					edits[tf.Name()] = append(edits[tf.Name()], edit{tf.Offset(te.Pos), tf.Offset(te.End), string(te.NewText)})
				}
			}
		}
	}
	slices.SortFunc(reports, func(a, b report) int {
		return cmp.Or(cmp.Compare(a.pos.Filename, b.pos.Filename), cmp.Compare(a.pos.Offset, b.pos.Offset))
	})
	manual := 0
	for _, r := range reports {
		fmt.Fprintf(stdout, "%s: %s\n", r.pos, r.msg)
		if r.manual {
			manual++
		}
	}
	if !*dryRun {
		for name, es := range edits {
			if err := applyEdits(name, es); err != nil {
				fmt.Fprintf(stderr, "polarnet fix: %v\n", err)
				return 1
			}
		}
	}
	fmt.Fprintf(stdout, "%d files rewritten, %d places to change by hand\n", len(edits), manual)
	if manual > 0 {
		return 3
	}
	return 0
}

// edit replaces the bytes [start, end) of a file by text.
type edit struct {
	start, end int
	text       string
}

// applyEdits applies es to the file (an edit several fixes share once),
// formats it and writes it back.
func applyEdits(name string, es []edit) error {
	src, err := os.ReadFile(name)
	if err != nil {
		return err
	}
	slices.SortFunc(es, func(a, b edit) int {
		return cmp.Or(cmp.Compare(a.start, b.start), cmp.Compare(a.end, b.end), cmp.Compare(a.text, b.text))
	})
	es = slices.Compact(es)
	var out []byte
	at := 0
	for _, e := range es {
		if e.start < at {
			return fmt.Errorf("%s: overlapping rewrites at offset %d", name, e.start)
		}
		out = append(append(out, src[at:e.start]...), e.text...)
		at = e.end
	}
	out = append(out, src[at:]...)
	formatted, err := format.Source(out)
	if err != nil {
		return fmt.Errorf("%s: rewritten file does not parse: %v", name, err)
	}
	return os.WriteFile(name, formatted, 0o644)
}
