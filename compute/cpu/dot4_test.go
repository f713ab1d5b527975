package cpu

import (
	"fmt"
	"math"
	"testing"

	"tandem/compute"
)

// TestSIMDKernelsMatchGoLoopsBitForBit protects the promise of
// dot_amd64.s: the AVX2 kernels give exactly the bits of the Go loops, so
// which one runs never changes a result.
func TestSIMDKernelsMatchGoLoopsBitForBit(t *testing.T) {
	if !useSIMD {
		t.Skip("no SIMD kernels on this machine")
	}
	r := newRand(3)
	special := []float32{0, float32(math.Copysign(0, -1)), 1e-40, -1e-39, 3e38, float32(math.Inf(1))}
	for _, K := range []int{1, 7, 8, 9, 15, 16, 17, 64, 255, 1037, 4096} {
		for _, dt := range []compute.DType{compute.BF16, compute.F32} {
			t.Run(fmt.Sprintf("%s/K=%d", dt, K), func(t *testing.T) {
				x := randVec(r, K, 2)
				wv := randVec(r, 4*K, 2)
				for i := 0; i < len(wv); i += 97 {
					wv[i] = special[i%len(special)]
				}
				b := New(1)
				w := weight(t, b, dt, wv, 4, K)
				var got, want [4]float32
				switch ws := floatData(w).(type) {
				case []uint16:
					got = dot4BF16(x, ws, K, 0)
					for r := range 4 {
						want[r] = dotBF16(x, ws[r*K:(r+1)*K])
					}
					// The two-row kernel: row 0 is x, row 1 another vector.
					x1 := randVec(r, K, 3)
					a, c := dot4BF16r2(x, x1, ws, K, 0)
					for i := range 4 {
						w1 := dotBF16(x1, ws[i*K:(i+1)*K])
						if math.Float32bits(a[i]) != math.Float32bits(want[i]) || math.Float32bits(c[i]) != math.Float32bits(w1) {
							t.Fatalf("two-row kernel, weight row %d: %v, %v; Go %v, %v", i, a[i], c[i], want[i], w1)
						}
					}
				case []float32:
					got = dot4F32(x, ws, K, 0)
					for r := range 4 {
						want[r] = dotF32(x, ws[r*K:(r+1)*K])
					}
				}
				for i := range 4 {
					if math.Float32bits(got[i]) != math.Float32bits(want[i]) && !(got[i] != got[i] && want[i] != want[i]) {
						t.Fatalf("row %d: SIMD %v (%#x), Go %v (%#x)", i, got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
					}
				}
			})
		}
	}
}

// TestMatMulSameWithAndWithoutSIMD runs whole matmuls both ways.
func TestMatMulSameWithAndWithoutSIMD(t *testing.T) {
	if !useSIMD {
		t.Skip("no SIMD kernels on this machine")
	}
	r := newRand(4)
	b := New(3)
	for _, s := range []struct{ M, N, K int }{{1, 37, 1037}, {5, 64, 96}, {9, 19, 8}} {
		x := b.FromF32(randVec(r, s.M*s.K, 1), s.M, s.K)
		for _, dt := range []compute.DType{compute.BF16, compute.F32, compute.F16} {
			w := weight(t, b, dt, randVec(r, s.N*s.K, 1), s.N, s.K)
			with := b.ToF32(b.MatMul(x, w))
			useSIMD = false
			without := b.ToF32(b.MatMul(x, w))
			useSIMD = true
			requireSameBits(t, fmt.Sprintf("%v %s", s, dt), with, without)
		}
	}
}
