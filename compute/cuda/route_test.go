package cuda

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"

	"tandem/compute"
)

// TestRouterMatchesHost protects the on-device expert routing
// (compute.Router and compute.ExpertBatcher) for a lone token and for a
// pass of several: each
// token's experts in ascending id with the host's float32 scales, each
// token's product on its expert's rows as MatMul of that token alone on the
// same rows (the bits, K split included), and the scaled add as AddRows.
func TestRouterMatchesHost(t *testing.T) {
	g := backendOrSkip(t)
	for _, N := range []int{1, 4, 7} {
		t.Run(fmt.Sprintf("tokens=%d", N), func(t *testing.T) { routerMatchesHost(t, g, N) })
	}
}

func routerMatchesHost(t *testing.T, g *Backend, N int) {
	r := rand.New(rand.NewPCG(19, uint64(20+N)))
	const E, k, I, H = 8, 3, 96, 1536
	gateUp := weight(g, compute.BF16, randF32(r, E*2*I*H), E, 2*I, H)
	down := weight(g, compute.BF16, randF32(r, E*H*I), E, H, I)
	pe := weight(g, compute.BF16, randF32(r, E), E)
	vals, idx := g.TopK(g.Softmax(g.FromF32(randF32(r, N*E), N, E)), k)

	experts, scales := g.RouteExperts(vals, idx, pe)
	v, ids, pes := g.ToF32(vals), g.ToI32(idx), g.ToF32(pe)
	gotE, gotS := g.ToI32(experts), g.ToF32(scales)
	if len(gotE) != N*k || len(gotS) != N*k {
		t.Fatalf("%d experts and %d scales for %d tokens of %d", len(gotE), len(gotS), N, k)
	}
	for n := range N {
		var sum float32
		for _, x := range v[n*k : (n+1)*k] {
			sum += x
		}
		want := make([]int, k)
		for j := range want {
			want[j] = n*k + j
		}
		sort.Slice(want, func(a, b int) bool { return ids[want[a]] < ids[want[b]] })
		for j, src := range want {
			if gotE[n*k+j] != ids[src] {
				t.Fatalf("token %d: experts %v, want the ids %v in ascending order", n, gotE[n*k:(n+1)*k], ids[n*k:(n+1)*k])
			}
			if s := v[src] / sum * pes[ids[src]]; gotS[n*k+j] != s {
				t.Fatalf("token %d: expert %d's scale %v, host %v", n, gotE[n*k+j], gotS[n*k+j], s)
			}
		}
		if !slices.IsSorted(gotE[n*k : (n+1)*k]) {
			t.Fatalf("token %d: experts %v not ascending", n, gotE[n*k:(n+1)*k])
		}
	}

	// alone is MatMul of token n of x alone on rows [off, off+c) of
	// expert e of w.
	alone := func(x, w *compute.Tensor, n, e, off, c int) []float32 {
		return g.ToF32(g.MatMul(g.Slice(x, n, n+1), g.Slice(g.Index(w, e), off, off+c)))
	}
	x := g.FromF32(randF32(r, N*H), N, H)
	for j := range k {
		for _, c := range []struct{ off, n int }{{0, 2 * I}, {I, I}} {
			got := g.ToF32(g.MatMulAt(x, gateUp, experts, j, c.off, c.n))
			for n := range N {
				e := int(gotE[n*k+j])
				if err := sameBits(got[n*c.n:(n+1)*c.n], alone(x, gateUp, n, e, c.off, c.n)); err != nil {
					t.Fatalf("slot %d, token %d (expert %d) rows [%d, %d): %v", j, n, e, c.off, c.off+c.n, err)
				}
			}
		}
		act := g.FromF32(randF32(r, N*I), N, I)
		y := g.MatMulAt(act, down, experts, j, 0, H)
		got := g.ToF32(y)
		for n := range N {
			e := int(gotE[n*k+j])
			if err := sameBits(got[n*H:(n+1)*H], alone(act, down, n, e, 0, H)); err != nil {
				t.Fatalf("slot %d, token %d (expert %d) down: %v", j, n, e, err)
			}
		}
		base := randF32(r, N*H)
		dst, ref := g.FromF32(base, N, H), g.FromF32(base, N, H)
		g.AddRowAt(dst, y, scales, j)
		rows, sc := make([]int32, N), make([]float32, N)
		for n := range N {
			rows[n], sc[n] = int32(n), gotS[n*k+j]
		}
		g.AddRows(ref, y, rows, sc)
		if err := sameBits(g.ToF32(dst), g.ToF32(ref)); err != nil {
			t.Fatalf("slot %d: AddRowAt: %v", j, err)
		}
	}

	// Every choice at once (compute.ExpertBatcher): row n·k + j from the
	// token's input (gate/up) or from the choice's own (down).
	got := g.ToF32(g.MatMulExperts(x, gateUp, experts, 0, 2*I))
	acts := g.FromF32(randF32(r, N*k*I), N*k, I)
	ys := g.MatMulExperts(acts, down, experts, 0, H)
	gotDown := g.ToF32(ys)
	for i := range N * k {
		e := int(gotE[i])
		if err := sameBits(got[i*2*I:(i+1)*2*I], alone(x, gateUp, i/k, e, 0, 2*I)); err != nil {
			t.Fatalf("MatMulExperts: token %d choice %d (expert %d) gate/up: %v", i/k, i%k, e, err)
		}
		if err := sameBits(gotDown[i*H:(i+1)*H], alone(acts, down, i, e, 0, H)); err != nil {
			t.Fatalf("MatMulExperts: token %d choice %d (expert %d) down: %v", i/k, i%k, e, err)
		}
	}
	dst, ref := g.SumExperts(ys, scales), g.Zeros(compute.F32, N, H)
	rows := make([]int32, N*k)
	for i := range rows {
		rows[i] = int32(i / k)
	}
	g.AddRows(ref, ys, rows, gotS)
	if err := sameBits(g.ToF32(dst), g.ToF32(ref)); err != nil {
		t.Fatalf("SumExperts: %v", err)
	}
}
