package gemma4_test

import (
	"slices"
	"testing"

	"tandem/compute"
	"tandem/compute/cpu"
	"tandem/model/gemma4"
)

// warmRecorder records a pass's compute.WarmL2 hints and the weights of
// its products, in the order the model issues them.
type warmRecorder struct {
	compute.Backend
	events []warmEvent
}

type warmEvent struct {
	warm bool              // a hint; otherwise a product
	ws   []*compute.Tensor // the hint's weights, or the product's one
}

func (r *warmRecorder) WarmL2(ws ...*compute.Tensor) {
	r.events = append(r.events, warmEvent{true, ws})
}

func (r *warmRecorder) MatMul(x, w *compute.Tensor) *compute.Tensor {
	r.events = append(r.events, warmEvent{false, []*compute.Tensor{w}})
	return r.Backend.MatMul(x, w)
}

// TestWarmL2HintsTheNextProducts protects the model's L2 hints
// (compute.WarmL2, TANDEM_CUDA_WARM_L2 on CUDA): each names the weights of
// the very next products, in their order, so that a backend warms what is
// read next and nothing else; every layer hints its o projection, its
// gate and up, and the next layer's first product, on every tiny preset
// (shared KV, keys as values, MoE, per-layer inputs).
func TestWarmL2HintsTheNextProducts(t *testing.T) {
	for _, name := range []string{"gemma4-tiny-e2b", "gemma4-tiny-26b-a4b", "gemma4-tiny-31b"} {
		t.Run(name, func(t *testing.T) {
			p, err := gemma4.LookupPreset(name)
			if err != nil {
				t.Fatal(err)
			}
			r := &warmRecorder{Backend: cpu.New(0)}
			m, err := p.Random(r, compute.BF16, 7, gemma4.LoadOptions{})
			if err != nil {
				t.Fatal(err)
			}
			ids := []int32{2, 17, 99}
			r.events = nil
			if _, err := m.Forward([]gemma4.Row{{Tokens: ids, Cache: m.NewCache(len(ids))}}, gemma4.ForwardOptions{}); err != nil {
				t.Fatal(err)
			}
			hints := 0
			for i, e := range r.events {
				if !e.warm {
					continue
				}
				hints++
				var next []*compute.Tensor
				for _, f := range r.events[i+1:] {
					if len(next) == len(e.ws) {
						break
					}
					if f.warm {
						t.Fatalf("hint %d (%d weights) is followed by another hint before its products", hints, len(e.ws))
					}
					next = append(next, f.ws[0])
				}
				if !slices.Equal(next, e.ws) {
					t.Fatalf("hint %d names %d weights that are not the next %d products' (%v against %v)", hints, len(e.ws), len(e.ws), e.ws, next)
				}
			}
			if want := 3*len(m.Config.Text.LayerTypes) - 1; hints != want {
				t.Errorf("%d hints in a pass, want %d (three a layer, none after the last)", hints, want)
			}
		})
	}
}
