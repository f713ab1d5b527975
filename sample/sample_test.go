package sample

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

func TestValidateNamesEachBadField(t *testing.T) {
	nan, inf := math.NaN(), math.Inf(1)
	tests := []struct {
		name string
		p    Params
		want []string // substrings of the error; none: valid
	}{
		{"zero value is greedy and valid", Params{}, nil},
		{"typical sampling", Params{Temperature: 0.7, TopK: 64, TopP: 0.95, MinP: 0.05, RepetitionPenalty: 1.1, Seed: 9}, nil},
		{"top_p and min_p at their bounds", Params{Temperature: 1, TopP: 1, MinP: 1}, nil},
		{"penalty below one encourages repeats", Params{Temperature: 1, RepetitionPenalty: 0.5}, nil},
		{"negative temperature", Params{Temperature: -1}, []string{"temperature"}},
		{"NaN temperature", Params{Temperature: nan}, []string{"temperature"}},
		{"infinite temperature", Params{Temperature: inf}, []string{"temperature"}},
		{"negative top_k", Params{TopK: -1}, []string{"top_k", "-1"}},
		{"negative top_p", Params{TopP: -0.1}, []string{"top_p"}},
		{"top_p above one", Params{TopP: 1.5}, []string{"top_p", "1.5"}},
		{"NaN top_p", Params{TopP: nan}, []string{"top_p"}},
		{"negative min_p", Params{MinP: -0.1}, []string{"min_p"}},
		{"min_p above one", Params{MinP: 2}, []string{"min_p"}},
		{"NaN min_p", Params{MinP: nan}, []string{"min_p"}},
		{"negative repetition penalty", Params{RepetitionPenalty: -1}, []string{"repetition_penalty"}},
		{"NaN repetition penalty", Params{RepetitionPenalty: nan}, []string{"repetition_penalty"}},
		{"infinite repetition penalty", Params{RepetitionPenalty: inf}, []string{"repetition_penalty"}},
		{"penalties at their bounds", Params{Temperature: 1, FrequencyPenalty: -2, PresencePenalty: 2}, nil},
		{"frequency penalty above 2", Params{FrequencyPenalty: 2.5}, []string{"frequency_penalty", "[-2, 2]", "2.5"}},
		{"frequency penalty below -2", Params{FrequencyPenalty: -3}, []string{"frequency_penalty", "-3"}},
		{"NaN frequency penalty", Params{FrequencyPenalty: nan}, []string{"frequency_penalty"}},
		{"presence penalty above 2", Params{PresencePenalty: 2.01}, []string{"presence_penalty", "2.01"}},
		{"infinite presence penalty", Params{PresencePenalty: -inf}, []string{"presence_penalty"}},
		// Every bad field is reported, not only the first.
		{"all bad at once", Params{Temperature: -1, TopK: -2, TopP: 2, MinP: -1, RepetitionPenalty: -3, FrequencyPenalty: 9, PresencePenalty: -9},
			[]string{"temperature", "top_k", "top_p", "min_p", "repetition_penalty", "frequency_penalty", "presence_penalty"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.p.Validate()
			if tt.want == nil {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate() = nil, want an error naming %v", tt.want)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Validate() = %q, want it to mention %q", err, w)
				}
			}
		})
	}
}

// reference is an independent float64 transcription of Hugging Face's
// processors, applied as their code does, one after the other on a full-size
// score vector with -inf for removed tokens:
// RepetitionPenaltyLogitsProcessor, TemperatureLogitsWarper,
// TopKLogitsWarper, TopPLogitsWarper, MinPLogitsWarper, then softmax.
// Where HF's order among equal logits is unspecified (top-p's sort), it
// keeps the lower ids, as Distribution documents.
func reference(logits []float32, history []int32, p Params) []float64 {
	n := len(logits)
	negInf := math.Inf(-1)
	// The penalty works on the float32 scores: gather the history's scores,
	// scale them, scatter them back (a repeated token gets the same value).
	s32 := slices.Clone(logits)
	if p.RepetitionPenalty != 0 && p.RepetitionPenalty != 1 {
		pen := float32(p.RepetitionPenalty)
		gathered := make([]float32, len(history))
		for i, tok := range history {
			g := logits[tok]
			if g < 0 {
				g *= pen
			} else {
				g /= pen
			}
			gathered[i] = g
		}
		for i, tok := range history {
			s32[tok] = gathered[i]
		}
	}
	s := make([]float64, n)
	for i, v := range s32 {
		s[i] = float64(v)
	}
	if p.Temperature == 0 {
		out := make([]float64, n)
		out[slices.Index(s, slices.Max(s))] = 1
		return out
	}
	for i := range s {
		s[i] /= p.Temperature
	}
	if p.TopK > 0 {
		sorted := slices.Clone(s)
		slices.Sort(sorted)
		kth := sorted[n-min(p.TopK, n)]
		for i := range s {
			if s[i] < kth {
				s[i] = negInf
			}
		}
	}
	if p.TopP > 0 && p.TopP < 1 {
		probs := softmax(s)
		asc := make([]int, n)
		for i := range asc {
			asc[i] = i
		}
		slices.SortStableFunc(asc, func(a, b int) int {
			return cmp.Or(cmp.Compare(s[a], s[b]), cmp.Compare(b, a))
		})
		var cum float64
		remove := make([]bool, n)
		for j, i := range asc {
			cum += probs[i]
			remove[i] = cum <= 1-p.TopP && j < n-1 // the most likely stays
		}
		for i := range s {
			if remove[i] {
				s[i] = negInf
			}
		}
	}
	if p.MinP > 0 {
		probs := softmax(s)
		top := slices.Max(probs)
		for i := range s {
			if probs[i] < p.MinP*top {
				s[i] = negInf
			}
		}
	}
	return softmax(s)
}

func softmax(s []float64) []float64 {
	m := slices.Max(s)
	out := make([]float64, len(s))
	var z float64
	for i, v := range s {
		out[i] = math.Exp(v - m)
		z += out[i]
	}
	for i := range out {
		out[i] /= z
	}
	return out
}

// closeDist reports how got differs from want: support (zero vs non-zero)
// must match exactly, values within tol.
func closeDist(want, got []float64, tol float64) error {
	if len(want) != len(got) {
		return fmt.Errorf("%d probabilities, want %d", len(got), len(want))
	}
	var sum float64
	for i := range want {
		if (want[i] == 0) != (got[i] == 0) || math.Abs(want[i]-got[i]) > tol {
			return fmt.Errorf("p[%d] = %v, want %v\n got  %v\n want %v", i, got[i], want[i], got, want)
		}
		sum += got[i]
	}
	if math.Abs(sum-1) > 1e-12 {
		return fmt.Errorf("probabilities sum to %v", sum)
	}
	return nil
}

func TestDistributionMatchesHFReference(t *testing.T) {
	ln2 := float32(math.Ln2)
	equal4 := []float32{0, 0, 0, 0}
	equal8 := []float32{1, 1, 1, 1, 1, 1, 1, 1}
	tests := []struct {
		name    string
		logits  []float32
		history []int32
		p       Params
		want    []float64 // exact expectation where it is known in closed form
	}{
		{"temperature 1 is plain softmax", []float32{1, 2, 3, 0.5}, nil, Params{Temperature: 1}, nil},
		{"temperature below 1 sharpens", []float32{1, 2, 3, 0.5}, nil, Params{Temperature: 0.25}, nil},
		{"temperature above 1 flattens", []float32{1, 2, 3, 0.5}, nil, Params{Temperature: 4}, nil},
		{"temperature scales log-odds", []float32{0, ln2}, nil, Params{Temperature: 1}, []float64{1.0 / 3, 2.0 / 3}},
		{"tiny temperature is one-hot", []float32{0.5, 0.4, 0.3}, nil, Params{Temperature: 1e-12}, []float64{1, 0, 0}},
		{"top_k 1 keeps the argmax", []float32{1, 3, 2, 0}, nil, Params{Temperature: 1, TopK: 1}, []float64{0, 1, 0, 0}},
		{"top_k 2", []float32{1, 3, 2, 0}, nil, Params{Temperature: 1, TopK: 2}, nil},
		// HF drops only logits below the k-th largest: both tied tokens stay.
		{"top_k keeps ties with the k-th logit", []float32{3, 2, 2, 1}, nil, Params{Temperature: 1, TopK: 2}, nil},
		{"top_k 1 on a tied max keeps both", []float32{2, 0, 2}, nil, Params{Temperature: 1, TopK: 1}, []float64{0.5, 0, 0.5}},
		{"top_k larger than the vocabulary is off", []float32{1, 3, 2, 0}, nil, Params{Temperature: 1, TopK: 10}, nil},
		{"top_k equal to the vocabulary is off", []float32{1, 3, 2, 0}, nil, Params{Temperature: 1, TopK: 4}, nil},
		// Exactly representable masses: the cut keeps the tokens that reach
		// top_p and no more (cumulative mass from the bottom <= 1-top_p goes).
		{"top_p mass reached exactly (1/2 of 4)", equal4, nil, Params{Temperature: 1, TopP: 0.5}, []float64{0.5, 0.5, 0, 0}},
		{"top_p mass reached exactly (3/4 of 4)", equal4, nil, Params{Temperature: 1, TopP: 0.75}, []float64{1.0 / 3, 1.0 / 3, 1.0 / 3, 0}},
		{"top_p mass reached exactly (3/8 of 8)", equal8, nil, Params{Temperature: 1, TopP: 0.375}, []float64{1.0 / 3, 1.0 / 3, 1.0 / 3, 0, 0, 0, 0, 0}},
		{"top_p just past a mass keeps one more", equal4, nil, Params{Temperature: 1, TopP: 0.5000001}, []float64{1.0 / 3, 1.0 / 3, 1.0 / 3, 0}},
		{"top_p tiny keeps one token", []float32{1, 3, 2, 0}, nil, Params{Temperature: 1, TopP: 1e-9}, []float64{0, 1, 0, 0}},
		// 1-top_p rounds to 1: every cumulative mass is <= it, yet one stays.
		{"top_p below float64 resolution keeps one token", []float32{1, 3, 2, 0}, nil, Params{Temperature: 1, TopP: 1e-17}, []float64{0, 1, 0, 0}},
		{"top_p tiny on ties keeps the lowest id", equal4, nil, Params{Temperature: 1, TopP: 1e-9}, []float64{1, 0, 0, 0}},
		{"top_p 1 is off", []float32{1, 3, 2, 0}, nil, Params{Temperature: 1, TopP: 1}, nil},
		{"top_p 0 is off", []float32{1, 3, 2, 0}, nil, Params{Temperature: 1, TopP: 0}, nil},
		{"top_p 0.9", []float32{4, 3, 2, 1, 0, -1}, nil, Params{Temperature: 1, TopP: 0.9}, nil},
		{"top_p after top_k renormalises", []float32{4, 3, 2, 1, 0, -1}, nil, Params{Temperature: 1, TopK: 3, TopP: 0.95}, nil},
		{"min_p drops tokens below min_p x max", []float32{0, -0.5, -1, -3}, nil, Params{Temperature: 1, MinP: 0.3}, nil},
		{"min_p keeps ties with the max", []float32{1, 1, 0}, nil, Params{Temperature: 1, MinP: 1}, []float64{0.5, 0.5, 0}},
		{"min_p on equal logits keeps all", equal4, nil, Params{Temperature: 1, MinP: 0.9}, []float64{0.25, 0.25, 0.25, 0.25}},
		{"min_p applies after temperature", []float32{0, -0.5, -1, -3}, nil, Params{Temperature: 3, MinP: 0.3}, nil},
		{"min_p after top_p", []float32{4, 3, 2, 1, 0, -1}, nil, Params{Temperature: 1, TopP: 0.99, MinP: 0.1}, nil},
		{"repetition penalty divides positive logits", []float32{2, 1, 0.5}, []int32{0}, Params{Temperature: 1, RepetitionPenalty: 2}, nil},
		{"repetition penalty multiplies negative logits", []float32{-1, -2, 0.5}, []int32{0}, Params{Temperature: 1, RepetitionPenalty: 2}, nil},
		{"repetition penalty counts a token once", []float32{2, 1, 0.5}, []int32{0, 0, 0, 2, 2}, Params{Temperature: 1, RepetitionPenalty: 2}, nil},
		{"repetition penalty below 1 encourages", []float32{2, 1, -0.5}, []int32{1, 2}, Params{Temperature: 1, RepetitionPenalty: 0.5}, nil},
		{"repetition penalty before top_k", []float32{3, 2.5, 1}, []int32{0}, Params{Temperature: 1, RepetitionPenalty: 2, TopK: 1}, []float64{0, 1, 0}},
		{"everything at once", []float32{2, -1, 0.3, 1.7, 1.7, -4, 0.9}, []int32{3, 1, 3}, Params{Temperature: 0.8, TopK: 5, TopP: 0.9, MinP: 0.05, RepetitionPenalty: 1.3}, nil},
		{"-inf logits get no mass", []float32{float32(math.Inf(-1)), 0, 1}, nil, Params{Temperature: 1, TopP: 0.99}, nil},
		{"one-token vocabulary", []float32{-7}, nil, Params{Temperature: 1, TopK: 3, TopP: 0.1, MinP: 0.5}, []float64{1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := slices.Clone(tt.logits)
			got := tt.p.Distribution(tt.logits, tt.history)
			if !slices.Equal(in, tt.logits) {
				t.Fatalf("Distribution modified its logits: %v, was %v", tt.logits, in)
			}
			want := reference(tt.logits, tt.history, tt.p)
			if err := closeDist(want, got, 1e-12); err != nil {
				t.Fatalf("against the reference: %v", err)
			}
			if tt.want != nil {
				if err := closeDist(tt.want, got, 1e-7); err != nil {
					t.Fatalf("against the closed form: %v", err)
				}
			}
		})
	}
}

func TestDistributionMatchesHFReferenceRandomized(t *testing.T) {
	// Small vocabularies with many exact ties (logits on a coarse grid) and
	// every filter on or off at random. Deterministic: a fixed seed.
	r := rand.New(rand.NewPCG(1, 2))
	for c := range 3000 {
		n := 1 + r.IntN(12)
		logits := make([]float32, n)
		for i := range logits {
			if c%2 == 0 {
				logits[i] = float32(r.IntN(7)-3) / 2 // ties
			} else {
				logits[i] = float32(r.NormFloat64() * 3)
			}
		}
		var history []int32
		for range r.IntN(5) {
			history = append(history, int32(r.IntN(n)))
		}
		p := Params{Temperature: []float64{0, 0.3, 1, 2.5}[r.IntN(4)]}
		if r.IntN(2) == 0 {
			p.TopK = 1 + r.IntN(n+2)
		}
		if r.IntN(2) == 0 {
			p.TopP = r.Float64()
		}
		if r.IntN(2) == 0 {
			p.MinP = r.Float64() * 0.5
		}
		if r.IntN(2) == 0 {
			p.RepetitionPenalty = 0.5 + 1.5*r.Float64()
		}
		got := p.Distribution(logits, history)
		if err := closeDist(reference(logits, history, p), got, 1e-12); err != nil {
			t.Fatalf("case %d: logits %v history %v params %+v: %v", c, logits, history, p, err)
		}
	}
}

func TestGreedyIsOneHotOnPenalisedArgmax(t *testing.T) {
	tests := []struct {
		name    string
		logits  []float32
		history []int32
		p       Params
		want    int32
	}{
		{"no penalty", []float32{1, 3, 2}, nil, Params{}, 1},
		{"tie takes the lowest id", []float32{3, 1, 3}, nil, Params{}, 0},
		{"penalty moves the argmax off a seen positive logit", []float32{2, 1.9}, []int32{0}, Params{RepetitionPenalty: 1.1}, 1},
		{"penalty pushes a seen negative logit further down", []float32{-1, -1.05}, []int32{0}, Params{RepetitionPenalty: 1.1}, 1},
		{"penalty 1 is off", []float32{2, 1.9}, []int32{0}, Params{RepetitionPenalty: 1}, 0},
		// Greedy ignores the sampling filters.
		{"filters ignored", []float32{1, 3, 2}, nil, Params{TopK: 1, TopP: 0.1, MinP: 0.9, Seed: 4}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want := make([]float64, len(tt.logits))
			want[tt.want] = 1
			if got := tt.p.Distribution(tt.logits, tt.history); !slices.Equal(got, want) {
				t.Errorf("Distribution = %v, want %v", got, want)
			}
			in := slices.Clone(tt.logits)
			if got := New(tt.p).Next(tt.logits, tt.history); got != tt.want {
				t.Errorf("Next = %d, want %d", got, tt.want)
			}
			if !slices.Equal(in, tt.logits) {
				t.Errorf("Next modified its logits: %v, was %v", tt.logits, in)
			}
		})
	}
}

func TestPenalize(t *testing.T) {
	tests := []struct {
		name    string
		logits  []float32
		history []int32
		penalty float64
		want    []float32
	}{
		{"positive divided, negative multiplied, zero kept", []float32{4, -4, 0, 4}, []int32{0, 1, 2}, 2, []float32{2, -8, 0, 4}},
		{"each token once however often it repeats", []float32{4, -4, 1}, []int32{0, 1, 0, 1, 0}, 2, []float32{2, -8, 1}},
		{"penalty below 1 raises seen positives", []float32{4, -4}, []int32{0, 1}, 0.5, []float32{8, -2}},
		{"penalty 1 is off", []float32{4, -4}, []int32{0, 1}, 1, []float32{4, -4}},
		{"penalty 0 is off", []float32{4, -4}, []int32{0, 1}, 0, []float32{4, -4}},
		{"ids outside the vocabulary are ignored", []float32{4, -4}, []int32{-1, 2, 99}, 2, []float32{4, -4}},
		{"empty history", []float32{4, -4}, nil, 2, []float32{4, -4}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := slices.Clone(tt.logits)
			Params{RepetitionPenalty: tt.penalty}.Penalize(got, tt.history)
			if !slices.Equal(got, tt.want) {
				t.Errorf("Penalize(%v, %v) = %v, want %v", tt.logits, tt.history, got, tt.want)
			}
		})
	}
}

// TestFrequencyAndPresencePenalties checks vLLM's semantics: after the
// repetition penalty, logit[t] -= freq·count(t) + pres·[count(t) > 0], with
// count(t) over the generated tokens only.
func TestFrequencyAndPresencePenalties(t *testing.T) {
	tests := []struct {
		name    string
		logits  []float32
		history []int32
		prompt  int
		p       Params
		want    []float32
	}{
		{"off", []float32{1, 2, 3}, []int32{0, 0, 1}, 0, Params{}, []float32{1, 2, 3}},
		{"frequency scales with the count", []float32{1, 2, 3}, []int32{0, 0, 1}, 0, Params{FrequencyPenalty: 0.5}, []float32{0, 1.5, 3}},
		{"presence once per seen token", []float32{1, 2, 3}, []int32{0, 0, 1}, 0, Params{PresencePenalty: 0.5}, []float32{0.5, 1.5, 3}},
		{"both add up", []float32{1, 2, 3}, []int32{0, 0, 1}, 0, Params{FrequencyPenalty: 1, PresencePenalty: 0.5}, []float32{-1.5, 0.5, 3}},
		{"negative values encourage repeats", []float32{1, 2, 3}, []int32{2}, 0, Params{FrequencyPenalty: -1, PresencePenalty: -2}, []float32{1, 2, 6}},
		{"the prompt does not count", []float32{1, 2, 3}, []int32{0, 0, 1, 2}, 3, Params{FrequencyPenalty: 1}, []float32{1, 2, 2}},
		{"a prompt longer than the history counts nothing", []float32{1, 2, 3}, []int32{0}, 5, Params{PresencePenalty: 1}, []float32{1, 2, 3}},
		{"ids outside the vocabulary are ignored", []float32{1, 2}, []int32{-1, 7, 1}, 0, Params{PresencePenalty: 1}, []float32{1, 1}},
		// The repetition penalty comes first and looks at the prompt too.
		{"after the repetition penalty", []float32{4, 4, 4}, []int32{0, 1, 1}, 1, Params{RepetitionPenalty: 2, FrequencyPenalty: 1}, []float32{2, 0, 4}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := slices.Clone(tt.logits)
			tt.p.PenalizeAfter(got, tt.history, tt.prompt)
			if !slices.Equal(got, tt.want) {
				t.Fatalf("PenalizeAfter(%v, %v, %d) = %v, want %v", tt.logits, tt.history, tt.prompt, got, tt.want)
			}
			// Greedy picks the argmax of the penalised logits; sampling
			// draws from their softmax.
			if tok := New(tt.p).NextAfter(tt.logits, tt.history, tt.prompt); tok != Argmax(tt.want) {
				t.Errorf("greedy NextAfter = %d, want %d", tok, Argmax(tt.want))
			}
			sp := tt.p
			sp.Temperature = 1
			ref := softmax(f64(tt.want))
			if err := closeDist(ref, sp.DistributionAfter(tt.logits, tt.history, tt.prompt), 1e-12); err != nil {
				t.Errorf("DistributionAfter: %v", err)
			}
		})
	}
}

func f64(x []float32) []float64 {
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = float64(v)
	}
	return out
}

func TestArgmax(t *testing.T) {
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	tests := []struct {
		name string
		x    []float32
		want int32
	}{
		{"single", []float32{-3}, 0},
		{"max in the middle", []float32{1, 5, 2}, 1},
		{"max last", []float32{1, 2, 9}, 2},
		{"ties take the lowest index", []float32{1, 7, 3, 7}, 1},
		{"all equal", []float32{2, 2, 2}, 0},
		{"negative values", []float32{-5, -1, -3}, 1},
		{"+inf wins", []float32{1, inf, 3}, 1},
		{"all -inf", []float32{-inf, -inf}, 0},
		{"NaN first never wins", []float32{nan, 1, 2}, 2},
		{"NaN in the middle never wins", []float32{1, nan, 0}, 0},
		{"NaN last never wins", []float32{1, 2, nan}, 1},
		{"leading NaNs", []float32{nan, nan, -1}, 2},
		{"all NaN", []float32{nan, nan}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Argmax(tt.x); got != tt.want {
				t.Errorf("Argmax(%v) = %d, want %d", tt.x, got, tt.want)
			}
		})
	}
}

func TestDrawMapsUniformToIndex(t *testing.T) {
	justBelow := func(x float64) float64 { return math.Nextafter(x, 0) }
	tenths := slices.Repeat([]float64{0.1}, 10) // sums to 0.9999999999999999
	tests := []struct {
		name  string
		probs []float64
		u     float64
		want  int32
	}{
		{"u 0 takes the first", []float64{0.25, 0.5, 0.25}, 0, 0},
		{"just below a boundary", []float64{0.25, 0.5, 0.25}, justBelow(0.25), 0},
		{"on a boundary takes the next", []float64{0.25, 0.5, 0.25}, 0.25, 1},
		{"second boundary", []float64{0.25, 0.5, 0.25}, 0.75, 2},
		{"u close to 1", []float64{0.25, 0.5, 0.25}, justBelow(1), 2},
		{"leading zero never drawn", []float64{0, 1}, 0, 1},
		{"zero in the middle never drawn", []float64{0.5, 0, 0.5}, 0.5, 2},
		{"trailing zero never drawn", []float64{0.5, 0.5, 0}, justBelow(1), 1},
		{"negative entry never drawn", []float64{-0.5, 1}, 0, 1},
		{"one-hot", []float64{0, 0, 1, 0}, 0.999, 2},
		// Rounding leaves u past the total: the last positive entry.
		{"u beyond a rounded-down total", tenths, justBelow(1), 9},
		{"u beyond the total skips trailing zeros", []float64{0.5, 0.25, 0}, 0.9, 1},
		{"no positive entry", []float64{0, 0}, 0.5, -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Draw(tt.probs, tt.u); got != tt.want {
				t.Errorf("Draw(%v, %v) = %d, want %d", tt.probs, tt.u, got, tt.want)
			}
		})
	}
}

func drawStream(p Params, logits []float32, n int) []int32 {
	s := New(p)
	out := make([]int32, n)
	for i := range out {
		out[i] = s.Next(logits, nil)
	}
	return out
}

func TestSamplerIsDeterministicPerSeed(t *testing.T) {
	logits := []float32{0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7} // near-flat: streams diverge fast
	for _, seed := range []uint64{0, 1, 42, math.MaxUint64} {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			p := Params{Temperature: 1, Seed: seed}
			a, b := drawStream(p, logits, 200), drawStream(p, logits, 200)
			if !slices.Equal(a, b) {
				t.Fatalf("seed %d gave two different streams:\n%v\n%v", seed, a, b)
			}
			other := p
			other.Seed = seed + 1
			if c := drawStream(other, logits, 200); slices.Equal(a, c) {
				t.Fatalf("seeds %d and %d gave the same stream", seed, other.Seed)
			}
			if u1, u2 := New(p).Uniform(), New(p).Uniform(); u1 != u2 || u1 < 0 || u1 >= 1 {
				t.Fatalf("Uniform() = %v and %v, want equal values in [0, 1)", u1, u2)
			}
			if got := New(p).Params(); got != p {
				t.Fatalf("Params() = %+v, want %+v", got, p)
			}
		})
	}
}

// chiSquared999 is the chi-squared distribution's 0.999 quantile by degrees
// of freedom: a correct sampler exceeds it with probability 0.001.
var chiSquared999 = []float64{1: 10.828, 2: 13.816, 3: 16.266, 4: 18.467, 5: 20.515, 6: 22.458, 7: 24.322, 8: 26.124, 9: 27.877}

func TestSamplerFrequenciesMatchDistribution(t *testing.T) {
	// Next's empirical frequencies against Distribution, chi-squared
	// goodness of fit at p = 0.001. The seeds are fixed, so the test is
	// deterministic; a wrong mapping from u to tokens (off by one, zero
	// entries drawn, filters skipped) lands far beyond the threshold.
	const draws = 100_000
	logits := []float32{2.0, 1.5, 1.5, 0.7, 0.2, -0.5, -1.0, -3.0}
	tests := []struct {
		name    string
		p       Params
		history []int32
	}{
		{"temperature 1", Params{Temperature: 1, Seed: 1}, nil},
		{"temperature 0.6", Params{Temperature: 0.6, Seed: 2}, nil},
		{"top_k 4", Params{Temperature: 1, TopK: 4, Seed: 3}, nil},
		{"top_p 0.8", Params{Temperature: 1, TopP: 0.8, Seed: 4}, nil},
		{"min_p 0.2", Params{Temperature: 1.5, MinP: 0.2, Seed: 5}, nil},
		{"penalty with history", Params{Temperature: 1, RepetitionPenalty: 1.5, Seed: 6}, []int32{0, 1, 7}},
		{"all filters", Params{Temperature: 0.9, TopK: 6, TopP: 0.95, MinP: 0.05, RepetitionPenalty: 1.2, Seed: 7}, []int32{2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			probs := tt.p.Distribution(logits, tt.history)
			s := New(tt.p)
			counts := make([]int, len(logits))
			for range draws {
				counts[s.Next(logits, tt.history)]++
			}
			var chi2 float64
			cells := 0
			for i, q := range probs {
				if q == 0 {
					if counts[i] != 0 {
						t.Fatalf("token %d has probability 0 but was drawn %d times", i, counts[i])
					}
					continue
				}
				e := q * draws
				chi2 += (float64(counts[i]) - e) * (float64(counts[i]) - e) / e
				cells++
			}
			if cells < 2 {
				t.Fatalf("distribution %v has %d cells; the test needs at least 2", probs, cells)
			}
			if limit := chiSquared999[cells-1]; chi2 > limit {
				t.Fatalf("chi-squared %.2f > %.3f (df %d): counts %v, probabilities %v", chi2, limit, cells-1, counts, probs)
			}
		})
	}
}
