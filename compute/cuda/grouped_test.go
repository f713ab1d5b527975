package cuda

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"tandem/compute"
)

// TestGroupedExpertsMatch protects compute.ExpertGrouper, a prompt pass's
// expert products in one launch: every choice's row is the bits MatMul
// gives its token (or the choice's own input) alone on its expert's rows,
// K splits included, exact and at bf16 (matmul_tiled1's arithmetic there),
// for experts with no choice, with one, and with more than a 64-row tile,
// and passes of more choices than moe_group has threads; SumExperts is
// add_rows over each token's choices into zeros.
func TestGroupedExpertsMatch(t *testing.T) {
	g := backendOrSkip(t)
	prevBLAS := promptBLAS
	t.Cleanup(func() { promptBLAS = prevBLAS; g.SetPrecision(compute.PrecisionExact) })
	promptBLAS = false // a bf16 product alone then takes matmul_tiled1, the grouped kernel's arithmetic
	for _, p := range []compute.Precision{compute.PrecisionExact, compute.PrecisionBF16} {
		for _, N := range []int{1, 9, 150, 400} { // 400 tokens: 1,200 choices, more than moe_group's 1,024 threads
			t.Run(fmt.Sprintf("%v/tokens=%d", p, N), func(t *testing.T) {
				g.SetPrecision(p)
				defer g.SetPrecision(compute.PrecisionExact)
				groupedMatches(t, g, N)
			})
		}
	}
}

func groupedMatches(t *testing.T, g *Backend, N int) {
	r := rand.New(rand.NewPCG(23, uint64(N)))
	// I = 40: 2I = 80 columns, a tile and a part; H = 1536 splits the gate
	// and up product's K.
	const E, k, I, H = 8, 3, 40, 1536
	gateUp := weight(g, compute.BF16, randF32(r, E*2*I*H), E, 2*I, H)
	down := weight(g, compute.BF16, randF32(r, E*H*I), E, H, I)
	if !g.GroupsExperts(gateUp) || !g.GroupsExperts(down) {
		t.Fatal("GroupsExperts refuses the test's aligned weights")
	}
	// Each token's k experts, distinct: expert 7 is never chosen, and a
	// lone token's choices leave others empty; most tokens take expert 0,
	// so that its entries fill more than one tile.
	experts := make([]int32, N*k)
	for n := range N {
		choice := []int32{0}
		if r.IntN(4) == 0 {
			choice = nil
		}
		for len(choice) < k {
			if e := int32(r.IntN(7)); !slices.Contains(choice, e) {
				choice = append(choice, e)
			}
		}
		slices.Sort(choice)
		copy(experts[n*k:], choice)
	}
	count0 := 0
	for n := range N {
		if experts[n*k] == 0 {
			count0++
		}
	}
	if N > 64 && count0 <= 64 {
		t.Fatalf("expert 0 has %d choices: the test wants more than a tile", count0)
	}
	groups := g.GroupExperts(g.FromI32(experts, N, k), E)
	alone := func(x, w *compute.Tensor, row, e, off, c int) []float32 {
		return g.ToF32(g.MatMul(g.Slice(x, row, row+1), g.Slice(g.Index(w, e), off, off+c)))
	}
	x := g.FromF32(randF32(r, N*H), N, H)
	for _, c := range []struct{ off, n int }{{0, 2 * I}, {I, I}} {
		got := g.ToF32(g.MatMulGrouped(x, gateUp, groups, c.off, c.n))
		for i, e := range experts {
			if err := sameBits(got[i*c.n:(i+1)*c.n], alone(x, gateUp, i/k, int(e), c.off, c.n)); err != nil {
				t.Fatalf("gate/up rows [%d, %d): token %d choice %d (expert %d): %v", c.off, c.off+c.n, i/k, i%k, e, err)
			}
		}
	}
	acts := g.FromF32(randF32(r, N*k*I), N*k, I)
	y := g.MatMulGrouped(acts, down, groups, 0, H)
	got := g.ToF32(y)
	for i, e := range experts {
		if err := sameBits(got[i*H:(i+1)*H], alone(acts, down, i, int(e), 0, H)); err != nil {
			t.Fatalf("down: token %d choice %d (expert %d): %v", i/k, i%k, e, err)
		}
	}
	hostScales := randF32(r, N*k)
	scales := g.FromF32(hostScales, N, k)
	ref := g.Zeros(compute.F32, N, H) // each token's choices added in order into zeros, by add_rows
	rows := make([]int32, N*k)
	for i := range rows {
		rows[i] = int32(i / k)
	}
	g.AddRows(ref, y, rows, hostScales)
	if err := sameBits(g.ToF32(g.SumExperts(y, scales)), g.ToF32(ref)); err != nil {
		t.Fatalf("SumExperts: %v", err)
	}
}
