package cpu

import (
	"fmt"
	"math"
	"slices"
	"testing"

	"tandem/compute"
)

func TestSoftmaxMatchesFloat64Reference(t *testing.T) {
	b := New(2)
	for _, c := range []struct {
		rows, D int
		scale   float32
		shift   float32
	}{{1, 1, 1, 0}, {3, 7, 1, 0}, {2, 128, 10, 0}, {4, 1001, 30, 0}, {2, 50, 5, 1000}, {1, 262, 80, -5000}} {
		t.Run(fmt.Sprintf("rows%d_D%d_x%g_shift%g", c.rows, c.D, c.scale, c.shift), func(t *testing.T) {
			x := randVec(newRand(uint64(c.D)), c.rows*c.D, c.scale)
			for i := range x {
				x[i] += c.shift
			}
			got := b.ToF32(b.Softmax(b.FromF32(x, c.rows, c.D)))
			want, tol := make([]float64, len(x)), make([]float64, len(x))
			for r := range c.rows {
				row := x[r*c.D : (r+1)*c.D]
				mx := float64(slices.Max(row))
				var sum float64
				for _, v := range row {
					sum += math.Exp(float64(v) - mx)
				}
				for i, v := range row {
					want[r*c.D+i] = math.Exp(float64(v)-mx) / sum
					tol[r*c.D+i] = 2*eps32*want[r*c.D+i] + 1e-45
				}
			}
			requireClose(t, "Softmax", got, want, tol)
		})
	}
}

func TestSoftmaxMinusInfinityGetsZeroWeight(t *testing.T) {
	b := New(1)
	inf := float32(math.Inf(-1))
	got := b.ToF32(b.Softmax(b.FromF32([]float32{inf, 0, inf, 0}, 1, 4)))
	requireSameBits(t, "masked softmax", got, []float32{0, 0.5, 0, 0.5})
}

func TestSoftmaxRowsAreBatchInvariant(t *testing.T) {
	b := New(4)
	const R, D = 7, 3000
	x := b.FromF32(randVec(newRand(8), R*D, 20), R, D)
	all := b.ToF32(b.Softmax(x))
	for r := range R {
		requireSameBits(t, fmt.Sprintf("row %d", r), all[r*D:(r+1)*D], b.ToF32(b.Softmax(b.Slice(x, r, r+1))))
	}
}

func TestArgmaxTiesAndNaN(t *testing.T) {
	b := New(1)
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	negZero := float32(math.Copysign(0, -1))
	for _, c := range []struct {
		name string
		row  []float32
		want int32
	}{
		{"single", []float32{3}, 0},
		{"lowest_index_on_tie", []float32{1, 5, 2, 5, 5}, 1},
		{"signed_zeros_tie", []float32{negZero, 0, -1}, 0},
		{"first_nan_wins", []float32{1, nan, inf, nan}, 1},
		{"infinity", []float32{1, inf, 3}, 1},
		{"all_minus_inf", []float32{float32(math.Inf(-1)), float32(math.Inf(-1))}, 0},
		{"last", []float32{-3, -2, -1}, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := b.ToI32(b.Argmax(b.FromF32(c.row, 1, len(c.row))))
			if len(got) != 1 || got[0] != c.want {
				t.Fatalf("Argmax(%v) = %v, want [%d]", c.row, got, c.want)
			}
		})
	}
}

func TestArgmaxKeyed(t *testing.T) {
	b := New(1)
	nan := float32(math.NaN())
	negZero := float32(math.Copysign(0, -1))
	for _, c := range []struct {
		name string
		row  []float32
		keys []int32
		want int32
	}{
		{"single", []float32{3}, []int32{42}, 42},
		{"largest", []float32{1, 5, 2}, []int32{9, 8, 7}, 8},
		{"tie_to_smaller_key", []float32{5, 1, 5, 5}, []int32{30, 1, 10, 20}, 10},
		{"signed_zeros_tie", []float32{0, negZero, -1}, []int32{6, 5, 1}, 5},
		{"nan_never_wins", []float32{nan, 1, nan, 2}, []int32{1, 2, 3, 4}, 4},
		{"all_nan_gives_first_key", []float32{nan, nan}, []int32{7, 3}, 7},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := b.ToI32(b.ArgmaxKeyed(b.FromF32(c.row, 1, len(c.row)), b.FromI32(c.keys, 1, len(c.keys))))
			if len(got) != 1 || got[0] != c.want {
				t.Fatalf("ArgmaxKeyed(%v, %v) = %v, want [%d]", c.row, c.keys, got, c.want)
			}
		})
	}
	mustPanic(t, "keys of another shape", "ArgmaxKeyed", func() {
		b.ArgmaxKeyed(b.Zeros(compute.F32, 2, 3), b.Zeros(compute.I32, 3, 2))
	})
}

func TestArgmaxManyRows(t *testing.T) {
	b := New(3)
	const R, D = 64, 5000
	x := randVec(newRand(6), R*D, 1)
	got := b.ToI32(b.Argmax(b.FromF32(x, 4, 16, D)))
	if len(got) != R {
		t.Fatalf("%d results, want %d", len(got), R)
	}
	for r := range R {
		row := x[r*D : (r+1)*D]
		if want := slices.Index(row, slices.Max(row)); int(got[r]) != want {
			t.Fatalf("row %d: %d, want %d", r, got[r], want)
		}
	}
}

// refTopK sorts indices stably: NaN first, then by descending value.
func refTopK(row []float32, k int) ([]float32, []int32) {
	idx := make([]int, len(row))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int {
		ka, kb := row[a], row[b]
		na, nb := row[a] != row[a], row[b] != row[b]
		switch {
		case na && !nb:
			return -1
		case nb && !na:
			return 1
		case ka > kb:
			return -1
		case ka < kb:
			return 1
		}
		return 0
	})
	vals, ids := make([]float32, k), make([]int32, k)
	for i := range k {
		vals[i], ids[i] = row[idx[i]], int32(idx[i])
	}
	return vals, ids
}

func TestTopKOrderAndTies(t *testing.T) {
	b := New(3)
	r := newRand(12)
	nan := float32(math.NaN())
	for _, c := range []struct {
		name    string
		rows, D int
		k       int
		gen     func(i int) float32
	}{
		{"many_ties", 6, 40, 8, func(int) float32 { return float32(r.IntN(5)) }},
		{"k_equals_D", 3, 9, 9, func(int) float32 { return float32(r.IntN(3)) - 1 }},
		{"k1", 4, 100, 1, func(int) float32 { return float32(r.IntN(4)) }},
		{"router_128_choose_8", 5, 128, 8, func(int) float32 { return r.Float32() }},
		{"ascending_worst_case", 1, 300, 16, func(i int) float32 { return float32(i % 300) }},
		{"nan_ranks_first", 2, 10, 4, func(i int) float32 {
			if i%7 == 3 {
				return nan
			}
			return float32(i % 4)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			x := make([]float32, c.rows*c.D)
			for i := range x {
				x[i] = c.gen(i)
			}
			vt, it := b.TopK(b.FromF32(x, c.rows, c.D), c.k)
			if !compute.SameShape(vt.Shape(), []int{c.rows, c.k}) || !compute.SameShape(it.Shape(), []int{c.rows, c.k}) {
				t.Fatalf("shapes %v %v", vt.Shape(), it.Shape())
			}
			vals, ids := b.ToF32(vt), b.ToI32(it)
			for row := range c.rows {
				wv, wi := refTopK(x[row*c.D:(row+1)*c.D], c.k)
				requireSameBits(t, fmt.Sprintf("row %d values", row), vals[row*c.k:(row+1)*c.k], wv)
				if !slices.Equal(ids[row*c.k:(row+1)*c.k], wi) {
					t.Fatalf("row %d indices %v, want %v (row %v)", row, ids[row*c.k:(row+1)*c.k], wi, x[row*c.D:(row+1)*c.D])
				}
			}
		})
	}
}

func TestTopKEdgeCases(t *testing.T) {
	b := New(1)
	v, i := b.TopK(b.FromF32([]float32{1, 2}, 1, 2), 0)
	if v.Len() != 0 || i.Len() != 0 {
		t.Fatalf("k=0 gave %v %v", v, i)
	}
	mustPanic(t, "k > D", "TopK", func() { b.TopK(b.FromF32([]float32{1, 2}, 2), 3) })
}
