// Command polarnet operates polarnet hosts and programs.
//
//	polarnet doctor [-iface NAME] [-probe=false] [tap|afxdp|dpdk|rdma|all]
//	polarnet stat [-interval 1s] [-n 0] [URL]
//	polarnet bench [-rpcbench PATH] [compare flags...]
//
// doctor checks the host for each link and prints what is ready and the
// exact fix for what is not; it exits 1 when a link asked for cannot run.
// stat shows a running program's Prometheus endpoint (metrics/prom) as
// rates per second, per shard and per queue, refreshed every interval.
// bench runs rpcbench's compare mode.
package main

import (
	"fmt"
	"io"
	"os"
)

const usage = `usage:
  polarnet doctor [-iface NAME] [-probe=false] [tap|afxdp|dpdk|rdma|all]
        check the host for each link; exit status 1 if one asked for cannot run
  polarnet stat [-interval 1s] [-n COUNT] [URL]
        live view of a program's metrics endpoint (default http://127.0.0.1:9090/metrics)
  polarnet bench [-rpcbench PATH] [rpcbench compare flags...]
        run rpcbench's compare mode
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
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
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "polarnet: unknown command %q\n%s", args[0], usage)
	return 2
}
