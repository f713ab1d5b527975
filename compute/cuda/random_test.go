package cuda

import (
	"math"
	"math/rand/v2"
	"testing"

	"tandem/compute"
)

// TestRandomWeightMatchesMathRand protects random_uniform
// (compute.RandomWeighter): every element must be the one math/rand/v2
// draws on the host in order, stream by stream, as model/gemma4's random
// weights are made: across streams (blocks of 1 << 20 elements), the
// kernel's runs of 4,096 and a ragged end, in each float dtype, and for
// fills that share a tensor.
func TestRandomWeightMatchesMathRand(t *testing.T) {
	b := backendOrSkip(t)
	const block = 1 << 20
	fills := []compute.RandomFill{
		{Off: 0, N: 1100 * 1001, Key: 0x1234, Block: block, Center: 0, HalfWidth: 0.0346},
		{Off: 1100 * 1001, N: 300, Key: 99, Block: block, Center: 1, HalfWidth: 0.17},
		{Off: 1100*1001 + 300, N: 37 * 129, Key: ^uint64(0), Block: 1000, Center: -0.5, HalfWidth: 3.4}, // runs of a whole block
	}
	n := 0
	for _, f := range fills {
		n += f.N
	}
	want := make([]float32, n)
	for _, f := range fills {
		var r *rand.Rand
		for e := range f.N {
			if e%f.Block == 0 {
				r = rand.New(rand.NewPCG(f.Key, uint64(e/f.Block)))
			}
			want[f.Off+e] = float32(f.Center + float64(f.HalfWidth*(2*r.Float64()-1))) // not fused
		}
	}
	for _, dt := range []compute.DType{compute.BF16, compute.F32, compute.F16} {
		w, err := b.RandomWeight(dt, []int{n}, fills)
		if err != nil {
			t.Fatal(err)
		}
		got := b.ToF32(w)
		for i, v := range want {
			switch dt {
			case compute.BF16:
				v = compute.RoundBF16(v)
			case compute.F16:
				v = compute.F16ToF32(compute.F32ToF16(v))
			}
			if math.Float32bits(got[i]) != math.Float32bits(v) {
				t.Fatalf("%v: element %d is %v, math/rand/v2 gives %v", dt, i, got[i], v)
			}
		}
	}
	for _, bad := range [][]compute.RandomFill{{{Off: 5, N: 6, Block: 1}}, {{Off: 0, N: 5, Block: 1}},
		{{Off: 0, N: 6, Block: 1}, {Off: 5, N: 5, Block: 1}}} {
		if _, err := b.RandomWeight(compute.BF16, []int{10}, bad); err == nil {
			t.Fatalf("fills %+v of 10 elements were accepted (past the end, short, overlapping)", bad)
		}
	}
}
