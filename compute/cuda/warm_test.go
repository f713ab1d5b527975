package cuda

import (
	"math/rand/v2"
	"testing"

	"tandem/compute"
)

// TestWarmL2InRecordings protects TANDEM_CUDA_WARM_L2's launches inside
// recorded steps: on the side stream they are forked into the capture and
// must be joined back before it ends (a capture left unjoined fails, and
// its calls run one by one: a fallback), and in the main stream they ride
// the programmatic chain. Either way each step is launched as graphs,
// l2_warm runs, and the products give the bits they give unwarmed.
func TestWarmL2InRecordings(t *testing.T) {
	backendOrSkip(t)
	g := graphsBackend(t)
	defer func(mib int, side bool) { warmL2MiB, warmSide = mib, side }(warmL2MiB, warmSide)
	const N, K = 2048, 1536
	r := rand.New(rand.NewPCG(31, 32))
	w := weight(g, compute.BF16, randF32(r, N*K), N, K)
	x := g.FromF32(randF32(r, K), 1, K)
	warmL2MiB = 0
	y0 := g.MatMul(x, w)
	want := g.ToF32(g.Add(y0, y0))
	for _, side := range []bool{true, false} {
		warmL2MiB, warmSide = 2, side // a share of the weight's 6 MiB: pieces with gaps between
		for step := range 3 {
			before, warmed := g.dev.GraphStats(), g.warmN
			end := compute.Record(g, "decode")
			g.WarmL2(w)
			y := g.MatMul(x, w)
			compute.Checkpoint(g) // a recording's first part ends with the side stream forked
			g.WarmL2(nil, w)
			out := g.Add(y, y)
			end()
			got := g.ToF32(out)
			after := g.dev.GraphStats()
			if err := sameBits(got, want); err != nil {
				t.Fatalf("side %v, step %d: %v", side, step, err)
			}
			if after.Fallbacks != before.Fallbacks || after.Launched < before.Launched+2 {
				t.Fatalf("side %v, step %d: %d recordings fell back and %d launched as graphs, want 0 and 2 or more",
					side, step, after.Fallbacks-before.Fallbacks, after.Launched-before.Launched)
			}
			if g.warmN != warmed+2 {
				t.Fatalf("side %v, step %d: %d l2_warm launches, want 2", side, step, g.warmN-warmed)
			}
		}
		if forked := g.dev.side.stream != 0; side && !forked {
			t.Fatal("no side stream was made: the warming ran in the main stream")
		}
	}
}

// TestWarmShares protects WarmL2's budget: the first weight is warmed
// whole before the next gets any, a weight of less than a piece is
// skipped, and activations (not model weights) are never warmed.
func TestWarmShares(t *testing.T) {
	g := backendOrSkip(t)
	defer func(mib int, side bool) { warmL2MiB, warmSide = mib, side }(warmL2MiB, warmSide)
	warmSide = false
	big := weight(g, compute.BF16, make([]float32, 1<<20), 1024, 1024) // 2 MiB
	tiny := weight(g, compute.BF16, make([]float32, 256), 1, 256)      // 512 bytes
	act := g.Zeros(compute.F32, 1024, 1024)
	for _, c := range []struct {
		mib  int
		ws   []*compute.Tensor
		want int
	}{
		{0, []*compute.Tensor{big}, 0},
		{1, []*compute.Tensor{big, big}, 1}, // the budget spent on the first
		{4, []*compute.Tensor{big, big}, 2},
		{4, []*compute.Tensor{tiny, act, nil, big}, 1},
	} {
		warmL2MiB = c.mib
		before := g.warmN
		g.WarmL2(c.ws...)
		if got := g.warmN - before; got != c.want {
			t.Errorf("%d MiB over %d tensors: %d launches, want %d", c.mib, len(c.ws), got, c.want)
		}
	}
	if err := g.Sync(); err != nil {
		t.Fatal(err)
	}
}
