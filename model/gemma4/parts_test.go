package gemma4_test

import (
	"testing"

	"tandem/compute/computetest"
	"tandem/compute/cpu"
	"tandem/model/gemma4"
	"tandem/model/gemma4/gemma4test"
)

// TestFirstPartCheckpoints protects ForwardOptions.FirstPart, the layers a
// recorded pass takes before its first checkpoint (a speculative verify's
// first part, TANDEM_SPEC_FIRST_PART): a pass of several tokens over the
// tiny E2B preset's layers must checkpoint after the first part, then
// every six layers, never after its last layer, and as before where
// FirstPart is 0.
func TestFirstPartCheckpoints(t *testing.T) {
	c := &computetest.Checkpointing{Backend: cpu.New(0)}
	m := gemma4test.Random(t, "gemma4-tiny-e2b", c)
	L := m.Config.Text.NumHiddenLayers
	ids := randomTokens(4, m.Config.Text.VocabSize, 3)
	for _, first := range []int{0, 1, 2, 5, 6, L - 1, L, L + 3} {
		want := 0 // checkpoints after layers n < L: n = f, f + 6, f + 12, …
		f := first
		if f <= 0 {
			f = 6
		}
		for n := f; n < L; n += 6 {
			want++
		}
		before := c.Calls()
		if _, err := m.Forward([]gemma4.Row{{Tokens: ids, Cache: m.NewCache(8)}}, gemma4.ForwardOptions{Logits: gemma4.LogitsNone, FirstPart: first}); err != nil {
			t.Fatal(err)
		}
		if got := c.Calls() - before; got != want {
			t.Errorf("FirstPart %d over %d layers: %d checkpoints, want %d", first, L, got, want)
		}
	}
}
