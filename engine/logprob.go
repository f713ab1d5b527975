package engine

import "math"

// logprobOf is tok's log-probability under logits (log-softmax of the raw
// logits: no penalties, temperature or filters, as OpenAI reports it) with
// the top most likely alternatives, most likely first, ties by lower id.
func logprobOf(logits []float32, tok int32, top int) Logprob {
	lse := logSumExp(logits)
	lp := Logprob{Token: tok, Logprob: float32(float64(logits[tok]) - lse)}
	if top <= 0 {
		return lp
	}
	// A running top list: one pass over the vocabulary, insertion into at
	// most 20 entries.
	best := make([]int32, 0, top)
	for i, v := range logits {
		if len(best) == top && !(v > logits[best[top-1]]) {
			continue
		}
		j := len(best)
		if j < top {
			best = append(best, 0)
		} else {
			j--
		}
		for j > 0 && v > logits[best[j-1]] {
			best[j] = best[j-1]
			j--
		}
		best[j] = int32(i)
	}
	lp.Top = make([]TokenLogprob, len(best))
	for i, t := range best {
		lp.Top[i] = TokenLogprob{Token: t, Logprob: float32(float64(logits[t]) - lse)}
	}
	return lp
}

// logSumExp is log Σ exp(x), in float64 from the largest value.
func logSumExp(x []float32) float64 {
	m := math.Inf(-1)
	for _, v := range x {
		m = max(m, float64(v))
	}
	if math.IsInf(m, 0) {
		return m
	}
	var z float64
	for _, v := range x {
		z += math.Exp(float64(v) - m)
	}
	return m + math.Log(z)
}
