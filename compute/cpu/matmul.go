package cpu

import (
	"fmt"

	"tandem/compute"
)

// Tile sizes for MatMul: a tile is up to matmulTileM rows of x against
// matmulTileN weight rows. Inside a tile each weight row is used for all of
// the tile's x rows while it is hot in L1. Tiling only changes the order in
// which output elements are produced, never how one is computed.
const (
	matmulTileM = 32
	matmulTileN = 16
)

// SetPrecision implements compute.Precisioner: at PrecisionBF16, MatMul
// rounds its activations to bf16 first and is otherwise the same.
func (b *Backend) SetPrecision(p compute.Precision) compute.Precision {
	return compute.Precision(b.precision.Swap(uint32(p)))
}

// roundedBF16 is xs rounded to bf16, a copy in pooled scratch (putF32 it
// once the product is done).
func roundedBF16(xs []float32) *[]float32 {
	r := getF32(len(xs))
	for i, v := range xs {
		(*r)[i] = compute.RoundBF16(v)
	}
	return r
}

// MatMul implements compute.Backend: x [..., K] F32 times w [N, K]ᵀ with F32,
// BF16 or F16 weights. Every output element is one dot product in the fixed
// order described in dot.go, whatever the number of rows M, so a row's
// result is the same alone or in a batch.
func (b *Backend) MatMul(x, w *compute.Tensor) *compute.Tensor {
	if x.Rank() == 0 || w.Rank() != 2 || x.Dim(-1) != w.Dim(1) {
		panic(fmt.Sprintf("cpu: MatMul %v by %vᵀ", x, w))
	}
	xs := f32s(x)
	if compute.Precision(b.precision.Load()) == compute.PrecisionBF16 {
		r := roundedBF16(xs)
		defer putF32(r)
		xs = *r
	}
	K, N := w.Dim(1), w.Dim(0)
	M := compute.NumElements(x.Shape()[:x.Rank()-1])
	shape := append(append([]int(nil), x.Shape()[:x.Rank()-1]...), N)
	out, os := newF32(shape...)
	if M == 0 || N == 0 || K == 0 {
		return out
	}

	var dot func(xr []float32, n int) float32
	// dot4, when set, computes four consecutive weight rows at once with
	// SIMD, bit-identical to four dot calls.
	var dot4 func(xr []float32, n int) [4]float32
	// dot4r2, when set, does the same for two x rows at once.
	var dot4r2 func(x0, x1 []float32, n int) ([4]float32, [4]float32)
	switch ws := floatData(w).(type) {
	case []float32:
		dot = func(xr []float32, n int) float32 { return dotF32(xr, ws[n*K:(n+1)*K]) }
		if useSIMD {
			dot4 = func(xr []float32, n int) [4]float32 { return dot4F32(xr, ws, K, n) }
		}
	case []uint16:
		if w.DType() == compute.BF16 {
			dot = func(xr []float32, n int) float32 { return dotBF16(xr, ws[n*K:(n+1)*K]) }
			if useSIMD {
				dot4 = func(xr []float32, n int) [4]float32 { return dot4BF16(xr, ws, K, n) }
				dot4r2 = func(x0, x1 []float32, n int) ([4]float32, [4]float32) { return dot4BF16r2(x0, x1, ws, K, n) }
			}
		} else {
			tab := f16Table()
			dot = func(xr []float32, n int) float32 { return dotF16(xr, ws[n*K:(n+1)*K], tab) }
		}
	}

	tilesM := (M + matmulTileM - 1) / matmulTileM
	tilesN := (N + matmulTileN - 1) / matmulTileN
	tileWork := min(M, matmulTileM) * min(N, matmulTileN) * K
	// Tiles run along N within one block of x rows, so a chunk streams
	// through the weights while its x rows stay in cache.
	b.parallelFor(tilesM*tilesN, tileWork, func(lo, hi int) {
		for t := lo; t < hi; t++ {
			m0 := t / tilesN * matmulTileM
			n0 := t % tilesN * matmulTileN
			m1, n1 := min(m0+matmulTileM, M), min(n0+matmulTileN, N)
			m := m0
			if dot4r2 != nil {
				for ; m+2 <= m1; m += 2 {
					x0, x1 := xs[m*K:(m+1)*K], xs[(m+1)*K:(m+2)*K]
					o0, o1 := os[m*N:(m+1)*N], os[(m+1)*N:(m+2)*N]
					n := n0
					for ; n+4 <= n1; n += 4 {
						a, c := dot4r2(x0, x1, n)
						o0[n], o0[n+1], o0[n+2], o0[n+3] = a[0], a[1], a[2], a[3]
						o1[n], o1[n+1], o1[n+2], o1[n+3] = c[0], c[1], c[2], c[3]
					}
					for ; n < n1; n++ {
						o0[n], o1[n] = dot(x0, n), dot(x1, n)
					}
				}
			}
			for ; m < m1; m++ {
				xr, o := xs[m*K:(m+1)*K], os[m*N:(m+1)*N]
				n := n0
				if dot4 != nil {
					for ; n+4 <= n1; n += 4 {
						r := dot4(xr, n)
						o[n], o[n+1], o[n+2], o[n+3] = r[0], r[1], r[2], r[3]
					}
				}
				for ; n < n1; n++ {
					o[n] = dot(xr, n)
				}
			}
		}
	})
	return out
}
