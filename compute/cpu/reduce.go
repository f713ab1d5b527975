package cpu

import (
	"fmt"
	"math"

	"tandem/compute"
)

// Softmax implements compute.Backend. Per row: m = max, e_i = exp(x_i − m)
// and Σe in float64 (index order), y_i = float32(e_i / Σe). A row holding a
// NaN, or +Inf, or only −Inf, gives NaNs.
func (b *Backend) Softmax(x *compute.Tensor) *compute.Tensor {
	xs := f32s(x)
	D := x.Dim(-1)
	out, os := newF32(x.Shape()...)
	b.parallelFor(x.Rows(), 16*D, func(lo, hi int) {
		ep := getF64(D)
		defer putF64(ep)
		for r := lo; r < hi; r++ {
			softmaxRow(os[r*D:(r+1)*D], xs[r*D:(r+1)*D], *ep)
		}
	})
	return out
}

func softmaxRow(y, x []float32, e []float64) {
	mx := float32(math.Inf(-1))
	for _, v := range x {
		mx = max(mx, v) // max propagates NaN
	}
	m := float64(mx)
	var sum float64
	for i, v := range x {
		e[i] = math.Exp(float64(v) - m)
		sum += e[i]
	}
	for i := range y {
		y[i] = float32(e[i] / sum)
	}
}

// Argmax implements compute.Backend: I32 [rows]. NaN counts as larger than
// every number (as in PyTorch), so a row's first NaN wins; otherwise the
// lowest index of the maximum wins (−0 and +0 tie).
func (b *Backend) Argmax(x *compute.Tensor) *compute.Tensor {
	xs := f32s(x)
	if x.Rank() == 0 || (x.Dim(-1) == 0 && compute.NumElements(x.Shape()[:x.Rank()-1]) > 0) {
		panic(fmt.Sprintf("cpu: Argmax of %v", x))
	}
	D, R := x.Dim(-1), x.Rows()
	out := make([]int32, R)
	b.parallelFor(R, D, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			out[r] = int32(argmaxRow(xs[r*D : (r+1)*D]))
		}
	})
	return compute.NewTensor(compute.I32, []int{R}, out)
}

// ArgmaxKeyed implements compute.Backend.
func (b *Backend) ArgmaxKeyed(x, keys *compute.Tensor) *compute.Tensor {
	xs := f32s(x)
	if keys.DType() != compute.I32 || !compute.SameShape(x.Shape(), keys.Shape()) || x.Rank() == 0 ||
		(x.Dim(-1) == 0 && x.Rows() > 0) {
		panic(fmt.Sprintf("cpu: ArgmaxKeyed of %v by %v", x, keys))
	}
	ks := i32s(keys)
	D, R := x.Dim(-1), x.Rows()
	out := make([]int32, R)
	for r := range R {
		v, k := xs[r*D:(r+1)*D], ks[r*D:(r+1)*D]
		best := -1
		for j, f := range v {
			if f == f && (best < 0 || f > v[best] || (f == v[best] && k[j] < k[best])) {
				best = j
			}
		}
		out[r] = k[max(best, 0)]
	}
	return compute.NewTensor(compute.I32, []int{R}, out)
}

func argmaxRow(x []float32) int {
	best := 0
	for i, v := range x {
		if v != v {
			return i
		}
		if v > x[best] {
			best = i
		}
	}
	return best
}

// TopK implements compute.Backend: values F32 [..., k] and indices I32
// [..., k], in descending order with ties broken by the lower index and NaN
// ranked above every number (as Argmax does).
func (b *Backend) TopK(x *compute.Tensor, k int) (values, indices *compute.Tensor) {
	xs := f32s(x)
	if x.Rank() == 0 || k < 0 || k > x.Dim(-1) {
		panic(fmt.Sprintf("cpu: TopK %d of %v", k, x))
	}
	D := x.Dim(-1)
	R := compute.NumElements(x.Shape()[:x.Rank()-1])
	shape := append(append([]int(nil), x.Shape()[:x.Rank()-1]...), k)
	vt, vs := newF32(shape...)
	is := make([]int32, R*k)
	if k > 0 {
		b.parallelFor(R, D, func(lo, hi int) {
			for r := lo; r < hi; r++ {
				topKRow(vs[r*k:(r+1)*k], is[r*k:(r+1)*k], xs[r*D:(r+1)*D])
			}
		})
	}
	return vt, compute.NewTensor(compute.I32, shape, is)
}

// topKRow keeps vals/idx sorted best first by insertion. Scanning in index
// order and inserting after equal values gives the lower index first on ties.
func topKRow(vals []float32, idx []int32, x []float32) {
	k, n := len(vals), 0
	for i, v := range x {
		if n == k && !ranksAbove(v, vals[k-1]) {
			continue
		}
		p := min(n, k-1)
		for p > 0 && ranksAbove(v, vals[p-1]) {
			p--
		}
		if n < k {
			n++
		}
		copy(vals[p+1:n], vals[p:n-1])
		copy(idx[p+1:n], idx[p:n-1])
		vals[p], idx[p] = v, int32(i)
	}
}

// ranksAbove orders values for TopK: NaN above everything, then by value.
func ranksAbove(a, b float32) bool {
	if b != b {
		return false
	}
	return a != a || a > b
}
