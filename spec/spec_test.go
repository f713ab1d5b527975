package spec_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"tandem/compute"
	"tandem/compute/computetest"
	"tandem/compute/cpu"
	"tandem/generation"
	"tandem/model/gemma4"
	"tandem/sample"
	"tandem/spec"
)

var presets = []string{"gemma4-tiny-e2b", "gemma4-tiny-e4b", "gemma4-tiny-26b-a4b", "gemma4-tiny-31b"}

// pair loads a tiny target and its assistant, bound.
func pair(t testing.TB, preset string) (*gemma4.Model, *gemma4.Assistant) {
	t.Helper()
	return pairOn(t, preset, computetest.Backend(t))
}

// pairOn is pair on backend b.
func pairOn(t testing.TB, preset string, b compute.Backend) (*gemma4.Model, *gemma4.Assistant) {
	t.Helper()
	load := func(name string) string {
		p, err := gemma4.LookupPreset(name)
		if err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		if err := p.Generate(dir, gemma4.GenerateOptions{Seed: 21}); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	m, err := gemma4.Load(load(preset), b)
	if err != nil {
		t.Fatal(err)
	}
	a, err := gemma4.LoadAssistant(load(preset+"-assistant"), b)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Bind(m); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(); m.Close() })
	return m, a
}

func prompt(n, vocab int, seed uint64) []int32 {
	r := rand.New(rand.NewPCG(seed, 9))
	ids := make([]int32, n)
	for i := range ids {
		ids[i] = int32(3 + r.IntN(vocab-3))
		for ids[i] == 50 || ids[i] == 106 { // keep stop ids out of prompts
			ids[i] = int32(3 + r.IntN(vocab-3))
		}
	}
	ids[0] = 2
	return ids
}

func plain(t testing.TB, m *gemma4.Model, p []int32, opt generation.Options) *generation.Result {
	t.Helper()
	res, err := generation.Generate(context.Background(), m, p, opt, nil)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func speculative(t testing.TB, m *gemma4.Model, d spec.Drafter, p []int32, opt generation.Options, k int) *spec.Result {
	t.Helper()
	res, err := spec.Generate(context.Background(), m, d, p, spec.Options{Options: opt, DraftTokens: k}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func assistant(t testing.TB, a *gemma4.Assistant, opt gemma4.DraftOptions, p sample.Params) spec.Drafter {
	t.Helper()
	d, err := spec.NewAssistant(a, opt, p)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestGreedySpeculativeEqualsPlain is the product's promise: with any draft
// depth, prompt length (shorter than the sliding window, longer than it,
// longer than the prefill chunk) and query convention, greedy speculative
// output is bit-identical to plain greedy output.
func TestGreedySpeculativeEqualsPlain(t *testing.T) {
	for _, preset := range presets {
		t.Run(preset, func(t *testing.T) {
			m, a := pair(t, preset)
			V := m.Config.Text.VocabSize
			for _, tc := range []struct {
				promptLen, prefill int
				ks                 []int
			}{
				{5, 512, []int{1, 2, 3, 4, 7}},
				{40, 512, []int{1, 2, 3, 4, 7}},
				{300, 128, []int{1, 2, 3, 4, 7}}, // chunked prefill
			} {
				p := prompt(tc.promptLen, V, uint64(tc.promptLen))
				opt := generation.Options{MaxTokens: 48, PrefillSize: tc.prefill}
				want := plain(t, m, p, opt).Tokens
				for _, k := range tc.ks {
					for _, last := range []bool{false, true} {
						got := speculative(t, m, assistant(t, a, gemma4.DraftOptions{QueryAtLast: last}, opt.Sample), p, opt, k)
						if !slices.Equal(got.Tokens, want) {
							t.Fatalf("prompt %d, k=%d, query at T-1 %v: speculative %v, plain %v", tc.promptLen, k, last, got.Tokens, want)
						}
						if s := got.Stats; s.Rounds == 0 || s.Drafted < s.Accepted || s.MeanAcceptLength() < 1 {
							t.Fatalf("implausible stats %+v", s)
						}
					}
				}
			}
		})
	}
}

// TestGreedySpeculativeEqualsPlainWithBF16Prompts: with prompt passes at
// bf16 (Model.SetPromptPrecision), greedy speculative output still equals
// plain greedy output, both starting from the same prompt pass, whole or
// chunked.
func TestGreedySpeculativeEqualsPlainWithBF16Prompts(t *testing.T) {
	for _, preset := range presets {
		t.Run(preset, func(t *testing.T) {
			m, a := pair(t, preset)
			if err := m.SetPromptPrecision(compute.PrecisionBF16); err != nil {
				t.Fatal(err)
			}
			for _, tc := range []struct{ promptLen, prefill int }{{40, 512}, {300, 128}} {
				p := prompt(tc.promptLen, m.Config.Text.VocabSize, uint64(tc.promptLen)+1)
				opt := generation.Options{MaxTokens: 40, PrefillSize: tc.prefill}
				want := plain(t, m, p, opt).Tokens
				for _, k := range []int{1, 3, 7} {
					got := speculative(t, m, assistant(t, a, gemma4.DraftOptions{}, opt.Sample), p, opt, k)
					if !slices.Equal(got.Tokens, want) {
						t.Fatalf("prompt %d, k=%d: speculative %v, plain %v", tc.promptLen, k, got.Tokens, want)
					}
				}
			}
		})
	}
}

// scripted proposes tokens from a known continuation: the truth (forced
// agreement) or the truth shifted by one (forced disagreement).
type scripted struct {
	promptLen int
	truth     []int32
	shift     int32
	vocab     int
}

func (s scripted) Propose(r spec.Round) (spec.Proposal, error) {
	var p spec.Proposal
	done := len(r.History) - s.promptLen // tokens emitted so far
	for i := range r.K {
		tok := int32(0)
		if j := done + i; j < len(s.truth) {
			tok = s.truth[j]
		}
		p.Tokens = append(p.Tokens, (tok+s.shift)%int32(s.vocab))
	}
	return p, nil
}

func TestForcedAgreementEmitsKPlusOnePerRound(t *testing.T) {
	for _, preset := range presets {
		t.Run(preset, func(t *testing.T) {
			m, _ := pair(t, preset)
			V := m.Config.Text.VocabSize
			p := prompt(30, V, 3)
			for _, k := range []int{1, 3, 7} {
				// 1 + 4(k+1) tokens: every round accepts everything.
				opt := generation.Options{MaxTokens: 1 + 4*(k+1)}
				want := plain(t, m, p, opt).Tokens
				got := speculative(t, m, scripted{len(p), want, 0, V}, p, opt, k)
				if !slices.Equal(got.Tokens, want) {
					t.Fatalf("k=%d: %v, plain %v", k, got.Tokens, want)
				}
				if s := got.Stats; s.Rounds != 4 || s.Accepted != 4*k || s.Drafted != 4*k || s.MeanAcceptLength() != float64(k+1) {
					t.Fatalf("k=%d: stats %+v, want 4 rounds of %d accepted drafts", k, s, k)
				}
			}
		})
	}
}

func TestForcedDisagreementEmitsOnePerRoundWithoutDrift(t *testing.T) {
	for _, preset := range presets {
		t.Run(preset, func(t *testing.T) {
			m, _ := pair(t, preset)
			V := m.Config.Text.VocabSize
			p := prompt(30, V, 4)
			opt := generation.Options{MaxTokens: 25}
			want := plain(t, m, p, opt).Tokens
			got := speculative(t, m, scripted{len(p), want, 1, V}, p, opt, 4)
			if !slices.Equal(got.Tokens, want) {
				t.Fatalf("%v, plain %v", got.Tokens, want)
			}
			if s := got.Stats; s.Accepted != 0 || s.Rounds != len(want)-1 {
				t.Fatalf("stats %+v: want %d rounds, none accepted", s, len(want)-1)
			}
		})
	}
}

func TestStopTokensAndBudgetsInsideRounds(t *testing.T) {
	m, a := pair(t, "gemma4-tiny-e4b")
	V := m.Config.Text.VocabSize
	p := prompt(20, V, 5)
	free := plain(t, m, p, generation.Options{MaxTokens: 40}).Tokens
	// A stop token that occurs inside an accepted (forced) draft.
	stopAt := -1
	for j := 3; j < len(free); j++ {
		if !slices.Contains(free[:j], free[j]) {
			stopAt = j
			break
		}
	}
	if stopAt < 0 {
		t.Fatal("no usable stop token in the continuation")
	}
	stops := []int32{free[stopAt]}
	for _, k := range []int{2, 4, 7} {
		opt := generation.Options{MaxTokens: 40, StopTokens: stops}
		want := plain(t, m, p, opt)
		got := speculative(t, m, scripted{len(p), free, 0, V}, p, opt, k)
		if !slices.Equal(got.Tokens, want.Tokens) || got.StopReason != generation.StopToken || len(got.Tokens) != stopAt+1 {
			t.Fatalf("k=%d: stop: %v (%s), plain %v (%s)", k, got.Tokens, got.StopReason, want.Tokens, want.StopReason)
		}
		for _, budget := range []int{1, 2, 6, 11} {
			opt := generation.Options{MaxTokens: budget}
			want := plain(t, m, p, opt).Tokens
			for _, d := range []spec.Drafter{scripted{len(p), free, 0, V}, assistant(t, a, gemma4.DraftOptions{}, sample.Params{})} {
				got := speculative(t, m, d, p, opt, k)
				if !slices.Equal(got.Tokens, want) || got.StopReason != generation.StopLength {
					t.Fatalf("k=%d budget %d: %v (%s), plain %v", k, budget, got.Tokens, got.StopReason, want)
				}
			}
		}
	}
}

func TestDrafterNeverPrefillsLongPrompts(t *testing.T) {
	// The seed port crashed when the prompt was longer than the prefill
	// chunk: its KV-shared drafter tried to prefill. Ours never does.
	m, a := pair(t, "gemma4-tiny-e2b")
	p := prompt(700, m.Config.Text.VocabSize, 6)
	opt := generation.Options{MaxTokens: 12, PrefillSize: 256}
	want := plain(t, m, p, opt).Tokens
	got := speculative(t, m, assistant(t, a, gemma4.DraftOptions{}, sample.Params{}), p, opt, 3)
	if !slices.Equal(got.Tokens, want) {
		t.Fatalf("%v, plain %v", got.Tokens, want)
	}
}

func TestRejectsInvalidDraftDepth(t *testing.T) {
	m, a := pair(t, "gemma4-tiny-31b")
	d := assistant(t, a, gemma4.DraftOptions{}, sample.Params{})
	for _, k := range []int{0, -1, spec.MaxDraftTokens + 1} {
		_, err := spec.Generate(context.Background(), m, d, []int32{2, 5}, spec.Options{Options: generation.Options{MaxTokens: 3}, DraftTokens: k}, nil)
		if err == nil || !errors.Is(err, spec.ErrInvalidDraftDepth) {
			t.Fatalf("k=%d: error %v", k, err)
		}
	}
}

// chiSquare compares observed counts with cell probabilities: Σ (obs −
// exp)² / exp, with cells expected fewer than 5 times pooled into one (the
// usual validity rule). An observation in a zero-probability cell fails.
func chiSquare(t *testing.T, obs map[string]int, probs map[string]float64, n int) (float64, int) {
	t.Helper()
	for cell := range obs {
		if probs[cell] == 0 {
			t.Fatalf("drew %s, which has probability 0", cell)
		}
	}
	var x, poolExp float64
	var poolObs, cells int
	for cell, p := range probs {
		e := p * float64(n)
		if e < 5 {
			poolExp += e
			poolObs += obs[cell]
			continue
		}
		d := float64(obs[cell]) - e
		x += d * d / e
		cells++
	}
	if poolExp > 0 {
		d := float64(poolObs) - poolExp
		x += d * d / poolExp
		cells++
	}
	return x, cells - 1
}

// chi2Critical is the p = 0.001 critical value of the chi-squared
// distribution (Wilson–Hilferty approximation, within 1% for dof ≥ 3).
func chi2Critical(dof int) float64 {
	k := float64(dof)
	const z = 3.0902 // the standard normal's 0.999 quantile
	v := 1 - 2/(9*k) + z*math.Sqrt(2/(9*k))
	return k * v * v * v
}

// noisyTarget drafts from a known mixture of the target's own sampling
// distribution and a fixed random one over the same support, so drafts are
// often but not always accepted: both the acceptance and the residual paths
// run. It recomputes the target on history + drafts (no cache), which is
// slow but exact.
type noisyTarget struct {
	m   *gemma4.Model
	sp  sample.Params
	rng *rand.Rand
}

func (d noisyTarget) Propose(r spec.Round) (spec.Proposal, error) {
	var p spec.Proposal
	seq := slices.Clone(r.History)
	for range r.K {
		c := d.m.NewCache(len(seq))
		out, err := d.m.Forward([]gemma4.Row{{Tokens: seq, Cache: c}}, gemma4.ForwardOptions{Logits: gemma4.LogitsLast})
		if err != nil {
			return p, err
		}
		q := d.sp.Distribution(d.m.Backend().ToF32(out.Logits), seq)
		var z float64
		for i := range q {
			if q[i] > 0 {
				q[i] = 0.6*q[i] + 0.4*(0.2+float64(i*7919%13)/13) // fixed noise on the support
			}
			z += q[i]
		}
		for i := range q {
			q[i] /= z
		}
		tok := sample.Draw(q, d.rng.Float64())
		p.Tokens, p.Probs = append(p.Tokens, tok), append(p.Probs, sample.Dense(q))
		seq = append(seq, tok)
	}
	return p, nil
}

// TestSpeculativeSamplingIsLossless draws the first three tokens many
// times with speculation (one round of two drafts after the prefill token)
// and compares their joint frequencies with the exact joint distribution of
// plain sampling, computed by enumerating the sampler's support, for
// several sampler settings and both an overlapping synthetic drafter and
// the real assistant. Seeds are fixed, so the test is deterministic. It
// catches a 30% bias in the acceptance probability (chi-squared 146 and 82
// against critical values 50 and 42, measured with 1500 draws).
func TestSpeculativeSamplingIsLossless(t *testing.T) {
	m, a := pair(t, "gemma4-tiny-e2b")
	b := m.Backend()
	p := prompt(12, m.Config.Text.VocabSize, 7)
	next := func(sp sample.Params, seq []int32) []float64 {
		c := m.NewCache(len(seq))
		out, err := m.Forward([]gemma4.Row{{Tokens: seq, Cache: c}}, gemma4.ForwardOptions{Logits: gemma4.LogitsLast})
		if err != nil {
			t.Fatal(err)
		}
		return sp.Distribution(b.ToF32(out.Logits), seq)
	}
	for _, tc := range []struct {
		sp   sample.Params
		real bool // the real assistant drafter (rarely accepted with random weights)
		n    int
	}{
		{sample.Params{Temperature: 1, TopK: 3}, false, 1000},
		{sample.Params{Temperature: 0.7, TopK: 4, TopP: 0.9, RepetitionPenalty: 1.3}, false, 1000},
		{sample.Params{Temperature: 1.5, TopK: 3, MinP: 0.05}, true, 400},
	} {
		sp := tc.sp
		t.Run(fmt.Sprintf("%+v/assistant=%v", sp, tc.real), func(t *testing.T) {
			joint := map[string]float64{}
			for t1, q1 := range next(sp, p) {
				if q1 == 0 {
					continue
				}
				s1 := append(slices.Clone(p), int32(t1))
				for t2, q2 := range next(sp, s1) {
					if q2 == 0 {
						continue
					}
					for t3, q3 := range next(sp, append(slices.Clone(s1), int32(t2))) {
						if q3 > 0 {
							joint[fmt.Sprint(t1, t2, t3)] = q1 * q2 * q3
						}
					}
				}
			}
			obs := map[string]int{}
			var accepted, drafted int
			for seed := range uint64(tc.n) {
				sp := sp
				sp.Seed = seed
				var d spec.Drafter = noisyTarget{m, sp, rand.New(rand.NewPCG(seed, 77))}
				if tc.real {
					d = assistant(t, a, gemma4.DraftOptions{}, sp)
				}
				res := speculative(t, m, d, p, generation.Options{MaxTokens: 4, Sample: sp}, 2)
				obs[fmt.Sprint(res.Tokens[0], res.Tokens[1], res.Tokens[2])]++
				accepted += res.Stats.Accepted
				drafted += res.Stats.Drafted
			}
			x, dof := chiSquare(t, obs, joint, tc.n)
			t.Logf("chi-squared %.1f with %d degrees of freedom (critical %.1f); %d of %d drafts accepted", x, dof, chi2Critical(dof), accepted, drafted)
			if x > chi2Critical(dof) {
				t.Fatalf("speculative sampling's joint distribution differs from plain sampling's: chi-squared %.1f > %.1f", x, chi2Critical(dof))
			}
			if !tc.real && accepted < drafted/4 {
				t.Fatalf("only %d of %d drafts accepted: the test no longer exercises acceptance", accepted, drafted)
			}
		})
	}
}

// TestSyntheticAcceptance protects the benchmark mode: at 1 every draft is
// accepted, at 0 none, and in between the rate is close to the setting.
func TestSyntheticAcceptance(t *testing.T) {
	m, a := pair(t, "gemma4-tiny-26b-a4b")
	p := prompt(20, m.Config.Text.VocabSize, 8)
	for _, tc := range []struct{ p, lo, hi float64 }{{1, 1, 1}, {0, 0, 0}, {0.6, 0.45, 0.75}} {
		res, err := spec.Generate(context.Background(), m, assistant(t, a, gemma4.DraftOptions{}, sample.Params{}), p,
			spec.Options{Options: generation.Options{MaxTokens: 120}, DraftTokens: 1, Synthetic: true, SyntheticAcceptance: tc.p}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if r := res.Stats.AcceptanceRate(); r < tc.lo || r > tc.hi || len(res.Tokens) != 120 {
			t.Fatalf("synthetic %v: acceptance %.2f over %d drafts, %d tokens", tc.p, r, res.Stats.Drafted, len(res.Tokens))
		}
	}
	_, err := spec.Generate(context.Background(), m, assistant(t, a, gemma4.DraftOptions{}, sample.Params{}), p,
		spec.Options{Options: generation.Options{MaxTokens: 5}, DraftTokens: 2, Synthetic: true, SyntheticAcceptance: 1.5}, nil)
	if err == nil || !strings.Contains(err.Error(), "synthetic acceptance") {
		t.Fatalf("error %v", err)
	}
}

// Greedy rounds kept on the device (drafts chosen and fed on the backend,
// the verify's argmaxes picked there, one read per round) must decide
// exactly as rounds read on the host: the same tokens as plain decoding,
// the same rounds and acceptances, for both drafter heads, any depth, the
// synthetic coin, and rows sent back to the host by a NaN pick. The
// backend here is the CPU with prefetching, which takes the device path.
func TestDeviceRoundsMatchHostRounds(t *testing.T) {
	t.Setenv("TANDEM_SPEC_AHEAD", "0") // rounds that never draft ahead; TestDraftingAheadMatches covers the rest
	for _, preset := range presets {
		t.Run(preset, func(t *testing.T) {
			deviceRoundsMatchHostRounds(t, preset, "")
		})
	}
}

// TestDraftingAheadMatches protects drafting ahead (TANDEM_SPEC_AHEAD):
// device rounds that issue the next round's drafts before reading the
// verdict, on a guess of it, give the tokens and statistics of host rounds,
// whether the guesses prove right (the drafts are used) or wrong (the cache
// is restored and the round drafts again). "always" guesses every round: at
// synthetic acceptance 0 every guess after the first round is right, at 0.7
// many are wrong. "auto" (the default) guesses once eight rounds agree; "0", never.
func TestDraftingAheadMatches(t *testing.T) {
	for _, mode := range []string{"always", "auto", "0"} {
		for _, preset := range presets {
			t.Run(mode+"/"+preset, func(t *testing.T) {
				t.Setenv("TANDEM_SPEC_AHEAD", mode)
				deviceRoundsMatchHostRounds(t, preset, mode)
			})
		}
	}
}

func deviceRoundsMatchHostRounds(t *testing.T, preset, ahead string) {
	t.Helper()
	m, a := pairOn(t, preset, cpu.New(0))
	pb := &computetest.Prefetching{Backend: cpu.New(0)}
	dm, da := pairOn(t, preset, pb)
	p := prompt(40, m.Config.Text.VocabSize, 4)
	opt := generation.Options{MaxTokens: 40}
	want := plain(t, m, p, opt).Tokens
	for _, tc := range []struct {
		k         int
		synthetic float64 // < 0: the greedy walk
		nanAt     []int
	}{
		{1, -1, nil}, {3, -1, nil}, {7, -1, nil},
		{3, -1, []int{0, 2, 3}},
		{3, 0.7, nil}, {3, 0.7, []int{1}},
		{3, 0, nil}, {3, 1, nil}, {3, 0, []int{0, 4}},
	} {
		so := spec.Options{Options: opt, DraftTokens: tc.k, Synthetic: tc.synthetic >= 0, SyntheticAcceptance: tc.synthetic}
		host, err := spec.Generate(context.Background(), m, assistant(t, a, gemma4.DraftOptions{}, opt.Sample), p, so, nil)
		if err != nil {
			t.Fatal(err)
		}
		pb.Reset(tc.nanAt...)
		var seen []int32
		dev, err := spec.Generate(context.Background(), dm, assistant(t, da, gemma4.DraftOptions{}, opt.Sample), p, so,
			func(tok int32) { seen = append(seen, tok) })
		if err != nil {
			t.Fatal(err)
		}
		name := fmt.Sprintf("k=%d synthetic %v NaN at %v", tc.k, tc.synthetic, tc.nanAt)
		if pb.Waiting != 0 {
			t.Fatalf("%s: %d prefetches never waited for", name, pb.Waiting)
		}
		if pb.Calls < 3*dev.Stats.Rounds {
			t.Fatalf("%s: %d prefetches for %d rounds: the rounds did not run on the device", name, pb.Calls, dev.Stats.Rounds)
		}
		if !slices.Equal(dev.Tokens, host.Tokens) || !slices.Equal(seen, dev.Tokens) {
			t.Fatalf("%s: device rounds gave %v (onToken %v), host rounds %v", name, dev.Tokens, seen, host.Tokens)
		}
		if tc.synthetic < 0 && !slices.Equal(dev.Tokens, want) {
			t.Fatalf("%s: speculative %v, plain %v", name, dev.Tokens, want)
		}
		if hs, ds := host.Stats, dev.Stats; hs.Rounds != ds.Rounds || hs.Accepted != ds.Accepted || hs.Drafted != ds.Drafted ||
			!slices.Equal(hs.AcceptedAt, ds.AcceptedAt) || !slices.Equal(hs.DraftedAt, ds.DraftedAt) {
			t.Fatalf("%s: device stats %+v, host stats %+v", name, ds, hs)
		}
		ds := dev.Stats
		switch {
		case ahead == "0" && ds.Ahead+ds.AheadMissed != 0:
			t.Fatalf("%s: drafted ahead %d times (%d missed) with TANDEM_SPEC_AHEAD=0", name, ds.Ahead, ds.AheadMissed)
		case ahead == "auto" && tc.synthetic == 0 && tc.nanAt == nil && (ds.Ahead == 0 || ds.AheadMissed != 0):
			t.Fatalf("%s: %d of %d rounds drafted ahead, %d missed; want the rounds after the first eight, none missed", name, ds.Ahead, ds.Rounds, ds.AheadMissed)
		case ahead == "always" && (tc.synthetic == 0 || tc.synthetic == 1) && tc.nanAt == nil && (ds.Ahead < ds.Rounds-3 || ds.AheadMissed != 0):
			t.Fatalf("%s: %d of %d rounds drafted ahead, %d missed; want all but the first and the last", name, ds.Ahead, ds.Rounds, ds.AheadMissed)
		case ahead == "always" && tc.synthetic == 0.7 && tc.nanAt == nil && (ds.Ahead == 0 || ds.AheadMissed == 0):
			t.Fatalf("%s: %d rounds drafted ahead, %d missed; want both", name, ds.Ahead, ds.AheadMissed)
		}
	}
}

// TestSampledTopsKeepTheTokens protects sampling from a device's top-k
// (sample.Params.FromTop): rounds whose drafter and verify read each row's
// largest logits give the tokens and statistics of rounds that read whole
// rows (TANDEM_SAMPLE_TOPS=0), for drafters with and without a centroid
// head, filters on top of top-k, penalties (which read whole rows), and the
// synthetic coin (whose correction is the top's argmax). On a backend that
// uploads late the drafts are drawn ahead (drawAhead), and tops that do
// not decide (late.SpoilTops) send drafting back to whole rows mid-round.
func TestSampledTopsKeepTheTokens(t *testing.T) {
	for _, preset := range presets {
		t.Run(preset, func(t *testing.T) {
			m, a := pair(t, preset)
			late := &computetest.Late{Backend: cpu.New(0)}
			lm, la := pairOn(t, preset, late)
			p := prompt(30, m.Config.Text.VocabSize, 6)
			for i, sp := range []sample.Params{
				{Temperature: 1, TopK: 5},
				{Temperature: 0.8, TopK: 8, TopP: 0.9},
				{Temperature: 1.3, TopK: 3, MinP: 0.05},
				{Temperature: 1, TopK: 5, RepetitionPenalty: 1.2},
			} {
				for _, k := range []int{1, 3} {
					for _, synthetic := range []float64{-1, 0.5} {
						sp.Seed = uint64(10*i + k)
						so := spec.Options{Options: generation.Options{MaxTokens: 30, Sample: sp}, DraftTokens: k,
							Synthetic: synthetic >= 0, SyntheticAcceptance: synthetic}
						run := func(m *gemma4.Model, a *gemma4.Assistant, tops string) *spec.Result {
							t.Setenv(sample.TopsEnv, tops)
							res, err := spec.Generate(context.Background(), m, assistant(t, a, gemma4.DraftOptions{}, sp), p, so, nil)
							if err != nil {
								t.Fatal(err)
							}
							return res
						}
						want := run(m, a, "0")
						for _, c := range []struct {
							name  string
							m     *gemma4.Model
							a     *gemma4.Assistant
							spoil int
						}{{"tops", m, a, 0}, {"drawn ahead", lm, la, 0}, {"drawn ahead, every fourth top spoilt", lm, la, 4}} {
							late.SpoilTops = c.spoil
							calls, verifies := late.Calls(), late.Recorded(fmt.Sprintf("verify-late%d", k+1))
							got := run(c.m, c.a, "1")
							name := fmt.Sprintf("%s: params %+v, k=%d, synthetic %v", c.name, sp, k, synthetic)
							ahead := c.m == lm && sp.RepetitionPenalty == 0
							if drew := late.Calls() > calls; drew != ahead {
								t.Fatalf("%s: drafts drawn ahead: %v", name, drew)
							}
							if unread := late.Recorded(fmt.Sprintf("verify-late%d", k+1)) > verifies; unread != ahead {
								t.Fatalf("%s: drafts verified unread: %v", name, unread)
							}
							if !slices.Equal(got.Tokens, want.Tokens) {
								t.Fatalf("%s: %v, whole rows %v", name, got.Tokens, want.Tokens)
							}
							if g, w := got.Stats, want.Stats; g.Rounds != w.Rounds || g.Accepted != w.Accepted || !slices.Equal(g.AcceptedAt, w.AcceptedAt) {
								t.Fatalf("%s: stats %+v, whole rows %+v", name, g, w)
							}
						}
					}
				}
			}
		})
	}
}

// TestPrefillTimeWaitsForTheDevice protects Result.Prefill of speculative
// decoding on an asynchronous backend: Generate waits for the prompt's
// work (Sync) right after the prefill's last product, before any draft.
func TestPrefillTimeWaitsForTheDevice(t *testing.T) {
	s := &computetest.Syncing{Backend: cpu.New(0)}
	m, a := pairOn(t, "gemma4-tiny-e2b", s)
	ids := prompt(9, m.Config.Text.VocabSize, 4)
	s.MatMuls = 0
	if _, _, err := generation.Prefill(context.Background(), m, m.NewCache(len(ids)), ids, len(ids)); err != nil {
		t.Fatal(err)
	}
	prefill := s.MatMuls
	s.MatMuls, s.At = 0, nil
	speculative(t, m, assistant(t, a, gemma4.DraftOptions{}, sample.Params{}), ids, generation.Options{MaxTokens: 6}, 3)
	if len(s.At) == 0 || s.At[0] != prefill {
		t.Fatalf("Sync calls at %v products, want the first right after the prefill's %d", s.At, prefill)
	}
}

// checkpointingPrefetch is the CPU behind Prefetching (device rounds, as on
// the GPU) that counts the model's checkpoints.
type checkpointingPrefetch struct {
	computetest.Prefetching
	calls int
}

func (b *checkpointingPrefetch) Checkpoint() { b.calls++ }

// TestFirstPartSplitsTheVerify protects TANDEM_SPEC_FIRST_PART: a device
// round's verify records its first N layers as a part of their own, then
// every six (by default two; 0 is the model's six), so each verify of the
// tiny E2B preset's layers takes the checkpoints of that schedule instead
// of the default one, nothing else changes its count (prefill, drafts),
// and the tokens are the same. A value that is not a layer count leaves
// the default.
func TestFirstPartSplitsTheVerify(t *testing.T) {
	t.Setenv("TANDEM_SPEC_AHEAD", "0")
	b := &checkpointingPrefetch{Prefetching: computetest.Prefetching{Backend: cpu.New(0)}}
	m, a := pairOn(t, "gemma4-tiny-e2b", b)
	L := m.Config.Text.NumHiddenLayers
	p := prompt(12, m.Config.Text.VocabSize, 5)
	so := spec.Options{Options: generation.Options{MaxTokens: 16}, DraftTokens: 3, Synthetic: true}
	parts := func(first int) int { // checkpoints a verify of L layers takes
		n := 0
		for at := first; at < L; at += 6 {
			n++
		}
		return n
	}
	run := func(v string) (int, *spec.Result) {
		t.Setenv("TANDEM_SPEC_FIRST_PART", v)
		b.Reset()
		before := b.calls
		res, err := spec.Generate(context.Background(), m, assistant(t, a, gemma4.DraftOptions{}, sample.Params{}), p, so, nil)
		if err != nil {
			t.Fatal(err)
		}
		if b.Calls < 3*res.Stats.Rounds {
			t.Fatalf("TANDEM_SPEC_FIRST_PART=%q: %d prefetches for %d rounds: the rounds did not run on the device", v, b.Calls, res.Stats.Rounds)
		}
		return b.calls - before, res
	}
	base, want := run("")
	for _, tc := range []struct {
		v     string
		first int
	}{{"2", 2}, {"1", 1}, {"6", 6}, {"0", 6}, {"3", 3}, {"x", 2}, {"-3", 2}} {
		got, res := run(tc.v)
		if !slices.Equal(res.Tokens, want.Tokens) {
			t.Fatalf("TANDEM_SPEC_FIRST_PART=%q: tokens %v, want %v", tc.v, res.Tokens, want.Tokens)
		}
		if d := res.Stats.Rounds * (parts(tc.first) - parts(2)); got-base != d {
			t.Errorf("TANDEM_SPEC_FIRST_PART=%q: %d checkpoints against %d by default over %d rounds, want %d more", tc.v, got, base, res.Stats.Rounds, d)
		}
	}
	if !spec.Live("TANDEM_SPEC_FIRST_PART") {
		t.Error("TANDEM_SPEC_FIRST_PART is not live")
	}
}
