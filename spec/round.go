package spec

import (
	"math"

	"tandem/compute"
	"tandem/generation"
	"tandem/model/gemma4"
	"tandem/sample"
)

// NewStats makes empty stats for rounds of up to k drafts.
func NewStats(k int) Stats {
	return Stats{AcceptedAt: make([]int, k), DraftedAt: make([]int, k)}
}

// Record counts a round that proposed drafted drafts and accepted
// accepted of them.
func (s *Stats) Record(drafted, accepted int) {
	s.Rounds++
	s.Drafted += drafted
	s.Accepted += accepted
	for i := range min(drafted, len(s.DraftedAt)) {
		s.DraftedAt[i]++
		if i < accepted {
			s.AcceptedAt[i]++
		}
	}
}

// Depth is how many drafts seq's next round may propose: at most k, and
// never past the budget, since a round emits up to its drafts plus one.
func Depth(seq *generation.Seq, k int) int { return max(0, min(k, seq.Left()-1)) }

// VerifyRows returns the logits of a verify pass's rows lazily: row i is
// position off+i of hidden (post-norm, [N, H]), i < n. The LM head is the
// largest single matmul and the walk often stops at row 0, so row 0 is
// computed alone; the first access past it computes all the remaining rows
// in one pass, which reads the head's weights once instead of once per
// row (the same bits either way: the head is batch-invariant).
func VerifyRows(m *gemma4.Model, hidden *compute.Tensor, off, n int) func(int) []float32 {
	b := m.Backend()
	rows := make([][]float32, n)
	return func(i int) []float32 {
		if rows[i] != nil {
			return rows[i]
		}
		lo, hi := i, i+1
		if i > 0 {
			lo, hi = 1, n
		}
		all := b.ToF32(m.Logits(b.Slice(hidden, off+lo, off+hi)))
		V := len(all) / (hi - lo)
		for j := lo; j < hi; j++ {
			rows[j] = all[(j-lo)*V : (j-lo+1)*V : (j-lo+1)*V]
		}
		return rows[i]
	}
}

// Judge decides speculative rounds: the greedy walk, rejection sampling,
// or, for benchmarks, synthetic acceptance. Generate and the engine both
// decide through it, so a sequence's tokens do not depend on which of them
// runs it.
type Judge struct {
	// Synthetic replaces the walk with a seeded coin accepting each draft
	// with probability SyntheticAcceptance (see Options).
	Synthetic           bool
	SyntheticAcceptance float64
}

// Verdict is the outcome of one round.
type Verdict struct {
	// Accepted drafts: the target's cache keeps pending and these, and
	// verify row Accepted is the next round's hidden state.
	Accepted int
	// Next is the correction (or bonus) token that follows them.
	Next int32
	// Emitted are the tokens emitted into the sequence, in order: the
	// accepted drafts, then Next, cut where a stop token or the budget
	// ended the sequence (exactly where plain decoding would have stopped).
	Emitted []int32
	// Kept is how many accepted drafts were emitted: Accepted, unless a
	// stop token or the budget ended the sequence among them. Statistics
	// count these; drafts accepted past the end were never used.
	Kept int
}

// Round decides a verified round for seq, whose last token is the round's
// pending token: prop holds the drafts and row(i) the target's logits at
// verify row i (pending, then drafts 1..i as inputs). It records the round
// in st and emits the tokens into seq.
func (j Judge) Round(seq *generation.Seq, st *Stats, prop Proposal, row func(int) []float32) Verdict {
	return j.round(seq, st, prop, row, nil, nil)
}

// RoundTop is Round with each verify row's largest logits (tops[i], at
// least the sequence's sample.Params.TopNeeded of them), which decide the
// target's distributions under top-k without row's vocabulary; row is read
// only where they do not (sample.Params.FromTop).
func (j Judge) RoundTop(seq *generation.Seq, st *Stats, prop Proposal, tops []sample.Top, row func(int) []float32) Verdict {
	return j.round(seq, st, prop, row, nil, tops)
}

// RoundPicked is Round with each verify row's argmax already picked (on
// the device): pick(i) is sample.Argmax of row i's logits. It is for
// sequences whose token depends on the logits alone
// (Params.ArgmaxOnly), which the greedy walk and the synthetic coin then
// decide from the picks.
func (j Judge) RoundPicked(seq *generation.Seq, st *Stats, prop Proposal, pick func(int) int32) Verdict {
	if !seq.Params().ArgmaxOnly() {
		panic("spec: RoundPicked for a sequence whose sampling needs the logits")
	}
	return j.round(seq, st, prop, nil, pick, nil)
}

func (j Judge) round(seq *generation.Seq, st *Stats, prop Proposal, row func(int) []float32, pick func(int) int32,
	tops []sample.Top) Verdict {
	k := len(prop.Tokens)
	if len(tops) < k+1 {
		tops = nil // not a top for every verify row: the rows decide
	}
	var v Verdict
	switch {
	case j.Synthetic:
		rng := seq.Sampler()
		for v.Accepted < k && rng.Uniform() < j.SyntheticAcceptance {
			v.Accepted++
		}
		switch {
		case pick != nil:
			v.Next = pick(v.Accepted)
		case tops != nil && len(tops[v.Accepted].Values) > 0 && tops[v.Accepted].Values[0] == tops[v.Accepted].Values[0]:
			v.Next = tops[v.Accepted].IDs[0] // a device's top-k leads with the argmax, NaN aside
		default:
			v.Next = sample.Argmax(row(v.Accepted))
		}
	case pick != nil:
		v.Next, v.Accepted = greedyWalk(prop, pick)
	case seq.Params().Greedy():
		hist, base := withDrafts(seq.History, prop.Tokens), len(seq.History)
		v.Next, v.Accepted = greedyWalk(prop, func(n int) int32 {
			return seq.Sampler().NextAfter(row(n), hist[:base+n], seq.Prompt) // penalised over the history up to row n
		})
	default:
		v.Next, v.Accepted = rejectionSample(seq, prop, row, tops)
	}
	for _, tok := range append(prop.Tokens[:v.Accepted:v.Accepted], v.Next) {
		v.Emitted = append(v.Emitted, tok)
		if seq.Emit(tok) {
			break
		}
	}
	v.Kept = min(v.Accepted, len(v.Emitted))
	st.Record(k, v.Kept)
	return v
}

// greedyWalk accepts draft i+1 while it equals the target's choice at row
// i, choose(i).
func greedyWalk(prop Proposal, choose func(int) int32) (next int32, n int) {
	for {
		tok := choose(n)
		if n < len(prop.Tokens) && prop.Tokens[n] == tok {
			n++
			continue
		}
		return tok, n
	}
}

// rejectionSample accepts draft i with probability min(1, p(d)/q(d)), where
// p is the target's sampling distribution at that position and q the
// drafter's; at the first rejection it draws from the residual
// normalize(max(0, p − q)); if every draft is accepted it draws the bonus
// from p. The emitted tokens are distributed exactly as plain sampling's.
// p comes from tops where they decide it, else from row's logits.
func rejectionSample(seq *generation.Seq, prop Proposal, row func(int) []float32, tops []sample.Top) (next int32, n int) {
	p, s := seq.Params(), seq.Sampler()
	base, k := len(seq.History), len(prop.Tokens)
	var hist []int32
	target := func(n int) sample.Dist {
		if tops != nil {
			if d, ok := p.FromTop(tops[n]); ok {
				return d
			}
		}
		if hist == nil {
			hist = withDrafts(seq.History, prop.Tokens)
		}
		// Penalised over the history up to row n: pending, then drafts 1..n.
		return sample.Dense(p.DistributionAfter(row(n), hist[:base+n], seq.Prompt))
	}
	for n < k {
		d := prop.Tokens[n]
		pt := target(n)
		qd := prop.Probs[n].At(d)
		if u := s.Uniform(); qd > 0 && u < pt.At(d)/qd {
			n++
			continue
		}
		return residual(pt, prop.Probs[n]).Draw(s.Uniform()), n
	}
	return target(k).Draw(s.Uniform()), k
}

// withDrafts is a new slice of history followed by drafts: the target's
// verify row i has seen the history and drafts 1..i.
func withDrafts(history, drafts []int32) []int32 {
	h := make([]int32, 0, len(history)+len(drafts))
	return append(append(h, history...), drafts...)
}

// residual is normalize(max(0, p − q)) over p's tokens (where p has none,
// neither has the residual); where p ≤ q everywhere (which happens only
// through rounding once p and q agree) it is p itself. Sparse or dense, it
// sums and draws in token order, so the token drawn is the same.
func residual(p, q sample.Dist) sample.Dist {
	r := sample.Dist{Index: p.Index, Prob: make([]float64, len(p.Prob))}
	var z float64
	for j, pj := range p.Prob {
		r.Prob[j] = max(0, pj-q.At(p.Token(j)))
		z += r.Prob[j]
	}
	if z <= 0 || math.IsNaN(z) {
		return p
	}
	for j := range r.Prob {
		r.Prob[j] /= z
	}
	return r
}
