package compute

import (
	"fmt"
	"unsafe"
)

// Tensor is a dense row-major array in one backend's memory. The backend that
// made it is the only one that may read its data. Tensors are values the model
// code passes around; views (Reshape, Index) share storage with their source.
type Tensor struct {
	dtype DType
	shape []int
	data  any // backend storage: the CPU backend keeps a typed Go slice here
}

// NewTensor wraps backend storage. It is for backends, not for model code.
func NewTensor(dt DType, shape []int, data any) *Tensor {
	return &Tensor{dtype: dt, shape: append([]int(nil), shape...), data: data}
}

// DType is the element type.
func (t *Tensor) DType() DType { return t.dtype }

// Shape returns the dimensions; callers must not modify the slice.
func (t *Tensor) Shape() []int { return t.shape }

// Rank is the number of dimensions.
func (t *Tensor) Rank() int { return len(t.shape) }

// Dim returns dimension i; negative i counts from the end (-1 is the last).
func (t *Tensor) Dim(i int) int {
	if i < 0 {
		i += len(t.shape)
	}
	return t.shape[i]
}

// Len is the number of elements.
func (t *Tensor) Len() int { return NumElements(t.shape) }

// Rows is the number of rows when the tensor is seen as a matrix whose rows
// are its last dimension: Len() / Dim(-1).
func (t *Tensor) Rows() int {
	if len(t.shape) == 0 || t.shape[len(t.shape)-1] == 0 {
		return 0
	}
	return t.Len() / t.shape[len(t.shape)-1]
}

// Data is the backend storage. It is for backends, not for model code.
func (t *Tensor) Data() any { return t.data }

// String describes the tensor without its data, for errors and logs.
func (t *Tensor) String() string { return fmt.Sprintf("%s%v", t.dtype, t.shape) }

// Reshape returns a view with a new shape and the same number of elements.
// One dimension may be -1 and is then inferred.
func (t *Tensor) Reshape(shape ...int) *Tensor {
	shape = append([]int(nil), shape...)
	infer, n := -1, 1
	for i, d := range shape {
		if d == -1 {
			if infer >= 0 {
				panic("compute: Reshape with two -1 dimensions")
			}
			infer = i
			continue
		}
		n *= d
	}
	if infer >= 0 {
		if n == 0 || t.Len()%n != 0 {
			panic(fmt.Sprintf("compute: cannot reshape %v to %v", t.shape, shape))
		}
		shape[infer] = t.Len() / n
		n *= shape[infer]
	}
	if n != t.Len() {
		panic(fmt.Sprintf("compute: cannot reshape %v to %v", t.shape, shape))
	}
	return &Tensor{dtype: t.dtype, shape: shape, data: t.data}
}

// NumElements is the product of the dimensions (1 for a scalar shape).
func NumElements(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}

// SameShape reports whether a and b have identical dimensions.
func SameShape(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// Float32s views 32-bit words as the float32 values they hold (no copy).
func Float32s(w []uint32) []float32 {
	return unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(w))), len(w))
}

// Int32s views 32-bit words as the int32 values they hold (no copy).
func Int32s(w []uint32) []int32 {
	return unsafe.Slice((*int32)(unsafe.Pointer(unsafe.SliceData(w))), len(w))
}
