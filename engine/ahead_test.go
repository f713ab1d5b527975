package engine

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"tandem/compute"
	"tandem/compute/computetest"
	"tandem/compute/cpu"
	"tandem/generation"
	"tandem/model/gemma4"
	"tandem/sample"
	"tandem/spec"
)

// aheadTarget is the tiny target on a backend that reads results
// asynchronously, so that the engine decodes greedy requests ahead:
// the shared target where its backend does (the GPU, or the CPU with
// TANDEM_TEST_BACKEND=cpu-async), else a copy on the CPU wrapped by
// computetest.Prefetching, which can also poison picks with NaNs (pf, nil
// on the GPU).
func aheadTarget(t *testing.T) (m *gemma4.Model, pf *computetest.Prefetching) {
	t.Helper()
	if p, ok := target.Backend().(*computetest.Prefetching); ok { // TANDEM_TEST_BACKEND=cpu-async
		return target, p
	}
	if _, ok := target.Backend().(compute.Prefetcher); ok {
		return target, nil
	}
	pf = &computetest.Prefetching{Backend: cpu.New(0)}
	m, err := gemma4.Load(targetDir, pf)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m, pf
}

// Greedy requests decoded ahead (each step issued with the device's picks
// before the host reads them) must stream what they stream alone, with
// the same finish: budgets of one, two and more, a stop token mid-stream,
// picks sent back to the host by a NaN (the step issued ahead is rolled
// back), three requests decoded together with NaNs in each row, a request
// arriving mid-run (the run ends so that it can start, and both match
// alone), a queued request cancelled mid-run, a cancelled one, the prompt
// again from the prefix cache a run left (its stop token's pick overruled
// by the host too), and requests that must keep the host's turn
// (logprobs, penalties, TANDEM_ENGINE_AHEAD=0).
func TestDecodeAheadMatchesAlone(t *testing.T) {
	m, pf := aheadTarget(t)
	prompt := promptOf(12, 31)
	free, _, _ := alone(t, Request{Prompt: prompt, MaxTokens: 40}, nil, 0, 0)
	cases := []struct {
		name  string
		req   Request
		nanAt []int // the F32 prefetches read as NaN (the CPU only)
	}{
		{"budget of one", Request{Prompt: prompt, MaxTokens: 1}, nil},
		{"budget of two", Request{Prompt: prompt, MaxTokens: 2}, nil},
		{"long", Request{Prompt: prompt, MaxTokens: 40}, nil},
		{"stop token mid-stream", Request{Prompt: prompt, MaxTokens: 40, StopTokens: []int32{free[9]}}, nil},
		{"NaN on the first step ahead", Request{Prompt: prompt, MaxTokens: 12}, []int{0}},
		{"NaN on consecutive steps", Request{Prompt: prompt, MaxTokens: 12}, []int{3, 4}},
		{"NaN on the last step", Request{Prompt: prompt, MaxTokens: 12}, []int{10}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.nanAt != nil && pf == nil {
				t.Skip("NaN picks are injected on the CPU only")
			}
			want, reason, _ := alone(t, tc.req, nil, 0, 0) // first: with cpu-async it reads back through pf too
			e := start(t, Config{Model: m, Parallel: 2})
			if pf != nil {
				pf.Reset(tc.nanAt...)
			}
			got := collect(t, submit(t, e, context.Background(), tc.req))
			if !slices.Equal(got.tokens, want) || got.final.FinishReason != reason {
				t.Fatalf("decoded ahead: %v (%s); alone: %v (%s)", got.tokens, got.final.FinishReason, want, reason)
			}
			if tc.req.MaxTokens > 1 {
				ranAhead(t, e, pf)
			}
			// Two readbacks a step; a run of n tokens after the first issues
			// n steps, none past the budget.
			if n := tc.req.MaxTokens; pf != nil && tc.nanAt == nil && tc.req.StopTokens == nil && pf.Calls != 2*(n-1) {
				t.Errorf("%d readbacks for %d tokens, want %d", pf.Calls, n, 2*(n-1))
			}
		})
	}
	for _, c := range []struct {
		nanAt  []int
		nanRow int
	}{{nil, 0}, {[]int{4}, 0}, {[]int{2, 9}, 2}, {[]int{5}, 1}} {
		nanAt := c.nanAt
		t.Run(fmt.Sprintf("three requests together, NaN picks at %v in request %d", nanAt, c.nanRow), func(t *testing.T) {
			if nanAt != nil && pf == nil {
				t.Skip("NaN picks are injected on the CPU only")
			}
			reqs := []Request{
				{Prompt: prompt, MaxTokens: 30},
				{Prompt: promptOf(7, 34), MaxTokens: 12, StopTokens: []int32{free[5]}},
				{Prompt: promptOf(15, 35), MaxTokens: 21},
			}
			var wants [][]int32
			var reasons []string
			for _, r := range reqs {
				w, reason, _ := alone(t, r, nil, 0, 0)
				wants, reasons = append(wants, w), append(reasons, reason)
			}
			e := start(t, Config{Model: m, Parallel: 3})
			if pf != nil {
				pf.Reset(nanAt...)
				pf.NaNRow = c.nanRow
			}
			var chs []<-chan Event
			for _, r := range reqs {
				chs = append(chs, submit(t, e, context.Background(), r))
			}
			for i, ch := range chs {
				got := collect(t, ch)
				if !slices.Equal(got.tokens, wants[i]) || got.final.FinishReason != reasons[i] {
					t.Fatalf("request %d: %v (%s); alone: %v (%s)", i, got.tokens, got.final.FinishReason, wants[i], reasons[i])
				}
			}
			ranAhead(t, e, pf)
			if n := e.aheadMost.Load(); n != 3 {
				t.Fatalf("at most %d requests decoded ahead together, want 3", n)
			}
		})
	}
	t.Run("a request arriving mid-run", func(t *testing.T) {
		e := start(t, Config{Model: m, Parallel: 2})
		if pf != nil {
			pf.Reset()
		}
		a := Request{Prompt: prompt, MaxTokens: 300}
		b := Request{Prompt: promptOf(9, 32), MaxTokens: 20}
		cha := submit(t, e, context.Background(), a)
		var early []int32
		for len(early) < 3 { // past its first token: a is in a run ahead
			early = append(early, (<-cha).Tokens...)
		}
		chb := submit(t, e, context.Background(), b)
		ra, rb, aAtB := collectTwo(t, cha, chb)
		ra.tokens = append(early, ra.tokens...)
		if aAtB > 150 {
			t.Errorf("b (20 tokens) finished after %d of a's 300: a's run did not make way for it", len(early)+aAtB)
		}
		for _, c := range []struct {
			req Request
			got result
		}{{a, ra}, {b, rb}} {
			want, reason, _ := alone(t, c.req, nil, 0, 0)
			if !slices.Equal(c.got.tokens, want) || c.got.final.FinishReason != reason {
				t.Fatalf("prompt %v: %v (%s); alone: %v (%s)", c.req.Prompt[:3], c.got.tokens, c.got.final.FinishReason, want, reason)
			}
		}
		ranAhead(t, e, pf)
	})
	t.Run("a queued request cancelled mid-run, one slot", func(t *testing.T) {
		e := start(t, Config{Model: m, Parallel: 1})
		cha := submit(t, e, context.Background(), Request{Prompt: prompt, MaxTokens: 400})
		var early []int32
		for len(early) < 3 { // past its first token: a is in a run ahead
			early = append(early, (<-cha).Tokens...)
		}
		ctx, cancel := context.WithCancel(context.Background())
		chb := submit(t, e, ctx, Request{Prompt: promptOf(9, 33), MaxTokens: 5})
		cancel()
		ra, rb, aAtB := collectTwo(t, cha, chb)
		if rb.final.FinishReason != FinishCancelled || len(rb.tokens) != 0 {
			t.Fatalf("b: %v (%s), want cancelled before it started", rb.tokens, rb.final.FinishReason)
		}
		if ra.final.FinishReason != FinishLength || aAtB > 200 {
			t.Fatalf("b's cancellation came after %d of a's 400 tokens (a finished: %s)", len(early)+aAtB, ra.final.FinishReason)
		}
	})
	t.Run("cancelled mid-run", func(t *testing.T) {
		e := start(t, Config{Model: m, Parallel: 1})
		if pf != nil {
			pf.Reset()
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		ch := submit(t, e, ctx, Request{Prompt: prompt, MaxTokens: 400})
		var toks []int32
		for ev := range ch {
			toks = append(toks, ev.Tokens...)
			if len(toks) >= 3 {
				cancel()
			}
			if ev.Done && ev.FinishReason != FinishCancelled {
				t.Fatalf("finished %q after %d tokens, want cancelled", ev.FinishReason, len(toks))
			}
		}
		want, _, _ := alone(t, Request{Prompt: prompt, MaxTokens: 400}, nil, 0, 0)
		if !slices.Equal(toks, want[:len(toks)]) {
			t.Fatalf("streamed %v, want a prefix of %v", toks, want)
		}
		ranAhead(t, e, pf)
	})
	t.Run("the prompt again, from the prefix cache the run left", func(t *testing.T) {
		e := start(t, Config{Model: m, Parallel: 1})
		req := Request{Prompt: prompt, MaxTokens: 15}
		want, _, _ := alone(t, req, nil, 0, 0)
		for i := range 2 {
			got := collect(t, submit(t, e, context.Background(), req))
			if !slices.Equal(got.tokens, want) {
				t.Fatalf("run %d: %v, want %v", i, got.tokens, want)
			}
			if i == 1 && got.final.Usage.CachedTokens == 0 {
				t.Error("the second run took nothing from the prefix cache")
			}
		}
		// A run ended by a stop token has a step in flight, which fed the
		// stop token: the cache it leaves holds that token's KV too. When
		// the stop token was the host's choice over a NaN pick, the step
		// fed another token and must not be kept. Every continuation of the
		// history must match its own run alone.
		stop := Request{Prompt: prompt, MaxTokens: 40, StopTokens: []int32{free[9]}}
		for _, nanAt := range [][]int{nil, {8}} { // 8: the stop token's step (the first token is the prompt's)
			if nanAt != nil && pf == nil {
				continue // NaN picks are injected on the CPU only
			}
			e := start(t, Config{Model: m, Parallel: 1})
			if pf != nil {
				pf.Reset(nanAt...)
			}
			hist := append(slices.Clone(prompt), collect(t, submit(t, e, context.Background(), stop)).tokens...)
			if pf != nil {
				pf.Reset()
			}
			// The first continuation takes the run's entry (a prompt equal to
			// the history would re-feed its last token and mask a wrong KV).
			for _, extra := range [][]int32{{free[3]}, {free[3], free[4], free[5]}, nil} {
				longer := Request{Prompt: append(slices.Clone(hist), extra...), MaxTokens: 5}
				got := collect(t, submit(t, e, context.Background(), longer))
				if w, _, _ := alone(t, longer, nil, 0, 0); !slices.Equal(got.tokens, w) {
					t.Fatalf("NaN at %v, continuation with %v: %v, want %v", nanAt, extra, got.tokens, w)
				}
				if got.final.Usage.CachedTokens == 0 {
					t.Errorf("NaN at %v, continuation with %v took nothing from the prefix cache", nanAt, extra)
				}
			}
		}
	})
	hostTurn := []struct {
		name string
		req  Request
		env  string
	}{
		{"logprobs", Request{Prompt: prompt, MaxTokens: 6, Logprobs: true}, ""},
		{"penalties", Request{Prompt: prompt, MaxTokens: 6, Sample: sample.Params{RepetitionPenalty: 1.3}}, ""},
		{"TANDEM_ENGINE_AHEAD=0", Request{Prompt: prompt, MaxTokens: 6}, "0"},
	}
	for _, tc := range hostTurn {
		t.Run("host's turn: "+tc.name, func(t *testing.T) {
			if tc.env != "" {
				t.Setenv("TANDEM_ENGINE_AHEAD", tc.env)
			}
			e := start(t, Config{Model: m, Parallel: 2})
			got := collect(t, submit(t, e, context.Background(), tc.req))
			if want, _, _ := alone(t, tc.req, nil, 0, 0); !slices.Equal(got.tokens, want) {
				t.Fatalf("%v, want %v", got.tokens, want)
			}
			if n := e.aheadRuns.Load(); n != 0 {
				t.Fatalf("decoded ahead %d times", n)
			}
		})
	}
}

// collectTwo reads two requests' channels to the end on the test's
// goroutine, and how many of a's tokens had come when b's channel closed.
func collectTwo(t *testing.T, cha, chb <-chan Event) (ra, rb result, aAtB int) {
	t.Helper()
	timeout := time.After(60 * time.Second)
	for cha != nil || chb != nil {
		select {
		case ev, ok := <-cha:
			if !ok {
				cha = nil
				continue
			}
			ra.tokens = append(ra.tokens, ev.Tokens...)
			if ev.Done {
				ra.final = ev
			}
		case ev, ok := <-chb:
			if !ok {
				chb, aAtB = nil, len(ra.tokens)
				continue
			}
			rb.tokens = append(rb.tokens, ev.Tokens...)
			if ev.Done {
				rb.final = ev
			}
		case <-timeout:
			t.Fatalf("no end after 60 s (a: %d tokens, b: %d)", len(ra.tokens), len(rb.tokens))
		}
	}
	return ra, rb, aAtB
}

// ranAhead checks that e decoded something ahead and that every readback
// was waited for (pf, on the CPU).
func ranAhead(t *testing.T, e *Engine, pf *computetest.Prefetching) {
	t.Helper()
	if e.aheadRuns.Load() == 0 {
		t.Fatal("nothing was decoded ahead")
	}
	if pf != nil && pf.Waiting != 0 {
		t.Fatalf("%d readbacks never waited for", pf.Waiting)
	}
}

// lateTarget is the tiny target on a backend that uploads late, so that
// the engine samples ahead: the shared target where its backend does (the
// GPU, or the CPU with TANDEM_TEST_BACKEND=cpu-async), else a copy on the
// CPU wrapped by computetest.Late.
func lateTarget(t *testing.T) *gemma4.Model {
	t.Helper()
	if _, ok := target.Backend().(compute.LateUploader); ok {
		return target
	}
	m, err := gemma4.Load(targetDir, &computetest.Late{Backend: cpu.New(0)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// Sampled requests sampled ahead (each step recorded while the last runs,
// its tokens sampled from the last step's logits where it launches) must
// stream what they stream alone, with the same finish: budgets of one, two
// and more, top-k and top-p, a stop token mid-stream (the step in flight
// rolled back), greedy with a penalty (sampled on the host too), and three
// requests together, one of which stops early.
func TestSampleAheadMatchesAlone(t *testing.T) {
	m := lateTarget(t)
	prompt := promptOf(12, 41)
	hot := sample.Params{Temperature: 1.3, TopK: 40, TopP: 0.95, Seed: 9}
	free, _, _ := alone(t, Request{Prompt: prompt, MaxTokens: 30, Sample: hot}, nil, 0, 0)
	// A stop token the second of three requests meets mid-run, first at its
	// fifth token: the step in flight is rolled back for the other two.
	second := Request{Prompt: promptOf(7, 42), MaxTokens: 12, Sample: sample.Params{Temperature: 1, Seed: 4}}
	free2, _, _ := alone(t, second, nil, 0, 0)
	at := 4
	for slices.Index(free2, free2[at]) != at {
		at++
	}
	second.StopTokens = []int32{free2[at]}
	// Every request samples from its top: the device ranks the tops and
	// only those come back.
	topKs := []Request{
		{Prompt: prompt, MaxTokens: 25, Sample: hot},
		{Prompt: promptOf(7, 42), MaxTokens: 14, Sample: sample.Params{Temperature: 0.9, TopK: 5, Seed: 5}},
		{Prompt: promptOf(15, 43), MaxTokens: 18, Sample: sample.Params{Temperature: 1.1, TopK: 8, MinP: 0.05, Seed: 6}},
	}
	cases := []struct {
		name string
		reqs []Request
	}{
		{"budget of one", []Request{{Prompt: prompt, MaxTokens: 1, Sample: hot}}},
		{"budget of two", []Request{{Prompt: prompt, MaxTokens: 2, Sample: hot}}},
		{"long", []Request{{Prompt: prompt, MaxTokens: 30, Sample: hot}}},
		{"temperature alone", []Request{{Prompt: prompt, MaxTokens: 20, Sample: sample.Params{Temperature: 0.7, Seed: 3}}}},
		{"stop token mid-stream", []Request{{Prompt: prompt, MaxTokens: 30, Sample: hot, StopTokens: []int32{free[8]}}}},
		{"greedy with a penalty", []Request{{Prompt: prompt, MaxTokens: 12, Sample: sample.Params{RepetitionPenalty: 1.3}}}},
		{"three together, one stopping early", []Request{
			{Prompt: prompt, MaxTokens: 25, Sample: hot},
			second,
			{Prompt: promptOf(15, 43), MaxTokens: 18, Sample: sample.Params{Temperature: 0.9, TopK: 5, Seed: 5}},
		}},
		{"three with top-k together", topKs},
		{"tops that do not decide", topKs}, // on the CPU, every third top read comes back with a NaN
	}
	spoil, _ := m.Backend().(*computetest.Late)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if spoil != nil {
				if spoil.SpoilTops = 0; tc.name == "tops that do not decide" {
					spoil.SpoilTops = 3
				}
			}
			e := start(t, Config{Model: m, Parallel: len(tc.reqs)})
			var chs []<-chan Event
			for _, r := range tc.reqs {
				chs = append(chs, submit(t, e, context.Background(), r))
			}
			for i, ch := range chs {
				got := collect(t, ch)
				want, reason, _ := alone(t, tc.reqs[i], nil, 0, 0)
				if i == 1 && tc.name == "three together, one stopping early" && reason != FinishStop {
					t.Fatalf("the second request finished %q, want its stop token", reason)
				}
				if !slices.Equal(got.tokens, want) || got.final.FinishReason != reason {
					t.Fatalf("request %d sampled ahead: %v (%s); alone: %v (%s)", i, got.tokens, got.final.FinishReason, want, reason)
				}
			}
			if tc.reqs[0].MaxTokens > 1 && e.lateRuns.Load() == 0 {
				t.Fatal("nothing was sampled ahead")
			}
		})
	}
}

// Requests whose drafts are drawn ahead (spec.DrawBatch: each draft drawn
// on the device thread from the drafter's top, the step's verify taking
// them unread) must stream what they stream alone from whole rows: three
// sampling requests and a greedy one (its drafts its tops' first), one
// still prefilling while the others verify, and,
// on the CPU, tops that now and then do not decide (SpoilTops), whose
// verifies are taken back and verified again the next step. With a
// synthetic coin that accepts every draft (Config.Judge) the drafts are
// the output, so a greedy draft taken from the wrong id shows too.
func TestDrawnDraftsMatchAlone(t *testing.T) {
	m := lateTarget(t)
	d := drafterFor(t, m)
	late, _ := m.Backend().(*computetest.Late)
	reqs := []Request{
		{Prompt: promptOf(9, 51), MaxTokens: 25, Sample: sample.Params{Temperature: 1, TopK: 5, Seed: 1}},
		{Prompt: promptOf(40, 52), MaxTokens: 20, Sample: sample.Params{Temperature: 0.8, TopK: 8, TopP: 0.9, Seed: 2}},
		{Prompt: promptOf(5, 53), MaxTokens: 14, Sample: sample.Params{Temperature: 1.2, TopK: 3, MinP: 0.05, Seed: 3}},
		{Prompt: promptOf(12, 54), MaxTokens: 18},
	}
	for _, c := range []struct {
		spoil     int
		synthetic bool
	}{{0, false}, {3, false}, {0, true}, {3, true}} {
		if late == nil && c.spoil > 0 {
			continue // a GPU's tops are never spoilt
		}
		t.Run(fmt.Sprintf("spoil %d synthetic %v", c.spoil, c.synthetic), func(t *testing.T) {
			t.Setenv(sample.TopsEnv, "1")
			calls, steps := 0, 0
			if late != nil {
				late.SpoilTops, calls, steps = c.spoil, late.Calls(), late.Recorded("step-late")
			}
			judge := spec.Judge{Synthetic: c.synthetic, SyntheticAcceptance: 1}
			e := start(t, Config{Model: m, Drafter: d, DraftTokens: 3, Parallel: len(reqs), PrefillSize: 16, CtxSize: 128, Judge: judge})
			got := runAll(t, e, reqs)
			if late != nil && (late.Calls() == calls || late.Recorded("step-late") == steps) {
				t.Fatal("no draft was drawn ahead for a step to verify unread")
			}
			t.Setenv(sample.TopsEnv, "0") // alone, from whole rows
			for i, r := range reqs {
				want, reason, st := alone(t, r, assistantFor(t, r.Sample), 3, 16)
				if c.synthetic {
					opt := spec.Options{Options: generation.Options{MaxTokens: r.MaxTokens, Sample: r.Sample, PrefillSize: 16},
						DraftTokens: 3, Synthetic: true, SyntheticAcceptance: 1}
					res, err := spec.Generate(context.Background(), target, assistantFor(t, r.Sample), r.Prompt, opt, nil)
					if err != nil {
						t.Fatal(err)
					}
					want, reason, st = res.Tokens, res.StopReason, res.Stats
				}
				if !slices.Equal(got[i].tokens, want) || got[i].final.FinishReason != reason {
					t.Errorf("request %d drawn ahead: %v (%s); alone: %v (%s)", i, got[i].tokens, got[i].final.FinishReason, want, reason)
				}
				if u := got[i].final.Usage; u.Rounds != st.Rounds || u.Accepted != st.Accepted {
					t.Errorf("request %d: %d rounds, %d accepted; alone %d and %d", i, u.Rounds, u.Accepted, st.Rounds, st.Accepted)
				}
			}
		})
	}
}

// Greedy drafting requests whose next drafts are picked during a step, on
// a guess of its verdict (drafts.go), must stream what they stream alone
// through spec.Generate, with the same rounds and acceptances: whether the
// guesses prove right (the next step verifies the drafts unread) or wrong
// (the cache goes back to the verdict and the row drafts anew), under the
// greedy walk and synthetic coins that accept nothing, some or every
// draft, with a request whose penalty keeps it on the host's picks and
// one that stops on a token, and with NaN picks that the host overrules.
// TANDEM_SPEC_AHEAD=always guesses every round, =0 never.
func TestStepDraftsAheadMatchAlone(t *testing.T) {
	m, pf := aheadTarget(t)
	d := drafterFor(t, m)
	free, _, _ := alone(t, Request{Prompt: promptOf(11, 72), MaxTokens: 30}, nil, 0, 0)
	greedy := []Request{
		{Prompt: promptOf(9, 71), MaxTokens: 26},
		{Prompt: promptOf(11, 72), MaxTokens: 30, StopTokens: []int32{free[17]}},
	}
	penalised := Request{Prompt: promptOf(7, 73), MaxTokens: 21, Sample: sample.Params{RepetitionPenalty: 1.3}}
	for _, c := range []struct {
		mode      string
		synthetic float64 // < 0: the greedy walk
		nanAt     []int
		penalty   bool // a request that reads logits too: no step drafts ahead while it runs
		stopping  bool // the request that stops on a token, alone: the engine then idles with drafts picked ahead
	}{
		{"always", -1, nil, false, false}, {"always", 0, nil, false, false}, {"always", 0.7, nil, false, false},
		{"always", 1, nil, false, false}, {"always", 0, []int{3, 8}, false, false}, {"auto", 0, nil, false, false},
		{"auto", -1, nil, false, false}, {"0", 0, nil, false, false}, {"always", 0.7, nil, true, false},
		{"always", 0, nil, false, true},
	} {
		reqs := greedy
		switch {
		case c.penalty:
			reqs = append(slices.Clip(greedy), penalised)
		case c.stopping:
			reqs = greedy[1:]
		}
		t.Run(fmt.Sprintf("%s synthetic %v NaN at %v penalty %v stopping %v", c.mode, c.synthetic, c.nanAt, c.penalty, c.stopping), func(t *testing.T) {
			if c.nanAt != nil && pf == nil {
				t.Skip("NaN picks are injected on the CPU only")
			}
			t.Setenv("TANDEM_SPEC_AHEAD", c.mode)
			judge := spec.Judge{Synthetic: c.synthetic >= 0, SyntheticAcceptance: max(c.synthetic, 0)}
			var want []result
			for _, r := range reqs {
				opt := spec.Options{Options: generation.Options{MaxTokens: r.MaxTokens, Sample: r.Sample, StopTokens: r.StopTokens, PrefillSize: 16},
					DraftTokens: 3, Synthetic: judge.Synthetic, SyntheticAcceptance: judge.SyntheticAcceptance}
				res, err := spec.Generate(context.Background(), target, assistantFor(t, r.Sample), r.Prompt, opt, nil)
				if err != nil {
					t.Fatal(err)
				}
				want = append(want, result{tokens: res.Tokens, final: Event{FinishReason: res.StopReason,
					Usage: Usage{Rounds: res.Stats.Rounds, Accepted: res.Stats.Accepted}}})
			}
			e := start(t, Config{Model: m, Drafter: d, DraftTokens: 3, Parallel: len(reqs), PrefillSize: 16, CtxSize: 128, Judge: judge})
			if pf != nil {
				pf.Reset(c.nanAt...)
			}
			got := runAll(t, e, reqs)
			for i := range reqs {
				g, w := got[i], want[i]
				if !slices.Equal(g.tokens, w.tokens) || g.final.FinishReason != w.final.FinishReason ||
					g.final.Usage.Rounds != w.final.Usage.Rounds || g.final.Usage.Accepted != w.final.Usage.Accepted {
					t.Errorf("request %d: %v (%s, %d rounds, %d accepted); alone %v (%s, %d, %d)", i, g.tokens, g.final.FinishReason,
						g.final.Usage.Rounds, g.final.Usage.Accepted, w.tokens, w.final.FinishReason, w.final.Usage.Rounds, w.final.Usage.Accepted)
				}
			}
			closeEngine(t, e) // an engine going idle or stopping reads what it picked ahead
			if pf != nil && pf.Waiting != 0 {
				t.Errorf("%d copies never waited for", pf.Waiting)
			}
			kept, missed, used := e.draftsKept.Load(), e.draftsMissed.Load(), e.draftsUsed.Load()
			ahead := 0
			for _, g := range got {
				ahead += g.final.Usage.Ahead
			}
			if used != kept || int64(ahead) != kept {
				t.Errorf("%d guesses kept, %d of them verified next step, %d in the requests' usage", kept, used, ahead)
			}
			switch {
			case c.mode == "0" && kept+missed != 0:
				t.Errorf("drafts picked ahead %d times with TANDEM_SPEC_AHEAD=0", kept+missed)
			case c.mode != "0" && (c.synthetic == 0 || c.synthetic == 1) && c.nanAt == nil && (kept == 0 || missed != 0):
				t.Errorf("%d guesses kept, %d missed; want some kept, none missed", kept, missed)
			case c.synthetic == 0.7 && !c.penalty && (kept == 0 || missed == 0):
				t.Errorf("%d guesses kept, %d missed; want both", kept, missed)
			case c.nanAt != nil && missed == 0:
				t.Errorf("NaN picks: no guess missed")
			}
		})
	}
}

// TestAheadDraftFits protects which verdicts keep drafts picked ahead: the
// guessed accepted count, at the guessed depth, where the host took the
// device's pick at that row as it is (a NaN row's pick, −1, is the
// host's and may differ from the token the drafts embedded).
func TestAheadDraftFits(t *testing.T) {
	n := &aheadDraft{a: 1, k: 3}
	for _, tc := range []struct {
		name     string
		accepted int
		picks    []int32
		depth    int
		want     bool
	}{
		{"the guessed verdict", 1, []int32{7, 8, 9, 10}, 3, true},
		{"more accepted", 2, []int32{7, 8, 9, 10}, 3, false},
		{"fewer accepted", 0, []int32{7, 8, 9, 10}, 3, false},
		{"a NaN at the guessed row", 1, []int32{7, -1, 9, 10}, 3, false},
		{"a NaN at another row", 1, []int32{-1, 8, -1, -1}, 3, true},
		{"another depth", 1, []int32{7, 8, 9, 10}, 2, false},
		{"no pick at the guessed row", 1, []int32{7}, 3, false},
	} {
		if got := n.fits(tc.accepted, tc.picks, tc.depth); got != tc.want {
			t.Errorf("%s: fits = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// drafterFor is the tiny drafter bound to m: the shared one where m is the
// shared target, else a copy loaded on m's backend.
func drafterFor(t *testing.T, m *gemma4.Model) *gemma4.Assistant {
	t.Helper()
	if m == target {
		return helper
	}
	d, err := gemma4.LoadAssistant(draftDir, m.Backend())
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Bind(m); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}
