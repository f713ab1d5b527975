package cpu

import (
	"fmt"
	"math"
	"testing"

	"tandem/compute"
)

// refRoPE applies the documented formula in float64 from the float32 angle
// (the angle is specified to be computed in float32).
func refRoPE(x []float32, pos []int32, H, d int, r *compute.RoPE) (want, tol []float64) {
	want, tol = make([]float64, len(x)), make([]float64, len(x))
	half := r.Dim / 2
	for t, p := range pos {
		for h := range H {
			o := (t*H + h) * d
			for j := range d {
				want[o+j] = float64(x[o+j])
			}
			for j, f := range r.InvFreq {
				a := float64(float32(p) * f)
				c, s := math.Cos(a), math.Sin(a)
				x0, x1 := float64(x[o+j]), float64(x[o+j+half])
				want[o+j] = x0*c - x1*s
				want[o+j+half] = x1*c + x0*s
				tl := 4 * eps32 * (math.Abs(x0) + math.Abs(x1))
				tol[o+j], tol[o+j+half] = tl, tl
			}
		}
	}
	return want, tol
}

func TestRoPEMatchesFloat64Reference(t *testing.T) {
	b := New(2)
	for _, c := range []struct {
		name string
		H, d int
		r    *compute.RoPE
		pos  []int32
	}{
		{"default_d2", 1, 2, compute.DefaultRoPE(2, 10000), []int32{0, 1, 5}},
		{"default_d6", 3, 6, compute.DefaultRoPE(6, 10000), []int32{3, 17}},
		{"default_d64", 2, 64, compute.DefaultRoPE(64, 10000), []int32{0, 1, 1000, 100000}},
		{"default_d256", 4, 256, compute.DefaultRoPE(256, 10000), []int32{7, 32767, 131071}},
		{"proportional_d512", 2, 512, compute.ProportionalRoPE(512, 1e6, 0.25), []int32{2, 9000}},
		{"proportional_d20", 1, 20, compute.ProportionalRoPE(20, 1e4, 0.5), []int32{1, 2, 3}},
		{"partial_rotary", 2, 12, compute.DefaultRoPE(8, 10000), []int32{4, 40}},
	} {
		t.Run(c.name, func(t *testing.T) {
			T := len(c.pos)
			x := randVec(newRand(uint64(c.d)), T*c.H*c.d, 2)
			got := b.ToF32(b.RoPE(b.FromF32(x, T, c.H, c.d), c.pos, c.r))
			want, tol := refRoPE(x, c.pos, c.H, c.d, c.r)
			requireClose(t, "RoPE", got, want, tol)
		})
	}
}

func TestProportionalRoPETable(t *testing.T) {
	r := compute.ProportionalRoPE(512, 1e6, 0.25)
	nonzero := 0
	for j, f := range r.InvFreq {
		if f != 0 {
			nonzero++
			if j >= 64 {
				t.Errorf("InvFreq[%d] = %v, want 0 beyond the 64 rotated pairs", j, f)
			}
		}
	}
	if len(r.InvFreq) != 256 || nonzero != 64 {
		t.Fatalf("%d frequencies, %d nonzero; want 256 and 64", len(r.InvFreq), nonzero)
	}
	if want := float32(math.Pow(1e6, -2.0/512)); r.InvFreq[1] != want {
		t.Fatalf("InvFreq[1] = %v, want %v (exponent over the full dim 512)", r.InvFreq[1], want)
	}
	if r.InvFreq[0] != 1 {
		t.Fatalf("InvFreq[0] = %v, want 1", r.InvFreq[0])
	}
}

// Only the first floor(f·d/2) pairs rotate; the rest must come out bit for
// bit as they went in, even -0, infinities and NaN (which x·1 − y·0 would
// not preserve).
func TestRoPEPassThroughDimsAreBitIdentical(t *testing.T) {
	b := New(1)
	const d, H = 16, 2
	r := compute.ProportionalRoPE(d, 1e4, 0.25) // rotated pairs: floor(0.25·16/2) = 2
	pos := []int32{0, 3, 77}
	x := randVec(newRand(9), len(pos)*H*d, 1)
	specials := []float32{float32(math.Copysign(0, -1)), float32(math.Inf(1)), float32(math.NaN()), float32(math.Inf(-1)), 1e-45}
	for i := range x {
		if j := i % d; j != 0 && j != 1 && j != 8 && j != 9 {
			x[i] = specials[i%len(specials)]
		}
	}
	got := b.ToF32(b.RoPE(b.FromF32(x, len(pos), H, d), pos, r))
	for i := range x {
		if j := i % d; j != 0 && j != 1 && j != 8 && j != 9 &&
			math.Float32bits(got[i]) != math.Float32bits(x[i]) {
			t.Fatalf("pass-through element %d (dim %d): %v, want %v bit for bit", i, j, got[i], x[i])
		}
	}
	// Rotated dims of a nonzero position must actually change.
	o := 2 * H * d // t=2 (pos 77), head 0
	if got[o] == x[o] || got[o+8] == x[o+8] {
		t.Fatalf("pair 0 at position 77 did not rotate")
	}
}

func TestRoPERowsAreBatchInvariant(t *testing.T) {
	b := New(4)
	const T, H, d = 9, 4, 256
	r := compute.DefaultRoPE(d, 10000)
	pos := []int32{5, 6, 7, 8, 9, 10, 11, 500, 4096}
	x := b.FromF32(randVec(newRand(2), T*H*d, 1), T, H, d)
	all := b.ToF32(b.RoPE(x, pos, r))
	for t0 := range T {
		requireSameBits(t, fmt.Sprintf("row %d", t0), all[t0*H*d:(t0+1)*H*d], b.ToF32(b.RoPE(b.Slice(x, t0, t0+1), pos[t0:t0+1], r)))
	}
	// [B, L, H, d] with B·L positions is the same computation.
	requireSameBits(t, "4-D", b.ToF32(b.RoPE(x.Reshape(3, 3, H, d), pos, r)), all)
}

func TestRoPERejectsMisuse(t *testing.T) {
	b := New(1)
	x := b.Zeros(compute.F32, 2, 1, 8)
	mustPanic(t, "position count", "positions", func() { b.RoPE(x, []int32{1}, compute.DefaultRoPE(8, 1e4)) })
	mustPanic(t, "table wider than head", "RoPE", func() { b.RoPE(x, []int32{1, 2}, compute.DefaultRoPE(10, 1e4)) })
}
