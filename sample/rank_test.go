package sample

import (
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"
)

// stableRank is the ranking by definition: every non-NaN index, stably
// sorted by descending value (so the lower index first among equals, -0
// equal to +0), cut to the top k and the values tied with the k-th.
func stableRank(l []float32, topK int) []int32 {
	var idx []int32
	for i, v := range l {
		if v == v {
			idx = append(idx, int32(i))
		}
	}
	sort.SliceStable(idx, func(a, b int) bool { return l[idx[a]] > l[idx[b]] })
	if topK > 0 && topK < len(idx) {
		n := topK
		for n < len(idx) && l[idx[n]] == l[idx[topK-1]] {
			n++
		}
		idx = idx[:n]
	}
	return idx
}

func TestRankingMatchesStableSort(t *testing.T) {
	// Both sorts (the comparison sort of small rows and the radix sort of
	// large ones), top-k cuts inside groups of ties, and the values a key
	// could get wrong: ±0, ±Inf, subnormals, NaN.
	r := rand.New(rand.NewPCG(3, 4))
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	odd := []float32{0, float32(math.Copysign(0, -1)), inf, -inf, nan, math.SmallestNonzeroFloat32, -math.SmallestNonzeroFloat32, math.MaxFloat32, -math.MaxFloat32}
	for c := range 60 {
		n := []int{1, 7, 300, 4095, 4096, 5000, 70000}[c%7]
		l := make([]float32, n)
		for i := range l {
			switch r.IntN(4) {
			case 0:
				l[i] = float32(r.IntN(9)-4) / 4 // ties
			case 1:
				l[i] = odd[r.IntN(len(odd))]
			default:
				l[i] = float32(r.NormFloat64() * 8)
			}
		}
		for _, k := range []int{0, 1, 3, 64, n / 2, n - 1, n, n + 5} {
			rk := newRanking(l, k)
			got := make([]int32, len(rk.ranked))
			for j, e := range rk.ranked {
				got[j] = entryIndex(e)
			}
			rk.free()
			if want := stableRank(l, k); !slices.Equal(got, want) {
				t.Fatalf("n %d, top-k %d: ranked %d indices, want %d; first difference at %d", n, k, len(got), len(want), firstDiff(got, want))
			}
		}
	}
}

func firstDiff(a, b []int32) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

func TestDistributionMatchesHFReferenceLargeVocabulary(t *testing.T) {
	// A vocabulary large enough for the radix sort and for exponentials
	// shared between goroutines, every filter alone and together.
	r := rand.New(rand.NewPCG(5, 6))
	logits := make([]float32, 40000)
	for i := range logits {
		logits[i] = float32(r.NormFloat64() * 4)
		if i%97 == 0 {
			logits[i] = 3 // a group of ties near the top
		}
	}
	history := []int32{5, 97, 39999, 5}
	for _, p := range []Params{
		{Temperature: 1},
		{Temperature: 0.7, TopK: 64},
		{Temperature: 1, TopK: 50}, // the cut falls inside the tied group
		{Temperature: 1, TopP: 0.9},
		{Temperature: 1.3, MinP: 0.02},
		{Temperature: 0.8, TopK: 400, TopP: 0.95, MinP: 0.01, RepetitionPenalty: 1.2},
	} {
		got := p.Distribution(logits, history)
		if err := closeDist(reference(logits, history, p), got, 1e-12); err != nil {
			t.Fatalf("params %+v: %v", p, err)
		}
	}
}

func TestDistributionGivesNaNNoMass(t *testing.T) {
	nan := float32(math.NaN())
	tests := []struct {
		name   string
		logits []float32
		p      Params
		want   []float64
	}{
		{"NaN beside equal logits", []float32{0, nan, 0}, Params{Temperature: 1}, []float64{0.5, 0, 0.5}},
		{"NaN with top_k", []float32{nan, 1, 1}, Params{Temperature: 1, TopK: 1}, []float64{0, 0.5, 0.5}},
		{"NaN with top_p", []float32{1, nan, 1}, Params{Temperature: 1, TopP: 0.5}, []float64{1, 0, 0}},
		{"all NaN picks token 0", []float32{nan, nan}, Params{Temperature: 1, TopP: 0.5, MinP: 0.1}, []float64{1, 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.p.Distribution(tt.logits, nil); !slices.Equal(got, tt.want) {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
		})
	}
}

// benchParams are the settings clients send most: OpenAI's defaults
// (temperature alone), Gemma's generation config (top-k 64, top-p 0.95),
// and top-p alone, which ranks the whole vocabulary.
var benchParams = []struct {
	name string
	p    Params
}{
	{"temperature", Params{Temperature: 1}},
	{"top-k-64-top-p", Params{Temperature: 1, TopK: 64, TopP: 0.95}},
	{"top-p", Params{Temperature: 1, TopP: 0.9}},
}

// benchLogits is a row of Gemma 4's vocabulary (262,144).
func benchLogits() []float32 {
	r := rand.New(rand.NewPCG(1, 2))
	logits := make([]float32, 262144)
	for i := range logits {
		logits[i] = float32(r.NormFloat64() * 3)
	}
	return logits
}

// BenchmarkDistribution times one token's distribution.
func BenchmarkDistribution(b *testing.B) {
	logits := benchLogits()
	for _, c := range benchParams {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				c.p.Distribution(logits, nil)
			}
		})
	}
}

// BenchmarkNext times one sampled token, as decoding takes it.
func BenchmarkNext(b *testing.B) {
	logits := benchLogits()
	for _, c := range benchParams {
		b.Run(c.name, func(b *testing.B) {
			s := New(c.p)
			for b.Loop() {
				s.Next(logits, nil)
			}
		})
	}
}

// TestNextIsDrawOfDistribution protects Next's shortcuts (its distribution's
// memory kept between tokens, only the last token's entries cleared, and
// the draw over top-k's candidates alone): token after token, with logits
// that change (and once, their count), each pick must be Draw of
// Distribution with the same uniform number, and the memory must hold
// nothing outside the entries the next token clears.
func TestNextIsDrawOfDistribution(t *testing.T) {
	for _, p := range []Params{
		{Temperature: 1, Seed: 1},
		{Temperature: 0.8, TopK: 20, Seed: 2},
		{Temperature: 1.2, TopK: 64, TopP: 0.9, Seed: 3},
		{Temperature: 1, TopP: 0.8, Seed: 4},
		{Temperature: 1, MinP: 0.05, RepetitionPenalty: 1.3, Seed: 5},
		{Temperature: 0.5, TopK: 3, FrequencyPenalty: 0.5, Seed: 6},
	} {
		r := rand.New(rand.NewPCG(p.Seed, 8))
		s, twin := New(p), New(p)
		var history []int32
		for step := range 120 {
			n := 5000
			if step >= 60 {
				n = 4500 // a vocabulary of another size: all of the memory is cleared
			}
			l := make([]float32, n)
			for i := range l {
				l[i] = float32(r.NormFloat64() * 3)
				if i%50 == 0 {
					l[i] = 4 // ties near the top
				}
			}
			got := s.NextAfter(l, history, 0)
			want := Draw(p.DistributionAfter(l, history, 0), twin.Uniform())
			if got != want {
				t.Fatalf("params %+v, token %d: Next picked %d, Draw of Distribution %d", p, step, got, want)
			}
			// The next token's distribution starts from zeros: whatever this
			// one set lies in dirty, which Next clears first.
			if s.dirty != nil {
				for i, q := range s.probs {
					if q != 0 && !slices.Contains(s.dirty, int32(i)) {
						t.Fatalf("params %+v, token %d: probs[%d] = %v is set outside the entries Next clears", p, step, i, q)
					}
				}
			}
			history = append(history, got)
		}
	}
}
