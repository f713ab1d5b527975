//go:build !amd64

package cpu

const useSIMD = false

func dotBF16x4(x *float32, w0, w1, w2, w3 *uint16, n int, out *[32]float32) {
	panic("cpu: no SIMD kernels on this architecture")
}

func dotF32x4(x, w0, w1, w2, w3 *float32, n int, out *[32]float32) {
	panic("cpu: no SIMD kernels on this architecture")
}

func dotBF16x4r2(x0, x1 *float32, w0, w1, w2, w3 *uint16, n int, out *[64]float32) {
	panic("cpu: no SIMD kernels on this architecture")
}
