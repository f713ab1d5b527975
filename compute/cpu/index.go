package cpu

import (
	"fmt"

	"tandem/compute"
)

// Gather implements compute.Backend: rows of table [V, D] (F32, BF16 or
// F16) widened to F32 [len(ids), D]. An id outside [0, V) panics; callers
// validate token ids where they enter.
func (b *Backend) Gather(table *compute.Tensor, ids []int32) *compute.Tensor {
	if table.Rank() != 2 {
		panic(fmt.Sprintf("cpu: Gather from %v", table))
	}
	V, D := table.Dim(0), table.Dim(1)
	for _, id := range ids {
		if id < 0 || int(id) >= V {
			panic(fmt.Sprintf("cpu: Gather id %d out of range for %v", id, table))
		}
	}
	if table.DType() == compute.I32 {
		ts := i32s(table)
		out := make([]int32, len(ids)*D)
		for i, id := range ids {
			copy(out[i*D:(i+1)*D], ts[int(id)*D:int(id+1)*D])
		}
		return compute.NewTensor(compute.I32, []int{len(ids), D}, out)
	}
	out, os := newF32(len(ids), D)
	b.parallelFor(len(ids), D, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			widenInto(os[i*D:(i+1)*D], table, int(ids[i])*D)
		}
	})
	return out
}

// GatherAt implements compute.Backend: Gather with the ids read from an
// I32 tensor (an id outside [0, V) panics here too).
func (b *Backend) GatherAt(table, ids *compute.Tensor) *compute.Tensor {
	if ids.DType() != compute.I32 || ids.Rank() != 1 {
		panic(fmt.Sprintf("cpu: GatherAt with ids %v", ids))
	}
	return b.Gather(table, i32s(ids))
}

// AddRows implements compute.Backend: dst[rows[i]] += scale[i]·src[i] for i
// in increasing order, each element as dst + float32(scale·src) (dst + src
// when scale is nil). dst is F32 [R, D] and is updated in place; src is F32
// [len(rows), D]. Work is split by columns, so every element still receives
// its updates in i order.
func (b *Backend) AddRows(dst, src *compute.Tensor, rows []int32, scale []float32) {
	ds, ss := f32s(dst), f32s(src)
	if dst.Rank() == 0 || src.Rank() != 2 || src.Dim(0) != len(rows) || src.Dim(1) != dst.Dim(-1) ||
		(scale != nil && len(scale) != len(rows)) {
		panic(fmt.Sprintf("cpu: AddRows of %v into %v with %d rows, %d scales", src, dst, len(rows), len(scale)))
	}
	D, R := dst.Dim(-1), dst.Rows()
	for _, r := range rows {
		if r < 0 || int(r) >= R {
			panic(fmt.Sprintf("cpu: AddRows row %d out of range for %v", r, dst))
		}
	}
	blocks := (D + elementGrain - 1) / elementGrain
	b.parallelFor(blocks, elementGrain*len(rows), func(lo, hi int) {
		c0, c1 := lo*elementGrain, min(hi*elementGrain, D)
		for i, r := range rows {
			d := ds[int(r)*D+c0 : int(r)*D+c1]
			s := ss[i*D+c0 : i*D+c1]
			if scale == nil {
				for j, v := range s {
					d[j] += v
				}
			} else {
				axpy(d, scale[i], s)
			}
		}
	})
}

// Concat implements compute.Backend for two tensors of one dtype whose
// leading dimensions match.
func (b *Backend) Concat(x, y *compute.Tensor) *compute.Tensor {
	if x.Rank() == 0 || x.Rank() != y.Rank() || x.DType() != y.DType() ||
		!compute.SameShape(x.Shape()[:x.Rank()-1], y.Shape()[:y.Rank()-1]) {
		panic(fmt.Sprintf("cpu: Concat of %v and %v", x, y))
	}
	da, db := x.Dim(-1), y.Dim(-1)
	shape := append(append([]int(nil), x.Shape()[:x.Rank()-1]...), da+db)
	rows := compute.NumElements(shape[:len(shape)-1])
	switch xs := x.Data().(type) {
	case []float32:
		return compute.NewTensor(x.DType(), shape, concatRows(rows, da, db, xs, y.Data().([]float32)))
	case []uint16:
		return compute.NewTensor(x.DType(), shape, concatRows(rows, da, db, xs, y.Data().([]uint16)))
	case []int32:
		return compute.NewTensor(x.DType(), shape, concatRows(rows, da, db, xs, y.Data().([]int32)))
	case []int64:
		return compute.NewTensor(x.DType(), shape, concatRows(rows, da, db, xs, y.Data().([]int64)))
	}
	panic(fmt.Sprintf("cpu: Concat of %v", x))
}

func concatRows[T any](rows, da, db int, a, b []T) []T {
	out := make([]T, rows*(da+db))
	for r := range rows {
		o := out[r*(da+db):]
		copy(o[:da], a[r*da:(r+1)*da])
		copy(o[da:da+db], b[r*db:(r+1)*db])
	}
	return out
}
