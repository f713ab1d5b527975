package engine

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"testing"

	"tandem/generation"
	"tandem/sample"
	"tandem/spec"
)

// mixedRequests builds n requests of every kind the engine must keep
// apart: greedy and seeded sampling (with every filter and penalty),
// prompts shorter and longer than the prefill chunk (16 in these tests),
// budgets from one token up, and stop tokens that end some of them early.
// A stop token is taken from the request's own continuation run alone,
// so it does stop it.
func mixedRequests(t *testing.T, n int, d func(sample.Params) spec.Drafter) []Request {
	lens := []int{3, 9, 17, 40, 70}
	budgets := []int{1, 2, 5, 12, 24, 30}
	samplers := []sample.Params{
		{},                        // greedy
		{Temperature: 1, TopK: 8}, // seeded sampling
		{PresencePenalty: 0.5, FrequencyPenalty: 0.25},        // greedy with penalties
		{Temperature: 0.7, TopP: 0.9, RepetitionPenalty: 1.2}, // nucleus + repetition
		{}, // greedy
		{Temperature: 1.3, MinP: 0.05, FrequencyPenalty: 0.5, PresencePenalty: -0.3}, // min-p + penalties
		{Temperature: 0.9, TopK: 20, TopP: 0.95, MinP: 0.02, FrequencyPenalty: 1},    // everything
		{RepetitionPenalty: 1.3}, // greedy + repetition
		// Nearly uniform target and drafter distributions: the real
		// assistant's drafts are then mostly accepted, random weights
		// notwithstanding, so rounds accept 0..k drafts with real drafts.
		{Temperature: 50},
	}
	reqs := make([]Request, n)
	for i := range reqs {
		r := Request{Prompt: promptOf(lens[i%len(lens)], uint64(100+i)), MaxTokens: budgets[i%len(budgets)], Sample: samplers[i%len(samplers)]}
		r.Sample.Seed = uint64(i)
		if i%3 == 0 && r.MaxTokens >= 5 {
			var dr spec.Drafter
			if d != nil {
				dr = d(r.Sample)
			}
			free, _, _ := alone(t, r, dr, 3, 16)
			j := len(free) / 2
			for j < len(free) && slices.Contains(free[:j], free[j]) {
				j++
			}
			if j < len(free) {
				r.StopTokens = []int32{free[j], 1}
			}
		}
		reqs[i] = r
	}
	return reqs
}

// runAll submits every request at once and collects every channel
// concurrently, as a server's handlers would.
func runAll(t *testing.T, e *Engine, reqs []Request) []result {
	chans := make([]<-chan Event, len(reqs))
	for i, r := range reqs {
		chans[i] = submit(t, e, context.Background(), r)
	}
	res := make([]result, len(reqs))
	var wg sync.WaitGroup
	for i, ch := range chans {
		wg.Go(func() { res[i] = collect(t, ch) })
	}
	wg.Wait()
	return res
}

// TestConcurrentRequestsMatchAlone is the engine's promise: 32 requests
// running together with the drafter, joining and leaving the batch at
// different steps, each produce exactly the tokens (and the speculative
// rounds) they produce alone through spec.Generate; the greedy ones also
// produce plain greedy decoding's tokens. The engine samples top-k
// requests from tops ranked on the device, alone from whole rows.
func TestConcurrentRequestsMatchAlone(t *testing.T) {
	n := 32
	if testing.Short() {
		n = 12
	}
	reqs := mixedRequests(t, n, func(p sample.Params) spec.Drafter { return assistantFor(t, p) })
	e := start(t, Config{Drafter: helper, DraftTokens: 3, Parallel: 8, PrefillSize: 16, CtxSize: 128})
	got := runAll(t, e, reqs)
	// Alone, the requests sample from whole rows: the engine's tops
	// (sample.Params.FromTop) must not change a token.
	t.Setenv(sample.TopsEnv, "0")
	var finals []Event
	for i, r := range reqs {
		want, reason, st := alone(t, r, assistantFor(t, r.Sample), 3, 16)
		g := got[i]
		name := fmt.Sprintf("request %d (prompt %d, max %d, %+v, stop %v)", i, len(r.Prompt), r.MaxTokens, r.Sample, r.StopTokens)
		if !slices.Equal(g.tokens, want) || g.final.FinishReason != reason {
			t.Errorf("%s:\nengine %v (%s)\nalone  %v (%s)", name, g.tokens, g.final.FinishReason, want, reason)
		}
		if u := g.final.Usage; u.CompletionTokens != len(want) || u.PromptTokens != len(r.Prompt) || u.Rounds != st.Rounds || u.Drafted != st.Drafted || u.Accepted != st.Accepted {
			t.Errorf("%s: usage %+v, alone %d tokens and %d rounds, %d drafted, %d accepted", name, u, len(want), st.Rounds, st.Drafted, st.Accepted)
		}
		if r.Sample.Greedy() {
			plain, _, _ := alone(t, r, nil, 0, 16)
			if !slices.Equal(want, plain) {
				t.Errorf("%s: speculative %v, plain greedy %v", name, want, plain)
			}
		}
		finals = append(finals, g.final)
	}
	checkCounters(t, e, finals)
	st := e.Stats()
	t.Logf("%d steps, %d rounds with drafts, %d/%d drafts accepted, per position %v", st.Steps, st.Drafts, st.AcceptedTokens, st.DraftTokens, st.AcceptedPerPos)
	if st.AcceptedPerPos[2] == 0 {
		t.Fatal("no round accepted all 3 drafts: the test no longer exercises acceptance")
	}
}

// checkCounters checks that the engine's cumulative counters are the sums
// of the finished requests' usage, and that nothing is held any more.
func checkCounters(t *testing.T, e *Engine, finals []Event) {
	t.Helper()
	var sum Usage
	for _, f := range finals {
		u := f.Usage
		sum.PromptTokens += u.PromptTokens
		sum.CachedTokens += u.CachedTokens
		sum.CompletionTokens += u.CompletionTokens
		sum.Rounds += u.Rounds
		sum.Drafted += u.Drafted
		sum.Accepted += u.Accepted
	}
	var s Stats
	waitFor(t, "the engine to be idle", func() bool { s = e.Stats(); return s.Running == 0 })
	var perPos int64
	for _, n := range s.AcceptedPerPos {
		perPos += n
	}
	for _, c := range []struct {
		name      string
		got, want int64
	}{
		{"requests", s.Requests, int64(len(finals))},
		{"prompt tokens", s.PromptTokens, int64(sum.PromptTokens)},
		{"cached tokens", s.CachedTokens, int64(sum.CachedTokens)},
		{"generated tokens", s.GeneratedTokens, int64(sum.CompletionTokens)},
		{"draft tokens", s.DraftTokens, int64(sum.Drafted)},
		{"accepted tokens", s.AcceptedTokens, int64(sum.Accepted)},
		{"accepted per position, summed", perPos, int64(sum.Accepted)},
		{"running", int64(s.Running), 0},
		{"waiting", int64(s.Waiting), 0},
		{"KV reserved", int64(s.KVUsedTokens), 0},
	} {
		if c.got != c.want {
			t.Errorf("stats: %s = %d, want %d (stats %+v)", c.name, c.got, c.want, s)
		}
	}
	if s.Drafts > int64(sum.Rounds) || (sum.Drafted > 0 && s.Drafts == 0) {
		t.Errorf("stats: %d rounds with drafts, %d rounds in all", s.Drafts, sum.Rounds)
	}
	if s.Steps == 0 || (s.GeneratedTokens > 0 && s.DecodeTokensRate <= 0) {
		t.Errorf("stats: %d steps, %.1f tokens/s", s.Steps, s.DecodeTokensRate)
	}
	if s.PrefixTokens > s.KVBudgetTokens {
		t.Errorf("stats: the prefix cache holds %d tokens, over the budget of %d", s.PrefixTokens, s.KVBudgetTokens)
	}
}

// TestSyntheticJudgeMatchesAlone protects Config.Judge: an engine whose
// rounds a synthetic coin decides (tandem bench --engine
// --synthetic-acceptance) gives each request the tokens, rounds and
// acceptances spec.Generate gives it alone with the same coin, greedy,
// sampled from tops and sampled from whole rows, running together; and it
// refuses an acceptance outside [0, 1].
func TestSyntheticJudgeMatchesAlone(t *testing.T) {
	reqs := []Request{
		{Prompt: promptOf(9, 61), MaxTokens: 20},
		{Prompt: promptOf(14, 62), MaxTokens: 17, Sample: sample.Params{Temperature: 1, TopK: 5, Seed: 4}},
		{Prompt: promptOf(6, 63), MaxTokens: 15, Sample: sample.Params{Temperature: 0.9, Seed: 5}},
	}
	for _, p := range []float64{0, 0.7, 1} {
		judge := spec.Judge{Synthetic: true, SyntheticAcceptance: p}
		e := start(t, Config{Drafter: helper, DraftTokens: 3, Parallel: len(reqs), PrefillSize: 16, CtxSize: 128, Judge: judge})
		got := runAll(t, e, reqs)
		accepted := 0
		for i, r := range reqs {
			opt := spec.Options{Options: generation.Options{MaxTokens: r.MaxTokens, Sample: r.Sample, PrefillSize: 16},
				DraftTokens: 3, Synthetic: true, SyntheticAcceptance: p}
			res, err := spec.Generate(context.Background(), target, assistantFor(t, r.Sample), r.Prompt, opt, nil)
			if err != nil {
				t.Fatal(err)
			}
			if u := got[i].final.Usage; !slices.Equal(got[i].tokens, res.Tokens) || u.Rounds != res.Stats.Rounds || u.Accepted != res.Stats.Accepted {
				t.Errorf("P = %v, request %d: engine %v (%d rounds, %d accepted); alone %v (%d, %d)", p, i, got[i].tokens,
					u.Rounds, u.Accepted, res.Tokens, res.Stats.Rounds, res.Stats.Accepted)
			}
			accepted += got[i].final.Usage.Accepted
		}
		if p == 1 && accepted == 0 {
			t.Errorf("P = 1: no draft accepted: the coin did not decide")
		}
	}
	for _, bad := range []float64{1.5, -0.1, math.NaN()} {
		if _, err := New(Config{Model: target, Drafter: helper, Judge: spec.Judge{Synthetic: true, SyntheticAcceptance: bad}}); err == nil {
			t.Errorf("New accepted a synthetic acceptance of %v", bad)
		}
	}
}
