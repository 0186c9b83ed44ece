package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// modulePath is the module whose cmd/rpcbench bench builds.
const modulePath = "github.com/polarnet/polarnet"

// benchCmd runs rpcbench's compare mode. rpcbench is a program of its own
// (cmd/rpcbench, package main, no reusable package), so bench runs its
// binary: -rpcbench PATH, else rpcbench on PATH, else one built with
// `go build ./cmd/rpcbench` from the polarnet module the working
// directory is in. Every other argument goes to `rpcbench compare`.
func benchCmd(args []string, stdout, stderr io.Writer) int {
	bin, rest, err := rpcbenchBinary(args, exec.LookPath, buildRPCBench)
	if err != nil {
		fmt.Fprintln(stderr, "polarnet bench:", err)
		return 2
	}
	cmd := exec.Command(bin, append([]string{"compare"}, rest...)...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, stdout, stderr
	if err := cmd.Run(); err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return exit.ExitCode()
		}
		fmt.Fprintln(stderr, "polarnet bench:", err)
		return 1
	}
	return 0
}

// rpcbenchBinary takes -rpcbench out of args and finds the binary.
func rpcbenchBinary(args []string, lookPath func(string) (string, error), build func() (string, error)) (string, []string, error) {
	var bin string
	var rest []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		name, val, hasVal := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "-") || name != "rpcbench" {
			rest = append(rest, a)
			continue
		}
		if !hasVal {
			if i+1 >= len(args) {
				return "", nil, errors.New("-rpcbench needs a path")
			}
			i++
			val = args[i]
		}
		bin = val
	}
	if bin != "" {
		return bin, rest, nil
	}
	if p, err := lookPath("rpcbench"); err == nil {
		return p, rest, nil
	}
	p, err := build()
	return p, rest, err
}

// buildRPCBench builds cmd/rpcbench of the polarnet module found at or
// above the working directory into a temporary directory.
func buildRPCBench() (string, error) {
	root, err := moduleRoot()
	if err != nil {
		return "", fmt.Errorf("rpcbench is not on PATH and %w; pass -rpcbench PATH", err)
	}
	dir, err := os.MkdirTemp("", "polarnet-bench-")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "rpcbench")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/rpcbench")
	cmd.Dir = root
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go build ./cmd/rpcbench: %v\n%s", err, out.String())
	}
	return bin, nil
}

func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for range 64 {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && strings.Contains(string(b), "module "+modulePath+"\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			break
		}
		dir = parent
	}
	return "", errors.New("the working directory is not inside the polarnet module")
}
