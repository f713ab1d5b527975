package spec_test

import (
	"context"
	"fmt"
	"math"
	"slices"
	"testing"

	"tandem/compute"
	"tandem/compute/computetest"
	"tandem/compute/cpu"
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
	params := []sample.Params{
		{},
		{Temperature: 1, Seed: 1},
		{Temperature: 50, Seed: 2}, // no filter: the centroid head's fill values matter
		{Temperature: 0.8, TopK: 10, FrequencyPenalty: 1, PresencePenalty: 0.5, Seed: 3},
		{RepetitionPenalty: 1.5},
	}
	ks := []int{3, 1, 4, 2, 3}
	rounds := batchRounds(t, m, ks)
	drafters := func() []*spec.Assistant { return assistants(t, a, params) }
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

// TestProposeBatchDrawsAheadAsAlone: on a backend that uploads late,
// sequences that sample from their tops draw their drafts ahead
// (drawAhead), batched, greedy ones among them taking their tops' first,
// and each gets the drafts and distributions it gets alone from whole
// rows, for the centroid head and the full one. Also where tops do not
// decide, which both swap the first two ids so that a top taken anyway
// shows: a NaN first (SpoilTops; a fresh backend's first spoilt read is
// row 1's, a greedy sequence's, and then the rows in turn) sends the round
// back to whole rows after its first steps, and the greedy row to the
// argmax; a tie for the first (TieTops, on row 0, whose greedy sequence
// drafts in every step) sends that row to the argmax.
func TestProposeBatchDrawsAheadAsAlone(t *testing.T) {
	for _, preset := range []string{"gemma4-tiny-e2b", "gemma4-tiny-31b"} {
		t.Run(preset, func(t *testing.T) {
			m, a := pairOn(t, preset, cpu.New(0))
			params := []sample.Params{
				{},
				{RepetitionPenalty: 1.5}, // greedy drafting takes no penalty
				{Temperature: 1, TopK: 5, Seed: 1},
				{Temperature: 0.8, TopK: 8, TopP: 0.9, Seed: 2},
				{Temperature: 1.2, TopK: 3, MinP: 0.05, Seed: 3},
			}
			ks := []int{4, 4, 3, 1, 4}
			rounds := func(m *gemma4.Model) []spec.Round { return batchRounds(t, m, ks) }
			drafters := func(a *gemma4.Assistant) []*spec.Assistant { return assistants(t, a, params) }
			t.Setenv(sample.TopsEnv, "0")
			var want []spec.Proposal
			for i, d := range drafters(a) {
				one, err := d.Propose(rounds(m)[i])
				if err != nil {
					t.Fatal(err)
				}
				want = append(want, one)
			}
			t.Setenv(sample.TopsEnv, "1")
			for _, c := range []struct{ spoil, tie int }{{0, 0}, {1, 0}, {2, 0}, {3, 0}, {0, 1}, {0, 2}} {
				late := &computetest.Late{Backend: cpu.New(0), SpoilTops: c.spoil, TieTops: c.tie}
				lm, la := pairOn(t, preset, late) // the same numbers as m's
				batch, err := spec.ProposeBatch(drafters(la), rounds(lm))
				if err != nil {
					t.Fatal(err)
				}
				if late.Calls() == 0 {
					t.Fatalf("spoil %d, tie %d: nothing was drawn ahead", c.spoil, c.tie)
				}
				for i := range params {
					if !slices.Equal(batch[i].Tokens, want[i].Tokens) || !sameDists(batch[i].Probs, want[i].Probs, lm.Config.Text.VocabSize) {
						t.Errorf("spoil %d, tie %d, sequence %d: drawn ahead %v, alone from whole rows %v (or their distributions differ)",
							c.spoil, c.tie, i, batch[i].Tokens, want[i].Tokens)
					}
				}
			}
		})
	}
}

// TestDrawBatchPicksAsAlone: sequences that all draft greedily, batched,
// have their drafts picked on the backend (DrawBatch's pickAhead), each
// step embedding the last one's picks unread, and each gets the drafts it
// gets alone on the host: the tokens the verify takes, and the proposal
// read after it, for the centroid head and the full one, with and without
// a backend that reads asynchronously (copies queued behind each step).
func TestDrawBatchPicksAsAlone(t *testing.T) {
	for _, preset := range []string{"gemma4-tiny-e2b", "gemma4-tiny-31b"} {
		for _, async := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/async=%v", preset, async), func(t *testing.T) {
				var be compute.Backend = cpu.New(0)
				var pb *computetest.Prefetching
				if async {
					pb = &computetest.Prefetching{Backend: cpu.New(0)}
					be = pb
				}
				m, a := pairOn(t, preset, be)
				params := []sample.Params{{}, {RepetitionPenalty: 1.5}, {}, {FrequencyPenalty: 1}}
				ks := []int{3, 1, 4, 2}
				var want []spec.Proposal
				for i, d := range assistants(t, a, params) {
					one, err := d.Propose(batchRounds(t, m, ks)[i])
					if err != nil {
						t.Fatal(err)
					}
					want = append(want, one)
				}
				dr, err := spec.DrawBatch(assistants(t, a, params), batchRounds(t, m, ks))
				if err != nil || dr == nil {
					t.Fatalf("DrawBatch: %v, %v; want greedy drafts picked ahead", dr, err)
				}
				toks := dr.Tokens()
				ok, err := dr.Finish()
				if err != nil {
					t.Fatal(err)
				}
				props, err := dr.Proposals()
				if err != nil {
					t.Fatal(err)
				}
				for i := range params {
					got := m.Backend().ToI32(toks[i])
					if !ok[i] || !slices.Equal(got, want[i].Tokens) || !slices.Equal(props[i].Tokens, want[i].Tokens) {
						t.Errorf("sequence %d: picked ahead %v (read %v, ok %v), alone %v", i, got, props[i].Tokens, ok[i], want[i].Tokens)
					}
				}
				if pb != nil && (pb.Waiting != 0 || pb.Calls < slices.Max(ks)) {
					t.Errorf("%d copies queued, %d never waited for; want one a draft step (%d), each waited for", pb.Calls, pb.Waiting, slices.Max(ks))
				}
			})
		}
	}
}

// batchRounds prefills a prompt for each of ks on m and makes its round of
// ks[i] drafts, each with a pending token of its own.
func batchRounds(t *testing.T, m *gemma4.Model, ks []int) []spec.Round {
	t.Helper()
	var rs []spec.Round
	for i, k := range ks {
		p := prompt(10+7*i, m.Config.Text.VocabSize, uint64(i))
		cache := m.NewCache(len(p))
		out, err := m.Forward([]gemma4.Row{{Tokens: p, Cache: cache}}, gemma4.ForwardOptions{Logits: gemma4.LogitsNone})
		if err != nil {
			t.Fatal(err)
		}
		rs = append(rs, spec.Round{Pending: int32(7 + i), Hidden: m.Backend().Slice(out.Hidden, len(p)-1, len(p)),
			Snap: m.Snapshot(cache), History: append(slices.Clone(p), int32(7+i)), Prompt: len(p) - 2, K: k})
	}
	return rs
}

// assistants wraps a once for each of params.
func assistants(t *testing.T, a *gemma4.Assistant, params []sample.Params) []*spec.Assistant {
	t.Helper()
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

// sameDists reports whether two lists of distributions give every token
// the same probability, bit for bit, sparse or dense.
func sameDists(a, b []sample.Dist, vocab int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		for t := range int32(vocab) {
			if math.Float64bits(a[i].At(t)) != math.Float64bits(b[i].At(t)) {
				return false
			}
		}
	}
	return true
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

// TestSampledDraftsPenaliseTheirOwnDrafts: a sampling drafter's penalties
// see the drafts it has made this round, as plain decoding's would see
// the tokens it emitted. Each draft's distribution is checked against one
// computed here from the drafter's logits for that step and the history
// with the earlier drafts appended; batched and alone give the same
// (TestProposeBatchEqualsAlone), so only an outside reference shows a
// history that left them out. Whole rows (no top-k), for both heads.
func TestSampledDraftsPenaliseTheirOwnDrafts(t *testing.T) {
	for _, preset := range []string{"gemma4-tiny-e2b", "gemma4-tiny-31b"} {
		t.Run(preset, func(t *testing.T) {
			m, a := pair(t, preset)
			p := sample.Params{Temperature: 1, FrequencyPenalty: 2, PresencePenalty: 1, RepetitionPenalty: 1.3, Seed: 4}
			r := batchRounds(t, m, []int{4})[0]
			d := assistants(t, a, []sample.Params{p})[0]
			prop, err := d.Propose(r)
			if err != nil {
				t.Fatal(err)
			}
			if len(prop.Tokens) != r.K || len(prop.Probs) != r.K {
				t.Fatalf("%d drafts and %d distributions, want %d", len(prop.Tokens), len(prop.Probs), r.K)
			}
			b, V := a.Backend(), m.Config.Text.VocabSize
			tok, hidden, hist := r.Pending, r.Hidden, slices.Clone(r.History)
			for j := range r.K {
				out, err := a.Step([]gemma4.DraftRow{{Token: tok, Hidden: hidden, Snap: r.Snap}}, d.Opt)
				if err != nil {
					t.Fatal(err)
				}
				want := sample.Dense(p.DistributionAfter(b.ToF32(a.Logits(out.Normed)), hist, r.Prompt))
				if !sameDists(prop.Probs[j:j+1], []sample.Dist{want}, V) {
					t.Fatalf("draft %d: its distribution is not the penalised one after the history and drafts %v", j, prop.Tokens[:j])
				}
				tok, hidden, hist = prop.Tokens[j], out.Next, append(hist, prop.Tokens[j])
			}
		})
	}
}
