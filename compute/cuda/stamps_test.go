package cuda

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"tandem/compute"
)

// TestAttributeStamps protects the pairing of logged launches with their
// modules' stamps: each module's stamps go to its launches in order,
// whatever the interleaving, each launch's share runs to the next
// launch's stamp, and a count that does not match is an error, not a
// shifted attribution.
func TestAttributeStamps(t *testing.T) {
	const ops, mm = 1, 2
	log := []stampLaunch{{"rmsnorm2", ops}, {"matmul_rows", mm}, {"attn_cluster", ops}, {"matmul_rows", mm}, {"rmsnorm2", ops}}
	stamps := map[uintptr][]uint64{ops: {1000, 1500, 4000}, mm: {1200, 3000}}
	got, err := attributeStamps(log, stamps)
	if err != nil {
		t.Fatal(err)
	}
	want := []StepStamp{{"rmsnorm2", 0, 200}, {"matmul_rows", 200, 300}, {"attn_cluster", 500, 1500}, {"matmul_rows", 2000, 1000}, {"rmsnorm2", 3000, 0}}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("launch %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	for _, bad := range []map[uintptr][]uint64{
		{ops: {1000, 1500}, mm: {1200, 3000}},             // a launch without its stamp
		{ops: {1000, 1500, 4000, 5000}, mm: {1200, 3000}}, // a stamp without its launch
	} {
		if _, err := attributeStamps(log, bad); err == nil {
			t.Errorf("stamps %v for %d launches: no error", bad, len(log))
		}
	}
}

// TestStepStamps protects the stamped build on the GPU (run it with
// TANDEM_CUDA_STAMPS=1: the kernels are compiled with stamps only then):
// every launch of a recorded step under programmatic launch, and of
// direct calls, gets its stamp, in order, with shares that add up to the
// run's span.
func TestStepStamps(t *testing.T) {
	backendOrSkip(t)
	if !stampsBuild {
		t.Skip("set TANDEM_CUDA_STAMPS=1 to build the kernels with step stamps")
	}
	g := graphsBackend(t)
	r := rand.New(rand.NewPCG(41, 42))
	const N, K = 2048, 1536
	w := weight(g, compute.BF16, randF32(r, N*K), N, K)
	norm := g.FromF32(randF32(r, K), K)
	x := g.FromF32(randF32(r, K), 1, K)
	if err := g.StartStamps(1 << 12); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for range 3 {
		end := compute.Record(g, "decode") // a plain step's site: its kernels launch with PDL
		h := g.RMSNorm(x, norm, 1e-6)
		y := g.MatMul(h, w)
		g.Add(y, y)
		end()
	}
	g.Add(x, x) // outside a recording
	got, err := g.StopStamps()
	if err != nil {
		t.Fatal(err)
	}
	wall := time.Since(start)
	if len(got) < 10 {
		t.Fatalf("%d stamped launches, want at least 10 (three steps of a norm, a product and an add)", len(got))
	}
	var sum time.Duration
	names := map[string]bool{}
	for i, s := range got {
		if s.Share < 0 || s.At < 0 {
			t.Fatalf("launch %d (%s): at %v, share %v: stamps out of order", i, s.Name, s.At, s.Share)
		}
		sum += s.Share
		names[strings.SplitN(s.Name, "_", 2)[0]] = true
	}
	if sum != got[len(got)-1].At || sum > wall {
		t.Errorf("shares add up to %v, the last stamp is at %v, the run took %v", sum, got[len(got)-1].At, wall)
	}
	for _, n := range []string{"rmsnorm", "matmul", "binary"} {
		if !names[n] {
			t.Errorf("no %s kernel among the stamped launches %v", n, names)
		}
	}
}
