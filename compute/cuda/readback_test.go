package cuda

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"tandem/compute"
)

// Prefetch must hand over the values the tensor had when it was queued,
// whatever is issued after it (here a long spin and a write into the same
// memory), for more prefetches at once than there are pinned slots (the
// rest are read synchronously), and in the order they are waited for or
// not.
func TestPrefetch(t *testing.T) {
	g := backendOrSkip(t)
	r := rand.New(rand.NewPCG(21, 22))
	const n = readSlots + 8
	type job struct {
		want []uint32
		wait func() []uint32
	}
	var jobs []job
	for i := range n {
		var want []uint32
		var x *compute.Tensor
		if i%2 == 0 {
			v := randF32(r, 1+i%7)
			x = g.FromF32(v, len(v))
			for _, f := range v {
				want = append(want, math.Float32bits(f))
			}
		} else {
			v := []int32{int32(i), -int32(i)}
			x = g.FromI32(v, 2)
			want = []uint32{uint32(v[0]), uint32(v[1])}
		}
		wait := g.Prefetch(x)
		g.Spin(200 * time.Microsecond)
		g.Copy(x, 0, g.Zeros(x.DType(), x.Shape()...)) // queued after the copy: must not show
		jobs = append(jobs, job{want, wait})
	}
	for i := n - 1; i >= 0; i-- { // waited for in reverse
		if got := jobs[i].wait(); !slices.Equal(got, jobs[i].want) {
			t.Fatalf("prefetch %d: %v, want %v", i, got, jobs[i].want)
		}
	}
	// Slots are free again: a prefetch behind a long spin returns before
	// work issued after it finishes.
	x := g.FromI32([]int32{7}, 1)
	wait := g.Prefetch(x)
	g.Spin(300 * time.Millisecond)
	start := time.Now()
	if got := wait(); got[0] != 7 {
		t.Fatalf("got %v, want [7]", got)
	}
	if d := time.Since(start); d > 200*time.Millisecond {
		t.Errorf("waiting for a prefetch took %v: it waited for the spin queued after it", d)
	}
	g.Sync()
}

// GatherAt with ids on the device must give Gather's rows.
func TestGatherAtMatchesGather(t *testing.T) {
	g := backendOrSkip(t)
	r := rand.New(rand.NewPCG(23, 24))
	for _, dt := range []compute.DType{compute.F32, compute.BF16} {
		table := weight(g, dt, randF32(r, 50*24), 50, 24)
		ids := []int32{3, 49, 0, 3}
		want := g.ToF32(g.Gather(table, ids))
		if err := sameBits(g.ToF32(g.GatherAt(table, g.FromI32(ids, len(ids)))), want); err != nil {
			t.Fatalf("%v table: %v", dt, err)
		}
	}
}
