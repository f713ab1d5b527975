package engine

import (
	"context"
	"testing"

	"tandem/compute/computetest"
	"tandem/compute/cpu"
	"tandem/model/gemma4/gemma4test"
	"tandem/sample"
)

// TestStepsCheckpoint protects the engine step's parts: a step is issued
// after the last one's results were read, with the device idle, so its
// pass is recorded in parts (gemma4.ForwardOptions.Checkpoint), a step of
// one sampled token too. The tiny E2B preset's ten layers take one
// checkpoint a pass: the prompt's step, then one a decode step.
func TestStepsCheckpoint(t *testing.T) {
	c := &computetest.Checkpointing{Backend: cpu.New(0)}
	m := gemma4test.Random(t, "gemma4-tiny-e2b", c)
	e, err := New(Config{Model: m, Parallel: 1, CtxSize: 256})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(context.Background())
	const tokens = 5
	g := collect(t, submit(t, e, context.Background(), Request{Prompt: promptOf(6, 1), MaxTokens: tokens, Sample: sample.Params{Temperature: 0.8, Seed: 3}}))
	if len(g.tokens) != tokens {
		t.Fatalf("%d tokens, want %d", len(g.tokens), tokens)
	}
	// The prompt's step, then a step a token after the first (the last
	// token is sampled from the step before it).
	if got, want := c.Calls(), 1+tokens-1; got != want {
		t.Errorf("%d checkpoints for a prompt and %d one-token steps, want %d", got, tokens-1, want)
	}
}
