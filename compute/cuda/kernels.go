package cuda

import _ "embed"

// MatMulSource is the batch-invariant bf16 matmul kernel (kernels/matmul.cu,
// after the shared device functions), compiled at start-up by NVRTC for the
// running GPU.
var MatMulSource = commonSource + matmulFile

//go:embed kernels/matmul.cu
var matmulFile string

// commonSource holds the device functions ops.cu and matmul.cu share
// (kernels/common.cuh), put before each.
//
//go:embed kernels/common.cuh
var commonSource string

// MatMulBlock is the thread count the matmul kernel is launched with; it is
// part of the reduction order, so it is fixed.
const MatMulBlock = 256
