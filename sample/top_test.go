package sample

import (
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"
)

// deviceTop is a row's n largest logits as a device's TopK gives them: NaN
// first, then descending, ties by lower index.
func deviceTop(l []float32, n int) Top {
	idx := make([]int32, len(l))
	for i := range idx {
		idx[i] = int32(i)
	}
	sort.SliceStable(idx, func(a, b int) bool {
		x, y := l[idx[a]], l[idx[b]]
		if x != x || y != y {
			return x != x && y == y
		}
		return x > y
	})
	top := Top{IDs: idx[:n], Vocab: len(l)}
	for _, i := range top.IDs {
		top.Values = append(top.Values, l[i])
	}
	return top
}

func TestFromTopMatchesDistribution(t *testing.T) {
	// FromTop must give DistributionAfter's probabilities bit for bit, and
	// refuse only rows its top cannot decide (a NaN, a tie at the cut).
	r := rand.New(rand.NewPCG(5, 6))
	nan := float32(math.NaN())
	odd := []float32{0, float32(math.Copysign(0, -1)), float32(math.Inf(1)), float32(math.Inf(-1)), nan}
	decided, refused := 0, 0
	for c := range 400 {
		V := []int{100, 5000, 70000}[c%3]
		l := make([]float32, V)
		for i := range l {
			switch x := r.IntN(100); {
			case x < 10:
				l[i] = float32(r.IntN(9)-4) / 2 // ties
			case x == 10 && c%5 == 0:
				l[i] = odd[r.IntN(len(odd))]
			default:
				l[i] = float32(r.NormFloat64() * 3)
			}
		}
		p := Params{
			Temperature: []float64{0.7, 1, 1.5}[r.IntN(3)],
			TopK:        []int{1, 2, 20, 64}[r.IntN(4)],
			TopP:        []float64{0, 0.5, 0.95}[r.IntN(3)],
			MinP:        []float64{0, 0.05}[r.IntN(2)],
		}
		n := p.TopNeeded(V)
		if n != p.TopK+1 {
			t.Fatalf("params %+v: TopNeeded(%d) = %d, want %d", p, V, n, p.TopK+1)
		}
		top := deviceTop(l, n)
		// Ties among the kept may come in any order.
		r.Shuffle(p.TopK, func(i, j int) {
			if top.Values[i] == top.Values[j] {
				top.IDs[i], top.IDs[j] = top.IDs[j], top.IDs[i]
			}
		})
		d, ok := p.FromTop(top)
		if !ok {
			undecided := !(top.Values[p.TopK] < top.Values[p.TopK-1])
			for _, v := range top.Values {
				undecided = undecided || v != v
			}
			if !undecided {
				t.Fatalf("case %d, params %+v: FromTop refused a row its top decides: %v", c, p, top.Values)
			}
			refused++
			continue
		}
		decided++
		want := p.DistributionAfter(l, nil, 0)
		if !slices.IsSorted(d.Index) || len(d.Index) != len(d.Prob) {
			t.Fatalf("case %d: index %v is not ascending or does not match %d probabilities", c, d.Index, len(d.Prob))
		}
		for j, tok := range d.Index {
			if math.Float64bits(want[tok]) != math.Float64bits(d.Prob[j]) {
				t.Fatalf("case %d, params %+v: token %d has %v, DistributionAfter %v", c, p, tok, d.Prob[j], want[tok])
			}
			want[tok] = 0
		}
		for tok, q := range want {
			if q != 0 {
				t.Fatalf("case %d, params %+v: token %d has %v outside FromTop's tokens", c, p, tok, q)
			}
		}
		full := Dense(p.DistributionAfter(l, nil, 0))
		for range 5 {
			u := r.Float64()
			if got, want := d.Draw(u), full.Draw(u); got != want {
				t.Fatalf("case %d: Draw(%v) = %d sparse, %d dense", c, u, got, want)
			}
		}
		if tok := d.Index[0]; math.Float64bits(d.At(tok)) != math.Float64bits(full.At(tok)) || d.At(-1) != 0 || d.At(int32(V)) != 0 {
			t.Fatalf("case %d: At disagrees with the dense distribution", c)
		}
	}
	if decided < 300 || refused == 0 {
		t.Fatalf("decided %d rows, refused %d: the cases do not exercise both", decided, refused)
	}
}

func TestFromTopRefusesWhatItCannotDecide(t *testing.T) {
	l := []float32{3, 1, 2, 0.5, 4, -1}
	good := Params{Temperature: 1, TopK: 2}
	top := deviceTop(l, 3)
	if _, ok := good.FromTop(top); !ok {
		t.Fatal("FromTop refused a row its top decides")
	}
	for _, tc := range []struct {
		name string
		p    Params
		top  Top
	}{
		{"greedy", Params{TopK: 2}, top},
		{"no top-k", Params{Temperature: 1}, top},
		{"top-k keeps the vocabulary", Params{Temperature: 1, TopK: 6}, deviceTop(l, 6)},
		{"repetition penalty", Params{Temperature: 1, TopK: 2, RepetitionPenalty: 1.2}, top},
		{"presence penalty", Params{Temperature: 1, TopK: 2, PresencePenalty: 0.5}, top},
		{"too few", good, deviceTop(l, 2)},
		{"tie at the cut", good, Top{Values: []float32{4, 3, 3}, IDs: []int32{4, 0, 2}, Vocab: 6}},
		{"NaN", good, Top{Values: []float32{float32(math.NaN()), 4, 3}, IDs: []int32{1, 4, 0}, Vocab: 6}},
		{"repeated id", good, Top{Values: []float32{4, 3, 2}, IDs: []int32{4, 4, 2}, Vocab: 6}},
		{"foreign id", good, Top{Values: []float32{4, 3, 2}, IDs: []int32{4, 9, 2}, Vocab: 6}},
	} {
		if _, ok := tc.p.FromTop(tc.top); ok {
			t.Errorf("%s: FromTop gave a distribution", tc.name)
		}
	}
}

func TestTopsNeeded(t *testing.T) {
	top5, top9 := Params{Temperature: 1, TopK: 5}, Params{Temperature: 0.7, TopK: 9}
	for _, tc := range []struct {
		name string
		ps   []Params
		want int
	}{
		{"none", nil, 0},
		{"the most any row needs", []Params{top5, top9}, 10},
		{"a row that needs its whole row", []Params{top5, {Temperature: 1}}, 0},
		{"a greedy row", []Params{{}, top9}, 0},
	} {
		if got := TopsNeeded(100, tc.ps...); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
	}
}
