package cpu

import (
	"fmt"
	"math"

	"tandem/compute"
)

// elementGrain is how many elements make one unit of parallel work for the
// cheap elementwise ops.
const elementGrain = 1024

// Add implements compute.Backend: a F32, b F32/BF16/F16 of a's shape, a row
// of a.Dim(-1) values, or a scalar.
func (b *Backend) Add(x, y *compute.Tensor) *compute.Tensor {
	return b.binary(x, y, "Add", func(p, q float32) float32 { return p + q })
}

// Mul implements compute.Backend with Add's broadcasting rules.
func (b *Backend) Mul(x, y *compute.Tensor) *compute.Tensor {
	return b.binary(x, y, "Mul", func(p, q float32) float32 { return p * q })
}

func (b *Backend) binary(x, y *compute.Tensor, name string, op func(p, q float32) float32) *compute.Tensor {
	xs := f32s(x)
	n := len(xs)
	period, err := compute.BroadcastPeriod(x, y) // y is indexed by i % period
	if err != nil {
		panic(fmt.Sprintf("cpu: %s: %v", name, err))
	}
	var ys []float32
	if y.DType() == compute.F32 {
		ys = f32s(y)
	} else {
		ys = make([]float32, y.Len()) // weights such as per-layer scalars
		widenInto(ys, y, 0)
	}
	out, os := newF32(x.Shape()...)
	b.forElements(n, 1, func(lo, hi int) {
		switch period {
		case n:
			for i := lo; i < hi; i++ {
				os[i] = op(xs[i], ys[i])
			}
		case 1:
			c := ys[0]
			for i := lo; i < hi; i++ {
				os[i] = op(xs[i], c)
			}
		default:
			for i := lo; i < hi; i++ {
				os[i] = op(xs[i], ys[i%period])
			}
		}
	})
	return out
}

// Scale implements compute.Backend.
func (b *Backend) Scale(x *compute.Tensor, s float32) *compute.Tensor {
	return b.unary(x, 1, func(v float32) float32 { return v * s })
}

// GeluTanh implements compute.Backend, evaluated in float64 and rounded once.
func (b *Backend) GeluTanh(x *compute.Tensor) *compute.Tensor {
	return b.unary(x, 16, gelu)
}

// GeluMul implements compute.Backend; it equals Mul(GeluTanh(gate), up) bit
// for bit.
func (b *Backend) GeluMul(gate, up *compute.Tensor) *compute.Tensor {
	gs, us := f32s(gate), f32s(up)
	if !compute.SameShape(gate.Shape(), up.Shape()) {
		panic(fmt.Sprintf("cpu: GeluMul of %v and %v", gate, up))
	}
	out, os := newF32(gate.Shape()...)
	b.forElements(len(gs), 16, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			os[i] = gelu(gs[i]) * us[i]
		}
	})
	return out
}

// Softcap implements compute.Backend: c·tanh(x/c) in float64, rounded once.
func (b *Backend) Softcap(x *compute.Tensor, c float32) *compute.Tensor {
	c64 := float64(c)
	return b.unary(x, 16, func(v float32) float32 {
		return float32(c64 * math.Tanh(float64(v)/c64))
	})
}

const sqrt2OverPi = 0.7978845608028654 // √(2/π)

func gelu(v float32) float32 {
	x := float64(v)
	return float32(0.5 * x * (1 + math.Tanh(sqrt2OverPi*(x+0.044715*x*x*x))))
}

func (b *Backend) unary(x *compute.Tensor, cost int, f func(float32) float32) *compute.Tensor {
	xs := f32s(x)
	out, os := newF32(x.Shape()...)
	b.forElements(len(xs), cost, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			os[i] = f(xs[i])
		}
	})
	return out
}

// forElements runs fn over [0, n) in parallel blocks of elementGrain.
func (b *Backend) forElements(n, cost int, fn func(lo, hi int)) {
	blocks := (n + elementGrain - 1) / elementGrain
	b.parallelFor(blocks, elementGrain*cost, func(lo, hi int) {
		fn(lo*elementGrain, min(hi*elementGrain, n))
	})
}
