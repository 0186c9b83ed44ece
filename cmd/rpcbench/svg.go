package main

import (
	"fmt"
	"html"
	"io"
	"math"
	"strings"
)

// chartSeries is one line of a latency chart.
type chartSeries struct {
	name string
	h    *hist
}

// Chart geometry.
const (
	chartW, chartH           = 1100, 560
	marginL, marginR         = 80, 330
	marginT, marginB         = 70, 60
	plotW, plotH             = chartW - marginL - marginR, chartH - marginT - marginB
	chartStep        float64 = 0.01 // x resolution, in decades of 1/(1-p)
)

var palette = []string{"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22", "#393b79", "#637939"}

// writeChart draws latency against percentile in the manner of
// HdrHistogram's plots: the x axis is log10(1/(1-p)), so 90%, 99%, 99.9%...
// are equally spaced and the tail gets the room it deserves; the y axis is
// logarithmic in microseconds. Each series is one run's full distribution.
func writeChart(w io.Writer, title, subtitle string, series []chartSeries) {
	// Axes: as many nines as the largest sample supports (at most five),
	// y from the smallest to the largest latency.
	xMax, yMin, yMax := 2.0, math.Inf(1), math.Inf(-1)
	for _, s := range series {
		xMax = max(xMax, math.Min(5, math.Floor(math.Log10(float64(s.h.N)))))
		yMin = min(yMin, float64(s.h.Min)/1e3)
		yMax = max(yMax, float64(s.h.Max)/1e3)
	}
	yMin = math.Pow(10, math.Floor(math.Log10(max(yMin, 0.1))))
	yMax = math.Pow(10, math.Ceil(math.Log10(max(yMax, yMin*10))))
	x := func(v float64) float64 { return marginL + v/xMax*plotW }
	y := func(us float64) float64 {
		us = min(max(us, yMin), yMax)
		return marginT + plotH - (math.Log10(us)-math.Log10(yMin))/(math.Log10(yMax)-math.Log10(yMin))*plotH
	}

	fmt.Fprintf(w, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", chartW, chartH, chartW, chartH)
	fmt.Fprintf(w, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(w, `<text x="%d" y="26" font-size="15" font-weight="bold">%s</text>`+"\n", marginL, html.EscapeString(title))
	fmt.Fprintf(w, `<text x="%d" y="46" fill="#444">%s</text>`+"\n", marginL, html.EscapeString(subtitle))

	// Grid and labels: decades with 2x and 5x lines on y; nines on x.
	for dec := yMin; dec < yMax*1.001; dec *= 10 {
		for _, m := range []float64{1, 2, 5} {
			v := dec * m
			if v > yMax*1.001 {
				break
			}
			stroke, width := "#ddd", 1
			if m == 1 {
				stroke = "#bbb"
			}
			fmt.Fprintf(w, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="%s" stroke-width="%d"/>`+"\n", marginL, y(v), marginL+plotW, y(v), stroke, width)
			fmt.Fprintf(w, `<text x="%d" y="%.1f" text-anchor="end" dominant-baseline="middle">%s</text>`+"\n", marginL-6, y(v), fmtAxisUS(v))
		}
	}
	for n := 0.0; n <= xMax; n++ {
		fmt.Fprintf(w, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#bbb"/>`+"\n", x(n), marginT, x(n), marginT+plotH)
		fmt.Fprintf(w, `<text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", x(n), marginT+plotH+18, nines(int(n)))
	}
	fmt.Fprintf(w, `<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#444"/>`+"\n", marginL, marginT, plotW, plotH)
	fmt.Fprintf(w, `<text x="%d" y="%d" text-anchor="middle">percentile</text>`+"\n", marginL+plotW/2, chartH-18)
	fmt.Fprintf(w, `<text x="20" y="%d" text-anchor="middle" transform="rotate(-90 20 %d)">latency (µs, log scale)</text>`+"\n", marginT+plotH/2, marginT+plotH/2)

	for i, s := range series {
		color := palette[i%len(palette)]
		var pts strings.Builder
		last := math.Min(xMax, math.Log10(float64(s.h.N)))
		for v := 0.0; v <= last+chartStep/2; v += chartStep {
			q := 1 - math.Pow(10, -v)
			fmt.Fprintf(&pts, "%.1f,%.1f ", x(v), y(float64(s.h.quantile(q))/1e3))
		}
		fmt.Fprintf(w, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`+"\n", color, strings.TrimSpace(pts.String()))
		ly := marginT + 10 + i*min(36, plotH/len(series))
		fmt.Fprintf(w, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="3"/>`+"\n", chartW-marginR+16, ly, chartW-marginR+40, ly, color)
		fmt.Fprintf(w, `<text x="%d" y="%d" dominant-baseline="middle">%s</text>`+"\n", chartW-marginR+46, ly, html.EscapeString(s.name))
		fmt.Fprintf(w, `<text x="%d" y="%d" dominant-baseline="middle" fill="#555" font-size="11">p50 %s · p99 %s · p99.9 %s</text>`+"\n",
			chartW-marginR+46, ly+15, fmtDur(s.h.quantile(0.5)), fmtDur(s.h.quantile(0.99)), fmtDur(s.h.quantile(0.999)))
	}
	fmt.Fprintln(w, "</svg>")
}

// nines labels x = n decades: 0%, 90%, 99%, 99.9%...
func nines(n int) string {
	switch n {
	case 0:
		return "0%"
	case 1:
		return "90%"
	}
	if n == 2 {
		return "99%"
	}
	return "99." + strings.Repeat("9", n-2) + "%"
}

func fmtAxisUS(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%gs", v/1e6)
	case v >= 1000:
		return fmt.Sprintf("%gms", v/1000)
	}
	return fmt.Sprintf("%gµs", v)
}
