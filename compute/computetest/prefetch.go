package computetest

import (
	"math"

	"tandem/compute"
)

// Prefetching wraps a backend that lacks compute.Prefetcher (the CPU) with
// one whose reads are immediate, which sends generation and speculation
// down their device-resident paths (the GPU's) on any backend. NaNAt makes
// the F32 prefetches it names (counting from 0) read as NaN in element
// NaNRow (the first by default), and the next I32 prefetch read another
// index there, as a TopK that met a NaN logit would report: in the tensor
// too, so that work already fed the device's pick (a step issued ahead)
// must be undone, as on a GPU. It exercises those paths' host fallbacks.
type Prefetching struct {
	compute.Backend
	NaNAt  map[int]bool
	NaNRow int
	// Values and Calls count the F32 prefetches and all prefetches;
	// Waiting counts those not yet waited for (a caller must wait for
	// each once: a second wait panics).
	Values, Calls, Waiting int
	poison                 bool // the next I32 prefetch reads a wrong first index
}

// Prefetch implements compute.Prefetcher.
func (b *Prefetching) Prefetch(t *compute.Tensor) func() []uint32 {
	b.Calls++
	var bits []uint32
	if t.DType() == compute.I32 {
		for _, v := range b.ToI32(t) {
			bits = append(bits, uint32(v))
		}
		if b.poison && len(bits) > b.NaNRow {
			bits[b.NaNRow] ^= 1
			if d, ok := t.Data().([]int32); ok { // the device's pick too, as a NaN would make it
				d[b.NaNRow] ^= 1
			}
			b.poison = false
		}
	} else {
		for _, v := range b.ToF32(t) {
			bits = append(bits, math.Float32bits(v))
		}
		if b.NaNAt[b.Values] && len(bits) > b.NaNRow {
			bits[b.NaNRow] = math.Float32bits(float32(math.NaN()))
			b.poison = true
		}
		b.Values++
	}
	b.Waiting++
	waited := false
	return func() []uint32 {
		if waited {
			panic("computetest: a prefetch waited for twice")
		}
		waited = true
		b.Waiting--
		return bits
	}
}

// Reset clears the counters and sets the prefetches to poison.
func (b *Prefetching) Reset(nanAt ...int) {
	b.Values, b.Calls, b.Waiting, b.poison, b.NaNRow = 0, 0, 0, false, 0
	b.NaNAt = map[int]bool{}
	for _, i := range nanAt {
		b.NaNAt[i] = true
	}
}

// LateI32 implements compute.LateUploader, taking the values at once (see
// Late): the GPU's sampled steps upload their tokens late.
func (b *Prefetching) LateI32(n int, values func() []int32) (*compute.Tensor, func() error) {
	return lateI32(b, n, values)
}

// ReadLate implements compute.LateUploader (see Late).
func (b *Prefetching) ReadLate(ts ...*compute.Tensor) func() ([][]uint32, error) {
	return readLate(b, ts)
}

// SetPrecision implements compute.Precisioner where the wrapped backend does.
func (b *Prefetching) SetPrecision(p compute.Precision) compute.Precision {
	prev, err := compute.SetPrecision(b.Backend, p)
	if err != nil {
		panic(err)
	}
	return prev
}
