// Package spec runs speculative decoding: a drafter proposes k tokens, the
// target verifies the pending token and the k drafts in one forward pass,
// and a walk keeps the longest prefix the target agrees with (spec §3).
//
// The output is exactly what plain decoding would produce: bit for bit at
// temperature 0 (the target's kernels are batch-invariant, so a verify pass
// gives each position the same logits as a one-token step), and in
// distribution when sampling (rejection sampling against the drafter's
// distribution). docs/speculative-decoding.md explains the loop and its
// invariants.
package spec

import (
	"context"
	"fmt"
	"math"
	"slices"
	"time"

	"tandem/compute"
	"tandem/generation"
	"tandem/model/gemma4"
	"tandem/sample"
)

// MaxDraftTokens bounds the draft depth: deeper rounds only add drafter and
// verify work once acceptance has decayed.
const MaxDraftTokens = 64

// ErrInvalidDraftDepth reports a draft depth outside [1, MaxDraftTokens].
var ErrInvalidDraftDepth = fmt.Errorf("spec: the number of draft tokens must be between 1 and %d", MaxDraftTokens)

// Options controls Generate. The embedded generation options mean what
// they mean for plain decoding.
type Options struct {
	generation.Options
	DraftTokens int // k: drafts per round
	Draft       gemma4.DraftOptions
	// SyntheticAcceptance in [0, 1] replaces the walk for benchmarks:
	// each draft is accepted with this probability (a seeded coin), so the
	// mechanism's speed can be measured without trained weights. The
	// drafter and the verify pass still run for real; the output is then
	// NOT the target's.
	Synthetic           bool
	SyntheticAcceptance float64
}

// Stats describe a speculative generation.
type Stats struct {
	Rounds   int `json:"rounds"`
	Drafted  int `json:"drafted"`
	Accepted int `json:"accepted"`
	// AcceptedAt[i] counts rounds whose draft i+1 was accepted; DraftedAt[i]
	// rounds that proposed a draft i+1.
	AcceptedAt []int         `json:"accepted_at"`
	DraftedAt  []int         `json:"drafted_at"`
	DraftTime  time.Duration `json:"-"`
	VerifyTime time.Duration `json:"-"`
}

// AcceptanceRate is accepted drafts over proposed drafts.
func (s Stats) AcceptanceRate() float64 {
	if s.Drafted == 0 {
		return 0
	}
	return float64(s.Accepted) / float64(s.Drafted)
}

// MeanAcceptLength is the tokens each target forward yields: accepted
// drafts plus the correction or bonus token, per round.
func (s Stats) MeanAcceptLength() float64 {
	if s.Rounds == 0 {
		return 0
	}
	return float64(s.Accepted+s.Rounds) / float64(s.Rounds)
}

// Result of Generate.
type Result struct {
	generation.Result
	Stats Stats
}

// Proposal is a drafter's k tokens; Probs[i], when sampling, is the
// distribution Tokens[i] was drawn from (nil for greedy drafting).
type Proposal struct {
	Tokens []int32
	Probs  [][]float64
}

// Round is what a drafter knows when a round starts.
type Round struct {
	Pending int32           // the emitted token the target has not processed yet, at position Snap.Len
	Hidden  *compute.Tensor // [1, H]: the target's post-norm hidden at position Snap.Len−1
	Snap    gemma4.Snapshot // the target's committed K/V
	History []int32         // prompt and emitted tokens, Pending last
	K       int
}

// Drafter proposes tokens for a round.
type Drafter interface {
	Propose(r Round) (Proposal, error)
}

// Generate decodes up to MaxTokens tokens after prompt with drafter d.
// onToken, if set, sees each token as it is emitted.
func Generate(ctx context.Context, m *gemma4.Model, d Drafter, prompt []int32, opt Options, onToken func(int32)) (*Result, error) {
	if opt.DraftTokens < 1 || opt.DraftTokens > MaxDraftTokens {
		return nil, fmt.Errorf("%w (got %d)", ErrInvalidDraftDepth, opt.DraftTokens)
	}
	if err := opt.Options.Validate(m, len(prompt)); err != nil {
		return nil, err
	}
	if opt.Synthetic && (opt.SyntheticAcceptance < 0 || opt.SyntheticAcceptance > 1) {
		return nil, fmt.Errorf("spec: synthetic acceptance must be in [0, 1], got %v", opt.SyntheticAcceptance)
	}
	b := m.Backend()
	k := opt.DraftTokens
	res := &Result{Result: generation.Result{PromptTokens: len(prompt), StopReason: generation.StopLength}}
	res.Stats.AcceptedAt, res.Stats.DraftedAt = make([]int, k), make([]int, k)
	chunk := min(opt.PrefillSize, len(prompt))
	cache := m.NewCache(max(chunk, k+1))
	start := time.Now()
	logits, hidden, err := generation.Prefill(ctx, m, cache, prompt, chunk)
	if err != nil {
		return nil, err
	}
	res.Prefill = time.Since(start)
	start = time.Now()
	target := sample.New(opt.Sample)
	history := slices.Clone(prompt)

	// emit appends tok and reports whether generation is over.
	emit := func(tok int32) bool {
		res.Tokens = append(res.Tokens, tok)
		history = append(history, tok)
		if onToken != nil {
			onToken(tok)
		}
		if slices.Contains(opt.StopTokens, tok) {
			res.StopReason = generation.StopToken
			return true
		}
		return len(res.Tokens) == opt.MaxTokens
	}
	if emit(target.Next(b.ToF32(logits), history)) {
		res.Decode = time.Since(start)
		return res, nil
	}
	for {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		pending := history[len(history)-1]
		// A round emits at most kr+1 tokens: never draft past the budget.
		kr := min(k, opt.MaxTokens-len(res.Tokens)-1)
		var prop Proposal
		if kr > 0 {
			t0 := time.Now()
			prop, err = d.Propose(Round{Pending: pending, Hidden: hidden, Snap: m.Snapshot(cache), History: history, K: kr})
			if err != nil {
				return res, err
			}
			if len(prop.Tokens) != kr {
				return res, fmt.Errorf("spec: drafter proposed %d tokens, asked for %d", len(prop.Tokens), kr)
			}
			res.Stats.DraftTime += time.Since(t0)
		}
		t0 := time.Now()
		T := cache.Len()
		out, err := m.Forward([]gemma4.Row{{Tokens: append([]int32{pending}, prop.Tokens...), Cache: cache}}, gemma4.ForwardOptions{Logits: gemma4.LogitsNone})
		if err != nil {
			return res, err
		}
		// The LM head is the largest single matmul; the walk usually stops
		// early, so each row's logits are computed only when it gets there
		// (the same bits as computing all rows: the head is batch-invariant).
		rows := make([][]float32, kr+1)
		row := func(i int) []float32 {
			if rows[i] == nil {
				rows[i] = b.ToF32(m.Logits(b.Slice(out.Hidden, i, i+1)))
			}
			return rows[i]
		}

		// Walk: the target's choice at row i is compared with draft i+1.
		n, done := 0, false
		// The target's row i sees the history up to and including its input:
		// seq[:base+i] (pending, then drafts 1..i).
		base := len(history)
		seq := append(slices.Clone(history), prop.Tokens...)
		var next int32
		switch {
		case opt.Synthetic:
			for n < kr && target.Uniform() < opt.SyntheticAcceptance {
				n++
			}
			next = sample.Argmax(row(n))
		case opt.Sample.Greedy():
			for {
				tok := target.Next(row(n), seq[:base+n])
				if n < kr && prop.Tokens[n] == tok {
					n++
					continue
				}
				next = tok
				break
			}
		default:
			next, n = rejectionSample(target, opt.Sample, prop, row, seq, base, kr)
		}
		res.Stats.VerifyTime += time.Since(t0)
		res.Stats.Rounds++
		res.Stats.Drafted += kr
		res.Stats.Accepted += n
		for i := range kr {
			res.Stats.DraftedAt[i]++
			if i < n {
				res.Stats.AcceptedAt[i]++
			}
		}
		// Emit in order; a stop token or the budget may end it mid-round,
		// exactly where plain decoding would have stopped.
		for _, tok := range append(slices.Clone(prop.Tokens[:n]), next) {
			if done = emit(tok); done {
				break
			}
		}
		if done {
			break
		}
		// Keep pending and the accepted drafts; the next round's hidden is
		// the verify row that produced the correction or bonus.
		if err := cache.Truncate(T + n + 1); err != nil {
			return res, err
		}
		hidden = b.Slice(out.Hidden, n, n+1)
	}
	res.Decode = time.Since(start)
	return res, nil
}

// rejectionSample accepts draft i with probability min(1, p(d)/q(d)), where
// p is the target's sampling distribution at that position and q the
// drafter's; at the first rejection it draws from the residual
// normalize(max(0, p − q)); if every draft is accepted it draws the bonus
// from p. The emitted tokens are distributed exactly as plain sampling's.
func rejectionSample(s *sample.Sampler, p sample.Params, prop Proposal, row func(int) []float32, seq []int32, base, k int) (next int32, n int) {
	for n < k {
		d := prop.Tokens[n]
		pt := p.Distribution(row(n), seq[:base+n])
		q := prop.Probs[n]
		if u := s.Uniform(); q[d] > 0 && u < pt[d]/q[d] {
			n++
			continue
		}
		return sample.Draw(residual(pt, q), s.Uniform()), n
	}
	return sample.Draw(p.Distribution(row(k), seq[:base+k]), s.Uniform()), k
}

// residual is normalize(max(0, p − q)); where p ≤ q everywhere (which
// happens only through rounding once p and q agree) it is p itself.
func residual(p, q []float64) []float64 {
	r := make([]float64, len(p))
	var z float64
	for i := range p {
		r[i] = max(0, p[i]-q[i])
		z += r[i]
	}
	if z <= 0 || math.IsNaN(z) {
		return p
	}
	for i := range r {
		r[i] /= z
	}
	return r
}

// Assistant drafts with a Gemma 4 assistant bound to the target.
type Assistant struct {
	A      *gemma4.Assistant
	Opt    gemma4.DraftOptions
	Sample sample.Params
	rng    *sample.Sampler
}

// NewAssistant wraps a bound assistant. Sampling drafts use their own
// random stream, seeded from the sampling seed.
func NewAssistant(a *gemma4.Assistant, opt gemma4.DraftOptions, p sample.Params) (*Assistant, error) {
	if a.Target() == nil {
		return nil, gemma4.ErrNotBound
	}
	dp := p
	dp.Seed = p.Seed ^ 0x6472616674 // "draft": a stream independent of the target's
	return &Assistant{A: a, Opt: opt, Sample: p, rng: sample.New(dp)}, nil
}

// Propose runs k drafter steps at one query position: the first from the
// target's hidden, each next from the drafter's own post-projection.
// Greedy drafting takes the centroid head's fast argmax; sampling draws
// from the full distribution, processed like the target's (temperature,
// top-k, top-p, min-p, penalties over the history and earlier drafts).
func (d *Assistant) Propose(r Round) (Proposal, error) {
	var p Proposal
	tok, h := r.Pending, r.Hidden
	hist := slices.Clone(r.History)
	for range r.K {
		out, err := d.A.Step([]gemma4.DraftRow{{Token: tok, Hidden: h, Snap: r.Snap}}, d.Opt)
		if err != nil {
			return p, err
		}
		if d.Sample.Greedy() {
			tok = d.A.Argmax(out.Normed)[0]
		} else {
			q := d.Sample.Distribution(d.A.Backend().ToF32(d.A.Logits(out.Normed)), hist)
			tok = sample.Draw(q, d.rng.Uniform())
			p.Probs = append(p.Probs, q)
		}
		p.Tokens = append(p.Tokens, tok)
		hist = append(hist, tok)
		h = out.Next
	}
	return p, nil
}
