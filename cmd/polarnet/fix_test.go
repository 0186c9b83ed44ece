package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/polarnet/polarnet/internal/testenv"
)

// TestFixRewritesAModule runs `polarnet fix` on a copy of the analyzer's
// server fixture as a module of its own: the file comes out as the golden
// one, the places left to a human are printed, and the status says so.
func TestFixRewritesAModule(t *testing.T) {
	fixture := filepath.Join("internal", "fix", "testdata", "src", "server")
	src, err := os.ReadFile(filepath.Join(fixture, "server.go"))
	require.NoError(t, err)
	golden, err := os.ReadFile(filepath.Join(fixture, "server.go.golden"))
	require.NoError(t, err)
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module example\n\ngo 1.26\n"), 0o644))
	file := filepath.Join(dir, "server.go")
	require.NoError(t, os.WriteFile(file, src, 0o644))
	t.Chdir(dir)

	var out, errb bytes.Buffer
	code := run([]string{"fix", "-n", "./..."}, &out, &errb)
	assert.Equal(t, 3, code, errb.String())
	unchanged, err := os.ReadFile(file)
	require.NoError(t, err)
	assert.Equal(t, string(src), string(unchanged), "-n changes nothing")

	out.Reset()
	code = run([]string{"fix", "./..."}, &out, &errb)
	t.Log(out.String())
	assert.Equal(t, 3, code, errb.String())
	fixed, err := os.ReadFile(file)
	require.NoError(t, err)
	assert.Equal(t, string(golden), string(fixed))
	assert.Contains(t, out.String(), "server.go:44:2: net.ListenTCP cannot be rewritten")
	assert.True(t, strings.HasSuffix(out.String(), "1 files rewritten, 7 places to change by hand\n"), out.String())
}

// TestFixAsVetTool runs the analysis as go vet's -vettool: it reports the
// rewrites and the places left, and changes nothing.
func TestFixAsVetTool(t *testing.T) {
	gobin := testenv.RequireCommand(t, "go")
	bin := filepath.Join(t.TempDir(), "polarnet")
	build := exec.Command(gobin, "build", "-o", bin, ".")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "%s", out)

	src, err := os.ReadFile(filepath.Join("internal", "fix", "testdata", "src", "server", "server.go"))
	require.NoError(t, err)
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module example\n\ngo 1.26\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "server.go"), src, 0o644))
	vet := exec.Command(gobin, "vet", "-vettool="+bin, "./...")
	vet.Dir = dir
	out, err = vet.CombinedOutput()
	t.Logf("%s", out)
	require.Error(t, err, "go vet fails when the analysis reports")
	assert.Contains(t, string(out), "server.go:10:13: net.Listen → listener.Listen")
	assert.Contains(t, string(out), "server.go:44:2: net.ListenTCP cannot be rewritten")
	unchanged, err := os.ReadFile(filepath.Join(dir, "server.go"))
	require.NoError(t, err)
	assert.Equal(t, string(src), string(unchanged))
}
