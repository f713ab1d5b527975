package cuda

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"tandem/compute"
	"tandem/compute/cpu"
)

var (
	gpuOnce sync.Once
	gpu     *Backend
	gpuErr  error
)

// backendOrSkip returns the shared GPU backend (kernels compile once per
// test binary), skipping where no driver exists.
func backendOrSkip(t testing.TB) *Backend {
	t.Helper()
	gpuOnce.Do(func() { gpu, gpuErr = New(0) })
	if errors.Is(gpuErr, ErrNoDriver) {
		t.Skipf("no GPU here: %v", gpuErr)
	}
	if gpuErr != nil {
		t.Fatal(gpuErr)
	}
	return gpu
}

func randF32(r *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	return x
}

// weight stores host values as a dt weight on backend be.
func weight(be compute.Backend, dt compute.DType, x []float32, shape ...int) *compute.Tensor {
	raw := make([]byte, len(x)*dt.Size())
	for i, v := range x {
		switch dt {
		case compute.F32:
			u := math.Float32bits(v)
			raw[4*i], raw[4*i+1], raw[4*i+2], raw[4*i+3] = byte(u), byte(u>>8), byte(u>>16), byte(u>>24)
		case compute.BF16, compute.F16:
			h := compute.F32ToBF16(v)
			if dt == compute.F16 {
				h = compute.F32ToF16(v)
			}
			raw[2*i], raw[2*i+1] = byte(h), byte(h>>8)
		}
	}
	t, err := be.Weight(dt, shape, raw)
	if err != nil {
		panic(err)
	}
	return t
}

// opCase runs one op on a backend; inputs come from a seeded generator so
// both backends see the same values.
type opCase struct {
	name string
	tol  float64 // max |Δ| / (1 + |cpu|); 0 means bit-identical
	run  func(be compute.Backend, r *rand.Rand) []*compute.Tensor
}

func attnCase(name string, B, L, Hq, Hkv, S, D, Dv int, opt func(r *rand.Rand) compute.AttentionOptions) opCase {
	return opCase{name: name, tol: 2e-5, run: func(be compute.Backend, r *rand.Rand) []*compute.Tensor {
		q := be.FromF32(randF32(r, B*L*Hq*D), B, L, Hq, D)
		k := be.FromF32(randF32(r, B*S*Hkv*D), B, S, Hkv, D)
		v := be.FromF32(randF32(r, B*S*Hkv*Dv), B, S, Hkv, Dv)
		return []*compute.Tensor{be.Attention(q, k, v, opt(r))}
	}}
}

// spans describes one ring buffer of S slots a row, row b holding the
// positions rows[b][0]..rows[b][1] (none where the second is smaller),
// each queried at its last L positions (from 0 for an empty row).
func spans(L, S int, rows [][2]int) func(*rand.Rand) compute.AttentionOptions {
	return func(*rand.Rand) compute.AttentionOptions {
		B := len(rows)
		o := compute.AttentionOptions{Mask: compute.Causal, KeyPos: make([]int32, B*S), KeyStart: make([]int, B)}
		for bi, r := range rows {
			for s := range S {
				o.KeyPos[bi*S+s] = -1
			}
			for p := r[0]; p <= r[1]; p++ {
				o.KeyPos[bi*S+p%S] = int32(p)
			}
			o.KeyStart[bi] = max(0, r[0]) % S
			for l := range L {
				o.QueryPos = append(o.QueryPos, int32(max(0, r[1]-L+1+l)))
			}
		}
		return o
	}
}

// ring describes B ring buffers of S slots holding positions first..last
// (oldest at slot first % S), queried at the last L positions.
func ring(B, L, S, last, window int) func(*rand.Rand) compute.AttentionOptions {
	return func(*rand.Rand) compute.AttentionOptions {
		o := compute.AttentionOptions{Mask: compute.Causal, Window: window, KeyPos: make([]int32, B*S), KeyStart: make([]int, B)}
		for bi := range B {
			first := max(0, last-S+1)
			for s := range S {
				o.KeyPos[bi*S+s] = -1
			}
			for p := first; p <= last; p++ {
				o.KeyPos[bi*S+p%S] = int32(p)
			}
			o.KeyStart[bi] = first % S
			for l := range L {
				o.QueryPos = append(o.QueryPos, int32(last-L+1+l))
			}
		}
		return o
	}
}

func full(B, L, S int, mask compute.Mask, window int) func(*rand.Rand) compute.AttentionOptions {
	return func(*rand.Rand) compute.AttentionOptions {
		o := compute.AttentionOptions{Mask: mask, Window: window, KeyLen: make([]int, B)}
		for bi := range B {
			o.KeyLen[bi] = S - bi // rows of different lengths
			for l := range L {
				o.QueryPos = append(o.QueryPos, int32(S-bi-L+l))
			}
		}
		return o
	}
}

// prefix fills each row's first lens[b] slots of a cache far larger than
// that (positions 0..lens[b]−1; a row of 0 has no keys) and queries its
// last L positions: the kernels must stop at the last key, not at S.
func prefix(L int, lens ...int) func(*rand.Rand) compute.AttentionOptions {
	return func(*rand.Rand) compute.AttentionOptions {
		o := compute.AttentionOptions{Mask: compute.Causal, KeyLen: lens}
		for _, n := range lens {
			for l := range L {
				o.QueryPos = append(o.QueryPos, int32(max(0, n-L+l)))
			}
		}
		return o
	}
}

var opCases = []opCase{
	{"MatMul/f32", 1e-5, func(be compute.Backend, r *rand.Rand) []*compute.Tensor {
		return []*compute.Tensor{be.MatMul(be.FromF32(randF32(r, 5*100), 5, 100), weight(be, compute.F32, randF32(r, 37*100), 37, 100))}
	}},
	{"MatMul/bf16-odd-K", 1e-5, func(be compute.Backend, r *rand.Rand) []*compute.Tensor {
		return []*compute.Tensor{be.MatMul(be.FromF32(randF32(r, 17*301), 17, 301), weight(be, compute.BF16, randF32(r, 41*301), 41, 301))}
	}},
	{"MatMul/bf16", 2e-4, func(be compute.Backend, r *rand.Rand) []*compute.Tensor {
		return []*compute.Tensor{be.MatMul(be.FromF32(randF32(r, 3*1536), 1, 3, 1536), weight(be, compute.BF16, randF32(r, 64*1536), 64, 1536))}
	}},
	{"MatMul/f16", 1e-5, func(be compute.Backend, r *rand.Rand) []*compute.Tensor {
		return []*compute.Tensor{be.MatMul(be.FromF32(randF32(r, 2*64), 2, 64), weight(be, compute.F16, randF32(r, 9*64), 9, 64))}
	}},
	{"Gather/bf16", 0, func(be compute.Backend, r *rand.Rand) []*compute.Tensor {
		return []*compute.Tensor{be.Gather(weight(be, compute.BF16, randF32(r, 50*33), 50, 33), []int32{3, 0, 49, 3})}
	}},
	{"AddRows", 0, func(be compute.Backend, r *rand.Rand) []*compute.Tensor {
		dst := be.FromF32(randF32(r, 4*300), 4, 300)
		be.AddRows(dst, be.FromF32(randF32(r, 5*300), 5, 300), []int32{2, 0, 2, 3, 2}, []float32{0.5, -1, 2, 0.25, 3})
		dst2 := be.FromF32(randF32(r, 2*7), 2, 7)
		be.AddRows(dst2, be.FromF32(randF32(r, 2*7), 2, 7), []int32{1, 1}, nil)
		return []*compute.Tensor{dst, dst2}
	}},
	{"Concat", 0, func(be compute.Backend, r *rand.Rand) []*compute.Tensor {
		return []*compute.Tensor{be.Concat(be.FromF32(randF32(r, 6*5), 2, 3, 5), be.FromF32(randF32(r, 6*4), 2, 3, 4))}
	}},
	{"Add-Mul", 0, func(be compute.Backend, r *rand.Rand) []*compute.Tensor {
		x := be.FromF32(randF32(r, 3*70), 3, 70)
		return []*compute.Tensor{
			be.Add(x, be.FromF32(randF32(r, 3*70), 3, 70)),
			be.Mul(x, weight(be, compute.BF16, randF32(r, 70), 70)),
			be.Add(x, be.FromF32([]float32{0.3}, 1)),
			be.Mul(x, weight(be, compute.F16, []float32{1.5}, 1)),
			be.Scale(x, 0.125),
		}
	}},
	{"Gelu-Softcap", 1e-7, func(be compute.Backend, r *rand.Rand) []*compute.Tensor {
		x, y := be.FromF32(randF32(r, 1000), 10, 100), be.FromF32(randF32(r, 1000), 10, 100)
		xo, yo := be.FromF32(randF32(r, 990), 10, 99), be.FromF32(randF32(r, 990), 10, 99) // not in 4-wide pieces: gelu_mul's other loop
		return []*compute.Tensor{be.GeluTanh(x), be.GeluMul(x, y), be.GeluMul(xo, yo), be.Softcap(be.Scale(x, 40), 30)}
	}},
	{"RMSNorm", 1e-6, func(be compute.Backend, r *rand.Rand) []*compute.Tensor {
		var out []*compute.Tensor
		for _, D := range []int{1536, 2816, 5376} { // 256, 512 and 1024 threads a row
			x := be.FromF32(randF32(r, 7*D), 7, D)
			out = append(out, be.RMSNorm(x, weight(be, compute.BF16, randF32(r, D), D), 1e-6), be.RMSNorm(x, nil, 1e-6))
		}
		return out
	}},
	{"RoPE", 1e-6, func(be compute.Backend, r *rand.Rand) []*compute.Tensor {
		x := be.FromF32(randF32(r, 3*4*64), 3, 4, 64)
		pos := []int32{0, 17, 40000}
		return []*compute.Tensor{be.RoPE(x, pos, compute.DefaultRoPE(64, 10000)), be.RoPE(x, pos, compute.ProportionalRoPE(64, 1e6, 0.25)), be.RoPE(x, pos, compute.DefaultRoPE(32, 10000))}
	}},
	{"Softmax", 1e-7, func(be compute.Backend, r *rand.Rand) []*compute.Tensor {
		return []*compute.Tensor{be.Softmax(be.FromF32(randF32(r, 5*3000), 5, 3000))}
	}},
	{"Argmax-TopK", 0, func(be compute.Backend, r *rand.Rand) []*compute.Tensor {
		x := randF32(r, 4*2000)
		x[10], x[1500] = 9, 9             // a tie: the lower index wins
		x[2000+7] = float32(math.NaN())   // NaN ranks first
		x[3*2000+5], x[3*2000+6] = 50, 50 // ties inside top-k
		t := be.FromF32(x, 4, 2000)
		v, i := be.TopK(t, 6)
		return []*compute.Tensor{be.Argmax(t), v, i}
	}},
	{"Argmax-TopK/wide", 0, func(be compute.Backend, r *rand.Rand) []*compute.Tensor {
		// Rows wide enough for the two-pass argmax (a vocabulary), with a
		// partial last slice, ties across slices, NaNs and signed zeros.
		const R, D = 5, 3*4096 + 16384 + 77
		x := randF32(r, R*D)
		x[100], x[9000], x[D-1] = 9, 9, 9 // a tie across slices: the lower index wins
		x[D+20000] = float32(math.NaN())  // NaN ranks first
		x[D+30000] = float32(math.NaN())
		for j := range D { // a row of zeros but one −0 late and one +0 early
			x[2*D+j] = -1
		}
		x[2*D+25000], x[2*D+5000] = float32(math.Copysign(0, -1)), 0
		x[3*D+D-1] = 50 // the best in the partial last slice
		for j := range D {
			x[4*D+j] = float32(math.NaN())
		}
		t := be.FromF32(x, R, D)
		v, i := be.TopK(t, 1)
		return []*compute.Tensor{be.Argmax(t), v, i}
	}},
	{"TopK/vocabulary", 0, func(be compute.Backend, r *rand.Rand) []*compute.Tensor {
		// topk_sort's passes: a vocabulary's row (three passes, a partial
		// last tile), ties across tiles and at the cut, NaNs, signed zeros,
		// −Inf, a row of equal values and a row of NaN; k from 2 to the
		// largest the sorts take, and one past it (topk's k passes).
		const R, D = 5, 262144 + 77
		x := randF32(r, R*D)
		x[100], x[9000], x[D-1] = 9, 9, 9 // a tie across tiles: the lower index first
		for j := range 70 {               // ties at every cut from 2 to 64
			x[D+1000+j*3000] = 7
		}
		x[D+20000], x[D+2] = float32(math.NaN()), float32(math.NaN()) // NaN ranks first
		for j := range D {
			x[2*D+j] = float32(math.Inf(-1))
		}
		x[2*D+5000], x[2*D+25000], x[2*D+7] = float32(math.Copysign(0, -1)), 0, -1 // −0 ties +0: the lower index first
		for j := range D {
			x[3*D+j], x[4*D+j] = 0.5, float32(math.NaN())
		}
		t := be.FromF32(x, R, D)
		var out []*compute.Tensor
		for _, k := range []int{2, 65, 1024, 1025} {
			v, i := be.TopK(t, k)
			out = append(out, v, i)
		}
		v, i := be.TopK(be.FromF32(x[:3*2049], 3, 2049), 1000) // one pass after the first, two tiles
		return append(out, v, i)
	}},
	{"ArgmaxKeyed-GatherI32", 0, func(be compute.Backend, r *rand.Rand) []*compute.Tensor {
		const R, D = 5, 1300
		x, keys := randF32(r, R*D), make([]int32, R*D)
		for i := range keys {
			keys[i] = int32(r.IntN(1 << 20))
		}
		x[3], x[900], keys[3], keys[900] = 9, 9, 70, 60 // a tie: the smaller key wins
		x[D+4] = float32(math.NaN())                    // NaN never wins
		for j := range D {                              // a row of NaN: its first key
			x[2*D+j] = float32(math.NaN())
		}
		x[3*D+1], x[3*D+2], keys[3*D+1], keys[3*D+2] = 0, float32(math.Copysign(0, -1)), 5, 4 // −0 ties +0
		for j := range D {
			if j != 1 && j != 2 {
				x[3*D+j] = -1
			}
		}
		table := be.FromI32(keys[:40*7], 40, 7)
		return []*compute.Tensor{be.ArgmaxKeyed(be.FromF32(x, R, D), be.FromI32(keys, R, D)),
			be.Gather(table, []int32{39, 0, 5}), be.GatherAt(table, be.FromI32([]int32{2, 2, 38}, 3))}
	}},
	{"Copy", 0, func(be compute.Backend, r *rand.Rand) []*compute.Tensor {
		src := be.FromF32(randF32(r, 3*20), 3, 20)
		bf, h, f := be.Zeros(compute.BF16, 5, 20), be.Zeros(compute.F16, 5, 20), be.Zeros(compute.F32, 5, 20)
		be.Copy(bf, 1, src)
		be.Copy(h, 2, src)
		be.Copy(f, 0, bf)
		be.Copy(f, 3, be.Slice(src, 1, 3))
		// Same-dtype copies: F32 and I32 as words, BF16 at an odd offset
		// by the copy engine.
		ids := be.Zeros(compute.I32, 4, 3)
		be.Copy(ids, 1, be.FromI32([]int32{7, -8, 9, 10, 11, 1 << 30}, 2, 3))
		bsrc, bf2 := be.Zeros(compute.BF16, 3, 3), be.Zeros(compute.BF16, 7, 3)
		be.Copy(bsrc, 0, be.FromF32(randF32(r, 9), 3, 3))
		be.Copy(bf2, 3, bsrc)                 // 18 bytes at byte 18
		be.Copy(bf2, 0, be.Slice(bsrc, 1, 3)) // 12 bytes at byte 0
		return []*compute.Tensor{bf, h, f, be.Index(f, 4), ids, bf2}
	}},
	attnCase("Attention/full-causal-gqa", 2, 3, 8, 2, 40, 64, 64, full(2, 3, 40, compute.Causal, 0)),
	attnCase("Attention/bidirectional-window", 1, 4, 4, 4, 30, 32, 48, full(1, 4, 30, compute.Bidirectional, 7)),
	attnCase("Attention/ring", 2, 2, 4, 1, 20, 32, 32, ring(2, 2, 20, 57, 16)),
	attnCase("Attention/long-multi-split", 1, 2, 2, 1, 2600, 256, 256, full(1, 2, 2600, compute.Causal, 0)),
	attnCase("Attention/head-512", 1, 1, 2, 1, 9, 512, 512, full(1, 1, 9, compute.Causal, 0)),
	attnCase("Attention/keys-short-of-capacity", 3, 2, 4, 2, 2600, 64, 64, prefix(2, 100, 0, 1030)),
}

func TestOpsMatchCPU(t *testing.T) {
	g := backendOrSkip(t)
	c := cpu.New(0)
	for _, tc := range opCases {
		t.Run(tc.name, func(t *testing.T) {
			want := tc.run(c, rand.New(rand.NewPCG(1, 2)))
			got := tc.run(g, rand.New(rand.NewPCG(1, 2)))
			for i := range want {
				if !compute.SameShape(want[i].Shape(), got[i].Shape()) || want[i].DType() != got[i].DType() {
					t.Fatalf("output %d: %v, want %v", i, got[i], want[i])
				}
				w, gg := host(c, want[i]), host(g, got[i])
				worst, at := 0.0, -1
				for j := range w {
					if math.IsNaN(w[j]) && math.IsNaN(gg[j]) || w[j] == gg[j] { // equal infinities too
						continue
					}
					d := math.Abs(w[j]-gg[j]) / (1 + math.Abs(w[j]))
					if d > worst || math.IsNaN(d) {
						worst, at = d, j
					}
				}
				if worst > tc.tol || (tc.tol == 0 && worst != 0) || math.IsNaN(worst) {
					t.Errorf("output %d: element %d = %v, CPU %v (rel %.3g > %.3g)", i, at, gg[at], w[at], worst, tc.tol)
				}
			}
		})
	}
}

// host reads any tensor as float64s (I32 values converted).
func host(be compute.Backend, t *compute.Tensor) []float64 {
	var out []float64
	if t.DType() == compute.I32 {
		for _, v := range be.ToI32(t) {
			out = append(out, float64(v))
		}
		return out
	}
	for _, v := range be.ToF32(t) {
		out = append(out, float64(v))
	}
	return out
}

// TestBatchInvariance checks the property verify passes rely on: a row's
// matmul and a query's attention have the same bits computed alone or
// with others, with extra keys beyond its position, and in a ring buffer
// that wrapped elsewhere.
func TestBatchInvariance(t *testing.T) {
	g := backendOrSkip(t)
	r := rand.New(rand.NewPCG(3, 4))
	// Rows 1..40 cover both kernel variants (up to 16 rows and more); a
	// row alone (at tile row 0) must equal itself at any place in a batch.
	const rows = 40
	for _, K := range []int{1536, 2048 + 5, 64} {
		for _, dt := range []compute.DType{compute.BF16, compute.F32} {
			w := weight(g, dt, randF32(r, 300*K), 300, K)
			xs := randF32(r, rows*K)
			all := g.ToF32(g.MatMul(g.FromF32(xs, rows, K), w))
			for M := 1; M <= rows; M++ {
				got := g.ToF32(g.MatMul(g.FromF32(xs[:M*K], M, K), w))
				if err := sameBits(got, all[:M*300]); err != nil {
					t.Fatalf("MatMul %v K=%d: M=%d differs from M=%d: %v", dt, K, M, rows, err)
				}
			}
			for i := range rows {
				alone := g.ToF32(g.MatMul(g.FromF32(xs[i*K:(i+1)*K], 1, K), w))
				if err := sameBits(alone, all[i*300:(i+1)*300]); err != nil {
					t.Fatalf("MatMul %v K=%d: row %d alone differs from row %d of %d: %v", dt, K, i, i, rows, err)
				}
			}
		}
	}

	// Attention: query at position p alone (decode: keys 0..p) against the
	// same query inside a verify pass (keys 0..p+L-1, queries p..p+L-1),
	// with the per-query kernels and with the query-tiled ones (L = 11
	// leaves a partial tile), for head dimensions on and off the vector path.
	// A scratch budget of 1 byte or 150 KiB makes the verify pass go
	// through in query groups of one and of two or three.
	// The tiled values kernel runs with one, two and four value columns a
	// thread (attnTiledCols; D = 42 takes two, or one where four were asked).
	const Hq, Hkv = 4, 2
	defer func(on bool, budget, min, cols int) {
		tiledAttention, attnScratchBytes, attnTileMin, attnTiledCols = on, budget, min, cols
	}(tiledAttention, attnScratchBytes, attnTileMin, attnTiledCols)
	attnTileMin = 2 // tile every group of two queries or more
	for _, c := range []struct {
		tiled      bool
		budget     int
		cols, want int // attnTiledCols, and the columns a thread D = 64 and 40 must get (42 takes 2 or 1)
	}{{false, attnScratchBytes, 1, 0}, {true, attnScratchBytes, 1, 1}, {false, 1, 1, 0}, {true, 150 << 10, 1, 1},
		{true, attnScratchBytes, 2, 2}, {true, attnScratchBytes, 4, 4}, {true, 150 << 10, 4, 4}} {
		tiledAttention, attnScratchBytes, attnTiledCols = c.tiled, c.budget, c.cols
		tiled := c.tiled
		before := g.tiledColsN[c.want]
		for _, D := range []int{64, 40, 42} {
			for _, p := range []int{5, 1023, 1024, 3000} {
				const L = 11
				S := p + L
				ks, vs := randF32(r, S*Hkv*D), randF32(r, S*Hkv*D)
				qs := randF32(r, L*Hq*D)
				k, v := g.FromF32(ks, S, Hkv, D), g.FromF32(vs, S, Hkv, D)
				verify := g.ToF32(g.Attention(g.FromF32(qs, L, Hq, D), k, v, compute.AttentionOptions{
					Mask: compute.Causal, QueryPos: seq(p, L)}))
				for l := range L {
					alone := g.ToF32(g.Attention(g.FromF32(qs[l*Hq*D:(l+1)*Hq*D], 1, Hq, D),
						g.Slice(k, 0, p+l+1), g.Slice(v, 0, p+l+1), compute.AttentionOptions{Mask: compute.Causal, QueryPos: seq(p+l, 1)}))
					if err := sameBits(alone, verify[l*Hq*D:(l+1)*Hq*D]); err != nil {
						t.Fatalf("attention (tiled %v, %d columns a thread, scratch budget %d, D=%d) at position %d: decode and verify differ: %v",
							tiled, c.cols, c.budget, D, p+l, err)
					}
				}
			}
		}
		if c.want > 0 && g.tiledColsN[c.want] == before {
			t.Fatalf("attention (tiled, %d columns a thread asked): attn_values_tiled never ran with %d", c.cols, c.want)
		}
	}

	// Sliding window in rings of two capacities, wrapped at different slots.
	const W, last, D = 16, 100, 64
	qs := randF32(r, Hq*D)
	kv := map[int][]float32{}
	for p := 0; p <= last; p++ {
		kv[p] = randF32(r, 2*Hkv*D)
	}
	var ref []float32
	for _, S := range []int{W, W + 3, W + 7} {
		ks, vs := make([]float32, S*Hkv*D), make([]float32, S*Hkv*D)
		opt := ring(1, 1, S, last, W)(nil)
		for s, p := range opt.KeyPos {
			if p >= 0 {
				copy(ks[s*Hkv*D:], kv[int(p)][:Hkv*D])
				copy(vs[s*Hkv*D:], kv[int(p)][Hkv*D:])
			}
		}
		got := g.ToF32(g.Attention(g.FromF32(qs, 1, Hq, D), g.FromF32(ks, S, Hkv, D), g.FromF32(vs, S, Hkv, D), opt))
		if ref == nil {
			ref = got
		} else if err := sameBits(got, ref); err != nil {
			t.Fatalf("ring of %d slots differs from %d slots: %v", S, W, err)
		}
	}
}

func seq(p, n int) []int32 {
	s := make([]int32, n)
	for i := range s {
		s[i] = int32(p + i)
	}
	return s
}

func sameBits(a, b []float32) error {
	if len(a) != len(b) {
		return fmt.Errorf("lengths %d and %d", len(a), len(b))
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return fmt.Errorf("element %d: %v vs %v", i, a[i], b[i])
		}
	}
	return nil
}

// TestMatMulSpeed logs the backend's matmul bandwidth at decode and verify
// sizes for published weight shapes, tensor-core kernel against the
// CUDA-core one (numbers only; timing never fails a test).
func TestMatMulSpeed(t *testing.T) {
	g := backendOrSkip(t)
	if testing.Short() {
		t.Skip("timing")
	}
	kernels := append([]string{"matmul_mma8", "matmul_mma8n"}, mma1Variants...)
	for _, name := range append(append(kernels, rowsVariants...), "matmul_rows_cl", "matmul_rows_wide_cl", "matmul_rows_glu_cl",
		"matmul_rows_glu_by_cl", "matmul_rows_wide2_early", "matmul_rows_wide3_early", "matmul_rows_wide4_early",
		"matmul_rows_wide2_early_cl", "matmul_rows_wide4_early_cl") {
		regs, err := g.dev.FuncAttribute(g.k[name], funcAttrNumRegs)
		if err != nil {
			t.Fatal(err)
		}
		local, err := g.dev.FuncAttribute(g.k[name], funcAttrLocalBytes)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %d registers, %d bytes of local memory a thread (spills)", name, regs, local)
	}
	type variant struct {
		name string
		set  func()
	}
	variants := []variant{{"warp", func() { warpMatMul = true }}, {"mma8", func() { mma8Kernel, tiledMatMul = "matmul_mma8", false }},
		{"mma8n", func() { mma8Kernel, tiledMatMul = "matmul_mma8n", false }},
		{"mma8tiled", func() { tiledMatMul = true }}}
	for _, v := range mma1Variants {
		variants = append(variants, variant{strings.TrimPrefix(v, "matmul_"), func() { rowsMaxM, mma1Kernel = 0, v }})
	}
	// matmul_rows_wide2 … 4, the default for 6-20 rows; /narrow and /wide
	// take two tiles with one column group a warp, or two, for every weight.
	variants = append(variants, variant{"tiles", func() {}}, variant{"tiles/counted", func() { clusterFinish = false }},
		variant{"tiles/narrow", func() { rowsKernel = "matmul_rows" }}, variant{"tiles/wide", func() { rowsKernel = "matmul_rows_wide" }})
	for _, v := range rowsVariants {
		variants = append(variants, variant{strings.TrimPrefix(v, "matmul_"), func() { rowsKernel = v }})
	}
	for _, n := range []int{8192, 32768} {
		variants = append(variants, variant{fmt.Sprintf("rows/splitwarps=%d", n), func() { rowsKernel, splitWarps = "matmul_rows", n }})
	}
	for _, n := range []int{1, 2, 3, 4, 6, 8, 12, 16, 25} { // the wide kernel's K splits swept: fillSplit's premise
		variants = append(variants, variant{fmt.Sprintf("rows_wide/splits=%d", n), func() { rowsKernel, splitFixed = "matmul_rows_wide", n }})
	}
	for _, k := range []string{"matmul_rows", "matmul_rows_wide"} { // the warp rule's splits (TANDEM_CUDA_SPLIT=warps)
		variants = append(variants, variant{strings.TrimPrefix(k, "matmul_") + "/warps", func() { rowsKernel, splitMode = k, "warps" }})
	}
	defer restoreMatMul()()
	r := rand.New(rand.NewPCG(5, 6))
	for _, s := range []struct{ N, K int }{{2048, 1536}, {6144, 1536}, {1536, 6144}, {262144, 1536}, {21504, 5376}, {5376, 21504}, {262144, 5376}} {
		w := weight(g, compute.BF16, randF32(r, s.N*s.K), s.N, s.K)
		for _, M := range []int{1, 4, 8, 16, 128, 512} {
			x := g.FromF32(randF32(r, M*s.K), M, s.K)
			line := fmt.Sprintf("N=%d K=%d M=%d:", s.N, s.K, M)
			for _, v := range variants {
				tv := strings.HasPrefix(v.name, "tiles")
				if tv && (M <= 5 || M > 20) || !tv && M > 16 != strings.HasPrefix(v.name, "mma8") &&
					v.name != "warp" || M > 5 && strings.HasPrefix(v.name, "rows") ||
					M > 128 && v.name != "mma8tiled" {
					continue
				}
				restore := restoreMatMul()
				v.set()
				d := deviceTime(t, g, 20, func() { g.MatMul(x, w) })
				restore()
				line += fmt.Sprintf("  %s %v %.0f GB/s", v.name, d.Round(100*time.Nanosecond), float64(2*s.N*s.K)/d.Seconds()/1e9)
				if M > 5 { // useful work: the three parts' mmas count once
					line += fmt.Sprintf(" %.0f TFLOP/s", float64(2*M*s.N*s.K)/d.Seconds()/1e12)
				}
			}
			t.Log(line)
		}
	}
}

// TestAttentionSpeed times a decode step's attention at 128 keys on the
// 31B and E2B shapes (sliding layers of 256-wide heads in a 1,024-slot
// ring, global layers of 512 in 4,096 slots), one and four queries, with
// the fused kernel and the two, each with and without packed value sums.
// It asserts nothing. On the H200 (tenth session): 31B sliding 19.1 µs
// fused, 18.5 packed; 512-wide heads 31.4 and 23.1. An L2 prefetch of the
// rows, tried beside them, cost 3-6 µs a call and went. Builds of the fused
// kernel that stop after the scores, and after their maximum, say how a
// call's time divides.
func TestAttentionSpeed(t *testing.T) {
	g := backendOrSkip(t)
	if testing.Short() {
		t.Skip("timing")
	}
	defer func(on, comb, pk, c4 bool, c4min, cl int, sp, rd, grp, always bool, rows int) {
		fusedAttention, combineInValuesOn, attnPacked, attnCols4, attnCols4Min, attnClusterBlocks = on, comb, pk, c4, c4min, cl
		attnClusterSplits, attnClusterRounds, attnGroup, attnGroupAlways, attnGroupRows = sp, rd, grp, always, rows
	}(fusedAttention, combineInValuesOn, attnPacked, attnCols4, attnCols4Min, attnClusterBlocks, attnClusterSplits, attnClusterRounds,
		attnGroup, attnGroupAlways, attnGroupRows)
	combineInValuesOn = true
	attnCols4Min = 0 // "+cols4" takes four columns at every width
	type variant struct {
		name                 string
		fused, packed, cols4 bool
		cluster              int  // attn_cluster's blocks a cluster
		group                bool // attn_cluster_group wherever it fits (attnGroupAlways); else never
		rows                 int  // attnGroupRows
	}
	variants := []variant{{"fused", true, false, false, 0, false, 8}, {"cluster8", true, false, false, 8, false, 8},
		{"group8", true, false, false, 8, true, 8}, {"fused+cols4", true, false, true, 0, false, 8},
		{"group8/4 rows", true, false, false, 8, true, 4}, {"group8/2 rows", true, false, false, 8, true, 2},
		{"cluster16", true, false, false, 16, false, 8}, {"cluster4", true, false, false, 4, false, 8},
		{"fused+packed", true, true, false, 0, false, 8}, {"two", false, false, false, 0, false, 8},
		{"two+packed", false, true, false, 0, false, 8}}
	// Builds of attn_fused that stop part way (ATTN_STOP), swapped in for
	// the kernel: what the scores take, and the scores with their maximum.
	fusedK := g.k["attn_fused"]
	defer func() { g.k["attn_fused"] = fusedK }()
	stops := map[string]Kernel{}
	for _, n := range []int{1, 2} {
		ks, err := g.dev.Compile(fmt.Sprintf("#define ATTN_STOP %d\n", n)+opsSource, "ops_stop.cu", "attn_fused")
		if err != nil {
			t.Fatal(err)
		}
		stops[[]string{"", "scores only", "scores+max"}[n]] = ks["attn_fused"]
	}
	defer func(c int) { attnTiledCols = c }(attnTiledCols)
	regs, _ := g.dev.FuncAttribute(g.k["attn_cluster"], funcAttrNumRegs)
	local, _ := g.dev.FuncAttribute(g.k["attn_cluster"], funcAttrLocalBytes)
	t.Logf("attn_cluster: %d registers, %d bytes of local memory a thread", regs, local)
	flush := l2Flusher(t, g)
	r := rand.New(rand.NewPCG(7, 8))
	for _, s := range []struct {
		name       string
		Hq, Hkv, D int
		S          int
	}{{"31B sliding", 32, 16, 256, 1024}, {"31B global", 32, 4, 512, 4096}, {"E2B sliding", 8, 1, 256, 1024}, {"E2B global", 8, 1, 512, 4096}} {
		k := g.FromF32(randF32(r, s.S*s.Hkv*s.D), 1, s.S, s.Hkv, s.D)
		v := g.FromF32(randF32(r, s.S*s.Hkv*s.D), 1, s.S, s.Hkv, s.D)
		for _, c := range []struct{ L, keys int }{{1, 128}, {4, 128}, {1, 1000}} { // 1000: a sliding window at 4k
			L := c.L
			q := g.FromF32(randF32(r, L*s.Hq*s.D), 1, L, s.Hq, s.D)
			opt := prefix(L, c.keys)(r)
			line := fmt.Sprintf("%s, %d queries over %d keys:", s.name, L, c.keys)
			for _, vr := range variants {
				fusedAttention, attnPacked, attnCols4, attnClusterBlocks = vr.fused, vr.packed, vr.cols4, vr.cluster
				attnGroup, attnGroupAlways, attnGroupRows = vr.group, vr.group, vr.rows
				before, grpBefore := g.attnClN, g.clGroupN
				d := deviceTime(t, g, 50, func() { g.Attention(q, k, v, opt) })
				line += fmt.Sprintf("  %s %v", vr.name, d.Round(100*time.Nanosecond))
				if vr.group {
					_, QG, _ := g.attnGroupPlan(true, s.D, s.D, c.keys, s.Hq, s.Hkv, 1, L)
					line += fmt.Sprintf(" (attn_cluster_group %v, %d heads a cluster)", g.clGroupN > grpBefore, QG)
				} else if vr.cluster > 0 {
					if p, ok := g.attnClusterPlan(ptrOf(k).ptr%16 == 0 && ptrOf(v).ptr%16 == 0, s.D, s.D, c.keys, s.Hq*L); g.attnClN == before {
						line += fmt.Sprintf(" (attn_fused: %d KiB, %d of %d clusters fit, ok %v)", p.smem>>10, g.attnClustersHeld(p.C, p.smem), s.Hq*L, ok)
					}
				}
			}
			for _, vr := range variants[:6] { // operands from memory, as in a step
				fusedAttention, attnPacked, attnCols4, attnClusterBlocks = vr.fused, vr.packed, vr.cols4, vr.cluster
				attnGroup, attnGroupAlways, attnGroupRows = vr.group, vr.group, vr.rows
				d := deviceTime(t, g, 50, func() { flush(); g.Attention(q, k, v, opt) })
				line += fmt.Sprintf("  %s, L2 flushed %v", vr.name, d.Round(100*time.Nanosecond))
			}
			fusedAttention, attnPacked, attnCols4, attnClusterBlocks, attnGroup, attnGroupRows = true, false, false, 0, false, 8
			for _, name := range []string{"scores only", "scores+max"} {
				g.k["attn_fused"] = stops[name]
				d := deviceTime(t, g, 50, func() { g.Attention(q, k, v, opt) })
				g.k["attn_fused"] = fusedK
				line += fmt.Sprintf("  fused, %s %v", name, d.Round(100*time.Nanosecond))
			}
			t.Log(line)
		}
		// A decode step at 4k on a sliding layer: the window (E2B's 512,
		// 31B's 1,024) straddles position 4,096, so it takes the split path,
		// or attn_cluster with attnClusterSplits (in rounds where its share
		// does not fit).
		for _, win := range []int{512, 1024} {
			if s.S != 1024 {
				break
			}
			q := g.FromF32(randF32(r, s.Hq*s.D), 1, 1, s.Hq, s.D)
			k := g.FromF32(randF32(r, win*s.Hkv*s.D), 1, win, s.Hkv, s.D)
			v := g.FromF32(randF32(r, win*s.Hkv*s.D), 1, win, s.Hkv, s.D)
			opt := ring(1, 1, win, 4100, win)(r)
			line := fmt.Sprintf("%s, one query, a window of %d straddling position 4,096:", s.name, win)
			for _, vr := range []struct {
				name           string
				splits, rounds bool
			}{{"split path", false, false}, {"cluster", true, false}, {"cluster, rounds", true, true}} {
				fusedAttention, attnClusterBlocks, attnClusterSplits, attnClusterRounds = true, 8, vr.splits, vr.rounds
				before, rounds := g.attnClN, g.roundsN
				d := deviceTime(t, g, 50, func() { g.Attention(q, k, v, opt) })
				df := deviceTime(t, g, 50, func() { flush(); g.Attention(q, k, v, opt) })
				line += fmt.Sprintf("  %s %v (L2 flushed %v; attn_cluster %v, rounds %v)", vr.name, d.Round(100*time.Nanosecond),
					df.Round(100*time.Nanosecond), g.attnClN > before, g.roundsN > rounds)
			}
			attnClusterSplits, attnClusterRounds = false, false
			t.Log(line)
		}
		// A prefill chunk: 64 queries over up to 2,048 keys, the tiled
		// values kernel with one, two and four columns a thread.
		keys := min(2048, s.S)
		q := g.FromF32(randF32(r, 64*s.Hq*s.D), 1, 64, s.Hq, s.D)
		opt := prefix(64, keys)(r)
		line := fmt.Sprintf("%s, 64 queries over %d keys (tiled):", s.name, keys)
		for _, cols := range []int{1, 2, 4} {
			attnTiledCols = cols
			d := deviceTime(t, g, 10, func() { g.Attention(q, k, v, opt) })
			line += fmt.Sprintf("  %d columns a thread %v", cols, d.Round(100*time.Nanosecond))
		}
		t.Log(line)
	}
}

// TestNormSpeed times a decode step's norms alone, to say where a
// single-block norm's time goes: rmsnorm2 (two reductions) against rmsnorm
// (one), each with and without writing the bf16 split, on the 31B and E2B
// widths, with their operands in L2 and after a read that flushed it (as
// in a step, where a product's weights pass between two norms), beside
// copy_words of one word (a launch and nothing else). In the 31B kernel
// profile rmsnorm2 took 14.7 µs a call, 1.7 ms a step; alone on the H200
// (eleventh session) 12.1 µs at 5,376 wide (14.0 with L2 flushed) against 3.8
// for the copy.
// Asserts nothing.
func TestNormSpeed(t *testing.T) {
	g := backendOrSkip(t)
	if testing.Short() {
		t.Skip("timing")
	}
	flush := l2Flusher(t, g)
	r := rand.New(rand.NewPCG(9, 10))
	one := g.FromF32([]float32{1}, 1)
	line := fmt.Sprintf("a launch (copy_words of one word) %v;", deviceTime(t, g, 100, func() {
		b := g.alloc(compute.F32, 1)
		g.launch("copy_words", [3]uint32{1, 1, 1}, 32, ptrOf(b), ptrOf(one), 1)
	}).Round(100*time.Nanosecond))
	for _, D := range []int{5376, 1536} {
		x, res := g.FromF32(randF32(r, D), 1, D), g.FromF32(randF32(r, D), 1, D)
		w1, w2 := weight(g, compute.BF16, randF32(r, D), D), weight(g, compute.BF16, randF32(r, D), D)
		y, h := g.alloc(compute.F32, D), g.alloc(compute.F32, D)
		parts := g.alloc(compute.BF16, 3, D)
		for _, c := range []struct {
			name  string
			split any
		}{{"with its split", ptrOf(parts)}, {"without", nil}} {
			for _, cold := range []bool{false, true} {
				launch := func(name string, args ...any) {
					if cold {
						flush()
					}
					g.launch(name, [3]uint32{1, 1, 1}, rowThreads(D), args...)
				}
				two := deviceTime(t, g, 100, func() {
					launch("rmsnorm2", ptrOf(y), ptrOf(h), ptrOf(x), ptrOf(res), ptrOf(w1), dtCode(compute.BF16), nil, 0,
						ptrOf(w2), dtCode(compute.BF16), D, float32(1e-6), c.split, D, 0)
				})
				single := deviceTime(t, g, 100, func() {
					launch("rmsnorm", ptrOf(h), ptrOf(x), ptrOf(w1), dtCode(compute.BF16), D, float32(1e-6), nil, c.split, D, 1, 0)
				})
				line += fmt.Sprintf("  D=%d %s%s: rmsnorm2 %v, rmsnorm %v;", D, c.name, map[bool]string{true: ", L2 flushed"}[cold],
					two.Round(100*time.Nanosecond), single.Round(100*time.Nanosecond))
			}
		}
	}
	t.Log(line)
}

// deviceTime is the device time of one call of f (every kernel it queues
// but l2Flusher's), averaged over reps calls run back to back behind a
// spin, so the host's launch rate does not count.
func deviceTime(t *testing.T, g *Backend, reps int, f func()) time.Duration {
	t.Helper()
	f() // warm up: allocations, caches
	if err := g.dev.StartProfile(); err != nil {
		t.Fatal(err)
	}
	g.Spin(20 * time.Millisecond)
	for range reps {
		f()
	}
	p, err := g.dev.StopProfile()
	if err != nil {
		t.Fatal(err)
	}
	var d time.Duration
	for _, k := range p.Kernels {
		if k.Name != "spin" && k.Name != "l2_flush" {
			d += k.Time
		}
	}
	return d / time.Duration(reps)
}

var (
	mma1Variants = []string{"matmul_mma1", "matmul_mma1n"}
	rowsVariants = []string{"matmul_rows", "matmul_rows_plain", "matmul_rows_wide", "matmul_rows_early", "matmul_rows_wide_early"}
)

// restoreMatMul returns a function that puts the matmul variant switches
// back as they are now.
func restoreMatMul() func() {
	w, m, rk, mk, m8, sw, tl := warpMatMul, rowsMaxM, rowsKernel, mma1Kernel, mma8Kernel, splitWarps, tiledMatMul
	sf, sm, so, cl, ca, ew, rt := splitFixed, splitMode, sumSplitsOnly, clusterFinish, clusterAlways, earlyWeights, rowsTiles
	return func() {
		warpMatMul, rowsMaxM, rowsKernel, mma1Kernel, mma8Kernel, splitWarps, tiledMatMul = w, m, rk, mk, m8, sw, tl
		splitFixed, splitMode, sumSplitsOnly, clusterFinish, clusterAlways, earlyWeights, rowsTiles = sf, sm, so, cl, ca, ew, rt
	}
}

// TestGeluMatMulsMatch protects matmul_rows_glu and matmul_rows_glu_by
// (TANDEM_CUDA_GLU): for one to five rows GeluMatMuls must give the bits
// of GeluMul after MatMuls (the stacked product through a rows kernel,
// then gelu_mul), and GeluMatMulBy those of GeluMul after MatMul of the
// gate alone, and so must the split each writes for the next product;
// with K split or not (up to 16 ways), a partial column group (I = 37) and
// K that is not a multiple of 8 (unaligned loads). They must run for
// those rows and not for six. The fused kernels' cluster finish
// (clusterFinish) must give the same bits and run where the splits fit a
// cluster.
func TestGeluMatMulsMatch(t *testing.T) {
	g := backendOrSkip(t)
	defer restoreMatMul()()
	defer func(on, split bool) { gluFused, gluSplit = on, split }(gluFused, gluSplit)
	gluSplit = false // its reference is MatMuls at splitK's split
	r := rand.New(rand.NewPCG(51, 52))
	for _, s := range []struct{ I, K int }{{300, 1536}, {1536, 4096}, {37, 2053}, {64, 64}} {
		stack := weight(g, compute.BF16, randF32(r, 2*s.I*s.K), 2*s.I, s.K)
		gate, up := g.Slice(stack, 0, s.I), g.Slice(stack, s.I, 2*s.I)
		down := weight(g, compute.BF16, randF32(r, 96*s.I), 96, s.I)
		for _, splits := range []int{0, 1, 3, 16} { // 0: splitK's own count
			for M := 1; M <= 6; M++ {
				x := g.FromF32(randF32(r, M*s.K), M, s.K)
				u := g.FromF32(randF32(r, M*s.I), M, s.I)
				for _, v := range []struct{ by, cluster, early bool }{{false, false, false}, {true, false, false}, {false, true, false},
					{true, true, false}, {false, false, true}, {true, true, true}} {
					by := v.by
					run := func(on bool) (y, product []float32, ran, clustered bool) {
						restore := restoreMatMul()
						defer restore()
						// The cluster finish (clusterFinish) and early
						// weights in the fused kernel only: the reference is
						// the counted finish of the plain kernels.
						splitFixed, gluFused, clusterFinish, clusterAlways = splits, on, on && v.cluster, true
						earlyWeights = on && v.early
						before, clBefore, earlyBefore := g.gluN, g.clusterN, g.earlyN
						var out *compute.Tensor
						if by {
							out = compute.GeluMatMulBy(g, x, gate, u)
						} else {
							out = compute.GeluMatMuls(g, x, gate, up)
						}
						ran, clustered = g.gluN > before, g.clusterN > clBefore
						if early := g.earlyN > earlyBefore; on && ran && early != v.early {
							t.Fatalf("early weights ran %v, want %v", early, v.early)
						}
						earlyWeights = false // the product of the output below: its own bits either way
						return g.ToF32(out), g.ToF32(g.MatMul(out, down)), ran, clustered
					}
					// The fused run first: a buffer the reference freed
					// could otherwise hold the right values already.
					gotY, gotP, ran, clustered := run(true)
					wantY, wantP, _, _ := run(false)
					name := fmt.Sprintf("I=%d K=%d, %d splits, M=%d, by a tensor %v, cluster finish %v, early weights %v", s.I, s.K, splits, M, by, v.cluster, v.early)
					if ran != (M <= 5) {
						t.Fatalf("%s: the fused kernel ran %v", name, ran)
					}
					sp := func() int { // the product's K splits
						defer restoreMatMul()()
						splitFixed = splits
						n := 2 * s.I
						if by {
							n = s.I
						}
						sp, _ := splitK(n, s.K)
						return sp
					}()
					// Unfused, a product of six rows takes the multi-tile
					// rows kernel, with the cluster finish too.
					if want := v.cluster && (ran || tilesFor(M, 1, 1) != "") && sp > 1 && sp <= g.maxCluster; clustered != want {
						t.Fatalf("%s: the cluster finish ran %v with %d splits, want %v", name, clustered, sp, want)
					}
					if err := sameBits(gotY, wantY); err != nil {
						t.Fatalf("%s: %v", name, err)
					}
					if err := sameBits(gotP, wantP); err != nil {
						t.Fatalf("%s, the product of its output (its split): %v", name, err)
					}
				}
			}
		}
	}
}

// TestGLUSplitKeepsRowsInvariant protects gluSplit
// (TANDEM_CUDA_GLU_SPLIT): with it a stacked gate|up product takes the
// split fillSplit counts for the GLU kernel on every path, so each row of a
// GeluMatMuls pass of any size (the GLU kernel up to five rows, the
// multi-tile and tiled kernels beyond) has the bits it has alone, and a
// lone row's are those of the stacked product at that split followed by
// gelu_mul; at the E2B MLP's shape (6144 × 1536 twice) the split is not
// splitK's on the H200 (5 against 2), so a path that kept splitK's fails.
func TestGLUSplitKeepsRowsInvariant(t *testing.T) {
	g := backendOrSkip(t)
	defer restoreMatMul()()
	defer func(on, fused bool, sf map[[2]int]int) { gluSplit, gluFused, splitsFor = on, fused, sf }(gluSplit, gluFused, splitsFor)
	r := rand.New(rand.NewPCG(61, 62))
	const most = 40
	for _, s := range []struct{ I, K int }{{6144, 1536}, {300, 1536}, {37, 2053}} {
		stack := weight(g, compute.BF16, randF32(r, 2*s.I*s.K), 2*s.I, s.K)
		gate, up := g.Slice(stack, 0, s.I), g.Slice(stack, s.I, 2*s.I)
		splitsFor, splitFixed = nil, 0 // the rules' own splits, whatever the environment set
		sk := gluSplitK(2*s.I, s.K)
		if plain, _ := splitK(2*s.I, s.K); sk.splits == plain {
			t.Logf("I=%d K=%d: the GLU split is splitK's (%d) on this device", s.I, s.K, plain)
		}
		gluFused, gluSplit = true, true
		xs := randF32(r, most*s.K)
		alone := make([][]float32, most)
		for i := range alone {
			alone[i] = g.ToF32(compute.GeluMatMuls(g, g.FromF32(xs[i*s.K:(i+1)*s.K], 1, s.K), gate, up))
		}
		for _, M := range []int{2, 5, 6, 8, 17, most} {
			y := g.ToF32(compute.GeluMatMuls(g, g.FromF32(xs[:M*s.K], M, s.K), gate, up))
			for i := range M {
				if err := sameBits(y[i*s.I:(i+1)*s.I], alone[i]); err != nil {
					t.Fatalf("I=%d K=%d, row %d of %d: %v", s.I, s.K, i, M, err)
				}
			}
		}
		// The stacked product and gelu_mul apart, at that split.
		gluFused, gluSplit, splitsFor = false, false, map[[2]int]int{{2 * s.I, s.K}: sk.splits}
		want := g.ToF32(compute.GeluMatMuls(g, g.FromF32(xs[:s.K], 1, s.K), gate, up))
		if err := sameBits(alone[0], want); err != nil {
			t.Fatalf("I=%d K=%d: a lone row against the stacked product at %d splits and gelu_mul: %v", s.I, s.K, sk.splits, err)
		}
	}
}

// TestSplitFinishMatchesSumSplits pins the order in which a product's K
// splits are added: the kernels' own finish (finish_group, run by the last
// block of a column group) must give the bits of sum_splits, which adds
// each output's partials in split order, for every kernel family (the rows
// kernels, 64 and 128 columns a block; mma1; the tiled and mma8 kernels)
// and split counts below, at and past the finish's 16 loads at a time
// (K = 5,376 takes 17 and 24 splits where 17 and 25 are asked).
// Every kernel family finishes the same way, so comparing them with each
// other, as TestMatMulVariantsMatch does, cannot see an order they share.
// The rows kernels' cluster finish (clusterFinish) is held to it too, with
// up to five rows, and must run for 2-16 splits (the largest cluster) and
// fall back to the counted finish beyond.
func TestSplitFinishMatchesSumSplits(t *testing.T) {
	g := backendOrSkip(t)
	defer restoreMatMul()()
	r := rand.New(rand.NewPCG(13, 14))
	const N, K = 300, 5376
	w := weight(g, compute.BF16, randF32(r, N*K), N, K)
	for _, c := range []struct {
		M       int
		kernel  string // the rows kernel, for M ≤ 5
		tiled   bool   // M > 16: matmul_tiled, else the streaming mma8
		cluster bool   // the rows kernels' cluster finish (clusterFinish), where the splits fit a cluster
	}{{1, "matmul_rows", false, false}, {1, "matmul_rows_wide", false, false}, {4, "matmul_rows_wide", false, false},
		{8, "auto", false, false}, {40, "auto", true, false}, {40, "auto", false, false},
		{1, "matmul_rows", false, true}, {5, "matmul_rows", false, true}, {1, "matmul_rows_wide", false, true},
		{4, "matmul_rows_wide", false, true}, {1, "matmul_rows_early", false, true}, {4, "matmul_rows_wide_early", false, true}} {
		if c.cluster && g.maxCluster == 0 {
			t.Logf("M=%d %s: no thread block clusters on this device", c.M, c.kernel)
			continue
		}
		x := g.FromF32(randF32(r, c.M*K), c.M, K)
		for _, splits := range []int{2, 3, 7, 12, 16, 17, 25} {
			restore := restoreMatMul()
			rowsKernel, splitFixed, tiledMatMul, clusterFinish, clusterAlways = c.kernel, splits, c.tiled, c.cluster, true
			before := g.clusterN
			got := g.ToF32(g.MatMul(x, w))
			clustered := g.clusterN > before
			sumSplitsOnly = true
			want := g.ToF32(g.MatMul(x, w))
			restore()
			name := fmt.Sprintf("M=%d %s (tiled %v, cluster %v), %d splits", c.M, c.kernel, c.tiled, c.cluster, splits)
			if wantCl := c.cluster && splits <= g.maxCluster; clustered != wantCl {
				t.Fatalf("%s: the cluster finish ran %v, want %v", name, clustered, wantCl)
			}
			if err := sameBits(got, want); err != nil {
				t.Fatalf("%s: the kernel's finish differs from sum_splits: %v", name, err)
			}
		}
	}
}

// Every tensor-core variant must give the bits of matmul_mma1 (three
// accumulators per row, four weight chunks per step, plain loads): the
// rows kernel (three tile rows per activation row) for M up to 5, the
// streaming mma1 up to 16 rows, and the streaming
// mma8 and the shared-memory tiled kernel beyond (partial row and column
// tiles included); odd K, K splits and unaligned activations included.
func TestMatMulVariantsMatch(t *testing.T) {
	g := backendOrSkip(t)
	reset := restoreMatMul()
	defer reset()
	r := rand.New(rand.NewPCG(9, 10))
	for _, s := range []struct{ N, K int }{{300, 1536}, {64, 8192}, {41, 2053}, {9, 64}, {2048, 5376}} {
		w := weight(g, compute.BF16, randF32(r, s.N*s.K), s.N, s.K)
		for _, M := range []int{1, 2, 3, 4, 5, 6, 8, 10, 11, 15, 16, 17, 20, 40, 64, 65, 130} {
			for _, offset := range []int{0, 1} {
				xs := randF32(r, (M+offset)*s.K)
				x := g.Slice(g.FromF32(xs, M+offset, s.K), offset, M+offset)
				rowsMaxM, mma1Kernel, mma8Kernel, tiledMatMul, rowsTiles = 0, "matmul_mma1", "matmul_mma8", false, 1
				want := g.ToF32(g.MatMul(x, w))
				variants := append([]string(nil), mma1Variants[1:]...)
				switch {
				case M <= 5:
					variants = append(variants, rowsVariants...)
				case M > 16:
					variants = []string{"matmul_mma8n", "matmul_tiled"}
				}
				if M > 5 && M <= 20 {
					variants = append(variants, "tiles", "tiles/early", "tiles/counted", "tiles/narrow", "tiles/narrow/early", "tiles/wide")
				}
				for _, v := range variants {
					reset()
					rowsMaxM, rowsKernel, mma1Kernel, mma8Kernel, tiledMatMul, rowsTiles = 0, "", v, v, false, 1
					switch {
					case strings.HasPrefix(v, "matmul_rows"):
						rowsMaxM, rowsKernel, mma1Kernel = 5, v, "matmul_mma1"
					case v == "matmul_tiled":
						// The tiled kernel is chosen by its switch; shapes
						// it cannot take (odd K) fall back to matmul_mma8n.
						mma1Kernel, mma8Kernel, tiledMatMul = "matmul_mma1", "matmul_mma8n", true
					case strings.HasPrefix(v, "tiles"): // matmul_rows_wide2 … 4, early weights or not
						rowsMaxM, rowsKernel, rowsTiles = 5, "auto", 4
						earlyWeights, clusterFinish = strings.HasSuffix(v, "/early"), v != "tiles/counted"
						switch { // two tiles with one column group a warp, or two, whatever the weight
						case strings.HasPrefix(v, "tiles/narrow"):
							rowsKernel = "matmul_rows"
						case v == "tiles/wide":
							rowsKernel = "matmul_rows_wide"
						}
					}
					tilesBefore, earlyBefore := g.tilesN, g.earlyN
					got := g.ToF32(g.MatMul(x, w))
					if err := sameBits(got, want); err != nil {
						t.Fatalf("N=%d K=%d M=%d offset %d: %s differs from matmul_mma1: %v", s.N, s.K, M, offset, v, err)
					}
					if tv := strings.HasPrefix(v, "tiles"); tv != (g.tilesN > tilesBefore) || tv && earlyWeights != (g.earlyN > earlyBefore) {
						t.Fatalf("N=%d K=%d M=%d: %s ran the tiles %v and early weights %v", s.N, s.K, M, v, g.tilesN > tilesBefore, g.earlyN > earlyBefore)
					}
				}
			}
		}
	}
}

// The split of a matmul's input is remembered for the next matmul of the
// same tensor; a Copy or AddRows into it must make the next matmul split
// afresh, and a view is a different tensor.
func TestSplitMemoForgetsWrites(t *testing.T) {
	g := backendOrSkip(t)
	r := rand.New(rand.NewPCG(11, 12))
	const N, K = 200, 1536
	w := weight(g, compute.BF16, randF32(r, N*K), N, K)
	a, c := randF32(r, 2*K), randF32(r, 2*K)
	fresh := func(data []float32) []float32 { return g.ToF32(g.MatMul(g.FromF32(data, len(data)/K, K), w)) }
	x := g.FromF32(a, 2, K)
	if err := sameBits(g.ToF32(g.MatMul(x, w)), fresh(a)); err != nil {
		t.Fatalf("first matmul: %v", err)
	}
	g.MatMul(x, w) // remembered now
	g.Copy(x, 0, g.FromF32(c, 2, K))
	if err := sameBits(g.ToF32(g.MatMul(x, w)), fresh(c)); err != nil {
		t.Fatalf("after Copy: %v", err)
	}
	g.MatMul(x, w)
	g.AddRows(x, g.FromF32(a[:K], 1, K), []int32{1}, []float32{1})
	want := g.ToF32(x)
	if err := sameBits(g.ToF32(g.MatMul(x, w)), fresh(want)); err != nil {
		t.Fatalf("after AddRows: %v", err)
	}
	g.MatMul(x, w)
	row := g.Slice(x, 1, 2)
	if err := sameBits(g.ToF32(g.MatMul(row, w)), fresh(want[K:])); err != nil {
		t.Fatalf("a view of the remembered tensor: %v", err)
	}
}

// The fused kernels must give the bits of the op sequences they replace:
// AddRMSNorm (with and without a weight, rows not a multiple of the block),
// the split written by the producers of matmul inputs, and RMSNormRoPE
// (full and partial rotation, bf16 and f32 weights).
func TestFusedOpsMatch(t *testing.T) {
	g := backendOrSkip(t)
	defer func(on bool) { fusedOps = on }(fusedOps)
	r := rand.New(rand.NewPCG(15, 16))
	for _, D := range []int{1536, 300, 5376} {
		x, res := g.FromF32(randF32(r, 3*D), 3, D), g.FromF32(randF32(r, 3*D), 3, D)
		for _, w := range []*compute.Tensor{nil, weight(g, compute.BF16, randF32(r, D), D)} {
			fusedOps = false
			want := g.ToF32(g.AddRMSNorm(res, x, w, 1e-6))
			fusedOps = true
			if err := sameBits(g.ToF32(g.AddRMSNorm(res, x, w, 1e-6)), want); err != nil {
				t.Fatalf("AddRMSNorm D=%d weight %v: fused differs: %v", D, w != nil, err)
			}
		}
	}
	// A layer boundary's two norms in one kernel (rmsnorm2), with and
	// without weights and the scalar; 7000 is past the register cache and
	// takes the sequence.
	defer func(on bool) { fusedNorm2 = on }(fusedNorm2)
	fusedNorm2 = true
	scalar := weight(g, compute.BF16, []float32{0.7}, 1)
	for _, D := range []int{1536, 300, 2816, 3073, 5376, 6144, 7000} {
		x, res := g.FromF32(randF32(r, 3*D), 3, D), g.FromF32(randF32(r, 3*D), 3, D)
		w := weight(g, compute.BF16, randF32(r, D), D)
		for _, c := range []struct{ w1, s, w2 *compute.Tensor }{{w, nil, w}, {nil, scalar, w}, {w, scalar, nil}, {nil, nil, nil}} {
			fusedOps = false
			y0, h0 := g.AddRMSNormNorm(res, x, c.w1, c.s, c.w2, 1e-6)
			wantY, wantH := g.ToF32(y0), g.ToF32(h0)
			fusedOps = true
			y1, h1 := g.AddRMSNormNorm(res, x, c.w1, c.s, c.w2, 1e-6)
			if err := sameBits(g.ToF32(y1), wantY); err != nil {
				t.Fatalf("AddRMSNormNorm D=%d (w1 %v, s %v, w2 %v): residual differs: %v", D, c.w1 != nil, c.s != nil, c.w2 != nil, err)
			}
			if err := sameBits(g.ToF32(h1), wantH); err != nil {
				t.Fatalf("AddRMSNormNorm D=%d (w1 %v, s %v, w2 %v): norm differs: %v", D, c.w1 != nil, c.s != nil, c.w2 != nil, err)
			}
		}
	}
	// A layer's per-head norms in one kernel (qkv_norms, a block a row, and
	// qkv_norms_warp, a warp a row, for heads up to 1,536): queries and
	// keys with their weights and RoPE, values plain; values may be the
	// keys. 1024 and 1500 take the rows' chunked sums; 2048 is past
	// qkv_norms_warp and takes the block either way.
	defer func(n int) { normWarpTokens = n }(normWarpTokens)
	for _, d := range []int{256, 512, 64, 1024, 1500, 2048} {
		const T, Hq, Hk = 3, 4, 2
		q, k, v := g.FromF32(randF32(r, T*Hq*d), T, Hq, d), g.FromF32(randF32(r, T*Hk*d), T, Hk, d), g.FromF32(randF32(r, T*Hk*d), T, Hk, d)
		pos := []int32{7, 1000, 4095}
		for _, c := range []struct {
			qw, kw, v *compute.Tensor
			rope      *compute.RoPE
		}{
			{weight(g, compute.BF16, randF32(r, d), d), weight(g, compute.F32, randF32(r, d), d), v, compute.DefaultRoPE(d, 10000)},
			{nil, weight(g, compute.BF16, randF32(r, d), d), k, compute.ProportionalRoPE(d, 1e6, 0.25)},
			{weight(g, compute.F16, randF32(r, d), d), nil, v, compute.DefaultRoPE(d/2, 10000)}, // rotates half the head
		} {
			fusedNorm2 = false
			q0, k0, v0 := g.QKVNorms(q, k, c.v, c.qw, c.kw, 1e-6, pos, c.rope, nil)
			want := [][]float32{g.ToF32(q0), g.ToF32(k0), g.ToF32(v0)}
			row := Hk * d
			// Straight into caches: none, one run (slots 2..4 of a cache), or
			// each of a batch's rows its own (token 0 into slot 5 of one
			// cache, tokens 1 and 2 into slots 0 and 1 of another).
			for _, runs := range [][]struct{ cache, slot, n int }{nil, {{0, 2, T}}, {{0, 5, 1}, {1, 0, 2}}} {
				for _, warps := range []int{math.MaxInt, 0} {
					fusedNorm2, normWarpTokens = true, warps
					var dst []compute.KVRun
					var caches []compute.KVRun
					for range 2 {
						caches = append(caches, compute.KVRun{K: g.Zeros(compute.F32, T+3, Hk, d), V: g.Zeros(compute.F32, T+3, Hk, d)})
					}
					for _, r := range runs {
						dst = append(dst, compute.KVRun{K: caches[r.cache].K, V: caches[r.cache].V, Slot: r.slot, N: r.n})
					}
					q1, k1, v1 := g.QKVNorms(q, k, c.v, c.qw, c.kw, 1e-6, pos, c.rope, dst)
					if err := sameBits(g.ToF32(q1), want[0]); err != nil {
						t.Fatalf("QKVNorms d=%d (values are keys: %v, into %v, warps from %d tokens) queries: %v", d, c.v == k, runs, warps, err)
					}
					if dst == nil {
						for i, got := range [][]float32{g.ToF32(k1), g.ToF32(v1)} {
							if err := sameBits(got, want[i+1]); err != nil {
								t.Fatalf("QKVNorms d=%d (values are keys: %v, warps from %d tokens) output %d: %v", d, c.v == k, warps, i+1, err)
							}
						}
						continue
					}
					if k1 != nil || v1 != nil {
						t.Fatalf("QKVNorms into caches returned keys %v and values %v, want nil", k1, v1)
					}
					// Every slot holds its token's keys and values, or zeros.
					for ci, cache := range caches {
						for i, ct := range []*compute.Tensor{cache.K, cache.V} {
							got := g.ToF32(ct)
							for s := range T + 3 {
								wantRow := make([]float32, row)
								tok := 0
								for _, r := range runs {
									if r.cache == ci && s >= r.slot && s < r.slot+r.n {
										copy(wantRow, want[i+1][(tok+s-r.slot)*row:])
									}
									tok += r.n
								}
								if err := sameBits(got[s*row:(s+1)*row], wantRow); err != nil {
									t.Fatalf("QKVNorms d=%d into %v (warps from %d tokens): cache %d output %d slot %d: %v", d, runs, warps, ci, i+1, s, err)
								}
							}
						}
					}
				}
			}
		}
	}
	// Producers of matmul inputs write the split as they write their output
	// (the matmul then skips split_bf16): the product must not change.
	for _, D := range []int{1536, 300} {
		w := weight(g, compute.BF16, randF32(r, 200*D), 200, D)
		norm := weight(g, compute.BF16, randF32(r, D), D)
		x, res := g.FromF32(randF32(r, 3*D), 3, D), g.FromF32(randF32(r, 3*D), 3, D)
		k, v := g.FromF32(randF32(r, 50*2*(D/4)), 50, 2, D/4), g.FromF32(randF32(r, 50*2*(D/4)), 50, 2, D/4)
		q := g.FromF32(randF32(r, 3*4*(D/4)), 3, 4, D/4)
		producers := map[string]func() *compute.Tensor{
			"RMSNorm":    func() *compute.Tensor { return g.RMSNorm(x, norm, 1e-6) },
			"AddRMSNorm": func() *compute.Tensor { return g.AddRMSNorm(res, x, norm, 1e-6) },
			"AddRMSNormNorm": func() *compute.Tensor {
				_, h := g.AddRMSNormNorm(res, x, norm, nil, norm, 1e-6)
				return h
			},
			"GeluMul": func() *compute.Tensor { return g.GeluMul(x, res) },
			"Attention": func() *compute.Tensor {
				return g.Attention(q, k, v, compute.AttentionOptions{Mask: compute.Causal, QueryPos: []int32{40, 41, 42}}).Reshape(3, D)
			},
		}
		for name, produce := range producers {
			fusedOps = false
			want := g.ToF32(g.MatMul(produce(), w))
			fusedOps = true
			if err := sameBits(g.ToF32(g.MatMul(produce(), w)), want); err != nil {
				t.Fatalf("MatMul of %s's output (D=%d) with the emitted split: %v", name, D, err)
			}
		}
	}

	const T, H = 3, 4
	for _, d := range []int{256, 512, 64} {
		x := g.FromF32(randF32(r, T*H*d), T, H, d)
		pos := []int32{7, 1000, 4095}
		for _, rope := range []*compute.RoPE{compute.DefaultRoPE(d, 10000), compute.ProportionalRoPE(d, 1e6, 0.25)} {
			for _, w := range []*compute.Tensor{weight(g, compute.BF16, randF32(r, d), d), weight(g, compute.F32, randF32(r, d), d), nil} {
				fusedOps = false
				want := g.ToF32(g.RMSNormRoPE(x, w, 1e-6, pos, rope))
				fusedOps = true
				if err := sameBits(g.ToF32(g.RMSNormRoPE(x, w, 1e-6, pos, rope)), want); err != nil {
					t.Fatalf("RMSNormRoPE d=%d rope dim %d weight %v: fused differs: %v", d, rope.Dim, w, err)
				}
			}
		}
	}
}

// rmsnorm's register-cached rows must give the bits of its loop: rows
// under, at and over the cache's 6144 elements, with and without a weight
// and a residual, and so must the split they write for the next matmul
// (compared through a product that takes it).
func TestRMSNormCacheMatch(t *testing.T) {
	g := backendOrSkip(t)
	defer func(c int) { rowCache = c }(rowCache)
	defer func(on bool) { fusedOps = on }(fusedOps)
	fusedOps = true
	r := rand.New(rand.NewPCG(19, 20))
	for _, D := range []int{300, 1536, 1537, 2816, 3072, 3073, 5376, 6144, 6145} {
		x, res := g.FromF32(randF32(r, 3*D), 3, D), g.FromF32(randF32(r, 3*D), 3, D)
		for _, w := range []*compute.Tensor{nil, weight(g, compute.BF16, randF32(r, D), D)} {
			ops := map[string]func() *compute.Tensor{
				"RMSNorm":    func() *compute.Tensor { return g.RMSNorm(x, w, 1e-6) },
				"AddRMSNorm": func() *compute.Tensor { return g.AddRMSNorm(res, x, w, 1e-6) },
			}
			proj := weight(g, compute.BF16, randF32(r, 16*D), 16, D)
			for name, op := range ops {
				rowCache = 0
				want := g.ToF32(op())
				wantProd := g.ToF32(g.MatMul(op(), proj))
				rowCache = 1
				if err := sameBits(g.ToF32(op()), want); err != nil {
					t.Fatalf("%s D=%d weight %v: cached rows differ: %v", name, D, w != nil, err)
				}
				if err := sameBits(g.ToF32(g.MatMul(op(), proj)), wantProd); err != nil {
					t.Fatalf("%s D=%d weight %v: the split cached rows write differs: %v", name, D, w != nil, err)
				}
			}
		}
	}
}

// TestMatMulForProfiler runs one matmul shape a few times for a profiler
// to look at (scripts/gpu/measure.sh ncu): TANDEM_PROFILE_SHAPE=NxKxM, e.g.
// 21504x5376x1. Skipped without it.
func TestMatMulForProfiler(t *testing.T) {
	shape := os.Getenv("TANDEM_PROFILE_SHAPE")
	if shape == "" {
		t.Skip("TANDEM_PROFILE_SHAPE not set")
	}
	var N, K, M int
	if _, err := fmt.Sscanf(shape, "%dx%dx%d", &N, &K, &M); err != nil || N < 1 || K < 1 || M < 1 {
		t.Fatalf("TANDEM_PROFILE_SHAPE=%q: want NxKxM", shape)
	}
	g := backendOrSkip(t)
	r := rand.New(rand.NewPCG(17, 18))
	w := weight(g, compute.BF16, randF32(r, N*K), N, K)
	x := g.FromF32(randF32(r, M*K), M, K)
	for range 5 {
		g.MatMul(x, w)
	}
	if err := g.Sync(); err != nil {
		t.Fatal(err)
	}
}

// TestFusedAttentionMatches protects attn_fused (TANDEM_CUDA_ATTN_FUSED)
// and packed value sums (TANDEM_CUDA_ATTN_PACKED): scores and values in
// one kernel, and value sums over (slot, weight) pairs, fused or not, each
// give the plain two kernels' bits,
// and so does a matmul of the output, whose split the kernels write. Every
// attention case runs, then one- to four-query passes over key counts
// that leave partial groups of 16 values and 256 keys, up to a whole
// chunk; caches of several chunks whose rows (of different lengths, one
// empty) lie in the first, where the values kernel folds in the later
// chunks' maxima; rings within and across a chunk boundary (two splits:
// the two kernels run either way); head widths the vector key loads do and
// do not take; value rows of 300, where only some threads take a second
// column; and queries so peaked that most keys' weights round to zero,
// which every variant must skip alike. The passes that qualify must run
// the fused kernel.
func TestFusedAttentionMatches(t *testing.T) {
	g := backendOrSkip(t)
	// By default only value rows wider than a block's threads take four
	// columns a thread (attnCols4Min): a sliding layer's 256 keep one.
	defer func(c4 bool, c4min int) { attnCols4, attnCols4Min = c4, c4min }(attnCols4, attnCols4Min)
	attnCols4, attnCols4Min = true, attnCols4Wide
	for _, c := range []struct {
		D    int
		want bool
	}{{256, false}, {300, true}, {512, true}} {
		before := g.cols4N
		attnCase("", 1, 1, 4, 2, 100, c.D, c.D, full(1, 1, 100, compute.Causal, 0)).run(g, rand.New(rand.NewPCG(1, 2)))
		if took := g.cols4N > before; took != c.want {
			t.Errorf("value rows of %d: four columns a thread %v, want %v", c.D, took, c.want)
		}
	}
	fusedAttentionVariants(t, g)
}

// fusedAttentionVariants is TestFusedAttentionMatches' comparison of the
// variants, four columns a thread taken at every width.
func fusedAttentionVariants(t *testing.T, g *Backend) {
	defer func(on, comb, pk, c4 bool, c4min, cl int, sp bool, rk int, rd, grp, always bool) {
		fusedAttention, combineInValuesOn, attnPacked, attnCols4, attnCols4Min, attnClusterBlocks, attnClusterSplits = on, comb, pk, c4, c4min, cl, sp
		attnRoundKeys, attnClusterRounds, attnGroup, attnGroupAlways = rk, rd, grp, always
	}(fusedAttention, combineInValuesOn, attnPacked, attnCols4, attnCols4Min, attnClusterBlocks, attnClusterSplits, attnRoundKeys,
		attnClusterRounds, attnGroup, attnGroupAlways)
	attnClusterRounds = false // rounds only where a variant forces them (attnRoundKeys)
	combineInValuesOn = true  // attn_fused stands in for the values kernel that combines
	attnCols4Min = 0          // four columns at every width the rows allow, when asked
	r := rand.New(rand.NewPCG(41, 42))
	w := weight(g, compute.BF16, randF32(r, 96*256), 96, 256)
	// cluster: attn_cluster's most blocks a cluster in place of attn_fused
	// (0: attn_fused), at the default 8, at 16 (a 32-wide value row leaves
	// blocks without columns), and at 3 (a 64-wide row's last block gets 16
	// of the 24 columns a block); splits: it takes
	// rows that straddle position chunks too (attnClusterSplits); rounds:
	// attn_cluster_rounds in its place, that many keys a round
	// (attnRoundKeys), so that small rows take many rounds; group:
	// attn_cluster_group wherever it fits (attnGroupAlways), the others
	// leaving it out.
	type variant struct {
		fused, packed, cols4 bool
		cluster              int
		splits               bool
		rounds               int
		group                bool
	}
	variants := []variant{{true, false, false, 0, false, 0, false}, {true, true, false, 0, false, 0, false},
		{false, true, false, 0, false, 0, false}, {true, false, true, 0, false, 0, false}, {false, false, true, 0, false, 0, false},
		{true, false, false, 8, false, 0, false}, {true, false, false, 16, false, 0, false}, {true, false, false, 3, false, 0, false},
		{true, false, false, 8, true, 0, false}, {true, false, false, 8, true, 8, false}, {true, false, false, 8, false, 0, true},
		{true, false, false, 3, true, 0, true}}
	clRuns := map[int]int{}     // attn_cluster's passes by blocks a cluster
	grpRuns := map[string]int{} // attn_cluster_group's by queries a row and splits
	// fits: rows of at most 100 keys, whose blocks' shares (up to 69 KiB,
	// three blocks a multiprocessor) at 8 blocks a cluster leave room on the
	// device for the cases' 16 clusters at once, heads up to 512. spans: rows
	// that straddle position chunks within one chunk's span, which
	// attn_cluster may take with splits.
	check := func(name string, tc opCase, seed uint64, fusable, fits, spans bool) {
		t.Helper()
		run := func(v variant) (attn, product []float32) {
			fusedAttention, attnPacked, attnCols4, attnClusterBlocks, attnClusterSplits = v.fused, v.packed, v.cols4, v.cluster, v.splits
			attnRoundKeys, attnGroup, attnGroupAlways = v.rounds, v.group, v.group
			a := tc.run(g, rand.New(rand.NewPCG(seed, seed+1)))[0]
			attn = g.ToF32(a)
			if n := a.Len(); n%256 == 0 { // the output's split, as the o projection reads it
				product = g.ToF32(g.MatMul(a.Reshape(n/256, 256), w))
			}
			return attn, product
		}
		wantA, wantP := run(variant{})
		if i := slices.IndexFunc(wantA, func(x float32) bool { return x != x }); i >= 0 && strings.Contains(name, "peaked") {
			t.Fatalf("%s: output %d is NaN: a zero weight's infinite value was summed", name, i)
		}
		for _, v := range variants {
			before, cols4Before, clBefore, roundsBefore, grpBefore := g.fusedN, g.cols4N, g.attnClN, g.roundsN, g.clGroupN
			gotA, gotP := run(v)
			if fused := g.fusedN > before; fused != (v.fused && fusable) {
				t.Fatalf("%s %+v: attn_fused ran %v, want %v", name, v, fused, v.fused && fusable)
			}
			allowed := v.fused && (fusable || v.splits && spans) && v.cluster >= 2 && v.cluster <= g.attnClusterMax
			cl, grp := g.attnClN > clBefore, g.clGroupN > grpBefore
			if grp && (!allowed || !v.group) || v.group && !grp && allowed && fits && v.cluster == 8 {
				t.Fatalf("%s %+v: attn_cluster_group ran %v (allowed %v)", name, v, grp, allowed)
			}
			if grp {
				grpRuns[map[bool]string{true: "one split", false: "splits"}[fusable]]++
				if strings.HasPrefix(name, "4 queries") {
					grpRuns["4 queries"]++
				}
			}
			if cl && !allowed || !cl && !grp && allowed && fits && v.cluster == 8 {
				t.Fatalf("%s %+v: attn_cluster ran %v (allowed %v)", name, v, cl, allowed)
			}
			if cl {
				clRuns[v.cluster]++
				if !fusable && v.rounds == 0 {
					clRuns[-1]++ // a pass of several splits
				}
			}
			if rounds := g.roundsN > roundsBefore; rounds != (cl && v.rounds > 0) {
				t.Fatalf("%s %+v: attn_cluster_rounds ran %v, attn_cluster %v", name, v, rounds, cl)
			}
			if g.roundsN > roundsBefore && !fusable {
				clRuns[-2]++ // rounds over a pass of several splits
			}
			// The cases below the table's have value rows in 16-byte chunks.
			if v.cols4 && !strings.HasPrefix(name, "Attention/") && g.cols4N == cols4Before {
				t.Fatalf("%s %+v: the value sums did not take four columns a thread", name, v)
			}
			if err := sameBits(gotA, wantA); err != nil {
				t.Fatalf("%s %+v: %v", name, v, err)
			}
			if err := sameBits(gotP, wantP); err != nil {
				t.Fatalf("%s %+v, matmul of the output: %v", name, v, err)
			}
		}
	}
	for _, tc := range opCases {
		if strings.HasPrefix(tc.name, "Attention/") {
			check(tc.name, tc, 1, !strings.Contains(tc.name, "multi-split") && !strings.Contains(tc.name, "short-of-capacity"), true, false)
		}
	}
	for _, L := range []int{1, 4} {
		for _, keys := range []int{1, 2, 63, 100, 257, 1024} {
			if keys < L {
				continue
			}
			for _, d := range []int{32, 64, 100, 256, 512} { // 32: one chunk of a key; 100: not in chunks
				check(fmt.Sprintf("%d queries, %d keys, head %d", L, keys, d),
					attnCase("", 1, L, 4, 2, keys, d, d, full(1, L, keys, compute.Causal, 0)), uint64(keys*d+L), true, keys <= 100, false)
			}
		}
		check(fmt.Sprintf("%d queries, rows of 100, 0 and 700 keys in 2,600 slots", L),
			attnCase("", 3, L, 4, 2, 2600, 64, 64, prefix(L, 100, 0, 700)), uint64(L+3), true, false, false)
		check(fmt.Sprintf("%d queries, a sliding ring across a chunk boundary", L),
			attnCase("", 2, L, 4, 1, 512, 128, 128, ring(2, L, 512, 1300, 512)), uint64(L), false, L == 1, true)
		check(fmt.Sprintf("%d queries, rows of different spans: one straddling, one within a chunk, one empty", L),
			attnCase("", 3, L, 4, 2, 600, 64, 64, spans(L, 600, [][2]int{{900, 1400}, {1000, 1023}, {0, -1}})), uint64(L+11), false, L == 1, true)
		check(fmt.Sprintf("%d queries, a sliding ring within a chunk", L),
			attnCase("", 2, L, 4, 1, 512, 128, 128, ring(2, L, 512, 2000, 512)), uint64(L+7), true, false, false)
		for _, d := range []int{64, 512} { // 512: both of a thread's columns skip the infinite value
			check(fmt.Sprintf("%d queries, head %d, peaked: most weights round to zero", L, d), peakedAttention(L, 300, d), uint64(L+d), true, false, false)
		}
		check(fmt.Sprintf("%d queries, values 300 wide: some threads take a second column", L),
			attnCase("", 1, L, 4, 2, 200, 64, 300, full(1, L, 200, compute.Causal, 0)), uint64(L+300), true, true, false)
	}
	for _, v := range variants {
		if v.cluster > 0 && v.cluster <= g.attnClusterMax && clRuns[v.cluster] == 0 {
			t.Errorf("attn_cluster never ran with %d blocks a cluster", v.cluster)
		}
	}
	if g.attnClusterMax > 0 && (clRuns[-1] == 0 || clRuns[-2] == 0) {
		t.Errorf("attn_cluster never took a pass whose rows straddle position chunks (%d), or never in rounds (%d)", clRuns[-1], clRuns[-2])
	}
	if g.attnClusterMax > 0 && (grpRuns["one split"] == 0 || grpRuns["splits"] == 0 || grpRuns["4 queries"] == 0) {
		t.Errorf("attn_cluster_group never took a pass of one split, of several, or of 4 queries a row (%v)", grpRuns)
	}
}

// TestAttentionSeesOnlyVisibleKeys protects leaving a row's keys out of
// sight out of its span (visibleKeys): a sliding ring of Window + 511
// slots, as the cache keeps, holds about twice the keys a decode query
// sees. The output must keep its bits whether the kernels visit every key
// or only those in sight, on every path: where the keys in sight lie in
// one chunk and all of them straddle two (attn_fused or attn_cluster
// against the split path), and where both straddle; with two batch rows,
// without a causal mask (a window alone), and with no key in sight.
func TestAttentionSeesOnlyVisibleKeys(t *testing.T) {
	g := backendOrSkip(t)
	defer func(all, sp, on, comb bool, cl int) {
		attnAllKeys, attnClusterSplits, fusedAttention, combineInValuesOn, attnClusterBlocks = all, sp, on, comb, cl
	}(attnAllKeys, attnClusterSplits, fusedAttention, combineInValuesOn, attnClusterBlocks)
	fusedAttention, combineInValuesOn = true, true
	// unseen: one row whose 600 keys (positions 0..599) all lie before its
	// query's window (position 2,000, a window of 100).
	unseen := func(*rand.Rand) compute.AttentionOptions {
		o := compute.AttentionOptions{Mask: compute.Causal, Window: 100, KeyPos: make([]int32, 600), QueryPos: []int32{2000}}
		for s := range o.KeyPos {
			o.KeyPos[s] = int32(s)
		}
		return o
	}
	bidirectional := func(o func(*rand.Rand) compute.AttentionOptions) func(*rand.Rand) compute.AttentionOptions {
		return func(r *rand.Rand) compute.AttentionOptions {
			opt := o(r)
			opt.Mask = compute.Bidirectional
			return opt
		}
	}
	cases := []struct {
		name            string
		B, L, S, D      int
		opt             func(*rand.Rand) compute.AttentionOptions
		oneChunkInSight bool // the keys in sight lie in one chunk, all of them in two
	}{
		{"decode, the window straddling position 4,096", 1, 1, 1023, 256, ring(1, 1, 1023, 4100, 512), false},
		{"decode, a window of 100 past position 4,096", 1, 1, 611, 256, ring(1, 1, 611, 4200, 100), true},
		{"verify of 4, a window of 100 past position 4,096", 1, 4, 611, 512, ring(1, 4, 611, 4200, 100), true},
		{"verify of 4, the window straddling position 4,096", 1, 4, 1023, 256, ring(1, 4, 1023, 4100, 512), false},
		{"decode, a window of 512 after position 4,608", 1, 1, 1023, 512, ring(1, 1, 1023, 4700, 512), true},
		{"two rows of a verify of 4, a window of 100 past position 4,096", 2, 4, 611, 256, ring(2, 4, 611, 4200, 100), true},
		{"verify of 4 without a causal mask, a window of 100 past position 4,096", 1, 4, 611, 256, bidirectional(ring(1, 4, 611, 4200, 100)), true},
		{"decode, no key in sight", 1, 1, 600, 256, unseen, false},
	}
	for _, c := range cases {
		for _, cl := range []int{0, 8} { // attn_fused, or attn_cluster where it fits
			for _, splits := range []bool{false, true} {
				attnClusterBlocks, attnClusterSplits = cl, splits
				tc := attnCase("", c.B, c.L, 8, 1, c.S, c.D, c.D, c.opt)
				run := func(all bool) ([]float32, bool) {
					attnAllKeys = all
					before := g.fusedN // attn_fused's passes, and attn_cluster's in its place
					out := g.ToF32(tc.run(g, rand.New(rand.NewPCG(uint64(c.S+c.L), 7)))[0])
					return out, g.fusedN > before
				}
				want, fusedAll := run(true)
				got, fused := run(false)
				if fusedAll && c.oneChunkInSight {
					t.Fatalf("%s: every key visited, the pass took attn_fused's path, not the split path", c.name)
				}
				if c.oneChunkInSight && !fused {
					t.Errorf("%s (cluster %d, splits %v): the keys in sight lie in one chunk, but the pass took the split path", c.name, cl, splits)
				}
				if err := sameBits(got, want); err != nil {
					t.Errorf("%s (cluster %d, splits %v): only the keys in sight against every key: %v", c.name, cl, splits, err)
				}
			}
		}
	}
}

// peakedAttention is a causal pass of L queries over keys keys whose
// queries are positive and 40 times the usual size, so that most keys'
// weights exp(score − max) fall below float32's smallest value. Key 0
// points away from every query and its value row is +Inf: a kernel that
// summed a zero weight's value (0 · Inf) would return NaN, so the sums
// must skip those keys whatever the kernel.
func peakedAttention(L, keys, d int) opCase {
	return opCase{run: func(be compute.Backend, r *rand.Rand) []*compute.Tensor {
		qv := randF32(r, L*4*d)
		for i := range qv {
			qv[i] = 40 * float32(math.Abs(float64(qv[i])))
		}
		kv, vv := randF32(r, keys*2*d), randF32(r, keys*2*d)
		for i := range 2 * d { // key 0, both heads
			kv[i], vv[i] = -50, float32(math.Inf(1))
		}
		q := be.FromF32(qv, 1, L, 4, d)
		k := be.FromF32(kv, 1, keys, 2, d)
		v := be.FromF32(vv, 1, keys, 2, d)
		return []*compute.Tensor{be.Attention(q, k, v, full(1, L, keys, compute.Causal, 0)(r))}
	}}
}

// A single split's attn_values normalises its output itself, with
// attn_combine's arithmetic (TANDEM_CUDA_COMBINE=1): every attention case
// must keep its bits, and so must a matmul of the output, whose split the
// values kernel then writes.
func TestCombineInValuesMatch(t *testing.T) {
	g := backendOrSkip(t)
	defer func(on bool) { combineInValuesOn = on }(combineInValuesOn)
	for _, tc := range opCases {
		if !strings.HasPrefix(tc.name, "Attention/") {
			continue
		}
		combineInValuesOn = false
		want := tc.run(g, rand.New(rand.NewPCG(1, 2)))
		combineInValuesOn = true
		got := tc.run(g, rand.New(rand.NewPCG(1, 2)))
		for i := range want {
			if err := sameBits(g.ToF32(got[i]), g.ToF32(want[i])); err != nil {
				t.Fatalf("%s output %d: %v", tc.name, i, err)
			}
		}
	}
	r := rand.New(rand.NewPCG(17, 18))
	const D = 1536
	w := weight(g, compute.BF16, randF32(r, 200*D), 200, D)
	k, v := g.FromF32(randF32(r, 50*2*(D/4)), 50, 2, D/4), g.FromF32(randF32(r, 50*2*(D/4)), 50, 2, D/4)
	q := g.FromF32(randF32(r, 3*4*(D/4)), 3, 4, D/4)
	product := func(on bool) []float32 {
		combineInValuesOn = on
		a := g.Attention(q, k, v, compute.AttentionOptions{Mask: compute.Causal, QueryPos: []int32{40, 41, 42}})
		return g.ToF32(g.MatMul(a.Reshape(3, D), w))
	}
	if err := sameBits(product(true), product(false)); err != nil {
		t.Fatalf("matmul of the attention output: %v", err)
	}
}

// TestMemInfoCountsCachedBlocks: memory the pool caches for reuse counts
// as free (the engine sizes its KV budget from it), up to the total.
func TestMemInfoCountsCachedBlocks(t *testing.T) {
	g := backendOrSkip(t)
	const n = 64 << 20 // floats: 256 MiB
	g.recycle(g.alloc(compute.F32, n))
	driver, _, err := g.dev.MemInfo()
	if err != nil {
		t.Fatal(err)
	}
	free, total, err := g.MemInfo()
	if err != nil {
		t.Fatal(err)
	}
	if free > total || free < driver+4*n && free < total {
		t.Fatalf("MemInfo free %d of %d with the driver's %d and %d bytes just returned to the pool", free, total, driver, 4*n)
	}
}

// TestAttentionRowsMatchApart protects AttentionRows, a serving step's
// rows attending each to a cache of its own in one pass over a table of
// their addresses: every row's output must be its own Attention's, bit for
// bit, on every kernel path (attn_cluster, attn_fused, the split path with
// and without the values kernel combining) and on every kind of row: full
// caches of different lengths, rings that wrap, a ring partly filled, keys
// that straddle a position chunk, and a row with no key in sight. The
// per-token cache writes of QKVNorms are TestFusedOpsMatch's.
func TestAttentionRowsMatchApart(t *testing.T) {
	g := backendOrSkip(t)
	defer func(on, comb, pk bool, cl int, rows, grp, always bool) {
		fusedAttention, combineInValuesOn, attnPacked, attnClusterBlocks, attnRows = on, comb, pk, cl, rows
		attnGroup, attnGroupAlways = grp, always
	}(fusedAttention, combineInValuesOn, attnPacked, attnClusterBlocks, attnRows, attnGroup, attnGroupAlways)
	attnRows = true
	r := rand.New(rand.NewPCG(61, 62))
	const Hq, Hkv = 4, 2 // few heads, so that four rows of four queries still fit attn_cluster's clusters
	// A row: slots of a cache, positions lo..hi held at slot p % slots
	// (a ring where hi ≥ slots; nil positions for a full cache whose slot p
	// is position p), queried at its last L positions.
	type row struct {
		slots, lo, hi int
		ring          bool
	}
	make1 := func(rw row, L, D int) (compute.AttentionRow, []int32) {
		k := g.FromF32(randF32(r, rw.slots*Hkv*D), rw.slots, Hkv, D)
		v := g.FromF32(randF32(r, rw.slots*Hkv*D), rw.slots, Hkv, D)
		a := compute.AttentionRow{K: k, V: v}
		if rw.ring {
			a.KeyPos = make([]int32, rw.slots)
			for s := range a.KeyPos {
				a.KeyPos[s] = -1
			}
			for p := rw.lo; p <= rw.hi; p++ {
				a.KeyPos[p%rw.slots] = int32(p)
			}
			a.KeyStart = (rw.hi + 1) % rw.slots
		}
		qpos := make([]int32, L)
		for l := range qpos {
			qpos[l] = int32(max(0, rw.hi-L+1+l))
		}
		return a, qpos
	}
	cases := []struct {
		name   string
		window int
		rows   []row
	}{
		{"full caches of 1, 100 and 300 keys", 0, []row{{1, 0, 0, false}, {100, 0, 99, false}, {300, 0, 299, false}}},
		{"sliding rings: wrapped, partly filled, across a chunk", 512, []row{{575, 1500, 2074, true}, {64, 0, 40, true}, {575, 700, 1274, true}, {575, 0, 574, true}}},
		{"full caches straddling a chunk, and one short", 0, []row{{1500, 0, 1499, false}, {1100, 0, 1099, false}, {5, 0, 4, false}}},
		{"a ring with no key in sight", 16, []row{{64, 0, 40, true}, {64, 100, 163, true}}},
	}
	// group: attn_cluster_group wherever it fits (attnGroupAlways); the
	// others leave it out.
	variants := []struct {
		name                   string
		fused, combine, packed bool
		cluster                int
		group                  bool
	}{
		{"attn_cluster", true, true, false, 8, false},
		{"attn_cluster_group", true, true, false, 8, true},
		{"attn_fused", true, true, false, 0, false},
		{"attn_fused packed", true, true, true, 0, false},
		{"split path", false, true, false, 0, false},
		{"split path with attn_combine", false, false, false, 0, false},
	}
	ran := map[string]int{} // passes by variant, queries a row and the kernel path taken
	for _, D := range []int{64, 256, 512} {
		for _, L := range []int{1, 4} {
			for _, tc := range cases {
				var kv []compute.AttentionRow
				var qpos []int32
				for _, rw := range tc.rows {
					a, qp := make1(rw, L, D)
					kv, qpos = append(kv, a), append(qpos, qp...)
				}
				// The window hides the queries' own early keys: a row whose
				// queries see nothing yields zeros, on both paths.
				if tc.window == 16 {
					for i := range qpos[:L] {
						qpos[i] = 100
					}
				}
				q := g.FromF32(randF32(r, len(kv)*L*Hq*D), len(kv), L, Hq, D)
				opt := compute.AttentionOptions{Scale: 0.5, Mask: compute.Causal, Window: tc.window, QueryPos: qpos}
				for _, vr := range variants {
					fusedAttention, combineInValuesOn, attnPacked, attnClusterBlocks = vr.fused, vr.combine, vr.packed, vr.cluster
					attnGroup, attnGroupAlways = vr.group, vr.group
					name := fmt.Sprintf("head %d, %d queries, %s, %s", D, L, tc.name, vr.name)
					want := g.ToF32(compute.AttendRowsApart(g, q, kv, opt))
					before, fusedBefore, clBefore, grpBefore := g.attnRowsN, g.fusedN, g.attnClN, g.clGroupN
					got := g.ToF32(g.AttentionRows(q, kv, opt))
					if g.attnRowsN == before {
						t.Fatalf("%s: the rows did not run as one pass", name)
					}
					if g.clGroupN > grpBefore {
						ran[fmt.Sprintf("%s, %d queries: attn_cluster_group", vr.name, L)]++
					} else if g.attnClN > clBefore {
						ran[fmt.Sprintf("%s, %d queries: attn_cluster", vr.name, L)]++
					} else if g.fusedN > fusedBefore {
						ran[fmt.Sprintf("%s, %d queries: attn_fused", vr.name, L)]++
					} else {
						ran[fmt.Sprintf("%s, %d queries: split path", vr.name, L)]++
					}
					if err := sameBits(got, want); err != nil {
						t.Fatalf("%s: %v", name, err)
					}
				}
			}
		}
	}
	// Every variant must have taken its own path for both query counts
	// (a pass the cluster cannot hold takes attn_fused, so it may do both).
	for _, vr := range variants {
		path := map[bool]string{true: "attn_fused", false: "split path"}[vr.fused]
		if vr.cluster > 0 && g.attnClusterMax > 0 {
			path = "attn_cluster"
			if vr.group {
				path = "attn_cluster_group"
			}
		}
		for _, L := range []int{1, 4} {
			if key := fmt.Sprintf("%s, %d queries: %s", vr.name, L, path); ran[key] == 0 {
				t.Errorf("%s never ran (paths taken: %v)", key, ran)
			}
		}
	}
	// Rows of a length the tiled kernels take go one Attention a row.
	a, _ := make1(row{64, 0, 40, true}, 16, 64)
	q := g.FromF32(randF32(r, 2*16*Hq*64), 2, 16, Hq, 64)
	qpos := make([]int32, 2*16)
	for i := range qpos {
		qpos[i] = int32(25 + i%16)
	}
	before := g.attnRowsN
	g.AttentionRows(q, []compute.AttentionRow{a, a}, compute.AttentionOptions{Mask: compute.Causal, QueryPos: qpos})
	if g.attnRowsN != before {
		t.Error("rows of 16 queries ran as one pass")
	}
}
