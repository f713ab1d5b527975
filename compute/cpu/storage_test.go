package cpu

import (
	"encoding/binary"
	"math"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"tandem/compute"
)

func TestWeightUsesAlignedBytesInPlace(t *testing.T) {
	b := New(1)
	buf := make([]uint64, 8) // 8-byte aligned backing store
	raw := unsafe.Slice((*byte)(unsafe.Pointer(&buf[0])), 64)
	for _, c := range []struct {
		dt compute.DType
		n  int
	}{{compute.F32, 16}, {compute.BF16, 32}, {compute.F16, 32}, {compute.I32, 16}, {compute.I64, 8}} {
		w, err := b.Weight(c.dt, []int{c.n}, raw[:c.n*c.dt.Size()])
		if err != nil {
			t.Fatal(err)
		}
		var p unsafe.Pointer
		switch d := w.Data().(type) {
		case []float32:
			p = unsafe.Pointer(&d[0])
		case []uint16:
			p = unsafe.Pointer(&d[0])
		case []int32:
			p = unsafe.Pointer(&d[0])
		case []int64:
			p = unsafe.Pointer(&d[0])
		}
		if p != unsafe.Pointer(&raw[0]) {
			t.Errorf("%v weight was copied; want the aligned bytes used in place", c.dt)
		}
	}
}

func TestWeightCopiesMisalignedBytes(t *testing.T) {
	b := New(1)
	f := []float32{1.5, -2, float32(math.Inf(1)), 3e-40}
	buf := make([]byte, 1+4*len(f))
	for i, v := range f {
		binary.LittleEndian.PutUint32(buf[1+4*i:], math.Float32bits(v))
	}
	w, err := b.Weight(compute.F32, []int{2, 2}, buf[1:])
	if err != nil {
		t.Fatal(err)
	}
	requireSameBits(t, "misaligned F32", b.ToF32(w), f)
	buf[1] ^= 0xff // the tensor must not alias the misaligned bytes
	requireSameBits(t, "after editing raw", b.ToF32(w), f)

	h := []uint16{0x3f80, 0xc000, 0x7f80, 0x0001}
	hb := make([]byte, 1+2*len(h))
	for i, v := range h {
		binary.LittleEndian.PutUint16(hb[1+2*i:], v)
	}
	if uintptr(unsafe.Pointer(&hb[1]))%2 == 0 {
		t.Skip("allocator returned an odd address; cannot build a misaligned buffer")
	}
	wb, err := b.Weight(compute.BF16, []int{4}, hb[1:])
	if err != nil {
		t.Fatal(err)
	}
	if got := wb.Data().([]uint16); !slices.Equal(got, h) {
		t.Fatalf("misaligned BF16: %#x, want %#x", got, h)
	}

	ib := make([]byte, 1+16)
	binary.LittleEndian.PutUint64(ib[1:], uint64(math.MaxInt64-5))
	binary.LittleEndian.PutUint64(ib[9:], uint64(1<<63))
	wi, err := b.Weight(compute.I64, []int{2}, ib[1:])
	if err != nil {
		t.Fatal(err)
	}
	if got := wi.Data().([]int64); got[0] != math.MaxInt64-5 || got[1] != math.MinInt64 {
		t.Fatalf("misaligned I64: %v", got)
	}
}

func TestWeightRejectsBadInput(t *testing.T) {
	b := New(1)
	_, err := b.Weight(compute.BF16, []int{3, 4}, make([]byte, 23))
	if err == nil || !strings.Contains(err.Error(), "24") || !strings.Contains(err.Error(), "23") {
		t.Fatalf("wrong length: err %v, want one naming 24 expected and 23 got", err)
	}
	if _, err := b.Weight(compute.Invalid, []int{1}, make([]byte, 1)); err == nil {
		t.Fatal("invalid dtype accepted")
	}
	if _, err := b.Weight(compute.F32, []int{-1, -4}, make([]byte, 16)); err == nil {
		t.Fatal("negative dims accepted")
	}
	if _, err := b.Weight(compute.F32, []int{1 << 40, 1 << 40}, nil); err == nil {
		t.Fatal("overflowing shape accepted")
	}
	w, err := b.Weight(compute.F32, []int{0, 5}, nil)
	if err != nil || w.Len() != 0 {
		t.Fatalf("empty weight: %v, %v", w, err)
	}
}

func TestViewsShareStorage(t *testing.T) {
	b := New(1)
	stack := b.Zeros(compute.F32, 3, 2, 4) // [E, N, K]
	b.Copy(b.Index(stack, 1), 1, b.FromF32([]float32{1, 2, 3, 4}, 1, 4))
	got := b.ToF32(stack)
	want := make([]float32, 24)
	copy(want[12:], []float32{1, 2, 3, 4})
	requireSameBits(t, "write through Index view", got, want)

	s := b.Slice(stack, 1, 3)
	if !compute.SameShape(s.Shape(), []int{2, 2, 4}) {
		t.Fatalf("Slice shape %v", s.Shape())
	}
	requireSameBits(t, "Slice", b.ToF32(s), want[8:])
	requireSameBits(t, "Reshape of a view", b.ToF32(s.Reshape(4, 4)), want[8:])

	mustPanic(t, "Index out of range", "Index", func() { b.Index(stack, 3) })
	mustPanic(t, "Slice out of range", "Slice", func() { b.Slice(stack, 2, 4) })
}

func TestCopyConvertsForCaches(t *testing.T) {
	b := New(1)
	src := []float32{1, 1.00390625, -3.3, 65520}
	// F32 into F32 at an offset.
	d := b.Zeros(compute.F32, 3, 2)
	b.Copy(d, 1, b.FromF32(src, 2, 2))
	requireSameBits(t, "F32", b.ToF32(d), append([]float32{0, 0}, src...))
	// BF16 source widened into an F32 cache.
	hb := weight(t, b, compute.BF16, roundTo(compute.BF16, src), 2, 2)
	b.Copy(d, 0, hb)
	requireSameBits(t, "BF16→F32", b.ToF32(b.Slice(d, 0, 2)), roundTo(compute.BF16, src))
	// F32 source rounded (to nearest even) into BF16 and F16 caches.
	for _, dt := range []compute.DType{compute.BF16, compute.F16} {
		c := b.Zeros(dt, 2, 2)
		b.Copy(c, 0, b.FromF32(src, 2, 2))
		requireSameBits(t, "F32→"+dt.String(), b.ToF32(c), roundTo(dt, src))
		// Same dtype copies the raw bits.
		c2 := b.Zeros(dt, 4, 2)
		b.Copy(c2, 2, c)
		if !slices.Equal(c2.Data().([]uint16)[4:], c.Data().([]uint16)) {
			t.Fatalf("%v raw copy differs", dt)
		}
	}
	ii := b.Zeros(compute.I32, 3)
	b.Copy(ii, 1, b.FromI32([]int32{7, 8}, 2))
	if got := b.ToI32(ii); !slices.Equal(got, []int32{0, 7, 8}) {
		t.Fatalf("I32 copy %v", got)
	}
	mustPanic(t, "past the end", "Copy", func() { b.Copy(d, 2, b.FromF32(src, 2, 2)) })
	mustPanic(t, "trailing dims differ", "Copy", func() { b.Copy(d, 0, b.FromF32(src, 1, 4)) })
	mustPanic(t, "int into float", "Copy", func() { b.Copy(d, 0, b.FromI32([]int32{1, 2}, 1, 2)) })
}

func TestHostRoundTrips(t *testing.T) {
	b := New(1)
	src := []float32{1, 2, 3, 4, 5, 6}
	x := b.FromF32(src, 2, 3)
	src[0] = 99 // FromF32 copies
	requireSameBits(t, "FromF32/ToF32", b.ToF32(x), []float32{1, 2, 3, 4, 5, 6})
	ids := b.FromI32([]int32{4, -2}, 2)
	if got := b.ToI32(ids); !slices.Equal(got, []int32{4, -2}) {
		t.Fatalf("ToI32 %v", got)
	}
	for _, dt := range []compute.DType{compute.F32, compute.BF16, compute.F16, compute.I32, compute.I64} {
		if z := b.Zeros(dt, 2, 0, 3); z.Len() != 0 || z.DType() != dt {
			t.Fatalf("Zeros(%v) = %v", dt, z)
		}
	}
	mustPanic(t, "length mismatch", "FromF32", func() { b.FromF32(src, 4) })
	mustPanic(t, "ToF32 of ints", "float", func() { b.ToF32(ids) })
	mustPanic(t, "ToI32 of floats", "I32", func() { b.ToI32(x) })
	if b.Name() != "cpu" || New(0).Threads() < 1 {
		t.Fatal("Name or default threads")
	}
}
