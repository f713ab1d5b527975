package cpu

import (
	"fmt"
	"testing"

	"tandem/compute"
)

var weightDTypes = []compute.DType{compute.F32, compute.BF16, compute.F16}

func TestMatMulMatchesFloat64Reference(t *testing.T) {
	b := New(3)
	for _, dt := range weightDTypes {
		for _, c := range []struct{ M, N, K int }{
			{1, 1, 1}, {1, 7, 3}, {3, 5, 8}, {2, 9, 15}, {1, 33, 16}, {5, 17, 17},
			{1, 1, 23}, {4, 3, 1037}, {1, 2, 4096}, {40, 10, 100}, {70, 19, 33},
		} {
			t.Run(fmt.Sprintf("%v/M%d_N%d_K%d", dt, c.M, c.N, c.K), func(t *testing.T) {
				r := newRand(uint64(c.M*1000 + c.N*10 + c.K))
				x := randVec(r, c.M*c.K, 2)
				w := roundTo(dt, randVec(r, c.N*c.K, 1))
				got := b.ToF32(b.MatMul(b.FromF32(x, c.M, c.K), weight(t, b, dt, w, c.N, c.K)))
				want, tol := refMatMul(x, w, c.M, c.N, c.K)
				requireClose(t, "MatMul", got, want, tol)
			})
		}
	}
}

func TestMatMulKeepsLeadingDims(t *testing.T) {
	b := New(1)
	x := b.FromF32(randVec(newRand(1), 2*3*5, 1), 2, 3, 5)
	w := b.FromF32(randVec(newRand(2), 4*5, 1), 4, 5)
	y := b.MatMul(x, w)
	if !compute.SameShape(y.Shape(), []int{2, 3, 4}) {
		t.Fatalf("shape %v, want [2 3 4]", y.Shape())
	}
	flat := b.MatMul(x.Reshape(6, 5), w)
	requireSameBits(t, "3-D vs 2-D x", b.ToF32(y), b.ToF32(flat))
}

func TestMatMulEmptyShapes(t *testing.T) {
	b := New(1)
	y := b.MatMul(b.Zeros(compute.F32, 3, 0), b.Zeros(compute.BF16, 2, 0))
	requireSameBits(t, "K=0", b.ToF32(y), make([]float32, 6))
	if y := b.MatMul(b.Zeros(compute.F32, 0, 4), b.Zeros(compute.F32, 2, 4)); y.Len() != 0 || y.Dim(1) != 2 {
		t.Fatalf("M=0 gave %v", y)
	}
}

func TestMatMulRejectsMismatchedShapes(t *testing.T) {
	b := New(1)
	mustPanic(t, "K mismatch", "MatMul", func() {
		b.MatMul(b.Zeros(compute.F32, 2, 3), b.Zeros(compute.F32, 4, 5))
	})
	mustPanic(t, "non-F32 x", "F32", func() {
		b.MatMul(b.Zeros(compute.BF16, 2, 3), b.Zeros(compute.F32, 4, 3))
	})
	mustPanic(t, "3-D w", "MatMul", func() {
		b.MatMul(b.Zeros(compute.F32, 2, 3), b.Zeros(compute.F32, 1, 4, 3))
	})
}

// emulateDot is the reduction order documented in dot.go, written out
// plainly: lane k%8 for k < K&^7, then a sequential tail, then a fixed tree.
func emulateDot(x, w []float32) float32 {
	var lanes [8]float32
	n := len(w) &^ 7
	for k := 0; k < n; k++ {
		lanes[k%8] = lanes[k%8] + float32(x[k]*w[k])
	}
	var tail float32
	for k := n; k < len(w); k++ {
		tail = tail + float32(x[k]*w[k])
	}
	return ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7])) + tail
}

// The documented order is what the CUDA backend and future kernels must
// reproduce, so the unrolled kernels are pinned to it bit for bit.
func TestDotKernelsFollowDocumentedOrder(t *testing.T) {
	r := newRand(7)
	tab := f16Table()
	for _, K := range []int{0, 1, 7, 8, 9, 15, 16, 17, 23, 24, 31, 32, 33, 40, 100, 1037, 4096} {
		x := randVec(r, K, 3)
		w := randVec(r, K, 1)
		wb, wh := make([]uint16, K), make([]uint16, K)
		for i, v := range w {
			wb[i], wh[i] = compute.F32ToBF16(v), compute.F32ToF16(v)
		}
		requireSameBits(t, fmt.Sprintf("dotF32 K=%d", K), []float32{dotF32(x, w)}, []float32{emulateDot(x, w)})
		requireSameBits(t, fmt.Sprintf("dotBF16 K=%d", K), []float32{dotBF16(x, wb)}, []float32{emulateDot(x, roundTo(compute.BF16, w))})
		requireSameBits(t, fmt.Sprintf("dotF16 K=%d", K), []float32{dotF16(x, wh, tab)}, []float32{emulateDot(x, roundTo(compute.F16, w))})
	}
}

// invarianceMs covers single rows, small verify batches and M across the
// 32-row tile boundary.
const invK, invN = 1037, 45

// invarianceData returns x [M, invK] and weights [invN, invK] representable
// in dt.
func invarianceData(dt compute.DType, M int) (x, w []float32) {
	r := newRand(11)
	return randVec(r, M*invK, 4), roundTo(dt, randVec(r, invN*invK, 1))
}

var invarianceMs = []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 31, 32, 33, 65}

// Every row of a batched MatMul must equal, bit for bit, the same row
// multiplied alone: speculative verify (M = k+1) relies on it.
func TestMatMulRowsAreBatchInvariant(t *testing.T) {
	const K, N = invK, invN
	maxM := invarianceMs[len(invarianceMs)-1]
	for _, dt := range weightDTypes {
		t.Run(dt.String(), func(t *testing.T) {
			b := New(4)
			xs, ws := invarianceData(dt, maxM)
			w := weight(t, b, dt, ws, N, K)
			x := b.FromF32(xs, maxM, K)
			alone := make([][]float32, maxM)
			for m := range maxM {
				alone[m] = b.ToF32(b.MatMul(b.Slice(x, m, m+1), w))
			}
			for _, M := range invarianceMs {
				got := b.ToF32(b.MatMul(b.Slice(x, 0, M), w))
				for m := range M {
					requireSameBits(t, fmt.Sprintf("M=%d row %d", M, m), got[m*N:(m+1)*N], alone[m])
				}
			}
		})
	}
}

// The bit-equality test above can only catch an order change if its data is
// sensitive to the summation order. Check that summing the same products in
// a different order (sequentially, or split-K in two halves as a GEMM might
// do for large M) changes some outputs, so a kernel whose order depended on
// M would fail TestMatMulRowsAreBatchInvariant.
func TestMatMulInvarianceDataIsOrderSensitive(t *testing.T) {
	const K, N = invK, invN
	x, w := invarianceData(compute.BF16, 1)
	seqDiff, splitDiff := 0, 0
	for n := range N {
		wr := w[n*K : (n+1)*K]
		ref := emulateDot(x, wr)
		var seq float32
		for k := range K {
			seq += float32(x[k] * wr[k])
		}
		split := emulateDot(x[:K/2], wr[:K/2]) + emulateDot(x[K/2:], wr[K/2:])
		if seq != ref {
			seqDiff++
		}
		if split != ref {
			splitDiff++
		}
	}
	if seqDiff == 0 || splitDiff == 0 {
		t.Fatalf("reordering changed %d (sequential) and %d (split-K) of %d outputs; the invariance data is too tame", seqDiff, splitDiff, N)
	}
	t.Logf("of %d outputs, sequential order changes %d and split-K changes %d", N, seqDiff, splitDiff)
}

// TestPrecisionBF16RoundsActivations pins compute.PrecisionBF16 on the CPU:
// a product then equals the exact product of the activations rounded to
// bf16, bit for bit, and differs from the exact product of the activations
// themselves; setting it back restores exact products.
func TestPrecisionBF16RoundsActivations(t *testing.T) {
	b := New(2)
	for _, dt := range weightDTypes {
		t.Run(dt.String(), func(t *testing.T) {
			const M, N, K = 9, 13, 70
			r := newRand(7)
			x := randVec(r, M*K, 2)
			w := weight(t, b, dt, roundTo(dt, randVec(r, N*K, 1)), N, K)
			exact := b.ToF32(b.MatMul(b.FromF32(x, M, K), w))
			rounded := b.ToF32(b.MatMul(b.FromF32(roundTo(compute.BF16, x), M, K), w))
			if prev := b.SetPrecision(compute.PrecisionBF16); prev != compute.PrecisionExact {
				t.Fatalf("a new backend's precision is %v", prev)
			}
			got := b.ToF32(b.MatMul(b.FromF32(x, M, K), w))
			if prev := b.SetPrecision(compute.PrecisionExact); prev != compute.PrecisionBF16 {
				t.Fatalf("SetPrecision returned %v, want bf16", prev)
			}
			requireSameBits(t, "bf16 product against the rounded activations' exact product", got, rounded)
			if sameBits(got, exact) < 0 {
				t.Fatal("the bf16 product equals the exact one: the activations were not rounded")
			}
			requireSameBits(t, "exact again", b.ToF32(b.MatMul(b.FromF32(x, M, K), w)), exact)
		})
	}
}
