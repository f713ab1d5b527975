package spec_test

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"tandem/generation"
	"tandem/model/gemma4"
	"tandem/sample"
	"tandem/spec"
)

// TestProposeBatchEqualsAlone: drafting for many sequences in one batch
// gives each sequence the drafts (and draft distributions) it gets alone,
// whatever the mix of depths and of greedy and sampling drafters.
func TestProposeBatchEqualsAlone(t *testing.T) {
	m, a := pair(t, "gemma4-tiny-e2b")
	V := m.Config.Text.VocabSize
	params := []sample.Params{
		{},
		{Temperature: 1, Seed: 1},
		{Temperature: 50, Seed: 2}, // no filter: the centroid head's fill values matter
		{Temperature: 0.8, TopK: 10, FrequencyPenalty: 1, PresencePenalty: 0.5, Seed: 3},
		{RepetitionPenalty: 1.5},
	}
	ks := []int{3, 1, 4, 2, 3}
	var rounds []spec.Round
	for i := range params {
		p := prompt(10+7*i, V, uint64(i))
		cache := m.NewCache(len(p))
		out, err := m.Forward([]gemma4.Row{{Tokens: p, Cache: cache}}, gemma4.ForwardOptions{Logits: gemma4.LogitsNone})
		if err != nil {
			t.Fatal(err)
		}
		hist := append(slices.Clone(p), int32(7+i)) // a pending token
		rounds = append(rounds, spec.Round{Pending: int32(7 + i), Hidden: m.Backend().Slice(out.Hidden, len(p)-1, len(p)),
			Snap: m.Snapshot(cache), History: hist, Prompt: len(p) - 2, K: ks[i]})
	}
	drafters := func() []*spec.Assistant {
		var ds []*spec.Assistant
		for _, p := range params {
			d, err := spec.NewAssistant(a, gemma4.DraftOptions{}, p)
			if err != nil {
				t.Fatal(err)
			}
			ds = append(ds, d)
		}
		return ds
	}
	batch, err := spec.ProposeBatch(drafters(), rounds)
	if err != nil {
		t.Fatal(err)
	}
	for i, d := range drafters() {
		one, err := d.Propose(rounds[i])
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(batch[i].Tokens, one.Tokens) || len(one.Tokens) != ks[i] {
			t.Errorf("sequence %d: batched drafts %v, alone %v", i, batch[i].Tokens, one.Tokens)
		}
		if fmt.Sprint(batch[i].Probs) != fmt.Sprint(one.Probs) {
			t.Errorf("sequence %d: batched draft distributions differ from alone", i)
		}
	}
	if _, err := spec.ProposeBatch(drafters()[:2], rounds); err == nil {
		t.Error("ProposeBatch accepted 2 drafters for 5 rounds")
	}
}

// TestPenalisedGreedySpeculativeEqualsPlain: frequency and presence
// penalties enter the greedy walk exactly as plain decoding applies them.
func TestPenalisedGreedySpeculativeEqualsPlain(t *testing.T) {
	m, a := pair(t, "gemma4-tiny-e2b")
	p := prompt(30, m.Config.Text.VocabSize, 12)
	for _, sp := range []sample.Params{
		{FrequencyPenalty: 2},
		{PresencePenalty: 1.5, RepetitionPenalty: 1.2},
		{FrequencyPenalty: -1, PresencePenalty: -0.5},
	} {
		opt := generation.Options{MaxTokens: 40, Sample: sp}
		want := plain(t, m, p, opt).Tokens
		free := plain(t, m, p, generation.Options{MaxTokens: 40}).Tokens
		if slices.Equal(want, free) {
			t.Errorf("%+v: the penalties changed nothing; the test would not see them ignored", sp)
		}
		for _, k := range []int{1, 3} {
			got := speculative(t, m, assistant(t, a, gemma4.DraftOptions{}, sp), p, opt, k)
			if !slices.Equal(got.Tokens, want) {
				t.Errorf("%+v, k=%d: speculative %v, plain %v", sp, k, got.Tokens, want)
			}
			// Forced agreement with the penalised continuation.
			got = speculative(t, m, scripted{len(p), want, 0, m.Config.Text.VocabSize}, p, opt, k)
			if !slices.Equal(got.Tokens, want) || got.Stats.Accepted == 0 {
				t.Errorf("%+v, k=%d, scripted: %v (%d accepted), plain %v", sp, k, got.Tokens, got.Stats.Accepted, want)
			}
		}
	}
	_, err := spec.Generate(context.Background(), m, assistant(t, a, gemma4.DraftOptions{}, sample.Params{}), p,
		spec.Options{Options: generation.Options{MaxTokens: 3, Sample: sample.Params{FrequencyPenalty: 3}}, DraftTokens: 2}, nil)
	if err == nil {
		t.Error("spec.Generate accepted frequency_penalty 3")
	}
}
