package cpu

import (
	"math"
	"sync"
	"unsafe"

	"tandem/compute"
)

// The dot products below all follow one reduction order, so that a result
// depends only on the two vectors, never on the caller or the weight dtype
// (widening BF16/F16 to float32 is exact):
//
//   - elements k < K&^7 go to lane k%8, each lane summing its products in
//     increasing k, starting from zero;
//   - the remaining K%8 elements are summed in order into a tail;
//   - the result is ((l0+l1)+(l2+l3)) + ((l4+l5)+(l6+l7)) + tail.
//
// Eight independent lanes hide the float add latency; the loops are unrolled
// (by 8 or 16) to amortise bounds checks. Each product is rounded with float32(...)
// so the compiler cannot fuse it into an FMA.

// dotF32 returns x·w for len(w) elements of x.
func dotF32(x, w []float32) float32 {
	n := len(w)
	x = x[:n]
	var s0, s1, s2, s3, s4, s5, s6, s7 float32
	k := 0
	for ; k+16 <= n; k += 16 {
		xx := (*[16]float32)(x[k : k+16])
		ww := (*[16]float32)(w[k : k+16])
		s0 += float32(xx[0] * ww[0])
		s1 += float32(xx[1] * ww[1])
		s2 += float32(xx[2] * ww[2])
		s3 += float32(xx[3] * ww[3])
		s4 += float32(xx[4] * ww[4])
		s5 += float32(xx[5] * ww[5])
		s6 += float32(xx[6] * ww[6])
		s7 += float32(xx[7] * ww[7])
		s0 += float32(xx[8] * ww[8])
		s1 += float32(xx[9] * ww[9])
		s2 += float32(xx[10] * ww[10])
		s3 += float32(xx[11] * ww[11])
		s4 += float32(xx[12] * ww[12])
		s5 += float32(xx[13] * ww[13])
		s6 += float32(xx[14] * ww[14])
		s7 += float32(xx[15] * ww[15])
	}
	if k+8 <= n {
		xx := (*[8]float32)(x[k : k+8])
		ww := (*[8]float32)(w[k : k+8])
		s0 += float32(xx[0] * ww[0])
		s1 += float32(xx[1] * ww[1])
		s2 += float32(xx[2] * ww[2])
		s3 += float32(xx[3] * ww[3])
		s4 += float32(xx[4] * ww[4])
		s5 += float32(xx[5] * ww[5])
		s6 += float32(xx[6] * ww[6])
		s7 += float32(xx[7] * ww[7])
		k += 8
	}
	var t float32
	for ; k < n; k++ {
		t += float32(x[k] * w[k])
	}
	return ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7)) + t
}

// dotBF16 returns x·w for bfloat16 w. It reads four weights at a time as one
// little-endian uint64 (an unaligned load, fine on the platforms Go runs
// little-endian on), which is markedly faster than four 16-bit loads.
func dotBF16(x []float32, w []uint16) float32 {
	n := len(w)
	x = x[:n]
	var s0, s1, s2, s3, s4, s5, s6, s7 float32
	k := 0
	for ; k+16 <= n; k += 16 {
		xx := (*[16]float32)(x[k : k+16])
		ww := (*[4]uint64)(unsafe.Pointer(&(*[16]uint16)(w[k : k+16])[0]))
		a, b := ww[0], ww[1]
		s0 += float32(xx[0] * lane0(a))
		s1 += float32(xx[1] * lane1(a))
		s2 += float32(xx[2] * lane2(a))
		s3 += float32(xx[3] * lane3(a))
		s4 += float32(xx[4] * lane0(b))
		s5 += float32(xx[5] * lane1(b))
		s6 += float32(xx[6] * lane2(b))
		s7 += float32(xx[7] * lane3(b))
		a, b = ww[2], ww[3]
		s0 += float32(xx[8] * lane0(a))
		s1 += float32(xx[9] * lane1(a))
		s2 += float32(xx[10] * lane2(a))
		s3 += float32(xx[11] * lane3(a))
		s4 += float32(xx[12] * lane0(b))
		s5 += float32(xx[13] * lane1(b))
		s6 += float32(xx[14] * lane2(b))
		s7 += float32(xx[15] * lane3(b))
	}
	if k+8 <= n {
		xx := (*[8]float32)(x[k : k+8])
		ww := (*[2]uint64)(unsafe.Pointer(&(*[8]uint16)(w[k : k+8])[0]))
		a, b := ww[0], ww[1]
		s0 += float32(xx[0] * lane0(a))
		s1 += float32(xx[1] * lane1(a))
		s2 += float32(xx[2] * lane2(a))
		s3 += float32(xx[3] * lane3(a))
		s4 += float32(xx[4] * lane0(b))
		s5 += float32(xx[5] * lane1(b))
		s6 += float32(xx[6] * lane2(b))
		s7 += float32(xx[7] * lane3(b))
		k += 8
	}
	var t float32
	for ; k < n; k++ {
		t += float32(x[k] * bf16(w[k]))
	}
	return ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7)) + t
}

// lane0..lane3 widen the bfloat16 in bits 0-15, 16-31, 32-47, 48-63 of a.
func lane0(a uint64) float32 { return math.Float32frombits(uint32(a) << 16) }
func lane1(a uint64) float32 { return math.Float32frombits(uint32(a) & 0xffff0000) }
func lane2(a uint64) float32 { return math.Float32frombits(uint32(a>>16) & 0xffff0000) }
func lane3(a uint64) float32 { return math.Float32frombits(uint32(a>>32) & 0xffff0000) }

// dotF16 returns x·w for IEEE half w, widening through a lookup table.
func dotF16(x []float32, w []uint16, tab *[1 << 16]float32) float32 {
	n := len(w)
	x = x[:n]
	var s0, s1, s2, s3, s4, s5, s6, s7 float32
	k := 0
	for ; k+8 <= n; k += 8 {
		xx := (*[8]float32)(x[k : k+8])
		ww := (*[8]uint16)(w[k : k+8])
		s0 += float32(xx[0] * tab[ww[0]])
		s1 += float32(xx[1] * tab[ww[1]])
		s2 += float32(xx[2] * tab[ww[2]])
		s3 += float32(xx[3] * tab[ww[3]])
		s4 += float32(xx[4] * tab[ww[4]])
		s5 += float32(xx[5] * tab[ww[5]])
		s6 += float32(xx[6] * tab[ww[6]])
		s7 += float32(xx[7] * tab[ww[7]])
	}
	var t float32
	for ; k < n; k++ {
		t += float32(x[k] * tab[w[k]])
	}
	return ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7)) + t
}

// f16Table maps every half-precision bit pattern to its float32 value. It is
// built on first use (256 KiB); F16 weights are rare.
var f16Table = sync.OnceValue(func() *[1 << 16]float32 {
	var t [1 << 16]float32
	for i := range t {
		t[i] = compute.F16ToF32(uint16(i))
	}
	return &t
})

// axpy computes y[j] += a·x[j], each product rounded to float32 first.
func axpy(y []float32, a float32, x []float32) {
	x = x[:len(y)]
	for j := range y {
		y[j] += float32(a * x[j])
	}
}
