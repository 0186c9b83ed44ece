package main

import (
	"errors"
	"expvar"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/polarnet/polarnet/metrics"
	"github.com/polarnet/polarnet/metrics/prom"
	"github.com/polarnet/polarnet/polarnet"
)

// -metrics ADDR: the ends with a polarnet stack serve its metrics while they
// run, Prometheus's text format at /metrics (metrics/prom, each stack's
// series labelled stack="client" or stack="server") and expvar's JSON at
// /debug/vars (metrics.PublishExpvar, a variable polarnet_client or
// polarnet_server per stack). The orchestrator passes the flag to those
// children only (metricsArgs); they listen in their own namespace, so the
// AF_XDP modes' polarnet end serves in its namespace (rpcbench -v names it).

// serveMetrics serves the stacks' metrics at addr, as told above, until
// the returned function is called. With addr empty it serves nothing. A
// stack may be nil (a kernel or vanilla end); with none left it fails.
func serveMetrics(addr string, stacks map[string]*polarnet.Stack) (stop func() error, err error) {
	if addr == "" {
		return func() error { return nil }, nil
	}
	mux := http.NewServeMux()
	live := map[string]*polarnet.Stack{}
	for name, st := range stacks {
		if st == nil {
			continue
		}
		live[name] = st
		if err := metrics.PublishExpvar("polarnet_"+name, st); err != nil {
			return nil, err
		}
	}
	if len(live) == 0 {
		return nil, errors.New("-metrics: this end has no polarnet stack")
	}
	mux.Handle("/metrics", prom.StacksHandler(live))
	mux.Handle("/debug/vars", expvar.Handler())
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("-metrics: %w", err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	return srv.Close, nil
}

// metricsArgs is the -metrics flag of the n-th child process of a run with a
// polarnet stack (n counts from 0): the n-th port after -metrics' own, so
// that two such processes (p2p-memif) serve side by side. Nil without
// -metrics.
func (r *runCfg) metricsArgs(n int) []string {
	if r.metrics == "" {
		return nil
	}
	host, port, _ := net.SplitHostPort(r.metrics) // checked by opts.check
	p, _ := strconv.Atoi(port)
	if p > 0 {
		p += n
	}
	return []string{"-metrics", net.JoinHostPort(host, strconv.Itoa(p))}
}

// checkMetricsAddr checks a -metrics address: host:port, port a number.
func checkMetricsAddr(addr string) error {
	if addr == "" {
		return nil
	}
	_, port, err := net.SplitHostPort(addr)
	if err == nil {
		var p int
		if p, err = strconv.Atoi(port); err == nil && (p < 0 || p > 65534) {
			err = errors.New("port out of range")
		}
	}
	if err != nil {
		return fmt.Errorf("-metrics %q: want HOST:PORT (%v)", addr, err)
	}
	return nil
}
