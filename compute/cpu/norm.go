package cpu

import (
	"fmt"
	"math"

	"tandem/compute"
)

// RMSNorm implements compute.Backend. Per row, in a fixed order:
//
//	ss = Σ float64(x_i)²              (float64, in index order)
//	r  = float32(1 / sqrt(ss/D + eps)) (float64, rounded once)
//	y_i = float32(x_i · r) · w_i       (float32, each product rounded)
//
// Accumulating squares in float64 keeps the norm accurate for long rows.
// w may be F32, BF16 or F16 of length D, or nil for the weightless norm.
func (b *Backend) RMSNorm(x, w *compute.Tensor, eps float32) *compute.Tensor {
	xs := f32s(x)
	D := x.Dim(-1)
	var wf []float32
	if w != nil {
		if w.Len() != D {
			panic(fmt.Sprintf("cpu: RMSNorm of %v with weight %v", x, w))
		}
		wf = make([]float32, D)
		widenInto(wf, w, 0)
	}
	out, os := newF32(x.Shape()...)
	b.parallelFor(x.Rows(), 2*D, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			rmsNormRow(os[r*D:(r+1)*D], xs[r*D:(r+1)*D], wf, eps)
		}
	})
	return out
}

func rmsNormRow(y, x, w []float32, eps float32) {
	var ss float64
	for _, v := range x {
		ss += float64(v) * float64(v) // exact square: an FMA would not change it
	}
	r := float32(1 / math.Sqrt(ss/float64(len(x))+float64(eps)))
	if w == nil {
		for i, v := range x {
			y[i] = v * r
		}
		return
	}
	w = w[:len(x)]
	for i, v := range x {
		y[i] = float32(v*r) * w[i]
	}
}
