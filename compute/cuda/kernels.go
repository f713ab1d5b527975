package cuda

import _ "embed"

// MatMulSource is the batch-invariant bf16 matmul kernel (kernels/matmul.cu),
// compiled at start-up by NVRTC for the running GPU.
//
//go:embed kernels/matmul.cu
var MatMulSource string

// MatMulBlock is the thread count the matmul kernel is launched with; it is
// part of the reduction order, so it is fixed.
const MatMulBlock = 256
