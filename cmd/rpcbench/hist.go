package main

import (
	"encoding/json"
	"fmt"
	"math"
	"math/bits"
	"time"
)

// Latency histogram in the manner of HdrHistogram: values (nanoseconds) are
// counted in buckets that are exact below 256 ns and, above, split every
// power of two into 128 equal sub-buckets, so any recorded value is known to
// within 1/128 (0.8%) of itself. Recording is an index computation and an
// increment; the buckets for up to histMax take 35 KiB.
const (
	subBits  = 7
	subCount = 1 << subBits // sub-buckets per power of two
	// histMax is the largest value recorded as itself (about 18 minutes);
	// larger values are clamped to it. Runs are bounded far below that.
	histMax = 1<<40 - 1
)

var histBuckets = bucketOf(histMax) + 1

// hist is a latency histogram. The zero value is not usable: see newHist.
type hist struct {
	Counts []uint64
	N      uint64
	Min    int64
	Max    int64
	Sum    float64
}

func newHist() *hist { return &hist{Counts: make([]uint64, histBuckets), Min: math.MaxInt64} }

// bucketOf returns the bucket of v: v itself below 2*subCount; above, the
// power of two (shift) and the top subBits+1 bits of v.
func bucketOf(v uint64) int {
	if v < 2*subCount {
		return int(v)
	}
	shift := bits.Len64(v) - subBits - 1
	return shift*subCount + int(v>>shift)
}

// bucketRange returns the smallest value of bucket i and its width.
func bucketRange(i int) (low, width uint64) {
	if i < 2*subCount {
		return uint64(i), 1
	}
	shift := i/subCount - 1
	return uint64(i-shift*subCount) << shift, 1 << shift
}

func (h *hist) record(d time.Duration) {
	v := int64(d)
	if v < 0 {
		v = 0
	}
	if v > histMax {
		v = histMax
	}
	h.Counts[bucketOf(uint64(v))]++
	h.N++
	h.Sum += float64(v)
	h.Min = min(h.Min, v)
	h.Max = max(h.Max, v)
}

func (h *hist) merge(o *hist) {
	if o == nil || o.N == 0 {
		return
	}
	for i, c := range o.Counts {
		h.Counts[i] += c
	}
	h.N += o.N
	h.Sum += o.Sum
	h.Min = min(h.Min, o.Min)
	h.Max = max(h.Max, o.Max)
}

// quantile returns the value below or at which a fraction q of the recorded
// values lie: the highest value of the bucket holding that rank (as
// HdrHistogram reports it), never above the largest value recorded.
func (h *hist) quantile(q float64) time.Duration {
	if h == nil || h.N == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(h.N)))
	rank = max(rank, 1)
	var seen uint64
	for i, c := range h.Counts {
		seen += c
		if seen >= rank {
			low, width := bucketRange(i)
			return time.Duration(min(int64(low+width-1), h.Max))
		}
	}
	return time.Duration(h.Max)
}

func (h *hist) mean() time.Duration {
	if h == nil || h.N == 0 {
		return 0
	}
	return time.Duration(h.Sum / float64(h.N))
}

// histJSON is how a histogram travels between processes and into
// results.json: the summary and the non-empty buckets as [bucket, count].
type histJSON struct {
	N       uint64      `json:"n"`
	Min     int64       `json:"min_ns"`
	Max     int64       `json:"max_ns"`
	Sum     float64     `json:"sum_ns"`
	Buckets [][2]uint64 `json:"buckets"`
}

func (h *hist) MarshalJSON() ([]byte, error) {
	j := histJSON{N: h.N, Min: h.Min, Max: h.Max, Sum: h.Sum}
	for i, c := range h.Counts {
		if c != 0 {
			j.Buckets = append(j.Buckets, [2]uint64{uint64(i), c})
		}
	}
	return json.Marshal(j)
}

func (h *hist) UnmarshalJSON(b []byte) error {
	var j histJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*h = *newHist()
	for _, b := range j.Buckets {
		if b[0] >= uint64(len(h.Counts)) {
			return fmt.Errorf("histogram bucket %d out of range", b[0])
		}
		h.Counts[b[0]] = b[1]
	}
	h.N, h.Min, h.Max, h.Sum = j.N, j.Min, j.Max, j.Sum
	return nil
}
