package cpu

import (
	"fmt"
	"math"
	"testing"

	"tandem/compute"
)

// float32 + and × are correctly rounded; a float64 sum or product of two
// float32 values of similar magnitude is exact, so rounding it once gives the
// expected bits.
func TestAddMulBroadcastsAndWidens(t *testing.T) {
	b := New(3)
	const R, D = 5, 3001
	r := newRand(1)
	x := randVec(r, R*D, 2)
	for _, dt := range weightDTypes {
		for _, c := range []struct {
			name  string
			shape []int
			idx   func(i int) int
		}{
			{"same_shape", []int{R, D}, func(i int) int { return i }},
			{"row", []int{D}, func(i int) int { return i % D }},
			{"row_2d", []int{1, D}, func(i int) int { return i % D }},
			{"scalar", []int{1}, func(int) int { return 0 }},
		} {
			t.Run(fmt.Sprintf("%v/%s", dt, c.name), func(t *testing.T) {
				yv := roundTo(dt, randVec(r, compute.NumElements(c.shape), 3))
				y := weight(t, b, dt, yv, c.shape...)
				xt := b.FromF32(x, R, D)
				sum, prod := b.ToF32(b.Add(xt, y)), b.ToF32(b.Mul(xt, y))
				wantSum, wantProd := make([]float32, len(x)), make([]float32, len(x))
				for i, v := range x {
					wantSum[i] = float32(float64(v) + float64(yv[c.idx(i)]))
					wantProd[i] = float32(float64(v) * float64(yv[c.idx(i)]))
				}
				requireSameBits(t, "Add", sum, wantSum)
				requireSameBits(t, "Mul", prod, wantProd)
			})
		}
	}
}

func TestAddRejectsIncompatibleShapes(t *testing.T) {
	b := New(1)
	mustPanic(t, "3 vs 2", "Add", func() { b.Add(b.Zeros(compute.F32, 2, 3), b.Zeros(compute.F32, 2)) })
	mustPanic(t, "transposed", "Mul", func() { b.Mul(b.Zeros(compute.F32, 2, 3), b.Zeros(compute.F32, 3, 2)) })
	mustPanic(t, "bf16 a", "F32", func() { b.Add(b.Zeros(compute.BF16, 2, 3), b.Zeros(compute.F32, 3)) })
}

func TestScaleIsOneRoundedProduct(t *testing.T) {
	b := New(2)
	x := randVec(newRand(2), 5000, 10)
	got := b.ToF32(b.Scale(b.FromF32(x, 50, 100), 0.0625*3))
	want := make([]float32, len(x))
	for i, v := range x {
		want[i] = float32(float64(v) * 0.1875)
	}
	requireSameBits(t, "Scale", got, want)
}

func TestGeluTanhMatchesFormula(t *testing.T) {
	b := New(2)
	x := append(randVec(newRand(3), 4000, 8), 0, 1, -1, 3, -3, 20, -20, 1e-30, -1e-30)
	got := b.ToF32(b.GeluTanh(b.FromF32(x, len(x))))
	want, tol := make([]float64, len(x)), make([]float64, len(x))
	for i, v := range x {
		z := float64(v)
		want[i] = 0.5 * z * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(z+0.044715*z*z*z)))
		tol[i] = eps32*math.Abs(want[i]) + 1e-45
	}
	requireClose(t, "GeluTanh", got, want, tol)
	// Spot values of gelu_pytorch_tanh.
	for _, c := range []struct{ x, y float64 }{{1, 0.8411919906082768}, {-1, -0.15880800939172324}, {2, 1.954597694087775}} {
		y := b.ToF32(b.GeluTanh(b.FromF32([]float32{float32(c.x)}, 1)))[0]
		if math.Abs(float64(y)-c.y) > 1e-7 {
			t.Errorf("gelu(%v) = %v, want %v", c.x, y, c.y)
		}
	}
}

func TestGeluMulEqualsGeluThenMul(t *testing.T) {
	b := New(3)
	r := newRand(4)
	gate := b.FromF32(randVec(r, 7*777, 4), 7, 777)
	up := b.FromF32(randVec(r, 7*777, 4), 7, 777)
	requireSameBits(t, "GeluMul", b.ToF32(b.GeluMul(gate, up)), b.ToF32(b.Mul(b.GeluTanh(gate), up)))
	mustPanic(t, "shape mismatch", "GeluMul", func() { b.GeluMul(gate, b.Zeros(compute.F32, 7, 776)) })
}

func TestSoftcapMatchesFormula(t *testing.T) {
	b := New(2)
	const c = 30
	x := append(randVec(newRand(5), 3000, 100), 0, 1e4, -1e4)
	got := b.ToF32(b.Softcap(b.FromF32(x, len(x)), c))
	want, tol := make([]float64, len(x)), make([]float64, len(x))
	for i, v := range x {
		want[i] = c * math.Tanh(float64(v)/c)
		tol[i] = eps32*math.Abs(want[i]) + 1e-45
	}
	requireClose(t, "Softcap", got, want, tol)
	if n := len(got); got[n-2] != c || got[n-1] != -c || got[n-3] != 0 {
		t.Fatalf("softcap saturation/zero: %v", got[n-3:])
	}
}
