package engine

import (
	"slices"
	"testing"

	"tandem/compute"
	"tandem/sample"
	"tandem/spec"
)

// bf16Prompts runs the shared target's prompt passes at bf16 for the test.
func bf16Prompts(t *testing.T) {
	t.Helper()
	if err := target.SetPromptPrecision(compute.PrecisionBF16); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := target.SetPromptPrecision(compute.PrecisionExact); err != nil {
			t.Error(err)
		}
	})
}

// TestBF16PromptsMatchAlone: with prompt passes at bf16, requests running
// together, prompt chunks beside other requests' decoding (which the
// engine then runs as two passes), produce the tokens they produce alone,
// speculative or plain.
func TestBF16PromptsMatchAlone(t *testing.T) {
	bf16Prompts(t)
	reqs := mixedRequests(t, 12, func(p sample.Params) spec.Drafter { return assistantFor(t, p) })
	e := start(t, Config{Drafter: helper, DraftTokens: 3, Parallel: 4, PrefillSize: 16, CtxSize: 128})
	got := runAll(t, e, reqs)
	t.Setenv(sample.TopsEnv, "0")
	for i, r := range reqs {
		want, reason, _ := alone(t, r, assistantFor(t, r.Sample), 3, 16)
		if g := got[i]; !slices.Equal(g.tokens, want) || g.final.FinishReason != reason {
			t.Errorf("request %d (prompt %d, %+v):\nengine %v (%s)\nalone  %v (%s)", i, len(r.Prompt), r.Sample, g.tokens, g.final.FinishReason, want, reason)
		}
		if r.Sample.Greedy() {
			if plain, _, _ := alone(t, r, nil, 0, 16); !slices.Equal(want, plain) {
				t.Errorf("request %d: speculative %v, plain greedy %v", i, want, plain)
			}
		}
	}
	if n := e.splitSteps.Load(); n == 0 {
		t.Fatal("no step ran prompt chunks beside decoding: the test no longer exercises the split")
	} else {
		t.Logf("%d steps ran their prompt chunks apart", n)
	}
}
