package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
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
// exact product of the activations themselves. cuBLASLt (promptBLAS) is
// off here: its bits are its own (TestLtRowInvariance).
func TestPrecisionBF16MatchesRoundedInputs(t *testing.T) {
	g := backendOrSkip(t)
	defer g.SetPrecision(compute.PrecisionExact)
	defer func(on bool) { promptBLAS = on }(promptBLAS)
	promptBLAS = false
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

// TestLtRowInvariance protects cuBLASLt's bf16 prompt products (promptBLAS):
// with one algorithm planned a weight shape, a row's result has the same
// bits whatever the number of rows in the call, from one to long prompt
// chunks, on the published models' shapes and a tiny one; and it is close
// to the float64 product of the rounded operands.
func TestLtRowInvariance(t *testing.T) {
	g := backendOrSkip(t)
	defer func(on bool) { promptBLAS = on }(promptBLAS)
	promptBLAS = true
	defer g.SetPrecision(compute.PrecisionExact)
	r := rand.New(rand.NewPCG(41, 42))
	for _, s := range []struct{ N, K int }{
		{128, 64},     // a tiny preset's
		{2048, 1536},  // E2B attention
		{12288, 1536}, // E2B double-wide MLP up
		{1536, 12288}, // E2B double-wide MLP down
		{21504, 5376}, // 31B MLP up
		{5376, 21504}, // 31B MLP down
	} {
		t.Run(fmt.Sprintf("%dx%d", s.N, s.K), func(t *testing.T) {
			wv := randF32(r, s.N*s.K)
			w := weight(g, compute.BF16, wv, s.N, s.K)
			x1 := randF32(r, s.K)
			g.SetPrecision(compute.PrecisionBF16)
			n0 := g.ltN
			alone := g.ToF32(g.MatMul(g.FromF32(x1, 1, s.K), w))
			if g.ltN == n0 {
				t.Skipf("no cuBLASLt algorithm for %dx%d: the shape keeps matmul_tiled1", s.N, s.K)
			}
			// Against float64 on the rounded operands.
			var worst float64
			for n := 0; n < s.N; n += max(1, s.N/256) {
				var ref, mag float64
				for k := range s.K {
					p := float64(compute.RoundBF16(x1[k])) * float64(compute.RoundBF16(wv[n*s.K+k]))
					ref, mag = ref+p, mag+math.Abs(p)
				}
				worst = max(worst, math.Abs(float64(alone[n])-ref)/(1+mag))
			}
			if worst > 1e-5 {
				t.Errorf("differs from the float64 product by %.3g of the terms' magnitude", worst)
			}
			for _, M := range []int{2, 7, 16, 64, 100, 512, 513, 1100, 4096, 4099} {
				xs := randF32(r, M*s.K)
				row := r.IntN(M)
				copy(xs[row*s.K:], x1)
				got := g.ToF32(g.MatMul(g.FromF32(xs, M, s.K), w))
				if err := sameBits(got[row*s.N:(row+1)*s.N], alone); err != nil {
					t.Fatalf("M = %d: row %d differs from the product alone: %v", M, row, err)
				}
			}
			g.SetPrecision(compute.PrecisionExact)
		})
	}
	// Stacked weights (a layer's q, k and v, or gate and up) run apart,
	// each with its own algorithm, whatever the rows: two cuBLASLt products
	// (the count is the check: MatMuls then calls MatMul itself), whose
	// outputs are MatMul's on each weight.
	t.Run("stacked", func(t *testing.T) {
		const N1, N2, K = 512, 256, 1536
		whole := weight(g, compute.BF16, randF32(r, (N1+N2)*K), N1+N2, K)
		w1, w2 := g.Slice(whole, 0, N1), g.Slice(whole, N1, N1+N2)
		g.SetPrecision(compute.PrecisionBF16)
		defer g.SetPrecision(compute.PrecisionExact)
		for _, M := range []int{1, 20, 600} {
			x := g.FromF32(randF32(r, M*K), M, K)
			n0 := g.ltN
			got := compute.MatMuls(g, x, w1, w2)
			if g.ltN != n0+2 {
				t.Fatalf("M = %d: %d cuBLASLt products for two stacked weights, want 2", M, g.ltN-n0)
			}
			for i, w := range []*compute.Tensor{w1, w2} {
				if err := sameBits(g.ToF32(got[i]), g.ToF32(g.MatMul(x, w))); err != nil {
					t.Fatalf("M = %d, weight %d: %v", M, i, err)
				}
			}
		}
	})
}

// TestFlashAttention protects attn_flash, a bf16 prompt pass's attention
// (promptFlash): it runs at every query count; a query's result has the
// same bits whatever queries share its pass (a prompt's chunking) and
// whether its row's cache comes alone or in a table of rows
// (AttentionRows); and it is near the exact attention, over full caches
// and sliding rings, heads of 32 to 512 (two column blocks), with rows
// whose queries see no key.
func TestFlashAttention(t *testing.T) {
	g := backendOrSkip(t)
	defer g.SetPrecision(compute.PrecisionExact)
	if g.flashSmem == 0 {
		t.Skip("attn_flash cannot take its shared memory on this device: bf16 prompts keep the exact attention")
	}
	regs, _ := g.dev.FuncAttribute(g.k["attn_flash"], funcAttrNumRegs)
	local, _ := g.dev.FuncAttribute(g.k["attn_flash"], funcAttrLocalBytes)
	t.Logf("attn_flash: %d registers, %d bytes of local memory a thread (spills)", regs, local)
	r := rand.New(rand.NewPCG(51, 52))
	passes := []flashPass{
		{"tiny full causal", 1, 40, 40, 32, 4, 1, full(1, 40, 40, compute.Causal, 0), 0},
		{"sliding ring wrapped", 2, 100, 160, 64, 4, 2, ring(2, 100, 160, 1200, 128), 0},
		{"sliding 256-wide across tiles", 1, 130, 1200, 256, 4, 2, ring(1, 130, 1200, 1100, 1024), 0},
		{"global 512-wide", 2, 70, 700, 512, 8, 1, full(2, 70, 700, compute.Causal, 0), 0},
		{"384-wide: a second column group of 128", 1, 50, 200, 384, 2, 1, full(1, 50, 200, compute.Causal, 0), 0},
		{"no mask", 2, 20, 90, 64, 2, 2, full(2, 20, 90, compute.Bidirectional, 0), 0},
		{"keys out of sight", 1, 16, 64, 64, 2, 1, spans(16, 64, [][2]int{{0, 40}}), 0},
		{"slots without a key", 1, 16, 96, 64, 2, 1, holes(16, 96, 7), 0},
		{"values of 40 (half an mma pair)", 1, 24, 80, 64, 2, 1, full(1, 24, 80, compute.Causal, 0), 40},
		{"values of 264 (a second group of 8)", 1, 24, 80, 64, 2, 1, full(1, 24, 80, compute.Causal, 0), 264},
	}
	for _, p := range passes {
		t.Run(p.name, func(t *testing.T) {
			opt := p.opt(r)
			scale := 1 / math.Sqrt(float64(p.D))
			opt.Scale = float32(scale)
			if p.name == "keys out of sight" { // the queries sit past a window that hides every key
				opt.Window = 8
				for i := range opt.QueryPos {
					opt.QueryPos[i] = 60
				}
			}
			qh := randF32(r, p.B*p.L*p.Hq*p.D)
			k := g.FromF32(randF32(r, p.B*p.S*p.H*p.D), p.B, p.S, p.H, p.D)
			v := g.FromF32(randF32(r, p.B*p.S*p.H*p.Dv()), p.B, p.S, p.H, p.Dv())
			attend := func(l0, l1 int) []float32 { // queries l0..l1−1 of every row
				n := l1 - l0
				sub := make([]float32, 0, p.B*n*p.Hq*p.D)
				o := opt
				o.QueryPos = nil
				for b := range p.B {
					row := (b*p.L + l0) * p.Hq * p.D
					sub = append(sub, qh[row:row+n*p.Hq*p.D]...)
					if opt.QueryPos != nil {
						o.QueryPos = append(o.QueryPos, opt.QueryPos[b*p.L+l0:b*p.L+l1]...)
					}
				}
				return g.ToF32(g.Attention(g.FromF32(sub, p.B, n, p.Hq, p.D), k, v, o))
			}
			exact := attend(0, p.L)
			g.SetPrecision(compute.PrecisionBF16)
			n0 := g.flashN
			whole := attend(0, p.L)
			if g.flashN == n0 {
				t.Fatal("attn_flash did not run")
			}
			var worst float64
			for i := range whole {
				worst = max(worst, math.Abs(float64(whole[i]-exact[i]))/(1+math.Abs(float64(exact[i]))))
			}
			if worst > 3e-2 {
				t.Errorf("bf16 attention differs from the exact one by %.3g", worst)
			}
			if err := sameBits(whole, exact); err == nil && slices.ContainsFunc(exact, func(v float32) bool { return v != 0 }) {
				t.Error("bf16 attention has the exact attention's bits: it did not round")
			}
			if p.Dv() > flashW { // one column group a block: the same bits
				flashMaxGroups = 1
				one := attend(0, p.L)
				flashMaxGroups = 2
				if err := sameBits(one, whole); err != nil {
					t.Fatalf("one column group a block against two: %v", err)
				}
			}
			row := p.Hq * p.Dv()
			for _, cut := range [][2]int{{0, 1}, {0, p.L / 3}, {p.L / 3, p.L}, {p.L - 1, p.L}} {
				if cut[1] <= cut[0] {
					continue
				}
				got := attend(cut[0], cut[1])
				n := (cut[1] - cut[0]) * row
				for b := range p.B {
					want := whole[(b*p.L+cut[0])*row : (b*p.L+cut[0])*row+n]
					if err := sameBits(got[b*n:(b+1)*n], want); err != nil {
						t.Fatalf("queries %d..%d of row %d alone: %v", cut[0], cut[1]-1, b, err)
					}
				}
			}
			g.SetPrecision(compute.PrecisionExact)
		})
	}
	t.Run("rows of several caches", func(t *testing.T) {
		const L, Hq, Hkv, D = 3, 4, 2, 64
		var kv []compute.AttentionRow
		var qpos []int32
		// A full cache of 50 keys, one of 300, and a ring of 160 slots
		// holding positions 1000-1159: rows whose keys start at other
		// positions, laid out from their own first tiles.
		for _, c := range []struct{ slots, lo, hi int }{{50, 0, 49}, {300, 0, 299}, {160, 1000, 1159}} {
			a := compute.AttentionRow{K: g.FromF32(randF32(r, c.slots*Hkv*D), c.slots, Hkv, D), V: g.FromF32(randF32(r, c.slots*Hkv*D), c.slots, Hkv, D)}
			if c.lo > 0 {
				a.KeyPos = make([]int32, c.slots)
				for p := c.lo; p <= c.hi; p++ {
					a.KeyPos[p%c.slots] = int32(p)
				}
				a.KeyStart = (c.hi + 1) % c.slots
			}
			kv = append(kv, a)
			qpos = append(qpos, seq(c.hi-L+1, L)...)
		}
		q := g.FromF32(randF32(r, len(kv)*L*Hq*D), len(kv), L, Hq, D)
		opt := compute.AttentionOptions{Scale: 0.125, Mask: compute.Causal, Window: 128, QueryPos: qpos}
		g.SetPrecision(compute.PrecisionBF16)
		want := g.ToF32(compute.AttendRowsApart(g, q, kv, opt))
		n0, r0 := g.flashN, g.attnRowsN
		got := g.ToF32(g.AttentionRows(q, kv, opt))
		g.SetPrecision(compute.PrecisionExact)
		if g.attnRowsN == r0 || g.flashN == n0 {
			t.Fatal("the rows did not run as one attn_flash pass")
		}
		if err := sameBits(got, want); err != nil {
			t.Fatal(err)
		}
	})
}

// holes is a cache of S slots holding positions 0..S−1 save every n-th,
// which holds none, queried causally at its last L positions.
func holes(L, S, n int) func(*rand.Rand) compute.AttentionOptions {
	return func(*rand.Rand) compute.AttentionOptions {
		o := compute.AttentionOptions{Mask: compute.Causal, KeyPos: make([]int32, S), QueryPos: seq(S-L, L)}
		for s := range S {
			o.KeyPos[s] = int32(s)
			if s%n == n-1 {
				o.KeyPos[s] = -1
			}
		}
		return o
	}
}

// flashPass is one of TestFlashAttention's attention passes.
type flashPass struct {
	name     string
	B, L, S  int
	D, Hq, H int // head width, query and key heads
	opt      func(*rand.Rand) compute.AttentionOptions
	dv       int // value width (0: D)
}

// Dv is the pass's value width.
func (p flashPass) Dv() int {
	if p.dv > 0 {
		return p.dv
	}
	return p.D
}
