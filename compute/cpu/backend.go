// Package cpu is the pure-Go compute backend: the numerics reference and the
// backend that runs tiny models in CI.
//
// Storage: Tensor.Data() is a typed Go slice of exactly Len() elements:
// F32 → []float32, BF16 and F16 → []uint16 (raw bit patterns), I32 → []int32,
// I64 → []int64. Views (Index, Slice, Tensor.Reshape) share it by sub-slicing.
//
// Determinism: every op computes each output element with one fixed sequence
// of floating-point operations that depends only on that element's inputs,
// never on the number of rows or query tokens in the call nor on the thread
// count. Parallel loops split work only along independent outputs (rows,
// columns, heads). Products that are accumulated in float32 are written
// float32(a*b) so that the compiler cannot fuse them into an FMA on some
// code paths and not others (Go may fuse x*y+z on arm64, ppc64, s390x,
// riscv64 and amd64 v3). The float32 kernels (MatMul, the attention sums)
// therefore give the same bits on every GOARCH; ops that go through float64
// library math (exp, tanh, cos) are exact functions of their inputs within
// one binary but may differ in the last bit between architectures.
//
// The backend assumes a little-endian host (checked once by New): stored
// weights are little-endian and are used in place.
package cpu

import (
	"runtime"
	"sync/atomic"
	"unsafe"

	"tandem/compute"
)

var _ compute.Backend = (*Backend)(nil)

// Backend is the CPU implementation of compute.Backend. It is safe for
// concurrent use; it holds no mutable state besides scratch pools.
type Backend struct {
	threads   int
	precision atomic.Uint32 // compute.Precision of MatMul's activations
}

// New returns a CPU backend that fans work out to at most threads goroutines
// (threads <= 0 means runtime.GOMAXPROCS(0)).
func New(threads int) *Backend {
	if !littleEndian() {
		panic("compute/cpu: big-endian hosts are not supported")
	}
	if threads <= 0 {
		threads = runtime.GOMAXPROCS(0)
	}
	return &Backend{threads: threads}
}

// Name implements compute.Backend.
func (b *Backend) Name() string { return "cpu" }

// Threads is the number of goroutines the backend fans out to.
func (b *Backend) Threads() int { return b.threads }

func littleEndian() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}
