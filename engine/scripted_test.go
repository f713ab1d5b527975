package engine

import (
	"fmt"
	"slices"
	"testing"

	"tandem/sample"
	"tandem/spec"
)

// script is a drafter that knows each request's continuation (its tokens
// run alone) and proposes it with every seventh position wrong, so rounds
// accept 0 to k drafts and the caches roll back by every amount. With
// random weights the real assistant almost never agrees with the target;
// this exercises acceptance. Sampling requests get q = 0.7·one-hot +
// 0.3·uniform, so rejection sampling both accepts and resamples.
type script struct {
	truth  map[string][]int32 // prompt → continuation
	sample map[string]bool    // prompt → sampling (needs q)
}

func key(p []int32) string { return fmt.Sprint(p) }

func (s *script) Propose(r spec.Round) (spec.Proposal, error) {
	var p spec.Proposal
	prompt := key(r.History[:r.Prompt])
	truth := s.truth[prompt]
	done := len(r.History) - r.Prompt // tokens emitted so far
	for j := range r.K {
		tok := int32(0)
		if i := done + j; i < len(truth) {
			tok = truth[i]
		}
		if (done+j)%7 == 6 {
			tok = (tok + 1) % int32(vocab)
		}
		p.Tokens = append(p.Tokens, tok)
		if s.sample[prompt] {
			q := make([]float64, vocab)
			for i := range q {
				q[i] = 0.3 / float64(vocab)
			}
			q[tok] += 0.7
			p.Probs = append(p.Probs, sample.Dense(q))
		}
	}
	return p, nil
}

// proposeBatch is the engine's hook: each round on its own.
func (s *script) proposeBatch(_ []*spec.Assistant, rs []spec.Round) ([]spec.Proposal, error) {
	out := make([]spec.Proposal, len(rs))
	for i, r := range rs {
		var err error
		if out[i], err = s.Propose(r); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// TestScriptedDraftsMatchAlone runs the concurrent-equality check with
// drafts that are often accepted: every acceptance length, rollbacks of
// every depth, bonus tokens and stops inside accepted drafts, across a
// batch whose rows do all of that at different steps.
func TestScriptedDraftsMatchAlone(t *testing.T) {
	n := 24
	if testing.Short() {
		n = 10
	}
	reqs := mixedRequests(t, n, nil)
	s := &script{truth: map[string][]int32{}, sample: map[string]bool{}}
	for _, r := range reqs {
		free := r
		free.StopTokens = nil
		s.truth[key(r.Prompt)], _, _ = alone(t, free, nil, 0, 16)
		s.sample[key(r.Prompt)] = !r.Sample.Greedy()
	}
	for _, k := range []int{1, 3, 5} {
		t.Run(fmt.Sprintf("k=%d", k), func(t *testing.T) {
			e, err := newEngine(Config{Model: target, Drafter: helper, DraftTokens: k, Parallel: 6, PrefillSize: 16, CtxSize: 128}, s.proposeBatch, nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { closeEngine(t, e) })
			got := runAll(t, e, reqs)
			var finals []Event
			accepted := 0
			for i, r := range reqs {
				want, reason, st := alone(t, r, s, k, 16)
				g := got[i]
				if !slices.Equal(g.tokens, want) || g.final.FinishReason != reason {
					t.Errorf("request %d (%+v):\nengine %v (%s)\nalone  %v (%s)", i, r.Sample, g.tokens, g.final.FinishReason, want, reason)
				}
				if u := g.final.Usage; u.Rounds != st.Rounds || u.Drafted != st.Drafted || u.Accepted != st.Accepted {
					t.Errorf("request %d: usage %+v, alone %+v", i, u, st)
				}
				if r.Sample.Greedy() {
					if plain, _, _ := alone(t, r, nil, 0, 16); !slices.Equal(want, plain) {
						t.Errorf("request %d: speculative %v, plain %v", i, want, plain)
					}
				}
				accepted += g.final.Usage.Accepted
				finals = append(finals, g.final)
			}
			checkCounters(t, e, finals)
			st := e.Stats()
			t.Logf("%d steps, %d rounds with drafts, %d/%d drafts accepted, per position %v", st.Steps, st.Drafts, st.AcceptedTokens, st.DraftTokens, st.AcceptedPerPos)
			closeEngine(t, e)
			if e.lateHeads != 0 {
				t.Errorf("the walks read %d verify rows outside the step's batched LM-head passes", e.lateHeads)
			}
			if accepted == 0 || st.AcceptedPerPos[k-1] == 0 {
				t.Fatalf("no round accepted all %d drafts: the test no longer exercises acceptance", k)
			}
		})
	}
}

var _ spec.Drafter = (*script)(nil)
