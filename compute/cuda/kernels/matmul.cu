// Batch-invariant y[M,N] = x[M,K] · w[N,K]ᵀ with bf16 weights and f32
// activations, for the small M of decode and verify.
//
// One block computes column n for every row. Thread t accumulates its
// 8-element chunks of K in order (one fused multiply-add per term), then
// the block reduces its partial sums with a fixed butterfly inside each warp
// and a fixed sequential sum over warps. Nothing here depends on M, so a
// row's result is the same bits whether it is computed alone or with others.
// The block size is part of the reduction order and must stay fixed.

#define ROWS 8 // rows per pass; M may be larger (the passes are independent)

__device__ __forceinline__ float bf16(unsigned short h) {
    return __uint_as_float(((unsigned)h) << 16);
}

// load8 widens 8 consecutive bf16 weights, with one 16-byte load when the
// rows are 16-byte aligned.
__device__ __forceinline__ void load8(float wk[8], const unsigned short* p, bool aligned) {
    if (aligned) {
        uint4 q = *(const uint4*)p;
        wk[0] = __uint_as_float(q.x << 16); wk[1] = __uint_as_float(q.x & 0xffff0000u);
        wk[2] = __uint_as_float(q.y << 16); wk[3] = __uint_as_float(q.y & 0xffff0000u);
        wk[4] = __uint_as_float(q.z << 16); wk[5] = __uint_as_float(q.z & 0xffff0000u);
        wk[6] = __uint_as_float(q.w << 16); wk[7] = __uint_as_float(q.w & 0xffff0000u);
    } else {
#pragma unroll
        for (int e = 0; e < 8; e++) wk[e] = bf16(p[e]);
    }
}

extern "C" __global__ void matmul_bf16(const float* __restrict__ x,
                                       const unsigned short* __restrict__ w,
                                       float* __restrict__ y, int M, int N, int K) {
    __shared__ float partial[32][ROWS];
    const int n = blockIdx.x;
    const unsigned short* wr = w + (size_t)n * K;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    for (int m0 = 0; m0 < M; m0 += ROWS) {
        float acc[ROWS];
#pragma unroll
        for (int j = 0; j < ROWS; j++) acc[j] = 0.0f;
        // Thread t takes 8-element chunks t, t + blockDim.x, … (one 16-byte
        // load of weights each), then the K % 8 tail one element at a time.
        const int K8 = K & ~7;
        const bool aligned = (K & 7) == 0; // 16-byte weight rows
        for (int k = threadIdx.x * 8; k < K8; k += blockDim.x * 8) {
            float wk[8];
            load8(wk, wr + k, aligned);
#pragma unroll
            for (int j = 0; j < ROWS; j++) {
                if (m0 + j < M) {
                    const float* xr = x + (size_t)(m0 + j) * K + k;
#pragma unroll
                    for (int e = 0; e < 8; e++) acc[j] = fmaf(xr[e], wk[e], acc[j]);
                }
            }
        }
        for (int k = K8 + threadIdx.x; k < K; k += blockDim.x) {
            float wk = bf16(wr[k]);
#pragma unroll
            for (int j = 0; j < ROWS; j++) {
                if (m0 + j < M) acc[j] = fmaf(x[(size_t)(m0 + j) * K + k], wk, acc[j]);
            }
        }
#pragma unroll
        for (int j = 0; j < ROWS; j++) {
            float v = acc[j];
            for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
            if (lane == 0) partial[warp][j] = v;
        }
        __syncthreads();
        if (threadIdx.x < ROWS && m0 + threadIdx.x < M) {
            float s = 0.0f;
            for (int i = 0; i < warps; i++) s += partial[i][threadIdx.x];
            y[(size_t)(m0 + threadIdx.x) * N + n] = s;
        }
        __syncthreads();
    }
}

// matmul_warp<DT> is the same product with one warp per output column (a
// block of 8 warps covers 8 columns): lane l accumulates 8-element chunks
// l, l + 32, … in order, then a fixed butterfly sums the warp. With fewer
// threads per column each thread keeps several 16-byte loads in flight,
// which suits the short rows (K of a few thousand) of decode. Its reduction
// order differs from matmul_bf16's, so a model must use one kernel for all
// its calls of a given weight. DT is the weight dtype: 0 f32, 1 bf16, 2 f16.
__device__ __forceinline__ float f16w(unsigned short h) {
    unsigned s = ((unsigned)h & 0x8000u) << 16, e = ((unsigned)h >> 10) & 0x1fu, m = (unsigned)h & 0x3ffu;
    if (e == 0) {
        float f = (float)m * 5.9604644775390625e-08f;
        return s ? -f : f;
    }
    if (e == 31) return __uint_as_float(s | 0x7f800000u | (m << 13));
    return __uint_as_float(s | ((e + 112u) << 23) | (m << 13));
}

template <int DT>
__device__ __forceinline__ float wload(const void* w, size_t i) {
    if (DT == 0) return ((const float*)w)[i];
    if (DT == 1) return bf16(((const unsigned short*)w)[i]);
    return f16w(((const unsigned short*)w)[i]);
}

template <int DT>
__device__ __forceinline__ void wload8(float wk[8], const void* w, size_t i, bool aligned) {
    if (DT == 1) {
        load8(wk, (const unsigned short*)w + i, aligned);
    } else {
#pragma unroll
        for (int e = 0; e < 8; e++) wk[e] = wload<DT>(w, i + e);
    }
}

template <int DT>
__device__ void matmul_warp(const float* __restrict__ x, const void* __restrict__ w,
                            float* __restrict__ y, int M, int N, int K) {
    const int lane = threadIdx.x & 31;
    const int n = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (n >= N) return;
    const size_t wr = (size_t)n * K;
    const int K8 = K & ~7;
    const bool aligned = (K & 7) == 0;
    for (int m0 = 0; m0 < M; m0 += ROWS) {
        float acc[ROWS];
#pragma unroll
        for (int j = 0; j < ROWS; j++) acc[j] = 0.0f;
        for (int k = lane * 8; k < K8; k += 32 * 8) {
            float wk[8];
            wload8<DT>(wk, w, wr + k, aligned);
#pragma unroll
            for (int j = 0; j < ROWS; j++) {
                if (m0 + j < M) {
                    const float* xr = x + (size_t)(m0 + j) * K + k;
#pragma unroll
                    for (int e = 0; e < 8; e++) acc[j] = fmaf(xr[e], wk[e], acc[j]);
                }
            }
        }
        for (int k = K8 + lane; k < K; k += 32) {
            float wk = wload<DT>(w, wr + k);
#pragma unroll
            for (int j = 0; j < ROWS; j++) {
                if (m0 + j < M) acc[j] = fmaf(x[(size_t)(m0 + j) * K + k], wk, acc[j]);
            }
        }
#pragma unroll
        for (int j = 0; j < ROWS; j++) {
            float v = acc[j];
            for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
            if (lane == 0 && m0 + j < M) y[(size_t)(m0 + j) * N + n] = v;
        }
    }
}

extern "C" __global__ void matmul_bf16_warp(const float* __restrict__ x, const unsigned short* __restrict__ w,
                                            float* __restrict__ y, int M, int N, int K) {
    matmul_warp<1>(x, w, y, M, N, K);
}

extern "C" __global__ void matmul_f32_warp(const float* __restrict__ x, const float* __restrict__ w,
                                           float* __restrict__ y, int M, int N, int K) {
    matmul_warp<0>(x, w, y, M, N, K);
}

extern "C" __global__ void matmul_f16_warp(const float* __restrict__ x, const unsigned short* __restrict__ w,
                                           float* __restrict__ y, int M, int N, int K) {
    matmul_warp<2>(x, w, y, M, N, K);
}
