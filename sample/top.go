package sample

import (
	"os"
	"slices"
)

// Dist is a distribution over a vocabulary: dense (Index nil: Prob[t] is
// token t's probability) or sparse (Prob[j] is token Index[j]'s, Index
// ascending, and every other token has none). Top-k's distributions are
// sparse: computed from a device's top-k, they never touch the vocabulary.
type Dist struct {
	Index []int32
	Prob  []float64
}

// Dense wraps a whole vocabulary's probabilities.
func Dense(probs []float64) Dist { return Dist{Prob: probs} }

// At is token t's probability.
func (d Dist) At(t int32) float64 {
	if d.Index == nil {
		if t < 0 || int(t) >= len(d.Prob) {
			return 0
		}
		return d.Prob[t]
	}
	if j, ok := slices.BinarySearch(d.Index, t); ok {
		return d.Prob[j]
	}
	return 0
}

// Token is the token of entry j of Prob.
func (d Dist) Token(j int) int32 {
	if d.Index == nil {
		return int32(j)
	}
	return d.Index[j]
}

// Draw is the package's Draw over d: the same token for the same
// distribution, dense or sparse, since both walk the tokens in order.
func (d Dist) Draw(u float64) int32 {
	j := Draw(d.Prob, u)
	if j < 0 {
		return j
	}
	return d.Token(int(j))
}

// Top is a row's largest logits in descending order and their token ids,
// as a device's top-k leaves them, from a row of Vocab logits.
type Top struct {
	Values []float32
	IDs    []int32
	Vocab  int
}

// Tops splits a device top-k's rows ([rows, n] values and ids, row-major)
// from rows of vocab logits.
func Tops(vals []float32, ids []int32, n, vocab int) []Top {
	tops := make([]Top, len(vals)/max(n, 1))
	for r := range tops {
		tops[r] = Top{Values: vals[r*n : (r+1)*n : (r+1)*n], IDs: ids[r*n : (r+1)*n : (r+1)*n], Vocab: vocab}
	}
	return tops
}

// TopsEnv set to 0 makes TopNeeded 0 everywhere, so that callers read
// whole rows: the way sampling ran before, for comparisons (read at every
// call).
const TopsEnv = "TANDEM_SAMPLE_TOPS"

// TopNeeded is how many of a row's largest logits FromTop needs to give
// the distribution, or 0 where only the whole row gives it: greedy
// decoding, penalties (which can move any token into the top k), no top-k,
// or a top-k that keeps the whole vocabulary. One more than top-k: the
// one past the cut tells whether top-k keeps ties with its k-th.
func (p Params) TopNeeded(vocab int) int {
	if p.Greedy() || p.penalizes() || p.TopK <= 0 || p.TopK >= vocab || os.Getenv(TopsEnv) == "0" {
		return 0
	}
	return p.TopK + 1
}

// TopsNeeded is how many of each row's largest logits rows sampled with ps
// need for every one of them to sample from its top (the most TopNeeded of
// any), or 0 where some row needs its whole row.
func TopsNeeded(vocab int, ps ...Params) int {
	n := 0
	for _, p := range ps {
		k := p.TopNeeded(vocab)
		if k == 0 {
			return 0
		}
		n = max(n, k)
	}
	return n
}

// FromTop is DistributionAfter for a row whose TopNeeded largest logits are
// top (ties among them in any order), as a sparse Dist over top-k's tokens:
// the same probabilities bit for bit, without the vocabulary. It reports
// false where top does not decide the distribution: too few entries, a NaN
// among them, or a tie at top-k's cut (top-k then keeps every tied token,
// which top may not list).
func (p Params) FromTop(top Top) (Dist, bool) {
	vocab := top.Vocab
	n := p.TopNeeded(vocab)
	if n == 0 || len(top.Values) < n || len(top.IDs) < n {
		return Dist{}, false
	}
	v, k := top.Values, p.TopK
	for _, x := range v[:n] {
		if x != x {
			return Dist{}, false
		}
	}
	if !(v[k] < v[k-1]) {
		return Dist{}, false
	}
	// The candidates, in index order, as the whole row's would be.
	pos := make([]int32, k)
	for j := range pos {
		pos[j] = int32(j)
	}
	slices.SortFunc(pos, func(a, b int32) int { return int(top.IDs[a]) - int(top.IDs[b]) })
	d := Dist{Index: make([]int32, k), Prob: make([]float64, k)}
	l := make([]float32, k)
	for j, at := range pos {
		d.Index[j], l[j] = top.IDs[at], v[at]
	}
	for j, t := range d.Index {
		if t < 0 || int(t) >= vocab || j > 0 && t == d.Index[j-1] {
			return Dist{}, false // not a row's top: a foreign or repeated id
		}
	}
	// Ranked as the whole row's candidates: the compact row keeps their
	// index order, so ties rank the same.
	var order []int32
	if p.TopP > 0 && p.TopP < 1 {
		r := newRanking(l, 0)
		order = make([]int32, len(r.ranked))
		for j, e := range r.ranked {
			order[j] = entryIndex(e)
		}
		r.free()
	}
	kept := make([]int32, k)
	best := int32(0)
	for j := range kept {
		kept[j] = int32(j)
		if l[j] > l[best] {
			best = int32(j)
		}
	}
	p.shape(d.Prob, l, kept, order, best)
	return d, true
}

// NextTop is NextAfter for a row whose largest logits are top, where they
// decide the distribution (FromTop): the same token, from the same random
// number. It reports false, drawing nothing, where they do not.
func (s *Sampler) NextTop(top Top) (int32, bool) {
	d, ok := s.p.FromTop(top)
	if !ok {
		return 0, false
	}
	return d.Draw(s.rng.Float64()), true
}
