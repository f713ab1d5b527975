package gemma4_test

import (
	"slices"
	"testing"

	"tandem/compute"
	"tandem/compute/computetest"
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
// gate and up, and the next layer's first product (the drafter's last its
// post-projection), in the target and its drafter, on every tiny preset
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
			ap, err := gemma4.LookupPreset(name + "-assistant")
			if err != nil {
				t.Fatal(err)
			}
			a, err := ap.RandomAssistant(r, compute.BF16, 7, gemma4.LoadOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if err := a.Bind(m); err != nil {
				t.Fatal(err)
			}
			ids := []int32{2, 17, 99}
			cache := m.NewCache(len(ids))
			r.events = nil
			out, err := m.Forward([]gemma4.Row{{Tokens: ids, Cache: cache}}, gemma4.ForwardOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if got, want := checkHints(t, "target", r.events), 3*len(m.Config.Text.LayerTypes)-1; got != want {
				t.Errorf("target: %d hints in a pass, want %d (three a layer, none after the last)", got, want)
			}
			r.events = nil
			if _, err := a.Step([]gemma4.DraftRow{{Token: 5, Hidden: r.Slice(out.Hidden, len(ids)-1, len(ids)), Snap: m.Snapshot(cache)}}, gemma4.DraftOptions{}); err != nil {
				t.Fatal(err)
			}
			if got, want := checkHints(t, "drafter", r.events), 3*len(a.Config.Text.LayerTypes); got != want {
				t.Errorf("drafter: %d hints in a step, want %d (three a layer: the last hints the post-projection)", got, want)
			}
		})
	}
}

// checkHints checks that each hint among events names the weights of the
// very next products, in their order, and returns how many hints there
// were.
func checkHints(t *testing.T, what string, events []warmEvent) int {
	t.Helper()
	hints := 0
	for i, e := range events {
		if !e.warm {
			continue
		}
		hints++
		var next []*compute.Tensor
		for _, f := range events[i+1:] {
			if len(next) == len(e.ws) {
				break
			}
			if f.warm {
				t.Fatalf("%s: hint %d (%d weights) is followed by another hint before its products", what, hints, len(e.ws))
			}
			next = append(next, f.ws[0])
		}
		if !slices.Equal(next, e.ws) {
			t.Fatalf("%s: hint %d names %d weights that are not the next %d products' (%v against %v)", what, hints, len(e.ws), len(e.ws), e.ws, next)
		}
	}
	return hints
}

// TestForwardCheckpoints protects ForwardOptions.Checkpoint: a pass of
// several tokens is recorded in parts of checkpointLayers layers (one
// checkpoint in the tiny E2B preset's ten layers), a lone token's pass only
// when asked (a speculative round's verify without drafts, which the device
// waits for), and never a plain decode step, which is issued ahead.
func TestForwardCheckpoints(t *testing.T) {
	p, err := gemma4.LookupPreset("gemma4-tiny-e2b")
	if err != nil {
		t.Fatal(err)
	}
	c := &computetest.Checkpointing{Backend: cpu.New(0)}
	m, err := p.Random(c, compute.BF16, 7, gemma4.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name       string
		tokens     int
		checkpoint bool
		want       int
	}{
		{"three tokens", 3, false, 1},
		{"a lone token", 1, false, 0},
		{"a lone token, asked", 1, true, 1},
	} {
		ids := []int32{2, 17, 99}[:tc.tokens]
		before := c.Calls()
		if _, err := m.Forward([]gemma4.Row{{Tokens: ids, Cache: m.NewCache(len(ids))}}, gemma4.ForwardOptions{Checkpoint: tc.checkpoint}); err != nil {
			t.Fatal(err)
		}
		if n := c.Calls() - before; n != tc.want {
			t.Errorf("%s: %d checkpoints, want %d", tc.name, n, tc.want)
		}
	}
}
