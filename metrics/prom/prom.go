// Package prom exports a polarnet Stack's metrics to Prometheus through
// client_golang: the families metrics.Engine and metrics.Protocol list, with
// the names given there.
//
//	http.Handle("/metrics", prom.Handler(st))               // a registry of its own
//	err := prom.Register(prometheus.DefaultRegisterer, st, nil) // or the default one
//	http.Handle("/metrics", prom.StacksHandler(map[string]*polarnet.Stack{"a": a, "b": b})) // several, by label stack
//
// Only programs that import this package link client_golang.
package prom

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/polarnet/polarnet/metrics"
	"github.com/polarnet/polarnet/polarnet"
)

// Collector is a prometheus.Collector of one Stack: every scrape reads the
// stack's counters afresh (Stack.Stats and Stack.ProtocolCounters).
type Collector struct {
	stack *polarnet.Stack
	descs map[*metrics.Desc]*prometheus.Desc
	order []*metrics.Desc
}

var _ prometheus.Collector = (*Collector)(nil)

// NewCollector returns a collector of st. constLabels are added to every
// metric: give each stack a label of its own ("stack": "a") when a process
// registers several.
func NewCollector(st *polarnet.Stack, constLabels prometheus.Labels) *Collector {
	c := &Collector{stack: st, descs: map[*metrics.Desc]*prometheus.Desc{}}
	for _, d := range append(metrics.Engine(), metrics.Protocol()...) {
		c.descs[d] = prometheus.NewDesc(d.Name, d.Help, d.Labels, constLabels)
		c.order = append(c.order, d)
	}
	return c
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.order {
		ch <- c.descs[d]
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	metrics.Collect(c.stack, func(s metrics.Sample) {
		d := c.descs[s.Desc]
		var m prometheus.Metric
		var err error
		switch s.Desc.Type {
		case metrics.Counter:
			m, err = prometheus.NewConstMetric(d, prometheus.CounterValue, s.Value, s.LabelValues...)
		case metrics.Gauge:
			m, err = prometheus.NewConstMetric(d, prometheus.GaugeValue, s.Value, s.LabelValues...)
		case metrics.Histogram:
			buckets := make(map[float64]uint64, len(s.Hist.Buckets))
			for _, b := range s.Hist.Buckets {
				buckets[b.UpperBound] = b.Count
			}
			m, err = prometheus.NewConstHistogram(d, s.Hist.Count, s.Hist.Sum, buckets, s.LabelValues...)
		}
		if err != nil {
			m = prometheus.NewInvalidMetric(d, err)
		}
		ch <- m
	})
}

// Register registers a collector of st with reg (prometheus.DefaultRegisterer
// for the default /metrics of promhttp.Handler()).
func Register(reg prometheus.Registerer, st *polarnet.Stack, constLabels prometheus.Labels) error {
	return reg.Register(NewCollector(st, constLabels))
}

// Handler returns an HTTP handler serving st's metrics, with the Go
// runtime's and the process's, from a registry of its own.
func Handler(st *polarnet.Stack) http.Handler {
	return handler(NewCollector(st, nil))
}

// StacksHandler is Handler for several stacks of one process: the series of
// stacks[name] carry the label stack="name".
func StacksHandler(stacks map[string]*polarnet.Stack) http.Handler {
	cs := make([]prometheus.Collector, 0, len(stacks))
	for name, st := range stacks {
		cs = append(cs, NewCollector(st, prometheus.Labels{"stack": name}))
	}
	return handler(cs...)
}

// handler serves cs with the Go runtime's and the process's collectors from
// a registry of its own.
func handler(cs ...prometheus.Collector) http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(append(cs, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))...)
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}
