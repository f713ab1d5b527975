package cpu

import (
	"fmt"
	"math"
	"testing"

	"tandem/compute"
)

func refRMSNorm(x, w []float32, D int, eps float32) (want, tol []float64) {
	want, tol = make([]float64, len(x)), make([]float64, len(x))
	for r := 0; r < len(x)/D; r++ {
		var ss float64
		for _, v := range x[r*D : (r+1)*D] {
			ss += float64(v) * float64(v)
		}
		inv := 1 / math.Sqrt(ss/float64(D)+float64(eps))
		for i := r * D; i < (r+1)*D; i++ {
			y := float64(x[i]) * inv
			if w != nil {
				y *= float64(w[i-r*D])
			}
			want[i] = y
			tol[i] = 4*eps32*math.Abs(y) + 1e-44
		}
	}
	return want, tol
}

func TestRMSNormMatchesFloat64Reference(t *testing.T) {
	b := New(2)
	for _, dt := range []compute.DType{compute.F32, compute.BF16, compute.F16, compute.Invalid} {
		for _, c := range []struct {
			rows, D int
			scale   float32
		}{{1, 1, 1}, {3, 7, 1}, {2, 8, 1e-3}, {4, 13, 100}, {2, 256, 1}, {5, 1537, 3}} {
			name := dt.String()
			if dt == compute.Invalid {
				name = "weightless"
			}
			t.Run(fmt.Sprintf("%s/rows%d_D%d_x%g", name, c.rows, c.D, c.scale), func(t *testing.T) {
				r := newRand(uint64(c.rows*100 + c.D))
				x := randVec(r, c.rows*c.D, c.scale)
				var w []float32
				var wt *compute.Tensor
				if dt != compute.Invalid {
					w = roundTo(dt, randVec(r, c.D, 2))
					wt = weight(t, b, dt, w, c.D)
				}
				got := b.ToF32(b.RMSNorm(b.FromF32(x, c.rows, c.D), wt, 1e-6))
				want, tol := refRMSNorm(x, w, c.D, 1e-6)
				requireClose(t, "RMSNorm", got, want, tol)
			})
		}
	}
}

func TestRMSNormEpsDominatesZeroRow(t *testing.T) {
	b := New(1)
	got := b.ToF32(b.RMSNorm(b.FromF32([]float32{0, 0, 0, 0}, 1, 4), nil, 1e-6))
	requireSameBits(t, "zero row", got, []float32{0, 0, 0, 0})
	got = b.ToF32(b.RMSNorm(b.FromF32([]float32{1e-4, 0}, 1, 2), nil, 0.5))
	requireClose(t, "eps", got, []float64{1e-4 / math.Sqrt(0.5e-8+0.5), 0}, []float64{4 * eps32 * 1.5e-4})
}

func TestRMSNormWeightlessEqualsUnitWeight(t *testing.T) {
	b := New(1)
	x := b.FromF32(randVec(newRand(3), 3*37, 5), 3, 37)
	ones := make([]float32, 37)
	for i := range ones {
		ones[i] = 1
	}
	requireSameBits(t, "nil vs ones", b.ToF32(b.RMSNorm(x, nil, 1e-6)), b.ToF32(b.RMSNorm(x, weight(t, b, compute.BF16, ones, 37), 1e-6)))
}

func TestRMSNormRowsAreBatchInvariant(t *testing.T) {
	b := New(4)
	const R, D = 9, 1000
	x := b.FromF32(randVec(newRand(4), R*D, 3), R, D)
	w := weight(t, b, compute.BF16, roundTo(compute.BF16, randVec(newRand(5), D, 1)), D)
	all := b.ToF32(b.RMSNorm(x, w, 1e-6))
	for r := range R {
		requireSameBits(t, fmt.Sprintf("row %d", r), all[r*D:(r+1)*D], b.ToF32(b.RMSNorm(b.Slice(x, r, r+1), w, 1e-6)))
	}
}

func TestRMSNormRejectsWrongWeightLength(t *testing.T) {
	b := New(1)
	mustPanic(t, "weight length", "RMSNorm", func() {
		b.RMSNorm(b.Zeros(compute.F32, 2, 4), b.Zeros(compute.F32, 3), 1e-6)
	})
}
