package main

import (
	"flag"
	"fmt"
	"io"

	"github.com/polarnet/polarnet/cmd/polarnet/internal/doctor"
)

func doctorCmd(args []string, stdout, stderr io.Writer) int {
	return runDoctor(args, stdout, stderr, doctor.HostEnv)
}

// runDoctor runs the doctor command with an Env from newEnv(probe).
func runDoctor(args []string, stdout, stderr io.Writer, newEnv func(probe bool) *doctor.Env) int {
	fs := flag.NewFlagSet("doctor", flag.ContinueOnError)
	fs.SetOutput(stderr)
	iface := fs.String("iface", "", "a network interface to check for AF_XDP (driver, queues, XDP support)")
	probe := fs.Bool("probe", true, "create a TAP and a veth pair in a throwaway network namespace to test them")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	link := "all"
	switch fs.NArg() {
	case 0:
	case 1:
		link = fs.Arg(0)
	default:
		fmt.Fprintln(stderr, "polarnet doctor: one link at most")
		return 2
	}
	reports, err := doctor.Run(newEnv(*probe), link, doctor.Options{Iface: *iface})
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	code := 0
	for i, r := range reports {
		if i > 0 {
			fmt.Fprintln(stdout)
		}
		r.Print(stdout)
		if !r.Ready() {
			code = 1
		}
	}
	return code
}
