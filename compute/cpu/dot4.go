package cpu

import "math"

// dot4BF16 computes x·w_r for the four consecutive bf16 weight rows starting
// at row n of w ([N, K]) with the SIMD kernel for the 8-lane part and the Go
// tail and combine of dot.go: bit-identical to four dotBF16 calls.
func dot4BF16(x []float32, w []uint16, K, n int) [4]float32 {
	var lanes [32]float32
	blocks := K / 8
	if blocks > 0 {
		dotBF16x4(&x[0], &w[n*K], &w[(n+1)*K], &w[(n+2)*K], &w[(n+3)*K], blocks, &lanes)
	}
	var out [4]float32
	for r := range 4 {
		row := w[(n+r)*K : (n+r+1)*K]
		var t float32
		for k := blocks * 8; k < K; k++ {
			t += float32(x[k] * math.Float32frombits(uint32(row[k])<<16))
		}
		out[r] = combine(lanes[8*r:8*r+8], t)
	}
	return out
}

// dot4BF16r2 is dot4BF16 for two x rows at once, sharing each weight load;
// bit-identical to eight dotBF16 calls.
func dot4BF16r2(x0, x1 []float32, w []uint16, K, n int) (a, b [4]float32) {
	var lanes [64]float32
	blocks := K / 8
	if blocks > 0 {
		dotBF16x4r2(&x0[0], &x1[0], &w[n*K], &w[(n+1)*K], &w[(n+2)*K], &w[(n+3)*K], blocks, &lanes)
	}
	for r := range 4 {
		row := w[(n+r)*K : (n+r+1)*K]
		var t0, t1 float32
		for k := blocks * 8; k < K; k++ {
			wk := math.Float32frombits(uint32(row[k]) << 16)
			t0 += float32(x0[k] * wk)
			t1 += float32(x1[k] * wk)
		}
		a[r] = combine(lanes[8*r:8*r+8], t0)
		b[r] = combine(lanes[32+8*r:32+8*r+8], t1)
	}
	return a, b
}

// dot4F32 is dot4BF16 for float32 weights.
func dot4F32(x []float32, w []float32, K, n int) [4]float32 {
	var lanes [32]float32
	blocks := K / 8
	if blocks > 0 {
		dotF32x4(&x[0], &w[n*K], &w[(n+1)*K], &w[(n+2)*K], &w[(n+3)*K], blocks, &lanes)
	}
	var out [4]float32
	for r := range 4 {
		row := w[(n+r)*K : (n+r+1)*K]
		var t float32
		for k := blocks * 8; k < K; k++ {
			t += float32(x[k] * row[k])
		}
		out[r] = combine(lanes[8*r:8*r+8], t)
	}
	return out
}

// combine finishes a dot product from its eight lane sums and tail, in
// dot.go's order.
func combine(l []float32, t float32) float32 {
	return ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7])) + t
}
