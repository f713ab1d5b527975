// Package computetest picks the backend tests run on: the CPU by default,
// the GPU with TANDEM_TEST_BACKEND=cuda, so model-level tests (HF parity,
// batch invariance, speculative exactness) run unchanged on both.
package computetest

import (
	"os"
	"sort"
	"sync"
	"testing"

	"tandem/compute"
	"tandem/compute/cpu"
	"tandem/compute/cuda"
)

// Env names the variable that selects the backend ("cpu" or "cuda").
const Env = "TANDEM_TEST_BACKEND"

var (
	once sync.Once
	gpu  *cuda.Backend
	err  error
)

// Backend returns the backend selected by $TANDEM_TEST_BACKEND. The GPU
// backend is opened once per test binary; a failure to open it fails the
// test (asking for the GPU where there is none is a mistake, not a skip).
func Backend(t testing.TB) compute.Backend {
	t.Helper()
	switch v := os.Getenv(Env); v {
	case "", "cpu":
		return cpu.New(0)
	case "cuda":
		once.Do(func() { gpu, err = cuda.New(0) })
		if err != nil {
			t.Fatalf("%s=cuda: %v", Env, err)
		}
		return gpu
	default:
		t.Fatalf("%s=%q: want cpu or cuda", Env, v)
		return nil
	}
}

// Stacking wraps a backend with compute.Stacker computed as separate
// MatMuls (the same bits as the backend alone), so models load their
// weights stacked and take their stacked paths on the CPU too.
type Stacking struct {
	compute.Backend
	Calls int // MatMuls calls
}

// MatMuls implements compute.Stacker.
func (b *Stacking) MatMuls(x *compute.Tensor, ws ...*compute.Tensor) []*compute.Tensor {
	b.Calls++
	out := make([]*compute.Tensor, len(ws))
	for i, w := range ws {
		out[i] = b.MatMul(x, w)
	}
	return out
}

// Routing wraps a backend with compute.Router done through host reads and
// the backend's own ops (the same bits), so models take their on-device
// expert routing path on the CPU too.
type Routing struct {
	compute.Backend
	Calls int // RouteExperts calls
}

// Routes implements compute.Router, for any number of tokens.
func (b *Routing) Routes(*compute.Tensor, int) bool { return true }

// RouteExperts implements compute.Router.
func (b *Routing) RouteExperts(vals, idx, perExpert *compute.Tensor) (experts, scales *compute.Tensor) {
	b.Calls++
	v, ids, pe := b.ToF32(vals), b.ToI32(idx), b.ToF32(perExpert)
	var sum float32
	for _, x := range v {
		sum += x
	}
	type pick struct {
		e int32
		s float32
	}
	picks := make([]pick, len(v))
	for j := range v {
		picks[j] = pick{ids[j], v[j] / sum * pe[ids[j]]}
	}
	sort.Slice(picks, func(i, j int) bool { return picks[i].e < picks[j].e })
	es, ss := make([]int32, len(v)), make([]float32, len(v))
	for j, p := range picks {
		es[j], ss[j] = p.e, p.s
	}
	return b.FromI32(es, len(es)), b.FromF32(ss, len(ss))
}

// MatMulAt implements compute.Router.
func (b *Routing) MatMulAt(x, w, experts *compute.Tensor, slot, off, n int) *compute.Tensor {
	e := int(b.ToI32(experts)[slot])
	return b.MatMul(x, b.Slice(b.Index(w, e), off, off+n))
}

// AddRowAt implements compute.Router.
func (b *Routing) AddRowAt(dst, src, scales *compute.Tensor, slot int) {
	b.AddRows(dst, src, []int32{0}, []float32{b.ToF32(scales)[slot]})
}
