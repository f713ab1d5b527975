package cpu

import (
	"fmt"
	"slices"
	"testing"

	"tandem/compute"
)

func TestGatherWidensRows(t *testing.T) {
	b := New(2)
	const V, D = 50, 33
	ids := []int32{3, 0, 49, 3, 17}
	for _, dt := range weightDTypes {
		t.Run(dt.String(), func(t *testing.T) {
			tab := roundTo(dt, randVec(newRand(1), V*D, 5))
			got := b.Gather(weight(t, b, dt, tab, V, D), ids)
			if !compute.SameShape(got.Shape(), []int{len(ids), D}) || got.DType() != compute.F32 {
				t.Fatalf("Gather gave %v", got)
			}
			want := make([]float32, 0, len(ids)*D)
			for _, id := range ids {
				want = append(want, tab[int(id)*D:(int(id)+1)*D]...)
			}
			requireSameBits(t, "Gather", b.ToF32(got), want)
		})
	}
	t.Run("I32 table", func(t *testing.T) {
		tab := make([]int32, V*D)
		for i := range tab {
			tab[i] = int32(i*7 - 100)
		}
		got := b.Gather(b.FromI32(tab, V, D), ids)
		if !compute.SameShape(got.Shape(), []int{len(ids), D}) || got.DType() != compute.I32 {
			t.Fatalf("Gather gave %v", got)
		}
		var want []int32
		for _, id := range ids {
			want = append(want, tab[int(id)*D:(int(id)+1)*D]...)
		}
		if !slices.Equal(b.ToI32(got), want) {
			t.Fatal("Gather of an I32 table changed its rows")
		}
		if at := b.ToI32(b.GatherAt(b.FromI32(tab, V, D), b.FromI32(ids, len(ids)))); !slices.Equal(at, want) {
			t.Fatal("GatherAt of an I32 table differs from Gather")
		}
	})
	mustPanic(t, "id out of range", "out of range", func() { b.Gather(b.Zeros(compute.BF16, V, D), []int32{V}) })
	mustPanic(t, "negative id", "out of range", func() { b.Gather(b.Zeros(compute.F32, V, D), []int32{-1}) })
}

// AddRows must visit contributions in i order so that a token's MoE sum is
// the same whatever other tokens share the call; duplicate rows exercise it.
func TestAddRowsAccumulatesInOrder(t *testing.T) {
	b := New(3)
	const R, D = 4, 2500
	r := newRand(2)
	dst0 := randVec(r, R*D, 1)
	rows := []int32{2, 0, 2, 3, 2}
	src := randVec(r, len(rows)*D, 1)
	for _, scale := range [][]float32{nil, {0.5, -1.25, 3, 0.1, 7}} {
		t.Run(fmt.Sprintf("scale=%v", scale), func(t *testing.T) {
			dst := b.FromF32(dst0, R, D)
			b.AddRows(dst, b.FromF32(src, len(rows), D), rows, scale)
			want := append([]float32(nil), dst0...)
			for i, row := range rows {
				for j := range D {
					p := src[i*D+j]
					if scale != nil {
						p = float32(scale[i] * p)
					}
					want[int(row)*D+j] += p
				}
			}
			requireSameBits(t, "AddRows", b.ToF32(dst), want)
		})
	}
	mustPanic(t, "row out of range", "out of range", func() {
		b.AddRows(b.Zeros(compute.F32, 2, 3), b.Zeros(compute.F32, 1, 3), []int32{2}, nil)
	})
	mustPanic(t, "scale count", "AddRows", func() {
		b.AddRows(b.Zeros(compute.F32, 2, 3), b.Zeros(compute.F32, 1, 3), []int32{1}, []float32{1, 2})
	})
}

func TestConcatJoinsLastDim(t *testing.T) {
	b := New(1)
	x := b.FromF32([]float32{1, 2, 3, 4, 5, 6}, 1, 2, 3)
	y := b.FromF32([]float32{7, 8}, 1, 2, 1)
	got := b.Concat(x, y)
	if !compute.SameShape(got.Shape(), []int{1, 2, 4}) {
		t.Fatalf("shape %v", got.Shape())
	}
	requireSameBits(t, "Concat", b.ToF32(got), []float32{1, 2, 3, 7, 4, 5, 6, 8})

	hb := weight(t, b, compute.BF16, []float32{1, 2}, 2, 1)
	hc := b.Concat(hb, hb)
	if hc.DType() != compute.BF16 {
		t.Fatalf("dtype %v", hc.DType())
	}
	requireSameBits(t, "BF16 Concat", b.ToF32(hc), []float32{1, 1, 2, 2})

	mustPanic(t, "leading dims differ", "Concat", func() { b.Concat(x, b.Zeros(compute.F32, 2, 2, 1)) })
	mustPanic(t, "dtypes differ", "Concat", func() { b.Concat(b.Zeros(compute.F32, 2, 1), hb) })
}
