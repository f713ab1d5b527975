package cuda

import (
	"fmt"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"
)

// cuBLAS enums used here (cublas_api.h, library_types.h).
const (
	opN = 0
	opT = 1

	dataF32  = 0
	dataBF16 = 14

	compute32F   = 68
	gemmDefault  = -1
	mathDefault  = 0
	mathPedantic = 2
)

type cublasAPI struct {
	cublasCreate      func(h *uintptr) int32
	cublasDestroy     func(h uintptr) int32
	cublasSetMathMode func(h uintptr, mode int32) int32
	// 19 arguments: purego >= v0.11 supports up to 32.
	cublasGemmEx func(h uintptr, transa, transb int32, m, n, k int32, alpha unsafe.Pointer,
		a uintptr, atype, lda int32, b uintptr, btype, ldb int32, beta unsafe.Pointer,
		c uintptr, ctype, ldc int32, computeType, algo int32) int32
}

var (
	cublasOnce sync.Once
	cublas     *cublasAPI
	cublasErr  error
)

func loadCUBLAS() (*cublasAPI, error) {
	cublasOnce.Do(func() {
		h, err := openLib("cuBLAS", "libcublas.so.13", "libcublas.so.12", "libcublas.so")
		if err != nil {
			cublasErr = err
			return
		}
		c := &cublasAPI{}
		for name, fn := range map[string]any{
			"cublasCreate_v2": &c.cublasCreate, "cublasDestroy_v2": &c.cublasDestroy,
			"cublasSetMathMode": &c.cublasSetMathMode, "cublasGemmEx": &c.cublasGemmEx,
		} {
			if _, err := purego.Dlsym(h, name); err != nil {
				cublasErr = fmt.Errorf("cuda: cuBLAS lacks %s: %v", name, err)
				return
			}
			purego.RegisterLibFunc(fn, h, name)
		}
		cublas = c
	})
	return cublas, cublasErr
}

// BLAS is a cuBLAS handle bound to a device's thread.
type BLAS struct {
	dev *Device
	api *cublasAPI
	h   uintptr
}

// NewBLAS creates a cuBLAS handle on dev, in pedantic math mode (no
// reduced-precision shortcuts).
func (dev *Device) NewBLAS() (*BLAS, error) {
	api, err := loadCUBLAS()
	if err != nil {
		return nil, err
	}
	b := &BLAS{dev: dev, api: api}
	err = dev.do(func() error {
		if r := api.cublasCreate(&b.h); r != 0 {
			return fmt.Errorf("cuda: cublasCreate: status %d", r)
		}
		if r := api.cublasSetMathMode(b.h, mathPedantic); r != 0 {
			return fmt.Errorf("cuda: cublasSetMathMode: status %d", r)
		}
		return nil
	})
	return b, err
}

// MatMulBF16 computes y[M,N] (f32, row-major) = x[M,K] · w[N,K]ᵀ with bf16
// x and w (row-major) and f32 accumulation, through cublasGemmEx with the
// default algorithm. Whether its rows are batch-invariant is what
// TestCuBLASRowInvariance measures.
func (b *BLAS) MatMulBF16(y, x, w Buffer, M, N, K int) error {
	alpha, beta := float32(1), float32(0)
	return b.dev.do(func() error {
		// Column-major view: yᵀ (N×M) = w (N×K, stored as wᵀ K×N) · xᵀ (K×M).
		r := b.api.cublasGemmEx(b.h, opT, opN, int32(N), int32(M), int32(K), unsafe.Pointer(&alpha),
			w.ptr, dataBF16, int32(K), x.ptr, dataBF16, int32(K), unsafe.Pointer(&beta),
			y.ptr, dataF32, int32(N), compute32F, gemmDefault)
		if r != 0 {
			return fmt.Errorf("cuda: cublasGemmEx %dx%dx%d: status %d", M, N, K, r)
		}
		return nil
	})
}

// Close destroys the handle.
func (b *BLAS) Close() error {
	return b.dev.do(func() error {
		if r := b.api.cublasDestroy(b.h); r != 0 {
			return fmt.Errorf("cuda: cublasDestroy: status %d", r)
		}
		return nil
	})
}
