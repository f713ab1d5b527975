package cpu

import (
	"math"

	"tandem/compute"
)

// RoPE implements compute.Backend for x [..., H, d] with one position per
// leading index (pos has Len/(H·d) entries; [T, H, d] is the usual shape).
// For pair j: angle = float32(pos)·InvFreq[j] in float32, cos and sin in
// float64 rounded to float32, then
//
//	out[j]      = float32(x[j]·cos) − float32(x[j+h]·sin)
//	out[j+h]    = float32(x[j+h]·cos) + float32(x[j]·sin)
//
// with h = r.Dim/2. Pairs whose InvFreq is 0, and dims at or beyond r.Dim
// (r.Dim < d is Qwen-style partial rotary), are copied bit for bit.
func (b *Backend) RoPE(x *compute.Tensor, pos []int32, r *compute.RoPE) *compute.Tensor {
	T, H, d, err := compute.CheckRoPE(x, pos, r)
	if err != nil {
		panic("cpu: " + err.Error())
	}
	xs := f32s(x)
	half := r.Dim / 2
	out, os := newF32(x.Shape()...)
	b.parallelFor(T, H*d+8*half, func(lo, hi int) {
		csp := getF32(2 * half)
		defer putF32(csp)
		cos, sin := (*csp)[:half], (*csp)[half:]
		for t := lo; t < hi; t++ {
			p := float32(pos[t])
			for j, f := range r.InvFreq {
				a := float64(p * f)
				cos[j], sin[j] = float32(math.Cos(a)), float32(math.Sin(a))
			}
			for h := range H {
				o := (t*H + h) * d
				ropeRow(os[o:o+d], xs[o:o+d], cos, sin, r.InvFreq)
			}
		}
	})
	return out
}

func ropeRow(y, x, cos, sin, freq []float32) {
	half := len(freq)
	copy(y[2*half:], x[2*half:])
	for j, f := range freq {
		x0, x1 := x[j], x[j+half]
		if f == 0 {
			y[j], y[j+half] = x0, x1
			continue
		}
		c, s := cos[j], sin[j]
		y[j] = float32(x0*c) - float32(x1*s)
		y[j+half] = float32(x1*c) + float32(x0*s)
	}
}
