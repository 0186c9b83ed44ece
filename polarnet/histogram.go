package polarnet

import (
	"math"
	"math/bits"
	"sync/atomic"
)

// HistogramBuckets is the number of buckets of a Histogram: bucket i counts
// values in (2^(i-1), 2^i], bucket 0 the values 0 and 1, and the last one
// also everything larger than its bound.
const HistogramBuckets = 33

// histogram is a fixed log2-bucket histogram of atomic counters: observing
// a value costs two uncontended atomic adds and no clock or lock, so a
// poller can afford one per burst.
type histogram struct {
	buckets [HistogramBuckets]atomic.Uint64
	sum     atomic.Uint64
}

// bucketOf returns the bucket of value v.
func bucketOf(v uint64) int {
	if v <= 1 {
		return 0
	}
	return min(bits.Len64(v-1), HistogramBuckets-1)
}

func (h *histogram) observe(v uint64) {
	h.buckets[bucketOf(v)].Add(1)
	h.sum.Add(v)
}

func (h *histogram) snapshot() Histogram {
	var out Histogram
	for i := range h.buckets {
		out.Counts[i] = h.buckets[i].Load()
	}
	// Read after the buckets: a concurrent observation may be in Sum and
	// not yet in a bucket, never the other way round when it matters (the
	// mean is then off by one observation at most).
	out.Sum = h.sum.Load()
	return out
}

// Histogram is a snapshot of a log2-bucket histogram: Counts[i] is how many
// observations fell in (BucketBound(i-1), BucketBound(i)].
type Histogram struct {
	Counts [HistogramBuckets]uint64
	// Sum is the sum of all observed values.
	Sum uint64
}

// BucketBound returns the inclusive upper bound of bucket i: 2^i. The last
// bucket has no bound (it returns +Inf as a float in Prometheus terms, and
// math.MaxUint64 here).
func BucketBound(i int) uint64 {
	if i >= HistogramBuckets-1 {
		return math.MaxUint64
	}
	return 1 << i
}

// Count returns the number of observations.
func (h Histogram) Count() uint64 {
	var n uint64
	for _, c := range h.Counts {
		n += c
	}
	return n
}

// Mean returns the mean observation, 0 without any.
func (h Histogram) Mean() float64 {
	n := h.Count()
	if n == 0 {
		return 0
	}
	return float64(h.Sum) / float64(n)
}

// Quantile returns an estimate of quantile q (0..1): the upper bound of the
// bucket holding it, so at most twice the true value. 0 without
// observations.
func (h Histogram) Quantile(q float64) uint64 {
	n := h.Count()
	if n == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(n)))
	rank = max(rank, 1)
	var seen uint64
	for i, c := range h.Counts {
		seen += c
		if seen >= rank {
			return BucketBound(i)
		}
	}
	return BucketBound(HistogramBuckets - 1)
}

// Sub returns h minus an earlier snapshot of the same histogram: what was
// observed in between.
func (h Histogram) Sub(earlier Histogram) Histogram {
	for i := range h.Counts {
		h.Counts[i] -= earlier.Counts[i]
	}
	h.Sum -= earlier.Sum
	return h
}

func (h *Histogram) add(o *Histogram) {
	for i := range h.Counts {
		h.Counts[i] += o.Counts[i]
	}
	h.Sum += o.Sum
}
