package gemma4_test

import (
	"testing"

	"tandem/compute"
	"tandem/compute/computetest"
	"tandem/compute/cpu"
	"tandem/model/gemma4"
)

// TestStackedWeightsMatch protects the stacked load (q, k, v and gate, up
// as rows of one tensor) and the models' MatMuls paths: on a backend that
// stacks but computes each product as MatMul does, every tiny preset's
// logits, and its drafter's logits and next hidden, are the bits of the
// plain backend. A weight stacked in the wrong rows or order, or a
// projection read from the wrong product, changes them.
func TestStackedWeightsMatch(t *testing.T) {
	for _, name := range []string{"gemma4-tiny-e2b", "gemma4-tiny-e4b", "gemma4-tiny-26b-a4b", "gemma4-tiny-31b"} {
		t.Run(name, func(t *testing.T) {
			p, err := gemma4.LookupPreset(name)
			if err != nil {
				t.Fatal(err)
			}
			ap, err := gemma4.LookupPreset(name + "-assistant")
			if err != nil {
				t.Fatal(err)
			}
			run := func(b compute.Backend) (logits, draft, next []float32) {
				m, err := p.Random(b, compute.BF16, 7, gemma4.LoadOptions{})
				if err != nil {
					t.Fatal(err)
				}
				a, err := ap.RandomAssistant(b, compute.BF16, 7, gemma4.LoadOptions{})
				if err != nil {
					t.Fatal(err)
				}
				if err := a.Bind(m); err != nil {
					t.Fatal(err)
				}
				ids := []int32{2, 17, 99, 3, 250, 41, 8}
				cache := m.NewCache(len(ids))
				out, err := m.Forward([]gemma4.Row{{Tokens: ids, Cache: cache}}, gemma4.ForwardOptions{Logits: gemma4.LogitsAll})
				if err != nil {
					t.Fatal(err)
				}
				so, err := a.Step([]gemma4.DraftRow{{Token: 5, Hidden: b.Slice(out.Hidden, len(ids)-1, len(ids)), Snap: m.Snapshot(cache)}}, gemma4.DraftOptions{})
				if err != nil {
					t.Fatal(err)
				}
				return b.ToF32(out.Logits), b.ToF32(a.Logits(so.Normed)), b.ToF32(so.Next)
			}
			stacking := &computetest.Stacking{Backend: cpu.New(0)}
			wantL, wantD, wantN := run(cpu.New(0))
			gotL, gotD, gotN := run(stacking)
			if stacking.Calls == 0 {
				t.Fatal("the models never asked for a stacked product")
			}
			for _, c := range []struct {
				what      string
				got, want []float32
			}{{"target logits", gotL, wantL}, {"drafter logits", gotD, wantD}, {"drafter next hidden", gotN, wantN}} {
				if len(c.got) != len(c.want) {
					t.Fatalf("%s: %d values, want %d", c.what, len(c.got), len(c.want))
				}
				for i := range c.want {
					if c.got[i] != c.want[i] {
						t.Fatalf("%s %d: stacked %v, plain %v", c.what, i, c.got[i], c.want[i])
					}
				}
			}
		})
	}
}

// TestDeviceRoutingMatches protects the MoE layer's on-device routing
// path (compute.Router, and compute.ExpertBatcher's every choice at once):
// decoding the tiny MoE preset through it, a token at a time and several
// tokens a pass (each routed as a lone token), gives the bits of the host
// path.
func TestDeviceRoutingMatches(t *testing.T) {
	p, err := gemma4.LookupPreset("gemma4-tiny-26b-a4b")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		passes [][]int32
		batch  bool
	}{
		{"one token a pass", [][]int32{{2}, {17}, {99}, {3}, {250}, {41}}, false},
		{"several tokens a pass", [][]int32{{2, 17, 99}, {3}, {250, 41, 7, 19}, {5, 6}}, false},
		{"one token a pass, choices batched", [][]int32{{2}, {17}, {99}, {3}, {250}, {41}}, true},
		{"several tokens a pass, choices batched", [][]int32{{2, 17, 99}, {3}, {250, 41, 7, 19}, {5, 6}}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			decode := func(b compute.Backend) [][]float32 {
				m, err := p.Random(b, compute.BF16, 9, gemma4.LoadOptions{})
				if err != nil {
					t.Fatal(err)
				}
				cache := m.NewCache(16)
				var out [][]float32
				for _, toks := range tc.passes {
					o, err := m.Forward([]gemma4.Row{{Tokens: toks, Cache: cache}}, gemma4.ForwardOptions{Logits: gemma4.LogitsAll})
					if err != nil {
						t.Fatal(err)
					}
					out = append(out, b.ToF32(o.Logits))
				}
				return out
			}
			routing := &computetest.Routing{Backend: cpu.New(0), Batch: tc.batch}
			want, got := decode(cpu.New(0)), decode(routing)
			if routing.Calls == 0 {
				t.Fatal("the MoE layers never routed on the device path")
			}
			if several := len(tc.passes[0]) > 1; several != (routing.Tokens > 0) {
				t.Fatalf("%d tokens routed in passes of several, want them iff a pass has several", routing.Tokens)
			}
			for s := range want {
				for i := range want[s] {
					if got[s][i] != want[s][i] {
						t.Fatalf("pass %d logit %d: routed on the device %v, on the host %v", s, i, got[s][i], want[s][i])
					}
				}
			}
		})
	}
}
