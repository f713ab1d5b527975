// Package sample turns logits into tokens: greedy argmax or seeded sampling
// with temperature, top-k, top-p, min-p and a repetition penalty, applied in
// Hugging Face's order (penalty, temperature, top-k, top-p, min-p), plus
// OpenAI's frequency and presence penalties (vLLM's semantics: applied after
// the repetition penalty, before the temperature, counting only the tokens
// generated after the prompt).
//
// Distribution exposes the exact distribution a token is drawn from, which
// lossless speculative sampling needs for both drafter and target.
package sample

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
)

// Params are the sampling settings. The zero value is greedy decoding.
type Params struct {
	Temperature       float64 // 0: greedy
	TopK              int     // 0: off
	TopP              float64 // 0 or 1: off
	MinP              float64 // 0: off
	RepetitionPenalty float64 // 0 or 1: off; >1 discourages tokens already seen
	// FrequencyPenalty and PresencePenalty, in [-2, 2] (0: off), subtract
	// freq·count(t) + pres·[count(t) > 0] from each token's logit, where
	// count(t) is how often t was generated so far (the prompt does not
	// count). Positive values discourage repeats.
	FrequencyPenalty float64
	PresencePenalty  float64
	Seed             uint64
}

// MaxPenalty bounds FrequencyPenalty and PresencePenalty (OpenAI's range).
const MaxPenalty = 2

// Greedy reports whether p picks the most likely token deterministically.
func (p Params) Greedy() bool { return p.Temperature == 0 }

// ArgmaxOnly reports whether the token p picks depends on the logits alone:
// greedy with no penalty, so a device can pick it without the history.
func (p Params) ArgmaxOnly() bool {
	return p.Greedy() && !p.penalizes()
}

// Validate rejects settings that have no meaning.
func (p Params) Validate() error {
	var errs []error
	if p.Temperature < 0 || math.IsNaN(p.Temperature) || math.IsInf(p.Temperature, 0) {
		errs = append(errs, fmt.Errorf("temperature must be >= 0, got %v", p.Temperature))
	}
	if p.TopK < 0 {
		errs = append(errs, fmt.Errorf("top_k must be >= 0, got %d", p.TopK))
	}
	if p.TopP < 0 || p.TopP > 1 || math.IsNaN(p.TopP) {
		errs = append(errs, fmt.Errorf("top_p must be in [0, 1], got %v", p.TopP))
	}
	if p.MinP < 0 || p.MinP > 1 || math.IsNaN(p.MinP) {
		errs = append(errs, fmt.Errorf("min_p must be in [0, 1], got %v", p.MinP))
	}
	if p.RepetitionPenalty < 0 || math.IsNaN(p.RepetitionPenalty) || math.IsInf(p.RepetitionPenalty, 0) {
		errs = append(errs, fmt.Errorf("repetition_penalty must be > 0, got %v", p.RepetitionPenalty))
	}
	if !(p.FrequencyPenalty >= -MaxPenalty && p.FrequencyPenalty <= MaxPenalty) { // NaN fails too
		errs = append(errs, fmt.Errorf("frequency_penalty must be in [-%d, %d], got %v", MaxPenalty, MaxPenalty, p.FrequencyPenalty))
	}
	if !(p.PresencePenalty >= -MaxPenalty && p.PresencePenalty <= MaxPenalty) {
		errs = append(errs, fmt.Errorf("presence_penalty must be in [-%d, %d], got %v", MaxPenalty, MaxPenalty, p.PresencePenalty))
	}
	return errors.Join(errs...)
}

// Sampler draws tokens with its own seeded random stream.
type Sampler struct {
	p     Params
	rng   *rand.Rand
	probs []float64 // Next's distribution, kept: a vocabulary's is megabytes a token
	dirty []int32   // the entries of probs the last token set; nil: any
}

// New makes a sampler; the same Params (seed included) give the same tokens.
func New(p Params) *Sampler {
	return &Sampler{p: p, rng: rand.New(rand.NewPCG(p.Seed, 0x74616e64656d))}
}

// Params returns the sampler's settings.
func (s *Sampler) Params() Params { return s.p }

// Penalize is PenalizeAfter with no prompt: every token of history counts
// as generated for the frequency and presence penalties.
func (p Params) Penalize(logits []float32, history []int32) { p.PenalizeAfter(logits, history, 0) }

// PenalizeAfter applies the penalties in place to the logits that follow
// history, whose first prompt tokens are the prompt. The repetition penalty
// (HF) looks at all of history: positive logits of seen tokens are divided
// by it, negative ones multiplied. Then the frequency and presence
// penalties (vLLM) subtract freq·count + pres·[count > 0], counting only
// history[prompt:], the generated tokens. Ids outside the vocabulary are
// ignored.
func (p Params) PenalizeAfter(logits []float32, history []int32, prompt int) {
	if p.RepetitionPenalty != 0 && p.RepetitionPenalty != 1 {
		pen := float32(p.RepetitionPenalty)
		seen := make(map[int32]bool, len(history))
		for _, t := range history {
			if seen[t] || t < 0 || int(t) >= len(logits) {
				continue
			}
			seen[t] = true
			if logits[t] > 0 {
				logits[t] /= pen
			} else {
				logits[t] *= pen
			}
		}
	}
	if p.FrequencyPenalty == 0 && p.PresencePenalty == 0 {
		return
	}
	prompt = min(max(prompt, 0), len(history))
	counts := make(map[int32]int, len(history)-prompt)
	for _, t := range history[prompt:] {
		if t >= 0 && int(t) < len(logits) {
			counts[t]++
		}
	}
	for t, c := range counts {
		logits[t] = float32(float64(logits[t]) - p.FrequencyPenalty*float64(c) - p.PresencePenalty)
	}
}

// Next is NextAfter with no prompt.
func (s *Sampler) Next(logits []float32, history []int32) int32 {
	return s.NextAfter(logits, history, 0)
}

// NextAfter picks the next token from one position's logits. history is
// the sequence so far, its first prompt tokens the prompt (for the
// penalties). logits is not modified.
func (s *Sampler) NextAfter(logits []float32, history []int32, prompt int) int32 {
	if s.p.Greedy() {
		l := slices.Clone(logits)
		s.p.PenalizeAfter(l, history, prompt)
		return Argmax(l)
	}
	if len(s.probs) != len(logits) || s.dirty == nil {
		s.probs = slices.Grow(s.probs[:0], len(logits))[:len(logits)]
		clear(s.probs)
	} else {
		for _, i := range s.dirty {
			s.probs[i] = 0
		}
	}
	probs, kept := s.p.distribution(s.probs, logits, history, prompt)
	s.dirty = kept
	if kept == nil {
		return Draw(probs, s.rng.Float64())
	}
	return drawAt(probs, kept, s.rng.Float64())
}

// Uniform draws the sampler's next uniform number in [0, 1).
func (s *Sampler) Uniform() float64 { return s.rng.Float64() }

// Argmax returns the index of the largest value, the lowest on ties; NaN
// never wins.
func Argmax(x []float32) int32 {
	bests := make([]int, chunks(len(x)))
	parallel(len(x), func(c, lo, hi int) {
		best := -1
		var m float32
		for i, v := range x[lo:hi] {
			if v > m || best < 0 && v == v {
				m, best = v, lo+i
			}
		}
		bests[c] = best
	})
	best := -1
	for _, b := range bests {
		if b >= 0 && (best < 0 || x[b] > x[best]) {
			best = b
		}
	}
	return int32(max(best, 0))
}

// Distribution is DistributionAfter with no prompt: every token of history
// counts as generated for the frequency and presence penalties.
func (p Params) Distribution(logits []float32, history []int32) []float64 {
	return p.DistributionAfter(logits, history, 0)
}

// DistributionAfter returns the probabilities sampling draws from after
// history, whose first prompt tokens are the prompt: softmax of the
// penalised logits (PenalizeAfter) at the temperature, restricted by top-k, top-p and min-p,
// renormalised. For greedy params it is one-hot on the argmax.
//
// The filters follow Hugging Face's warpers: top-k keeps every token whose
// logit is at least the k-th largest (ties with it included); top-p drops
// the tokens whose cumulative probability, summed from the least likely, is
// <= 1-top_p, always keeping the most likely; min-p drops tokens whose
// probability is below min_p times the largest. Where top-p's cut falls
// inside a group of equal logits, the lower token ids are kept. NaN logits
// get no mass (all NaN: one-hot on token 0).
func (p Params) DistributionAfter(logits []float32, history []int32, prompt int) []float64 {
	probs, _ := p.distribution(make([]float64, len(logits)), logits, history, prompt)
	return probs
}

// distribution is DistributionAfter into probs, which must be zeros of the
// logits' length. kept lists, in index order, the only entries it may have
// set, where top-k cut the candidates (nil: any).
func (p Params) distribution(probs []float64, logits []float32, history []int32, prompt int) (_ []float64, kept []int32) {
	l := logits
	if p.penalizes() {
		l = slices.Clone(logits)
		p.PenalizeAfter(l, history, prompt)
	}
	if p.Greedy() {
		probs[Argmax(l)] = 1
		return probs, nil
	}
	topP := p.TopP > 0 && p.TopP < 1
	cut := p.TopK > 0 && p.TopK < len(l)
	// The candidates: every token, or top-k's (HF removes only logits below
	// the k-th largest, so ties with it stay), listed in index order (kept;
	// nil: every token). Only top-k and top-p need them ranked, and only
	// top-p needs a whole vocabulary ranked.
	var order []int32
	if cut || topP {
		r := newRanking(l, p.TopK)
		order = make([]int32, len(r.ranked))
		for j, e := range r.ranked {
			order[j] = entryIndex(e)
		}
		r.free()
		if cut {
			kept = slices.Sorted(slices.Values(order))
		}
	}
	var best int32
	switch {
	case len(order) > 0:
		best = order[0] // the argmax: ranked ties put the lowest index first
	case cut || topP: // every logit NaN: nothing to sample from
		probs[0] = 1
		return probs, nil
	default:
		if best = Argmax(l); l[best] != l[best] {
			probs[best] = 1
			return probs, nil
		}
	}
	p.shape(probs, l, kept, order, best)
	return probs, kept
}

// shape sets probs at the candidates (kept, in index order; nil: every
// token) to the tempered softmax of l, then cuts it by top-p (order: the
// candidates ranked, when top-p is on) and min-p. best is the argmax.
func (p Params) shape(probs []float64, l []float32, kept, order []int32, best int32) {
	exps(probs, l, kept, float64(l[best]), p.Temperature)
	normalize(probs, kept)
	if p.TopP > 0 && p.TopP < 1 {
		// Summed from the least likely token up, as HF does, so that a mass
		// reached exactly is decided the same way; the most likely stays.
		var cum float64
		dropped := false
		for j := len(order) - 1; j > 0; j-- {
			cum += probs[order[j]]
			if cum > 1-p.TopP {
				break
			}
			probs[order[j]] = 0
			dropped = true
		}
		if dropped {
			normalize(probs, kept)
		}
	}
	if p.MinP > 0 && dropBelow(probs, kept, p.MinP*probs[best]) {
		normalize(probs, kept)
	}
}

// exps sets probs[i] = exp((l[i] - maxL) / temperature) at the candidates
// (kept; nil: every token, NaN ones 0).
func exps(probs []float64, l []float32, kept []int32, maxL, temperature float64) {
	if kept != nil {
		for _, i := range kept {
			probs[i] = math.Exp((float64(l[i]) - maxL) / temperature)
		}
		return
	}
	parallel(len(l), func(_, lo, hi int) {
		for i, v := range l[lo:hi] {
			if v == v {
				probs[lo+i] = math.Exp((float64(v) - maxL) / temperature)
			}
		}
	})
}

// normalize scales probs at the candidates (kept; nil: all) to sum to one.
// A list of candidates is summed in its order, a whole vocabulary by chunks
// (parallel).
func normalize(probs []float64, kept []int32) {
	var z float64
	if kept == nil {
		sums := make([]float64, chunks(len(probs)))
		parallel(len(probs), func(c, lo, hi int) {
			var s float64
			for _, q := range probs[lo:hi] {
				s += q
			}
			sums[c] = s
		})
		for _, s := range sums {
			z += s
		}
		parallel(len(probs), func(_, lo, hi int) {
			for i := lo; i < hi; i++ {
				probs[i] /= z
			}
		})
		return
	}
	for _, i := range kept {
		z += probs[i]
	}
	for _, i := range kept {
		probs[i] /= z
	}
}

// dropBelow zeroes the candidates' probabilities below floor and reports
// whether it zeroed any.
func dropBelow(probs []float64, kept []int32, floor float64) bool {
	dropped := false
	drop := func(i int) {
		if q := probs[i]; q > 0 && q < floor {
			probs[i] = 0
			dropped = true
		}
	}
	if kept == nil {
		for i := range probs {
			drop(i)
		}
	} else {
		for _, i := range kept {
			drop(int(i))
		}
	}
	return dropped
}

// penalizes reports whether PenalizeAfter changes anything.
func (p Params) penalizes() bool {
	return (p.RepetitionPenalty != 0 && p.RepetitionPenalty != 1) || p.FrequencyPenalty != 0 || p.PresencePenalty != 0
}

// drawAt is Draw over probs whose positive entries are all at kept (in
// index order): the same pick, without a vocabulary's walk.
func drawAt(probs []float64, kept []int32, u float64) int32 {
	var cum float64
	last := int32(-1)
	for _, i := range kept {
		q := probs[i]
		if q <= 0 {
			continue
		}
		cum += q
		last = i
		if u < cum {
			return i
		}
	}
	return last
}

// Draw picks an index from probs with the uniform number u in [0, 1):
// index i covers [sum of probs before i, that plus probs[i]). Entries <= 0
// are never picked; u beyond the total (rounding) picks the last positive
// entry, and probs with no positive entry give -1.
func Draw(probs []float64, u float64) int32 {
	var cum float64
	last := int32(-1)
	for i, q := range probs {
		if q <= 0 {
			continue
		}
		cum += q
		last = int32(i)
		if u < cum {
			return int32(i)
		}
	}
	return last // rounding left u beyond the total: take the last candidate
}
