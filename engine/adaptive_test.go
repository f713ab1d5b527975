package engine

import (
	"slices"
	"testing"
	"time"

	"tandem/sample"
)

// TestAdaptiveChoosesTheFasterMode protects the policy's decisions: each
// mode is measured first (drafting, then not), the faster is taken, the
// slower is tried adaptTries steps in every adaptProbe, a change of rates
// turns the choice, and batch sizes of one class share their record.
func TestAdaptiveChoosesTheFasterMode(t *testing.T) {
	a := newAdaptive()
	const n = 6
	step := func(draftRate, plainRate float64) bool {
		d := a.draft(n)
		rate := plainRate
		if d {
			rate = draftRate
		}
		a.observe(n, d, int(rate), time.Second) // rate tokens in a second
		return d
	}
	var got []bool
	for range 2 * adaptWarm {
		got = append(got, step(100, 300))
	}
	if want := []bool{true, true, true, false, false, false}; !slices.Equal(got, want) {
		t.Fatalf("warming up: %v, want each mode %d times, drafting first: %v", got, adaptWarm, want)
	}
	drafted := 0
	for range 2 * adaptProbe {
		if step(100, 300) {
			drafted++
		}
	}
	if drafted != 2*adaptTries {
		t.Fatalf("with plain steps three times faster, %d of %d steps drafted, want the %d tries", drafted, 2*adaptProbe, 2*adaptTries)
	}
	// Acceptance rises: drafting is now faster. The tries see it and the
	// choice turns within a few of them; a batch of 5 is of the same class.
	for range 2 * adaptProbe {
		step(900, 300)
	}
	drafted = 0
	for i := range adaptProbe {
		size := n
		if i%2 == 1 {
			size = 5
		}
		if d := a.draft(size); d {
			drafted++
			a.observe(size, d, 900, time.Second)
		} else {
			a.observe(size, d, 300, time.Second)
		}
	}
	if drafted != adaptProbe-adaptTries {
		t.Fatalf("after drafting became three times faster, %d of %d steps drafted, want all but the %d tries", drafted, adaptProbe, adaptTries)
	}
	if !a.draft(8) { // another class, measured from the start
		t.Fatal("a new class of batch sizes did not start by drafting")
	}
}

// TestAdaptiveDraftsMatchAlone protects AdaptiveDrafts in the engine: where
// plain steps are faster (a clock that makes steps with drafts ten times
// slower), greedy requests stop drafting, and where drafted steps are
// faster they keep drafting; either way every greedy request's tokens are
// its plain decoding's, and sampled requests draft every round, as alone.
func TestAdaptiveDraftsMatchAlone(t *testing.T) {
	const k, maxTokens = 3, 80
	var reqs []Request
	for i := range 6 {
		r := Request{Prompt: promptOf(20, uint64(40+i)), MaxTokens: maxTokens}
		if i == 5 {
			r.Sample = sample.Params{Temperature: 0.8, TopK: 5, Seed: 3}
		}
		reqs = append(reqs, r)
	}
	s := &script{truth: map[string][]int32{}, sample: map[string]bool{}}
	for _, r := range reqs {
		s.truth[key(r.Prompt)], _, _ = alone(t, r, nil, 0, 16)
		s.sample[key(r.Prompt)] = !r.Sample.Greedy()
	}
	for _, c := range []struct {
		name      string
		draftCost time.Duration // a step with drafts; one without takes 1 ms
		slower    bool          // drafting is the slower mode
	}{
		{"drafts ten times slower", 10 * time.Millisecond, true},
		{"drafts as fast as plain steps", time.Millisecond, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			e, err := newEngine(Config{Model: target, Drafter: helper, DraftTokens: k, Parallel: 6, PrefillSize: 16, CtxSize: 128,
				AdaptiveDrafts: true}, s.proposeBatch, nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { closeEngine(t, e) })
			var clock time.Time
			e.adapt.now = func() time.Time { // read twice a step: at the decision and after it
				cost := time.Millisecond
				if !e.undrafted {
					cost = c.draftCost
				}
				clock = clock.Add(cost / 2)
				return clock
			}
			got := runAll(t, e, reqs)
			for i, r := range reqs {
				want, reason, st := alone(t, r, s, k, 16)
				g := got[i]
				if !slices.Equal(g.tokens, want) || g.final.FinishReason != reason {
					t.Errorf("request %d (%+v):\nengine %v (%s)\nalone  %v (%s)", i, r.Sample, g.tokens, g.final.FinishReason, want, reason)
				}
				if u := g.final.Usage; !r.Sample.Greedy() && (u.Rounds != st.Rounds || u.Drafted != st.Drafted || u.Accepted != st.Accepted) {
					t.Errorf("sampled request %d: usage %+v, alone %+v", i, u, st)
				}
			}
			st := e.Stats()
			t.Logf("%d steps, %d without greedy drafts", st.Steps, st.UndraftedSteps)
			if undrafted := st.UndraftedSteps > st.Steps/2; undrafted != c.slower {
				t.Fatalf("%d of %d steps without greedy drafts: most of them %v, want %v", st.UndraftedSteps, st.Steps, undrafted, c.slower)
			}
		})
	}
}

// TestAdaptiveDraftsAheadStop protects adaptive drafting where drafts are
// picked ahead (the GPU's path, here on the CPU backend that reads
// asynchronously): a step decided without drafts drops the drafts picked
// for it, or greedy rows would verify them and pick the next ones ahead,
// step after step, whatever the policy said.
func TestAdaptiveDraftsAheadStop(t *testing.T) {
	m, _ := aheadTarget(t)
	t.Setenv("TANDEM_SPEC_AHEAD", "always")
	var reqs []Request
	for i := range 4 {
		reqs = append(reqs, Request{Prompt: promptOf(12, uint64(80+i)), MaxTokens: 60})
	}
	e := start(t, Config{Model: m, Drafter: drafterFor(t, m), DraftTokens: 3, Parallel: 4, PrefillSize: 16, CtxSize: 128, AdaptiveDrafts: true})
	var clock time.Time
	e.adapt.now = func() time.Time { // steps with drafts ten times slower
		cost := time.Millisecond
		if !e.undrafted {
			cost = 10 * time.Millisecond
		}
		clock = clock.Add(cost / 2)
		return clock
	}
	got := runAll(t, e, reqs)
	for i, r := range reqs {
		if want, _, _ := alone(t, r, nil, 0, 16); !slices.Equal(got[i].tokens, want) {
			t.Errorf("request %d: %v, plain %v", i, got[i].tokens, want)
		}
	}
	st := e.Stats()
	t.Logf("%d steps, %d without greedy drafts, %d rounds drafted; drafts picked ahead kept %d, used %d", st.Steps, st.UndraftedSteps, st.Drafts, e.draftsKept.Load(), e.draftsUsed.Load())
	if e.draftsKept.Load() == 0 {
		t.Fatal("no drafts were picked ahead: the test no longer exercises that path")
	}
	if st.UndraftedSteps <= st.Steps/2 {
		t.Fatalf("%d of %d steps without greedy drafts: drafts picked ahead kept the rows drafting", st.UndraftedSteps, st.Steps)
	}
}
