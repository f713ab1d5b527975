package engine

import (
	"context"
	"math"
	"slices"
	"testing"

	"tandem/generation"
	"tandem/sample"
)

// TestLogprobsAreTheTargetsLogSoftmax compares each emitted token's
// logprob and alternatives with teacher-forced scoring of the prompt and
// output (generation.ScoreTokens), with and without speculation: with a
// drafter they come from the verify rows, accepted drafts included.
func TestLogprobsAreTheTargetsLogSoftmax(t *testing.T) {
	for _, tc := range []struct {
		name    string
		drafter bool
		sample  sample.Params
	}{
		{"plain greedy", false, sample.Params{}},
		{"speculative greedy", true, sample.Params{}},
		{"speculative sampling, drafts accepted", true, sample.Params{Temperature: 50, Seed: 2}},
		{"penalties do not change logprobs", true, sample.Params{FrequencyPenalty: 2, PresencePenalty: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{CtxSize: 128}
			if tc.drafter {
				cfg.Drafter = helper
			}
			e := start(t, cfg)
			prompt := promptOf(12, 3)
			g := collect(t, submit(t, e, context.Background(), Request{Prompt: prompt, MaxTokens: 24, Sample: tc.sample, Logprobs: true, TopLogprobs: 3}))
			if len(g.logprobs) != len(g.tokens) || len(g.tokens) != 24 {
				t.Fatalf("%d tokens, %d logprobs", len(g.tokens), len(g.logprobs))
			}
			sc, err := generation.ScoreTokens(context.Background(), target, slices.Concat(prompt, g.tokens), 0)
			if err != nil {
				t.Fatal(err)
			}
			for i, lp := range g.logprobs {
				want := sc.Positions[len(prompt)-1+i]
				if lp.Token != g.tokens[i] || math.Abs(float64(lp.Logprob)-want.Logprob) > 1e-5 {
					t.Fatalf("token %d: %+v, scoring says %d at %v", i, lp, want.Next, want.Logprob)
				}
				if len(lp.Top) != 3 || lp.Top[0].Token != want.Top1 || math.Abs(float64(lp.Top[0].Logprob)-want.Top1Logprob) > 1e-5 {
					t.Fatalf("token %d: alternatives %+v, scoring's top-1 %d at %v", i, lp.Top, want.Top1, want.Top1Logprob)
				}
				for j := 1; j < len(lp.Top); j++ {
					if lp.Top[j].Logprob > lp.Top[j-1].Logprob || lp.Top[j].Token == lp.Top[j-1].Token {
						t.Fatalf("token %d: alternatives out of order: %+v", i, lp.Top)
					}
				}
				if tc.sample == (sample.Params{}) && lp.Top[0].Token != lp.Token {
					t.Fatalf("token %d: greedy emitted %d but the top alternative is %d", i, lp.Token, lp.Top[0].Token)
				}
			}
			if tc.sample.Temperature > 0 && g.final.Usage.Accepted == 0 {
				t.Fatalf("no draft accepted: the test no longer covers logprobs of accepted drafts")
			}
		})
	}
}

// TestLogprobsOnlyWhenAsked: no logprobs unless asked; none for
// TopLogprobs -1; the token's own logprob without alternatives for 0.
func TestLogprobsOnlyWhenAsked(t *testing.T) {
	e := start(t, Config{CtxSize: 64})
	for _, tc := range []struct {
		logprobs   bool
		top, wantN int // wantN: logprobs per token (0 or 1)
	}{{false, 5, 0}, {true, -1, 0}, {true, 0, 1}, {true, 20, 1}} {
		g := collect(t, submit(t, e, context.Background(), Request{Prompt: promptOf(5, 1), MaxTokens: 4, Logprobs: tc.logprobs, TopLogprobs: tc.top}))
		if len(g.logprobs) != tc.wantN*len(g.tokens) {
			t.Fatalf("%+v: %d logprobs for %d tokens", tc, len(g.logprobs), len(g.tokens))
		}
		for _, lp := range g.logprobs {
			if len(lp.Top) != max(tc.top, 0) {
				t.Fatalf("%+v: %d alternatives", tc, len(lp.Top))
			}
		}
	}
}

// TestPlainRequestsMatchGenerate: without a drafter, concurrent requests
// produce generation.Generate's tokens.
func TestPlainRequestsMatchGenerate(t *testing.T) {
	reqs := mixedRequests(t, 16, nil)
	e := start(t, Config{Parallel: 5, PrefillSize: 16, CtxSize: 128})
	got := runAll(t, e, reqs)
	var finals []Event
	for i, r := range reqs {
		want, reason, _ := alone(t, r, nil, 0, 16)
		if g := got[i]; !slices.Equal(g.tokens, want) || g.final.FinishReason != reason {
			t.Errorf("request %d (%+v): engine %v (%s), alone %v (%s)", i, r.Sample, g.tokens, g.final.FinishReason, want, reason)
		}
		if u := got[i].final.Usage; u.Rounds != 0 || u.Drafted != 0 {
			t.Errorf("request %d: speculative usage %+v without a drafter", i, u)
		}
		finals = append(finals, got[i].final)
	}
	checkCounters(t, e, finals)
}
