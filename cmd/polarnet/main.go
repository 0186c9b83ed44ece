// Command polarnet operates polarnet hosts and programs.
//
//	polarnet doctor [-iface NAME] [-probe=false] [tap|afxdp|dpdk|rdma|all|env]
//	polarnet stat [-interval 1s] [-n 0] [URL]
//	polarnet bench [-rpcbench PATH] [compare flags...]
//	polarnet fix [-n] [-test=false] [packages]
//
// doctor checks the host for each link and prints what is ready and the
// exact fix for what is not; it exits 1 when a link asked for cannot run.
// doctor env reads the POLARNET_* variables as a program would and starts
// the stack they configure, to say why it would not.
// stat shows a running program's Prometheus endpoint (metrics/prom) as
// rates per second, per shard and per queue, refreshed every interval.
// bench runs rpcbench's compare mode. fix moves a program from Go's net
// to polarnet's dialer and listener (see docs/migrating.md); the same
// analysis runs under go vet as
//
//	go vet -vettool=$(command -v polarnet) ./...
//
// which reports the rewrites and what is left to change by hand.
package main

import (
	"fmt"
	"io"
	"os"
	"strings"

	"golang.org/x/tools/go/analysis/unitchecker"

	"github.com/polarnet/polarnet/cmd/polarnet/internal/fix"
)

const usage = `usage:
  polarnet doctor [-iface NAME] [-probe=false] [tap|afxdp|dpdk|rdma|all|env]
        check the host for each link, or (env) the POLARNET_* variables and the
        stack they start; exit status 1 if one asked for cannot run
  polarnet stat [-interval 1s] [-n COUNT] [URL]
        live view of a program's metrics endpoint (default http://127.0.0.1:9090/metrics)
  polarnet bench [-rpcbench PATH] [rpcbench compare flags...]
        run rpcbench's compare mode
  polarnet fix [-n] [-test=false] [packages]
        rewrite net.Dial/Listen and *net.TCPConn assertions to polarnet's; -n: print only
`

func main() {
	if byGoVet(os.Args[1:]) {
		unitchecker.Main(fix.Analyzer)
	}
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// byGoVet reports whether go vet runs the command as its -vettool: it asks
// for the version and the flags, then passes a .cfg file.
func byGoVet(args []string) bool {
	return len(args) > 0 && (strings.HasPrefix(args[0], "-V=") || args[0] == "-flags" || strings.HasSuffix(args[len(args)-1], ".cfg"))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "doctor":
		return doctorCmd(args[1:], stdout, stderr)
	case "stat":
		return statCmd(args[1:], stdout, stderr)
	case "bench":
		return benchCmd(args[1:], stdout, stderr)
	case "fix":
		return fixCmd(args[1:], stdout, stderr)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "polarnet: unknown command %q\n%s", args[0], usage)
	return 2
}
