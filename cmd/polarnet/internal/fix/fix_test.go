package fix_test

import (
	"testing"

	"golang.org/x/tools/go/analysis/analysistest"

	"github.com/polarnet/polarnet/cmd/polarnet/internal/fix"
)

func TestFix(t *testing.T) {
	analysistest.RunWithSuggestedFixes(t, analysistest.TestData(), fix.Analyzer, "server", "client", "shadow", "blocked", "alone")
}
