// Package computetest picks the backend tests run on: the CPU by default,
// the GPU with TANDEM_TEST_BACKEND=cuda, so model-level tests (HF parity,
// batch invariance, speculative exactness) run unchanged on both.
package computetest

import (
	"os"
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
