package main

import (
	"math"
	"math/bits"
	"sort"
)

// Hist is a log-linear latency histogram (HDR style) over non-negative int64
// values (nanoseconds). With histSub = 7 every bucket is at most 1/64 of its
// value wide, so quantiles carry under 1% relative error; recording is a few
// instructions and allocation-free.
type Hist struct {
	counts   [histBuckets]uint64
	n        uint64
	sum      float64
	min, max int64
}

const (
	histSub     = 7
	histHalf    = 1 << (histSub - 1)
	histBuckets = (64-histSub+1)*histHalf + (1 << histSub)
)

func histIndex(v int64) int {
	if v < 0 {
		v = 0
	}
	u := uint64(v)
	if u < 1<<histSub {
		return int(u)
	}
	msb := bits.Len64(u) - 1
	shift := msb - histSub + 1
	m := u >> uint(shift)
	return shift*histHalf + int(m)
}

// histBounds returns the half-open value range [lo, hi) of bucket i.
func histBounds(i int) (lo, hi float64) {
	if i < 1<<histSub {
		return float64(i), float64(i + 1)
	}
	shift := i/histHalf - 1
	m := i - shift*histHalf
	return math.Ldexp(float64(m), shift), math.Ldexp(float64(m+1), shift)
}

// Record adds one value.
func (h *Hist) Record(v int64) {
	if v < 0 {
		v = 0
	}
	h.counts[histIndex(v)]++
	if h.n == 0 || v < h.min {
		h.min = v
	}
	if v > h.max {
		h.max = v
	}
	h.n++
	h.sum += float64(v)
}

// Count is the number of recorded values.
func (h *Hist) Count() uint64 { return h.n }

// Mean of the recorded values (0 when empty).
func (h *Hist) Mean() float64 {
	if h.n == 0 {
		return 0
	}
	return h.sum / float64(h.n)
}

// Max recorded value.
func (h *Hist) Max() int64 { return h.max }

// Quantile returns the q-quantile (0 < q <= 1) using the nearest-rank
// definition: the smallest recorded value v with at least ceil(q*n) values
// <= v, approximated by its bucket midpoint and clamped to [min, max].
func (h *Hist) Quantile(q float64) float64 {
	if h.n == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(h.n)))
	if rank < 1 {
		rank = 1
	}
	if rank >= h.n {
		return float64(h.max)
	}
	if rank == 1 {
		return float64(h.min)
	}
	var cum uint64
	for i, c := range h.counts {
		cum += c
		if cum >= rank {
			lo, hi := histBounds(i)
			v := lo
			if hi-lo > 1 {
				v = (lo + hi - 1) / 2
			}
			return math.Min(math.Max(v, float64(h.min)), float64(h.max))
		}
	}
	return float64(h.max)
}

// Merge adds all values of o into h.
func (h *Hist) Merge(o *Hist) {
	if o.n == 0 {
		return
	}
	for i, c := range o.counts {
		h.counts[i] += c
	}
	if h.n == 0 || o.min < h.min {
		h.min = o.min
	}
	if o.max > h.max {
		h.max = o.max
	}
	h.n += o.n
	h.sum += o.sum
}

// exactQuantile is the reference nearest-rank quantile of a sample (used by
// tests and for small samples).
func exactQuantile(xs []int64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]int64(nil), xs...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	rank := int(math.Ceil(q * float64(len(s))))
	if rank < 1 {
		rank = 1
	}
	if rank > len(s) {
		rank = len(s)
	}
	return float64(s[rank-1])
}

// median of the finite values in xs; NaN when there are none. With an even
// count it averages the two middle values.
func median(xs []float64) float64 {
	s := make([]float64, 0, len(xs))
	for _, x := range xs {
		if !math.IsNaN(x) && !math.IsInf(x, 0) {
			s = append(s, x)
		}
	}
	if len(s) == 0 {
		return math.NaN()
	}
	sort.Float64s(s)
	m := len(s) / 2
	if len(s)%2 == 1 {
		return s[m]
	}
	return (s[m-1] + s[m]) / 2
}
