package gemma4_test

import (
	"testing"

	"tandem/compute/computetest"
	"tandem/model/gemma4"
	"tandem/model/gemma4/gemma4test"
)

// TestPrefillFLOPsCountsThePass protects bench's share of the tensor-core
// peak: PrefillFLOPs, worked out from the weights and the layers' windows,
// equals the multiply-adds a prompt pass really makes, counted op by op
// (computetest.Counting: its products and the keys each query's options
// let it see). Every tiny preset, dense, KV-shared and MoE, at prompts
// shorter and longer than their sliding windows, in one pass and in
// chunks, its weights stacked or not.
func TestPrefillFLOPsCountsThePass(t *testing.T) {
	for _, preset := range tinyTargets {
		for _, n := range []int{1, 9, 40} {
			counter := &computetest.Counting{Backend: computetest.Backend(t)}
			m := gemma4test.Random(t, preset, counter)
			ids := randomTokens(n, m.Config.Text.VocabSize, 5)
			counter.FLOPs = 0
			if _, err := m.Forward([]gemma4.Row{{Tokens: ids, Cache: m.NewCache(n)}}, gemma4.ForwardOptions{Logits: gemma4.LogitsLast, Prompt: true}); err != nil {
				t.Fatal(err)
			}
			if got, want := m.PrefillFLOPs(n), counter.FLOPs; got != want {
				t.Errorf("%s, %d tokens: PrefillFLOPs %.0f, the pass made %.0f", preset, n, got, want)
			}
			// In chunks of 9 (bench's --prefill-size; a sliding layer's ring
			// wraps), the last one's logits alone: the same work.
			counter.FLOPs = 0
			cache := m.NewCache(9)
			for s := 0; s < n; s += 9 {
				logits := gemma4.LogitsNone
				if s+9 >= n {
					logits = gemma4.LogitsLast
				}
				if _, err := m.Forward([]gemma4.Row{{Tokens: ids[s:min(s+9, n)], Cache: cache}}, gemma4.ForwardOptions{Logits: logits, Prompt: true}); err != nil {
					t.Fatal(err)
				}
			}
			if got, want := m.PrefillFLOPs(n), counter.FLOPs; got != want {
				t.Errorf("%s, %d tokens in chunks of 9: PrefillFLOPs %.0f, the passes made %.0f", preset, n, got, want)
			}
			// Loaded stacked (the GPU's q, k, v and gate, up as views of one
			// tensor each), the count is the same.
			stacked := gemma4test.Random(t, preset, &computetest.Stacking{Backend: computetest.Backend(t)})
			if got, want := stacked.PrefillFLOPs(n), m.PrefillFLOPs(n); got != want {
				t.Errorf("%s, %d tokens: PrefillFLOPs %.0f stacked, %.0f not", preset, n, got, want)
			}
		}
	}
}
