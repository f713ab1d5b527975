package cpu

import (
	"encoding/binary"
	"fmt"
	"math"
	"unsafe"

	"tandem/compute"
)

// Zeros implements compute.Backend.
func (b *Backend) Zeros(dt compute.DType, shape ...int) *compute.Tensor {
	checkShape(shape)
	return compute.NewTensor(dt, shape, alloc(dt, compute.NumElements(shape)))
}

// FromF32 implements compute.Backend.
func (b *Backend) FromF32(data []float32, shape ...int) *compute.Tensor {
	checkShape(shape)
	if n := compute.NumElements(shape); n != len(data) {
		panic(fmt.Sprintf("cpu: FromF32: %d values for shape %v (%d elements)", len(data), shape, n))
	}
	return compute.NewTensor(compute.F32, shape, append([]float32(nil), data...))
}

// FromI32 implements compute.Backend.
func (b *Backend) FromI32(data []int32, shape ...int) *compute.Tensor {
	checkShape(shape)
	if n := compute.NumElements(shape); n != len(data) {
		panic(fmt.Sprintf("cpu: FromI32: %d values for shape %v (%d elements)", len(data), shape, n))
	}
	return compute.NewTensor(compute.I32, shape, append([]int32(nil), data...))
}

// Weight implements compute.Backend. Aligned bytes are reinterpreted in place
// (raw must then outlive the tensor and must not be modified); misaligned
// bytes are decoded into a new slice.
func (b *Backend) Weight(dt compute.DType, shape []int, raw []byte) (*compute.Tensor, error) {
	size := dt.Size()
	if size == 0 {
		return nil, fmt.Errorf("cpu: weight of unsupported dtype %v", dt)
	}
	n := 1
	for _, d := range shape {
		if d < 0 {
			return nil, fmt.Errorf("cpu: weight with negative dimension in shape %v", shape)
		}
		if d != 0 && n > math.MaxInt/size/d {
			return nil, fmt.Errorf("cpu: weight shape %v is too large", shape)
		}
		n *= d
	}
	if want := n * size; len(raw) != want {
		return nil, fmt.Errorf("cpu: weight %v%v needs %d bytes, got %d", dt, shape, want, len(raw))
	}
	var data any
	if n > 0 && uintptr(unsafe.Pointer(unsafe.SliceData(raw)))%uintptr(size) == 0 {
		p := unsafe.Pointer(unsafe.SliceData(raw))
		switch dt {
		case compute.F32:
			data = unsafe.Slice((*float32)(p), n)
		case compute.BF16, compute.F16:
			data = unsafe.Slice((*uint16)(p), n)
		case compute.I32:
			data = unsafe.Slice((*int32)(p), n)
		case compute.I64:
			data = unsafe.Slice((*int64)(p), n)
		}
	} else {
		data = decodeLE(dt, n, raw)
	}
	return compute.NewTensor(dt, shape, data), nil
}

// decodeLE copies little-endian bytes into a new typed slice.
func decodeLE(dt compute.DType, n int, raw []byte) any {
	le := binary.LittleEndian
	switch dt {
	case compute.F32:
		s := make([]float32, n)
		for i := range s {
			s[i] = math.Float32frombits(le.Uint32(raw[4*i:]))
		}
		return s
	case compute.BF16, compute.F16:
		s := make([]uint16, n)
		for i := range s {
			s[i] = le.Uint16(raw[2*i:])
		}
		return s
	case compute.I32:
		s := make([]int32, n)
		for i := range s {
			s[i] = int32(le.Uint32(raw[4*i:]))
		}
		return s
	case compute.I64:
		s := make([]int64, n)
		for i := range s {
			s[i] = int64(le.Uint64(raw[8*i:]))
		}
		return s
	}
	panic(fmt.Sprintf("cpu: unsupported dtype %v", dt))
}

// ToF32 implements compute.Backend.
func (b *Backend) ToF32(t *compute.Tensor) []float32 {
	out := make([]float32, t.Len())
	widenInto(out, t, 0)
	return out
}

// ToI32 implements compute.Backend.
func (b *Backend) ToI32(t *compute.Tensor) []int32 {
	return append([]int32(nil), i32s(t)...)
}

// Index implements compute.Backend.
func (b *Backend) Index(t *compute.Tensor, i int) *compute.Tensor {
	if t.Rank() == 0 || i < 0 || i >= t.Dim(0) {
		panic(fmt.Sprintf("cpu: Index %d of %v", i, t))
	}
	stride := compute.NumElements(t.Shape()[1:])
	return compute.NewTensor(t.DType(), t.Shape()[1:], subslice(t, i*stride, (i+1)*stride))
}

// Slice implements compute.Backend.
func (b *Backend) Slice(t *compute.Tensor, start, end int) *compute.Tensor {
	if t.Rank() == 0 || start < 0 || end < start || end > t.Dim(0) {
		panic(fmt.Sprintf("cpu: Slice [%d, %d) of %v", start, end, t))
	}
	shape := append([]int{end - start}, t.Shape()[1:]...)
	stride := compute.NumElements(t.Shape()[1:])
	return compute.NewTensor(t.DType(), shape, subslice(t, start*stride, end*stride))
}

// Copy implements compute.Backend. Same dtypes copy the raw elements; an F32
// dst widens a BF16/F16 src; a BF16/F16 dst takes an F32 src rounded to
// nearest even (for low-precision caches).
func (b *Backend) Copy(dst *compute.Tensor, start int, src *compute.Tensor) {
	if dst.Rank() == 0 || src.Rank() == 0 || !compute.SameShape(dst.Shape()[1:], src.Shape()[1:]) ||
		start < 0 || start+src.Dim(0) > dst.Dim(0) {
		panic(fmt.Sprintf("cpu: Copy %v into %v at %d", src, dst, start))
	}
	stride := compute.NumElements(src.Shape()[1:])
	lo, n := start*stride, src.Len()
	switch {
	case dst.DType() == src.DType():
		switch d := dst.Data().(type) {
		case []float32:
			copy(d[lo:lo+n], f32s(src))
		case []uint16:
			copy(d[lo:lo+n], src.Data().([]uint16)[:n])
		case []int32:
			copy(d[lo:lo+n], i32s(src))
		case []int64:
			copy(d[lo:lo+n], src.Data().([]int64)[:n])
		default:
			panic(fmt.Sprintf("cpu: Copy of %v", src))
		}
	case dst.DType() == compute.F32 && src.DType().IsFloat():
		widenInto(f32s(dst)[lo:lo+n], src, 0)
	case src.DType() == compute.F32 && (dst.DType() == compute.BF16 || dst.DType() == compute.F16):
		d := dst.Data().([]uint16)[lo : lo+n]
		round := compute.F32ToBF16
		if dst.DType() == compute.F16 {
			round = compute.F32ToF16
		}
		for i, v := range f32s(src) {
			d[i] = round(v)
		}
	default:
		panic(fmt.Sprintf("cpu: Copy %v into %v", src, dst))
	}
}

func checkShape(shape []int) {
	for _, d := range shape {
		if d < 0 {
			panic(fmt.Sprintf("cpu: negative dimension in shape %v", shape))
		}
	}
}

func alloc(dt compute.DType, n int) any {
	switch dt {
	case compute.F32:
		return make([]float32, n)
	case compute.BF16, compute.F16:
		return make([]uint16, n)
	case compute.I32:
		return make([]int32, n)
	case compute.I64:
		return make([]int64, n)
	}
	panic(fmt.Sprintf("cpu: unsupported dtype %v", dt))
}

// newF32 allocates a zeroed F32 tensor and returns its storage too.
func newF32(shape ...int) (*compute.Tensor, []float32) {
	d := make([]float32, compute.NumElements(shape))
	return compute.NewTensor(compute.F32, shape, d), d
}

// subslice returns elements [lo, hi) of t's storage, capacity-limited so a
// view can never reach past its end.
func subslice(t *compute.Tensor, lo, hi int) any {
	switch d := t.Data().(type) {
	case []float32:
		return d[lo:hi:hi]
	case []uint16:
		return d[lo:hi:hi]
	case []int32:
		return d[lo:hi:hi]
	case []int64:
		return d[lo:hi:hi]
	}
	panic(fmt.Sprintf("cpu: tensor %v has foreign storage %T", t, t.Data()))
}

// f32s returns t's float32 storage, panicking with a clear message when t is
// not an F32 tensor of this backend.
func f32s(t *compute.Tensor) []float32 {
	d, ok := t.Data().([]float32)
	if !ok || t.DType() != compute.F32 {
		panic(fmt.Sprintf("cpu: want an F32 tensor, got %v", t))
	}
	return d[:t.Len()]
}

func i32s(t *compute.Tensor) []int32 {
	d, ok := t.Data().([]int32)
	if !ok || t.DType() != compute.I32 {
		panic(fmt.Sprintf("cpu: want an I32 tensor, got %v", t))
	}
	return d[:t.Len()]
}

// floatData checks that t is a float tensor and returns its storage: a
// []float32 for F32 or the raw []uint16 for BF16/F16.
func floatData(t *compute.Tensor) any {
	switch d := t.Data().(type) {
	case []float32:
		if t.DType() == compute.F32 {
			return d[:t.Len()]
		}
	case []uint16:
		if t.DType() == compute.BF16 || t.DType() == compute.F16 {
			return d[:t.Len()]
		}
	}
	panic(fmt.Sprintf("cpu: want a float tensor, got %v", t))
}

// widenInto writes float elements [off, off+len(dst)) of t into dst as
// float32. Widening is exact.
func widenInto(dst []float32, t *compute.Tensor, off int) {
	switch d := floatData(t).(type) {
	case []float32:
		copy(dst, d[off:off+len(dst)])
	case []uint16:
		src := d[off : off+len(dst)]
		if t.DType() == compute.BF16 {
			for i, h := range src {
				dst[i] = bf16(h)
			}
		} else {
			tab := f16Table()
			for i, h := range src {
				dst[i] = tab[h]
			}
		}
	}
}

// bf16 widens a bfloat16 bit pattern (exact; the same as compute.BF16ToF32).
func bf16(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }
