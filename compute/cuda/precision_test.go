package cuda

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"tandem/compute"
)

// TestPrecisionBF16MatchesRoundedInputs pins compute.PrecisionBF16 on the
// GPU: every product (MatMul for every M, stacked MatMuls, the gated
// products, f32 weights, a K the tiled kernel cannot take) equals, bit for
// bit, the exact product of the activations rounded to bf16 (the kernels
// matmul_tiled1 does not serve get the rounded activations, whose mid and
// lo parts are zero); a row's result does not depend on M; aligned bf16
// weights really take matmul_tiled1 (matmul_tiled1w beyond 64 rows); and the result differs from the
// exact product of the activations themselves.
func TestPrecisionBF16MatchesRoundedInputs(t *testing.T) {
	g := backendOrSkip(t)
	defer g.SetPrecision(compute.PrecisionExact)
	r := rand.New(rand.NewPCG(31, 32))
	round := func(xs []float32) []float32 {
		out := make([]float32, len(xs))
		for i, v := range xs {
			out[i] = compute.RoundBF16(v)
		}
		return out
	}
	for _, s := range []struct {
		N, K  int
		dt    compute.DType
		tiled bool // matmul_tiled1 takes it
	}{
		{300, 1536, compute.BF16, true},
		{2048, 5376, compute.BF16, true}, // K split
		{41, 2053, compute.BF16, false},  // odd K: the rows and mma kernels on rounded inputs
		{96, 200, compute.F32, false},    // the warp kernel on rounded inputs
	} {
		w := weight(g, s.dt, randF32(r, s.N*s.K), s.N, s.K)
		var row0 []float32 // row 0's bf16 result at M = 1
		for _, M := range []int{1, 3, 5, 8, 16, 17, 64, 130} {
			t.Run(fmt.Sprintf("%dx%d_%v/M%d", s.N, s.K, s.dt, M), func(t *testing.T) {
				xs := randF32(r, M*s.K)
				if row0 != nil {
					copy(xs, row0[:s.K])
				}
				exact := g.ToF32(g.MatMul(g.FromF32(xs, M, s.K), w))
				want := g.ToF32(g.MatMul(g.FromF32(round(xs), M, s.K), w))
				n0, w0 := g.tiled1N, g.tiled1wN
				g.SetPrecision(compute.PrecisionBF16)
				got := g.ToF32(g.MatMul(g.FromF32(xs, M, s.K), w))
				g.SetPrecision(compute.PrecisionExact)
				if err := sameBits(got, want); err != nil {
					t.Fatalf("bf16 product against the rounded activations' exact one: %v", err)
				}
				if err := sameBits(got, exact); err == nil {
					t.Fatal("the bf16 product equals the exact one: the activations were not rounded")
				}
				if ran := g.tiled1N > n0; ran != s.tiled {
					t.Fatalf("matmul_tiled1 ran: %v, want %v", ran, s.tiled)
				}
				if wide := g.tiled1wN > w0; wide != (s.tiled && M > 64) {
					t.Fatalf("matmul_tiled1w ran: %v, want %v", wide, s.tiled && M > 64)
				}
				if row0 == nil {
					row0 = append(xs[:s.K:s.K], got...)
				} else if err := sameBits(got[:s.N], row0[s.K:]); err != nil {
					t.Fatalf("row 0 differs from its product at M = 1: %v", err)
				}
			})
		}
	}
	t.Run("stacked and gated", func(t *testing.T) {
		const M, N, K = 20, 256, 512
		whole := weight(g, compute.BF16, randF32(r, 2*N*K), 2*N, K)
		gate, up := g.Slice(whole, 0, N), g.Slice(whole, N, 2*N)
		xs := randF32(r, M*K)
		x, xr := g.FromF32(xs, M, K), g.FromF32(round(xs), M, K)
		wantGU := compute.GeluMatMuls(g, xr, gate, up)
		wantS := compute.MatMuls(g, xr, gate, up)
		by := g.FromF32(randF32(r, M*N), M, N)
		wantBy := compute.GeluMatMulBy(g, xr, gate, by)
		g.SetPrecision(compute.PrecisionBF16)
		gotGU := compute.GeluMatMuls(g, x, gate, up)
		gotS := compute.MatMuls(g, x, gate, up)
		gotBy := compute.GeluMatMulBy(g, x, gate, by)
		g.SetPrecision(compute.PrecisionExact)
		for _, c := range []struct {
			name      string
			got, want *compute.Tensor
		}{{"GeluMatMuls", gotGU, wantGU}, {"MatMuls gate", gotS[0], wantS[0]}, {"MatMuls up", gotS[1], wantS[1]}, {"GeluMatMulBy", gotBy, wantBy}} {
			if err := sameBits(g.ToF32(c.got), g.ToF32(c.want)); err != nil {
				t.Errorf("%s: %v", c.name, err)
			}
		}
	})
}
