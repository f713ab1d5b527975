package cpu

import "golang.org/x/sys/cpu"

// useSIMD selects the AVX2 kernels; they give the same bits as the Go loops
// (see dot_amd64.s), only faster. Tests switch it off to compare.
var useSIMD = cpu.X86.HasAVX2

//go:noescape
func dotBF16x4(x *float32, w0, w1, w2, w3 *uint16, n int, out *[32]float32)

//go:noescape
func dotF32x4(x, w0, w1, w2, w3 *float32, n int, out *[32]float32)

//go:noescape
func dotBF16x4r2(x0, x1 *float32, w0, w1, w2, w3 *uint16, n int, out *[64]float32)
