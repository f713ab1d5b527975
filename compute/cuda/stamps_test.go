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
// every launch of three recorded steps under programmatic launch, run as
// graphs, and of a direct call after them gets its stamp, in order; every
// share but the last is positive; the steps stamp the same kernels in the
// same order. It logs the smallest share and how many shares are whole
// microseconds, which says the global timer's resolution.
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
	step := func() {
		h := g.RMSNorm(x, norm, 1e-6)
		y := g.MatMul(h, w)
		g.Add(y, y)
	}
	step() // allocations and splits made before the stamped steps
	// A site's first step runs op by op (it is not recorded), so the
	// site's first recording comes before the stamped steps too.
	end := compute.Record(g, "decode")
	step()
	end()
	if err := g.Sync(); err != nil {
		t.Fatal(err)
	}
	before := g.dev.GraphStats()
	if err := g.StartStamps(1 << 12); err != nil {
		t.Fatal(err)
	}
	const steps = 3
	for range steps {
		end := compute.Record(g, "decode") // a plain step's site: its kernels launch with PDL
		step()
		end()
	}
	g.Add(x, x) // outside a recording
	got, err := g.StopStamps()
	if err != nil {
		t.Fatal(err)
	}
	if after := g.dev.GraphStats(); after.Launched < before.Launched+steps || after.Fallbacks != before.Fallbacks {
		t.Fatalf("%d steps launched as graphs and %d fell back, want %d and 0", after.Launched-before.Launched, after.Fallbacks-before.Fallbacks, steps)
	}
	if (len(got)-1)%steps != 0 || len(got) < 1+3*steps {
		t.Fatalf("%d stamped launches: not %d steps of the same launches and one more", len(got), steps)
	}
	per := (len(got) - 1) / steps
	smallest, whole := time.Duration(1<<62), 0
	for i, s := range got {
		if i+1 < len(got) && s.Share <= 0 {
			t.Fatalf("launch %d (%s) has share %v: stamps out of order", i, s.Name, s.Share)
		}
		if i < len(got)-1 && s.Name != got[i%per].Name {
			t.Fatalf("launch %d is %s, the first step's launch %d was %s", i, s.Name, i%per, got[i%per].Name)
		}
		if s.Share > 0 {
			smallest = min(smallest, s.Share)
			if s.Share%time.Microsecond == 0 {
				whole++
			}
		}
	}
	names := map[string]bool{}
	for _, s := range got[:per] {
		names[strings.SplitN(s.Name, "_", 2)[0]] = true
	}
	for _, n := range []string{"rmsnorm", "matmul", "binary"} {
		if !names[n] {
			t.Errorf("no %s kernel among a step's stamped launches %v", n, names)
		}
	}
	t.Logf("%d launches a step; smallest share %v, %d of %d shares whole microseconds", per, smallest, whole, len(got)-1)
}
