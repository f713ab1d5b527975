package cuda

import (
	"math/rand/v2"
	"slices"
	"sort"
	"testing"

	"tandem/compute"
)

// TestRouterMatchesHost protects the on-device expert routing
// (compute.Router): the experts in ascending id with the host's float32
// scales, each expert's product on its rows as MatMul on the same rows
// (the bits, K split included), and the scaled add as AddRows.
func TestRouterMatchesHost(t *testing.T) {
	g := backendOrSkip(t)
	r := rand.New(rand.NewPCG(19, 20))
	const E, k, I, H = 8, 3, 96, 1536
	gateUp := weight(g, compute.BF16, randF32(r, E*2*I*H), E, 2*I, H)
	down := weight(g, compute.BF16, randF32(r, E*H*I), E, H, I)
	pe := weight(g, compute.BF16, randF32(r, E), E)
	vals, idx := g.TopK(g.Softmax(g.FromF32(randF32(r, E), 1, E)), k)

	experts, scales := g.RouteExperts(vals, idx, pe)
	v, ids, pes := g.ToF32(vals), g.ToI32(idx), g.ToF32(pe)
	var sum float32
	for _, x := range v {
		sum += x
	}
	want := make([]int, k)
	for j := range want {
		want[j] = j
	}
	sort.Slice(want, func(a, b int) bool { return ids[want[a]] < ids[want[b]] })
	gotE, gotS := g.ToI32(experts), g.ToF32(scales)
	for j, src := range want {
		if gotE[j] != ids[src] {
			t.Fatalf("experts %v, want the ids %v in ascending order", gotE, ids)
		}
		if s := v[src] / sum * pes[ids[src]]; gotS[j] != s {
			t.Fatalf("expert %d's scale %v, host %v", gotE[j], gotS[j], s)
		}
	}

	x := g.FromF32(randF32(r, H), 1, H)
	for j := range k {
		e := int(gotE[j])
		for _, c := range []struct{ off, n int }{{0, 2 * I}, {I, I}} {
			got := g.ToF32(g.MatMulAt(x, gateUp, experts, j, c.off, c.n))
			ref := g.ToF32(g.MatMul(x, g.Slice(g.Index(gateUp, e), c.off, c.off+c.n)))
			if err := sameBits(got, ref); err != nil {
				t.Fatalf("slot %d (expert %d) rows [%d, %d): %v", j, e, c.off, c.off+c.n, err)
			}
		}
		act := g.FromF32(randF32(r, I), 1, I)
		y := g.MatMulAt(act, down, experts, j, 0, H)
		if err := sameBits(g.ToF32(y), g.ToF32(g.MatMul(act, g.Index(down, e)))); err != nil {
			t.Fatalf("slot %d (expert %d) down: %v", j, e, err)
		}
		base := randF32(r, H)
		dst, ref := g.FromF32(base, 1, H), g.FromF32(base, 1, H)
		g.AddRowAt(dst, y, scales, j)
		g.AddRows(ref, y, []int32{0}, []float32{gotS[j]})
		if err := sameBits(g.ToF32(dst), g.ToF32(ref)); err != nil {
			t.Fatalf("slot %d: AddRowAt: %v", j, err)
		}
	}
	if !slices.IsSorted(gotE) {
		t.Fatalf("experts %v not ascending", gotE)
	}
}
