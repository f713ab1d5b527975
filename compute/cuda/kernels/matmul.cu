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
    pdl_start();
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
    pdl_start();
    matmul_warp<1>(x, w, y, M, N, K);
}

extern "C" __global__ void matmul_f32_warp(const float* __restrict__ x, const float* __restrict__ w,
                                           float* __restrict__ y, int M, int N, int K) {
    pdl_start();
    matmul_warp<0>(x, w, y, M, N, K);
}

extern "C" __global__ void matmul_f16_warp(const float* __restrict__ x, const unsigned short* __restrict__ w,
                                           float* __restrict__ y, int M, int N, int K) {
    pdl_start();
    matmul_warp<2>(x, w, y, M, N, K);
}

// ---------------------------------------------------------------------------
// Tensor-core matmul for bf16 weights: one kernel for every M, so decode,
// verify and prefill rows share one arithmetic and stay batch-invariant.
//
// Activations are f32; each is split into three bf16 parts (x = hi + mid +
// lo to 24 mantissa bits, as exact as f32; two parts left errors 100 times
// the CPU's and flipped MoE routing), and every part goes through
// mma.sync m16n8k16 with f32 accumulation. A warp owns 8 output columns and
// one K range; for every 32-wide K block it loads 16 bytes of each of its 8
// weight rows per lane and runs 6 mmas (three parts of two k-steps) per
// 16-row M tile. Each output's sequence of mma accumulations
// depends only on K and on the split of K, which is chosen from the weight's
// shape (N, K), never from M. Which M tile or tile row a row lands in does
// not change its arithmetic: a tensor core computes each output element
// from its own row and column. Rows beyond M are zeros.

// The activations' three bf16 parts are written by split_bf16 (ops.cu), or
// by the op that produced them (emit in ops.cu): one definition of the split.

// load8bf reads bf16 elements k..k+7 of a row of length K (zeros past K or
// when !ok), with one 16-byte load when aligned.
__device__ __forceinline__ uint4 load8bf(const unsigned short* row, int k, int K, bool ok, bool aligned) {
    uint4 q;
    q.x = q.y = q.z = q.w = 0u;
    if (!ok) return q;
    if (aligned && k + 8 <= K) return *(const uint4*)(row + k);
    unsigned v[8];
#pragma unroll
    for (int e = 0; e < 8; e++) v[e] = k + e < K ? row[k + e] : 0u;
    q.x = v[0] | (v[1] << 16);
    q.y = v[2] | (v[3] << 16);
    q.z = v[4] | (v[5] << 16);
    q.w = v[6] | (v[7] << 16);
    return q;
}

// mma_part accumulates one part of one 32-wide K block of a 16-row tile.
// Lane (g, t) holds k = kb + 8t … 8t+7 of weight row g (q) and of tile rows
// g and g+8 (a0, a1); the first mma takes elements 0-3, the second 4-7, the
// same permutation of K on both sides.
__device__ __forceinline__ void mma_part(float c[4], uint4 q, uint4 a0, uint4 a1) {
    mma16816(c, a0.x, a1.x, a0.y, a1.y, q.x, q.y);
    mma16816(c, a0.z, a1.z, a0.w, a1.w, q.z, q.w);
}

__device__ __forceinline__ unsigned pack2(unsigned short a, unsigned short b) {
    return (unsigned)a | ((unsigned)b << 16);
}

// wchunk reads weights k..k+7 of a row; NC streams them past L1 with a
// 256-byte L2 prefetch (weights are read once per step).
template <bool NC>
__device__ __forceinline__ uint4 wchunk(const unsigned short* row, int k, int K, bool ok, bool aligned) {
    if (NC && ok && aligned && k + 8 <= K) {
        uint4 q;
        // volatile: without it the compiler may hoist the load above the
        // alignment test (it did: misaligned-address faults on odd K).
        asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];"
            : "=r"(q.x), "=r"(q.y), "=r"(q.z), "=r"(q.w)
            : "l"(row + k));
        return q;
    }
    return load8bf(row, k, K, ok, aligned);
}

// wload_step loads the U weight chunks of the K step at kb: lane t takes
// k = kb + 32u + 8t of its weight row.
template <int U, bool NC>
__device__ __forceinline__ void wload_step(uint4 q[U], const unsigned short* wr, int kb, int t, int k1, bool wok, bool al) {
#pragma unroll
    for (int u = 0; u < U; u++) {
        const int k = kb + 32 * u + 8 * t;
        q[u] = wchunk<NC>(wr, k, k1, wok && k < k1, al);
    }
}

// matmul_mma<MT, U, NC>: grid (ceil(N/64), splits), 8 warps. Split s
// covers K range [s·kchunk, (s+1)·kchunk) and writes partial sums to
// part[s][M][N] (or y directly when splits = 1). xs holds the three parts
// split_bf16 wrote ([3][M][K]). MT tiles of 16 rows share each weight load;
// MT changes only how many rows one pass serves. U weight chunks per lane
// per K step; NC streams weights past L1. Neither U nor NC changes the
// arithmetic: every output still accumulates its mmas in K order. (Loading
// the next step's weights ahead of this step's mmas was tried: more
// registers, fewer warps, slower.)
template <int MT, int U, bool NC>
__device__ void matmul_mma(const unsigned short* __restrict__ xs, const unsigned short* __restrict__ w, float* __restrict__ out,
                           int M, int N, int K, int kchunk, int aligned) {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int n0 = (blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5)) * 8;
    if (n0 >= N) return;
    const int k0 = blockIdx.y * kchunk, k1 = min(K, k0 + kchunk);
    const bool wok = n0 + g < N, al = aligned != 0;
    const unsigned short* wr = w + (size_t)(wok ? n0 + g : 0) * K;
    float* o = out + (size_t)blockIdx.y * M * N;
    for (int m0 = 0; m0 < M; m0 += 16 * MT) {
        // One accumulator per part: three independent mma chains, summed
        // smallest first at the end.
        float c[MT][4], cp[3][MT][4];
#pragma unroll
        for (int p = 0; p < 3; p++)
#pragma unroll
            for (int i = 0; i < MT; i++) cp[p][i][0] = cp[p][i][1] = cp[p][i][2] = cp[p][i][3] = 0.0f;
        for (int kb = k0; kb < k1; kb += 32 * U) {
            uint4 cur[U];
            wload_step<U, NC>(cur, wr, kb, t, k1, wok, al);
#pragma unroll
            for (int u = 0; u < U; u++) {
                const int k = kb + 32 * u + 8 * t;
                const bool kin = k < k1;
#pragma unroll
                for (int i = 0; i < MT; i++) {
                    if (m0 + 16 * i >= M) break;
                    const int r0 = m0 + 16 * i + g, r1 = r0 + 8;
#pragma unroll
                    for (int p = 0; p < 3; p++) {
                        const unsigned short* xp = xs + (size_t)p * M * K;
                        const uint4 a0 = load8bf(xp + (size_t)r0 * K, k, k1, r0 < M && kin, al);
                        const uint4 a1 = load8bf(xp + (size_t)r1 * K, k, k1, r1 < M && kin, al);
                        mma_part(cp[p][i], cur[u], a0, a1);
                    }
                }
            }
        }
#pragma unroll
        for (int i = 0; i < MT; i++)
#pragma unroll
            for (int e = 0; e < 4; e++) c[i][e] = __fadd_rn(__fadd_rn(cp[2][i][e], cp[1][i][e]), cp[0][i][e]);
#pragma unroll
        for (int i = 0; i < MT; i++) {
            const int r0 = m0 + 16 * i + g, r1 = r0 + 8, n = n0 + 2 * t;
            if (r0 < M) {
                if (n < N) o[(size_t)r0 * N + n] = c[i][0];
                if (n + 1 < N) o[(size_t)r0 * N + n + 1] = c[i][1];
            }
            if (r1 < M) {
                if (n < N) o[(size_t)r1 * N + n] = c[i][2];
                if (n + 1 < N) o[(size_t)r1 * N + n + 1] = c[i][3];
            }
        }
    }
}

// Segment outputs (TANDEM_CUDA_SEGMENTS=1): a stacked product of several
// rows (q|k|v, gate|up) written as its products one after another, each
// [M, width] and contiguous, instead of [M, N] rows that split_cols then
// copies apart. Columns [0, b1), [b1, b2) and [b2, N) are the products;
// SEG_NONE for b1 and b2 is the plain layout. Only where the output goes
// changes, never what is summed.
#define SEG_NONE 0x7fffffff
__device__ __forceinline__ size_t seg_at(int r, int n, int M, int N, int b1, int b2) {
    const int e1 = min(b1, N), e2 = min(b2, N);
    const int lo = n < e1 ? 0 : (n < e2 ? e1 : e2), hi = n < e1 ? e1 : (n < e2 ? e2 : N);
    return (size_t)lo * M + (size_t)r * (hi - lo) + (n - lo);
}

// split_sum is output i's sum over S splits of partials MN apart, in split
// order. The partials are loaded FB at a time before they are added: loaded
// one by one, each load waited for the addition before it, a chain of one
// L2 round trip a split at the end of every product (fill splits give the
// E2B products 10-16).
#define FB 16
__device__ __forceinline__ float split_sum(const float* part, size_t MN, size_t i, int S) {
    float s = 0.0f;
    for (int j0 = 0; j0 < S; j0 += FB) {
        float v[FB];
#pragma unroll
        for (int u = 0; u < FB; u++) v[u] = j0 + u < S ? __ldcg(part + (size_t)(j0 + u) * MN + i) : 0.0f;
#pragma unroll
        for (int u = 0; u < FB; u++)
            if (j0 + u < S) s = j0 + u == 0 ? v[u] : __fadd_rn(s, v[u]);
    }
    return s;
}

// split_sum2 is split_sum of outputs i and k at once (ok: the output is
// wanted; else its sum is 0 and nothing of it is read): both outputs'
// partials are loaded before either is added, so a finish that gives a
// thread two outputs (a verify's four rows, a GLU's gate and up) waits out
// one L2 round trip for them instead of two. Each output's additions are
// split_sum's.
__device__ __forceinline__ void split_sum2(const float* part, size_t MN, size_t i, bool oki, size_t k, bool okk, int S,
                                           float& si, float& sk) {
    si = sk = 0.0f;
    for (int j0 = 0; j0 < S; j0 += FB) {
        float v[FB], u[FB];
#pragma unroll
        for (int x = 0; x < FB; x++) {
            v[x] = oki && j0 + x < S ? __ldcg(part + (size_t)(j0 + x) * MN + i) : 0.0f;
            u[x] = okk && j0 + x < S ? __ldcg(part + (size_t)(j0 + x) * MN + k) : 0.0f;
        }
#pragma unroll
        for (int x = 0; x < FB; x++)
            if (j0 + x < S) {
                si = j0 + x == 0 ? v[x] : __fadd_rn(si, v[x]);
                sk = j0 + x == 0 ? u[x] : __fadd_rn(sk, u[x]);
            }
    }
}

// last_split reports, to every thread of the block, whether the block is
// the last of its gridDim.y K splits to finish; its partials are visible
// before it counts, and the last block sees everyone's.
__device__ __forceinline__ bool last_split(int* counters, int counter) {
    __shared__ int last;
    __threadfence(); // this block's partials, visible before the count
    __syncthreads();
    if (threadIdx.x == 0) last = atomicAdd(counters + counter, 1) == (int)gridDim.y - 1;
    __syncthreads();
    if (last) __threadfence();
    return last;
}

// finish_group: with K split over gridDim.y blocks of one output tile (rows
// [r0, r1), columns [c0, c0 + COLS)), the last of them to finish sums the
// tile's partials in split order (the order sum_splits used, so the bits
// are the same) and resets the tile's counter for the next launch.
template <int COLS = 64>
__device__ __forceinline__ void finish_group(float* y, const float* part, int* counters, int counter, int M, int N,
                                             int r0, int r1, int b1 = SEG_NONE, int b2 = SEG_NONE) {
    if (gridDim.y == 1 || counters == 0) return; // no split, or summed by sum_splits
    if (!last_split(counters, counter)) return;
    const int c0 = blockIdx.x * COLS, T = (r1 - r0) * COLS, B = blockDim.x;
    const size_t MN = (size_t)M * N;
    for (int e = threadIdx.x; e < T; e += 2 * B) { // two outputs a thread at once (split_sum2)
        const int ra = r0 + e / COLS, na = c0 + e % COLS, rb = r0 + (e + B) / COLS, nb = c0 + (e + B) % COLS;
        const bool oka = na < N, okb = e + B < T && nb < N;
        float sa, sb;
        split_sum2(part, MN, (size_t)ra * N + na, oka, (size_t)rb * N + nb, okb, gridDim.y, sa, sb);
        if (oka) y[seg_at(ra, na, M, N, b1, b2)] = sa;
        if (okb) y[seg_at(rb, nb, M, N, b1, b2)] = sb;
    }
    if (threadIdx.x == 0) counters[counter] = 0;
}

// finish_splits: finish_group for kernels whose block covers 64 columns of
// every row.
__device__ __forceinline__ void finish_splits(float* y, const float* part, int* counters, int M, int N,
                                              int b1 = SEG_NONE, int b2 = SEG_NONE) {
    finish_group(y, part, counters, blockIdx.x, M, N, 0, M, b1, b2);
}

// The cluster finish (the _cl kernels, TANDEM_CUDA_CLUSTER=1): the K splits
// of one column group run as one thread block cluster (sm_90; cluster dims
// (1, gridDim.y, 1), so a block's rank in its cluster is blockIdx.y). Each
// block keeps its partial tile in its own shared memory; after a cluster
// barrier every block reads a share of the outputs' partials from all the
// splits' blocks (distributed shared memory) and adds them in split order,
// split_sum's order, so the bits are the counted finish's. What it saves:
// the counted finish's fence, count and L2 round trips at the end of every
// split product (TestWeightStreamSpeed: 3.6 µs of a 31B MLP product's 65,
// 1.9 of an E2B one's 11).
#define CL_ROWS 5 // the rows kernels' most rows

// cluster_sum is the S splits' partials at p, added in split order as
// split_sum adds them (all loaded before the first addition).
__device__ __forceinline__ float cluster_sum(const float* p, int S) {
    float s = 0.0f;
    for (int j0 = 0; j0 < S; j0 += FB) {
        float v[FB];
#pragma unroll
        for (int u = 0; u < FB; u++) v[u] = j0 + u < S ? cluster_ld(p, j0 + u) : 0.0f;
#pragma unroll
        for (int u = 0; u < FB; u++)
            if (j0 + u < S) s = j0 + u == 0 ? v[u] : __fadd_rn(s, v[u]);
    }
    return s;
}

// cluster_finish is finish_group for a _cl kernel whose block covers COLS
// columns: output (r, c0 + j)'s partial is tile[r·COLS + j] in every
// split's block. Every thread of the cluster calls it.
template <int COLS>
__device__ __forceinline__ void cluster_finish(float* y, const float* tile, int M, int N, int b1, int b2) {
    cluster_sync(); // every split's tile is written
    const int S = gridDim.y, c0 = blockIdx.x * COLS;
    for (int e = blockIdx.y * blockDim.x + threadIdx.x; e < M * COLS; e += S * blockDim.x) {
        const int r = e / COLS, n = c0 + e % COLS;
        if (n < N) y[seg_at(r, n, M, N, b1, b2)] = cluster_sum(tile + e, S);
    }
    cluster_sync(); // no block leaves while another reads its tile
}

// The kernels take y, the split partials' buffer part (y itself without a
// K split) and the column groups' counters.
#define MMA_KERNEL(name, MT, U, NC)                                                                        \
    extern "C" __global__ void name(const unsigned short* xs, const unsigned short* w, float* y, float* part, \
                                    int* counters, int M, int N, int K, int kchunk, int aligned) {          \
        pdl_start();                                                                                        \
        matmul_mma<MT, U, NC>(xs, w, part, M, N, K, kchunk, aligned);                                       \
        finish_splits(y, part, counters, M, N);                                                             \
    }
MMA_KERNEL(matmul_mma1, 1, 4, false) // plain loads: the reference the tests compare with
MMA_KERNEL(matmul_mma8, 8, 1, false)
MMA_KERNEL(matmul_mma1n, 1, 4, true)
MMA_KERNEL(matmul_mma8n, 8, 1, true)

// ---------------------------------------------------------------------------
// matmul_rows: the tensor-core product for M ≤ 5 (decode and short
// verifies) with the three parts of an activation row as three tile rows:
// tile row 3r + p holds part p (hi, mid, lo) of row r, so one mma does what
// matmul_mma needs three for, and each lane loads at most two activation
// chunks per weight chunk. Tile row 3r + p accumulates exactly the mmas
// matmul_mma's part-p accumulator of row r does (a tensor core computes
// each output element from its own row and column), and the parts are
// summed in the same order, so the bits equal matmul_mma's for every M.
// (Splitting the activations inside the kernel instead of in split_bf16
// was tried: every warp then redoes the split, and the kernel ran at half
// the bandwidth.)
//
// rows_act points a lane at its tile rows g and g + 8: part p of activation
// row r sits in tile row 3r + p (null and !ok past the 3M rows).
struct rows_act {
    const unsigned short *x0, *x1;
    bool ok0, ok1;
};
__device__ __forceinline__ rows_act rows_act_of(const unsigned short* xs, int M, int K, int g) {
    const int i1 = g + 8;
    rows_act a;
    a.ok0 = g < 3 * M;
    a.ok1 = i1 < 3 * M;
    a.x0 = xs + (a.ok0 ? (size_t)(g % 3) * M * K + (size_t)(g / 3) * K : 0);
    a.x1 = xs + (a.ok1 ? (size_t)(i1 % 3) * M * K + (size_t)(i1 / 3) * K : 0);
    return a;
}

// rows_act_tile is rows_act_of for the 16-row tile that holds activation
// rows r0 … r0 + 4 (the multi-tile wide kernels): part p of row r0 + i in
// tile row 3i + p, the tile's sixteenth row always empty. For r0 = 0 and
// M ≤ 5 it is rows_act_of.
__device__ __forceinline__ rows_act rows_act_tile(const unsigned short* xs, int M, int K, int g, int r0) {
    const int i1 = g + 8;
    rows_act a;
    a.ok0 = g < 15 && r0 + g / 3 < M;
    a.ok1 = i1 < 15 && r0 + i1 / 3 < M;
    a.x0 = xs + (a.ok0 ? (size_t)(g % 3) * M * K + (size_t)(r0 + g / 3) * K : 0);
    a.x1 = xs + (a.ok1 ? (size_t)(i1 % 3) * M * K + (size_t)(r0 + i1 / 3) * K : 0);
    return a;
}

// rows_act_token is rows_act_of for token z of the M in xs taken alone:
// the tile rows of a one-row product over that token's three parts.
__device__ __forceinline__ rows_act rows_act_token(const unsigned short* xs, int M, int K, int g, int z) {
    rows_act a;
    a.ok0 = g < 3;
    a.ok1 = false;
    a.x0 = xs + (a.ok0 ? (size_t)(g % 3) * M * K + (size_t)z * K : 0);
    a.x1 = xs;
    return a;
}

// rows_store writes a warp's 8 columns for each of M rows at o from its
// accumulator (c[0..1]: tile row g, columns 2t and 2t+1; c[2..3]: tile row
// g + 8) through tile, the warp's 16 × 9 floats of shared memory: each
// output is its row's three parts summed (lo + mid) + hi.
__device__ __forceinline__ void rows_store(float* tile, const float c[4], int g, int t, int lane, float* o, int M, int N,
                                           int n0, int b1 = SEG_NONE, int b2 = SEG_NONE, int r0 = 0, int Mt = -1) {
    tile[g * 9 + 2 * t] = c[0];
    tile[g * 9 + 2 * t + 1] = c[1];
    tile[(g + 8) * 9 + 2 * t] = c[2];
    tile[(g + 8) * 9 + 2 * t + 1] = c[3];
    __syncwarp();
    if (Mt < 0) Mt = M; // the tile's rows, r0 … r0 + Mt − 1 of the M
    for (int e = lane; e < 8 * Mt; e += 32) {
        const int r = e >> 3, j = e & 7;
        if (n0 + j < N)
            o[seg_at(r0 + r, n0 + j, M, N, b1, b2)] = __fadd_rn(__fadd_rn(tile[(3 * r + 2) * 9 + j], tile[(3 * r + 1) * 9 + j]), tile[(3 * r) * 9 + j]);
    }
}

// wide_mma accumulates one K step, U weight chunks from kb, of G column
// groups into c: each chunk against the lane's two activation tile rows,
// loaded once for all G groups.
template <int G, int U>
__device__ __forceinline__ void wide_mma(float c[G][4], const uint4 q[G][U], const rows_act& x, int kb, int k1, int t,
                                         bool al) {
#pragma unroll
    for (int u = 0; u < U; u++) {
        const int k = kb + 32 * u + 8 * t;
        const bool kin = k < k1;
        const uint4 a0 = load8bf(x.x0, k, k1, x.ok0 && kin, al);
        const uint4 a1 = load8bf(x.x1, k, k1, x.ok1 && kin, al);
#pragma unroll
        for (int i = 0; i < G; i++) mma_part(c[i], q[i][u], a0, a1);
    }
}

// tiles_mma is wide_mma for T tiles of activation rows, each tile's mmas
// those wide_mma runs for it alone: a weight chunk is loaded once for T·5
// rows.
template <int T, int G, int U>
__device__ __forceinline__ void tiles_mma(float c[T][G][4], const uint4 q[G][U], const rows_act x[T], int kb, int k1,
                                          int t, bool al) {
#pragma unroll
    for (int u = 0; u < U; u++) {
        const int k = kb + 32 * u + 8 * t;
        const bool kin = k < k1;
        uint4 a0[T], a1[T];
#pragma unroll
        for (int s = 0; s < T; s++) {
            a0[s] = load8bf(x[s].x0, k, k1, x[s].ok0 && kin, al);
            a1[s] = load8bf(x[s].x1, k, k1, x[s].ok1 && kin, al);
        }
#pragma unroll
        for (int s = 0; s < T; s++)
#pragma unroll
            for (int i = 0; i < G; i++) mma_part(c[s][i], q[i][u], a0[s], a1[s]);
    }
}

// rows_mma is wide_mma for matmul_rows' one column group.
template <int U>
__device__ __forceinline__ void rows_mma(float c[4], const uint4 q[U], const rows_act& x, int kb, int k1, int t, bool al) {
    wide_mma<1, U>(reinterpret_cast<float(*)[4]>(c), reinterpret_cast<const uint4(*)[U]>(q), x, kb, k1, t, al);
}

// With Tok, block z of the grid's third dimension computes row z / xdiv of
// the M in xs alone (matmul_rows_tokens): the arithmetic of a launch with
// M = 1, its split partials at row z of out's [splits][gridDim.z][N].
//
// With Early (the _early kernels, TANDEM_CUDA_EARLY_WEIGHTS=1) the kernel's
// pdl_start comes after its first weight loads: weights are constants, so
// under programmatic launch they stream while the kernel before still
// finishes, and only the activations wait for it. The same loads and mmas
// in the same order: the bits are the plain kernel's. (Asking L2 for the
// next 4 or 16 steps' weights before the wait too lost on the H200: E2B
// decode 206 → 181 tok/s, 31B 43.9 → 41.8.)
template <int U, bool NC, bool Tok, bool Early = false, bool Local = false>
__device__ void matmul_rows(const unsigned short* __restrict__ xs, const unsigned short* __restrict__ w, float* __restrict__ out,
                            int M, int N, int K, int kchunk, int aligned, int xdiv = 1, int b1 = SEG_NONE,
                            int b2 = SEG_NONE) {
    __shared__ float tile[8][16][9];
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3, wid = threadIdx.x >> 5;
    const int n0 = (blockIdx.x * (blockDim.x >> 5) + wid) * 8;
    if (n0 >= N) {
        if (Early) pdl_start_for(xs, out);
        return;
    }
    const int k0 = blockIdx.y * kchunk, k1 = min(K, k0 + kchunk);
    const bool wok = n0 + g < N, al = aligned != 0;
    const unsigned short* wr = w + (size_t)(wok ? n0 + g : 0) * K;
    const rows_act x = Tok ? rows_act_token(xs, M, K, g, blockIdx.z / xdiv) : rows_act_of(xs, M, K, g);
    float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    int kb = k0;
    if (Early) {
        uint4 cur[U];
        wload_step<U, NC>(cur, wr, kb, t, k1, wok, al);
        pdl_start_for(xs, out);
        rows_mma<U>(c, cur, x, kb, k1, t, al);
        kb += 32 * U;
    }
    for (; kb < k1; kb += 32 * U) {
        uint4 cur[U];
        wload_step<U, NC>(cur, wr, kb, t, k1, wok, al);
        rows_mma<U>(c, cur, x, kb, k1, t, al);
    }
    if (Tok)
        rows_store(&tile[wid][0][0], c, g, t, lane, out + ((size_t)blockIdx.y * gridDim.z + blockIdx.z) * N, 1, N, n0);
    else if (Local) // a _cl kernel's partial tile, in its block's shared memory
        rows_store(&tile[wid][0][0], c, g, t, lane, out, M, 64, n0 - blockIdx.x * 64);
    else if (gridDim.y == 1) // out is the result itself: its layout may be segments
        rows_store(&tile[wid][0][0], c, g, t, lane, out, M, N, n0, b1, b2);
    else
        rows_store(&tile[wid][0][0], c, g, t, lane, out + (size_t)blockIdx.y * M * N, M, N, n0);
}

// At most 64 registers: four blocks per multiprocessor. (More weight bytes
// in flight per warp was measured on the H200 and lost: eight chunks per
// step, or four loaded a step ahead, both at three blocks per
// multiprocessor, streamed the 31B MLP shapes at 2.3-2.6 TB/s against
// 2.6-3.1 for this kernel. So did weights streamed through shared memory
// by cp.async, 4 KB in flight per warp: 2.4-2.5 TB/s against 2.7-3.1. In
// the seventh session eight and sixteen chunks a step lost on every shape
// too, the E2B shape's small products included.)
#define ROWS_KERNEL(name, U, NC, MINB, EARLY)                                                                 \
    extern "C" __global__ void __launch_bounds__(256, MINB) name(const unsigned short* xs, const unsigned short* w, \
                                    float* y, float* part, int* counters, int M, int N, int K, int kchunk,     \
                                    int aligned, int b1, int b2) {                                             \
        if (!EARLY) pdl_start();                                                                               \
        matmul_rows<U, NC, false, EARLY>(xs, w, part, M, N, K, kchunk, aligned, 1, b1, b2);                    \
        finish_splits(y, part, counters, M, N, b1, b2);                                                        \
    }
ROWS_KERNEL(matmul_rows, 4, true, 4, false)
ROWS_KERNEL(matmul_rows_plain, 4, false, 4, false) // plain loads, for comparison
ROWS_KERNEL(matmul_rows_early, 4, true, 4, true)

// matmul_rows_cl: matmul_rows with the cluster finish (launched as
// clusters of its gridDim.y K splits); matmul_rows_early_cl with early
// weights too.
#define ROWS_CL_KERNEL(name, EARLY)                                                                              \
    extern "C" __global__ void __launch_bounds__(256, 4) name(const unsigned short* xs, const unsigned short* w,   \
            float* y, float* part, int* counters, int M, int N, int K, int kchunk, int aligned, int b1, int b2) {  \
        __shared__ float ct[CL_ROWS * 64];                                                                       \
        if (!EARLY) pdl_start();                                                                                 \
        matmul_rows<4, true, false, EARLY, true>(xs, w, ct, M, N, K, kchunk, aligned, 1, b1, b2);                \
        cluster_finish<64>(y, ct, M, N, b1, b2);                                                                 \
    }
ROWS_CL_KERNEL(matmul_rows_cl, false)
ROWS_CL_KERNEL(matmul_rows_early_cl, true)

// matmul_rows_wide: matmul_rows with 8·G columns a warp, G groups of 8
// sharing every activation load, and U weight chunks a group per K step.
// A verify's rows load 1.5 activation chunks per weight chunk in
// matmul_rows (12 of a tile's 16 rows are live at M = 4), 1.5/G here. Each
// output column accumulates the same mmas in the same K order as
// matmul_rows (U changes only how many 32-wide blocks a step loads), so the
// bits are its bits. A block covers 64·G columns. T > 1 takes T tiles of
// five rows (tiles_mma; the multi-tile kernels below), T = 1 one tile of
// at most five.
//
// matmul_rows_wide (G = 2, U = 2: the bytes in flight of matmul_rows)
// streamed the 31B shapes 12-19% faster than matmul_rows at one row and
// 19-23% at four on the H200; the E2B shape's small products ran 3-10%
// slower. Wider and deeper settings lost on every shape in the eighth
// session: G = 4, U = 1 (the 31B MLP at one row 84 µs against 70) and
// G = 2, U = 4 at three blocks a multiprocessor (75 µs).
// Its K step is matmul_rows' (wide_mma); matmul_rows keeps a body of its
// own for the token-routed variant (Tok) and its one column group, at 64
// registers, the most its four blocks a multiprocessor allow.
template <int G, int U, bool NC, bool Early, bool Local = false, int T = 1>
__device__ void matmul_rows_wide(const unsigned short* __restrict__ xs, const unsigned short* __restrict__ w,
                                 float* __restrict__ out, int M, int N, int K, int kchunk, int aligned, int b1,
                                 int b2) {
    __shared__ float tile[8][16][9];
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3, wid = threadIdx.x >> 5;
    const int n0 = (blockIdx.x * (blockDim.x >> 5) + wid) * 8 * G;
    if (n0 >= N) {
        if (Early) pdl_start_for(xs, out);
        return;
    }
    const int k0 = blockIdx.y * kchunk, k1 = min(K, k0 + kchunk);
    const bool al = aligned != 0;
    bool ok[G];
    const unsigned short* wr[G];
#pragma unroll
    for (int i = 0; i < G; i++) {
        ok[i] = n0 + 8 * i + g < N;
        wr[i] = w + (size_t)(ok[i] ? n0 + 8 * i + g : 0) * K;
    }
    rows_act x[T];
#pragma unroll
    for (int s = 0; s < T; s++) x[s] = rows_act_tile(xs, M, K, g, 5 * s);
    float c[T][G][4];
#pragma unroll
    for (int s = 0; s < T; s++)
#pragma unroll
        for (int i = 0; i < G; i++) c[s][i][0] = c[s][i][1] = c[s][i][2] = c[s][i][3] = 0.0f;
    int kb = k0;
    if (Early) { // as matmul_rows: the first step's weights before the wait
        uint4 q[G][U];
#pragma unroll
        for (int i = 0; i < G; i++) wload_step<U, NC>(q[i], wr[i], kb, t, k1, ok[i], al);
        pdl_start_for(xs, out);
        tiles_mma<T, G, U>(c, q, x, kb, k1, t, al);
        kb += 32 * U;
    }
    for (; kb < k1; kb += 32 * U) {
        uint4 q[G][U];
#pragma unroll
        for (int i = 0; i < G; i++) wload_step<U, NC>(q[i], wr[i], kb, t, k1, ok[i], al);
        tiles_mma<T, G, U>(c, q, x, kb, k1, t, al);
    }
    // Local: a _cl kernel's partial tile ([M][64·G]), in shared memory.
    float* o = Local ? out : out + (size_t)blockIdx.y * M * N;
    const int ldo = Local ? 64 * G : N, c0 = Local ? blockIdx.x * 64 * G : 0;
    if (gridDim.y > 1) b1 = b2 = SEG_NONE; // partials keep the plain layout
#pragma unroll
    for (int s = 0; s < T; s++)
#pragma unroll
        for (int i = 0; i < G; i++) {
            if (s > 0 || i > 0) __syncwarp(); // the next group reuses the tile
            if (5 * s < M)
                rows_store(&tile[wid][0][0], c[s][i], g, t, lane, o, M, ldo, n0 + 8 * i - c0, b1, b2, 5 * s,
                           min(5, M - 5 * s));
        }
}

#define WIDE_KERNEL(name, G, U, MINB, EARLY)                                                                   \
    extern "C" __global__ void __launch_bounds__(256, MINB) name(const unsigned short* xs, const unsigned short* w, \
                                    float* y, float* part, int* counters, int M, int N, int K, int kchunk,     \
                                    int aligned, int b1, int b2) {                                             \
        if (!EARLY) pdl_start();                                                                               \
        matmul_rows_wide<G, U, true, EARLY>(xs, w, part, M, N, K, kchunk, aligned, b1, b2);                    \
        finish_group<64 * G>(y, part, counters, blockIdx.x, M, N, 0, M, b1, b2);                               \
    }
WIDE_KERNEL(matmul_rows_wide, 2, 2, 4, false)
WIDE_KERNEL(matmul_rows_wide_early, 2, 2, 4, true)

// matmul_rows_wide_cl: matmul_rows_wide with the cluster finish;
// matmul_rows_wide_early_cl with early weights too.
#define WIDE_CL_KERNEL(name, EARLY)                                                                              \
    extern "C" __global__ void __launch_bounds__(256, 4) name(const unsigned short* xs, const unsigned short* w,   \
            float* y, float* part, int* counters, int M, int N, int K, int kchunk, int aligned, int b1, int b2) {  \
        __shared__ float ct[CL_ROWS * 128];                                                                      \
        if (!EARLY) pdl_start();                                                                                 \
        matmul_rows_wide<2, 2, true, EARLY, true>(xs, w, ct, M, N, K, kchunk, aligned, b1, b2);                  \
        cluster_finish<128>(y, ct, M, N, b1, b2);                                                                \
    }
WIDE_CL_KERNEL(matmul_rows_wide_cl, false)
WIDE_CL_KERNEL(matmul_rows_wide_early_cl, true)

// matmul_rows_wideT (T = 2, 3, 4): matmul_rows_wide for up to 5·T rows
// (batched decode, a verify of more than four drafts, several requests'
// verifies in one step), rows 5s … 5s + 4 in tile s: each weight chunk is
// loaded once for every tile, where matmul_mma1n loaded it once for 16 rows
// but each row's three parts needed three mmas and six activation chunks.
// Each row's tile rows accumulate the mmas a lone tile's would, in the same
// order, so the bits are matmul_rows'.
#define TILES_KERNEL(name, T, G, MINB, EARLY)                                                                  \
    extern "C" __global__ void __launch_bounds__(256, MINB) name(const unsigned short* xs, const unsigned short* w, \
                                    float* y, float* part, int* counters, int M, int N, int K, int kchunk,     \
                                    int aligned, int b1, int b2) {                                             \
        if (!EARLY) pdl_start();                                                                               \
        matmul_rows_wide<G, 2, true, EARLY, false, T>(xs, w, part, M, N, K, kchunk, aligned, b1, b2);          \
        finish_group<64 * G>(y, part, counters, blockIdx.x, M, N, 0, M, b1, b2);                               \
    }
#define TILES_CL_KERNEL(name, T, G, MINB, EARLY)                                                                 \
    extern "C" __global__ void __launch_bounds__(256, MINB) name(const unsigned short* xs, const unsigned short* w, \
            float* y, float* part, int* counters, int M, int N, int K, int kchunk, int aligned, int b1, int b2) {  \
        __shared__ float ct[5 * T * 64 * G];                                                                     \
        if (!EARLY) pdl_start();                                                                                 \
        matmul_rows_wide<G, 2, true, EARLY, true, T>(xs, w, ct, M, N, K, kchunk, aligned, b1, b2);               \
        cluster_finish<64 * G>(y, ct, M, N, b1, b2);                                                             \
    }
// Three and four tiles take two column groups a warp at 128 registers
// (two blocks a multiprocessor); two tiles take two groups at 80 registers
// (matmul_rows_wide2) or one at 64 (matmul_rows_wide2n, 64 columns a
// block), which tilesFor gives the large weights. On the H200, two tiles
// with one group streamed the 31B MLP at 8 rows in 113 µs against 124
// with two, but the E2B products in 17.6-18.1 µs against 15.9; four tiles
// with one group at 80 registers were two to three times slower at 16
// rows (spills).
#define TILES_KERNELS(name, T, G, MINB)                        \
    TILES_KERNEL(name, T, G, MINB, false)                      \
    TILES_KERNEL(name##_early, T, G, MINB, true)               \
    TILES_CL_KERNEL(name##_cl, T, G, MINB, false)              \
    TILES_CL_KERNEL(name##_early_cl, T, G, MINB, true)
TILES_KERNELS(matmul_rows_wide2, 2, 2, 3)
TILES_KERNELS(matmul_rows_wide2n, 2, 1, 4)
TILES_KERNELS(matmul_rows_wide3, 3, 2, 2)
TILES_KERNELS(matmul_rows_wide4, 4, 2, 2)

// matmul_rows_glu: y = GeluTanh(x·gateᵀ)·(x·upᵀ), [M, I], for M ≤ 5 rows
// and a stacked weight w = gate|up ([2I, K]), with y's split emitted to
// parts ([3][M·I], when given): gelu_mul of the stacked product in the
// product's own kernel. A warp's two column groups are gate columns
// n0..n0+7 and the same up columns I+n0.., so it holds both of an output's
// sums. Each column accumulates the mmas the rows kernels would for it, in
// K chunks of kchunk (the stacked product's split, splitK(2I, K)), and the
// splits are added by split_sum in split order, so the bits are those of
// the stacked product followed by gelu_mul (TANDEM_CUDA_GLU=1). Grid
// (ceil(I/64), splits); part holds [splits][M][2I] partials.
//
// matmul_rows_glu_by is y = GeluTanh(x·wᵀ)·up for w [I, K] and a given up
// ([M, I]): one column group a warp, K chunks of splitK(I, K), partials
// [splits][M][I] (a per-layer input's gate, E2B).
__device__ __forceinline__ void glu_store(float* y, unsigned short* parts, int M, int I, int r, int n, float g,
                                          float u) {
    const float v = __fmul_rn(gelu(g), u);
    y[(size_t)r * I + n] = v;
    emit(parts, (size_t)M * I, (size_t)r * I + n, v);
}

// With Cl (the _cl kernels) a split's partials stay in the block's shared
// memory, ct ([M][G·64]: gate columns, then up's), and the cluster finish
// sums them. With Early (the _early kernels) the first K step's weights
// are loaded before the wait for the kernel before, as matmul_rows does.
template <bool By, bool Cl = false, bool Early = false>
__device__ __forceinline__ void rows_glu(const unsigned short* xs, const unsigned short* w, float* y, float* part,
                                         int* counters, int M, int I, int K, int kchunk, int aligned,
                                         unsigned short* parts, const float* up, float* ct = 0) {
    constexpr int G = By ? 1 : 2; // column groups a warp: gate (and up)
    __shared__ float tile[8][G][16][9];
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3, wid = threadIdx.x >> 5;
    const int n0 = (blockIdx.x * 8 + wid) * 8, N = G * I; // N: a partial row's width
    const bool split = gridDim.y > 1;
    if (n0 < I) {
        const int k0 = blockIdx.y * kchunk, k1 = min(K, k0 + kchunk);
        const bool al = aligned != 0, ok = n0 + g < I;
        bool oks[G];
        const unsigned short* wr[G];
#pragma unroll
        for (int i = 0; i < G; i++) {
            oks[i] = ok;
            wr[i] = w + (size_t)(ok ? i * I + n0 + g : 0) * K;
        }
        const rows_act x = rows_act_of(xs, M, K, g);
        float c[G][4];
#pragma unroll
        for (int i = 0; i < G; i++) c[i][0] = c[i][1] = c[i][2] = c[i][3] = 0.0f;
        int kb = k0;
        if (Early) {
            uint4 q[G][2];
#pragma unroll
            for (int i = 0; i < G; i++) wload_step<2, true>(q[i], wr[i], kb, t, k1, oks[i], al);
            pdl_start();
            wide_mma<G, 2>(c, q, x, kb, k1, t, al);
            kb += 64;
        }
        for (; kb < k1; kb += 64) {
            uint4 q[G][2];
#pragma unroll
            for (int i = 0; i < G; i++) wload_step<2, true>(q[i], wr[i], kb, t, k1, oks[i], al);
            wide_mma<G, 2>(c, q, x, kb, k1, t, al);
        }
        // Each output is its row's three tile rows summed (lo + mid) + hi,
        // as rows_store does.
#pragma unroll
        for (int i = 0; i < G; i++) {
            float* tl = &tile[wid][i][0][0];
            tl[g * 9 + 2 * t] = c[i][0];
            tl[g * 9 + 2 * t + 1] = c[i][1];
            tl[(g + 8) * 9 + 2 * t] = c[i][2];
            tl[(g + 8) * 9 + 2 * t + 1] = c[i][3];
        }
        __syncwarp();
        float* o = part + (size_t)blockIdx.y * M * N;
        for (int e = lane; e < 8 * M; e += 32) {
            const int r = e >> 3, j = e & 7;
            if (n0 + j >= I) continue;
            float s[G];
#pragma unroll
            for (int i = 0; i < G; i++) {
                const float* tl = &tile[wid][i][0][0];
                s[i] = __fadd_rn(__fadd_rn(tl[(3 * r + 2) * 9 + j], tl[(3 * r + 1) * 9 + j]), tl[(3 * r) * 9 + j]);
            }
            if (split && Cl) {
#pragma unroll
                for (int i = 0; i < G; i++) ct[(r * G + i) * 64 + n0 - blockIdx.x * 64 + j] = s[i];
            } else if (split) {
#pragma unroll
                for (int i = 0; i < G; i++) o[(size_t)r * N + i * I + n0 + j] = s[i];
            } else {
                glu_store(y, parts, M, I, r, n0 + j, s[0], By ? up[(size_t)r * I + n0 + j] : s[G - 1]);
            }
        }
    } else if (Early) {
        pdl_start();
    }
    const int c0 = blockIdx.x * 64;
    if (split && Cl) {
        cluster_sync(); // every split's tile is written
        const int S = gridDim.y;
        for (int e = blockIdx.y * blockDim.x + threadIdx.x; e < M * 64; e += S * blockDim.x) {
            const int r = e / 64, n = c0 + e % 64;
            if (n >= I) continue;
            const float* p = ct + r * G * 64 + e % 64;
            glu_store(y, parts, M, I, r, n, cluster_sum(p, S), By ? up[(size_t)r * I + n] : cluster_sum(p + 64, S));
        }
        cluster_sync(); // no block leaves while another reads its tile
        return;
    }
    if (!split || !last_split(counters, blockIdx.x)) return;
    const size_t MN = (size_t)M * N;
    for (int e = threadIdx.x; e < M * 64; e += blockDim.x) {
        const int r = e / 64, n = c0 + e % 64;
        if (n >= I) continue;
        const size_t i = (size_t)r * N + n;
        float g, u; // the gate's and up's sums at once (split_sum2)
        split_sum2(part, MN, i, true, i + I, !By, gridDim.y, g, u);
        glu_store(y, parts, M, I, r, n, g, By ? up[(size_t)r * I + n] : u);
    }
    if (threadIdx.x == 0) counters[blockIdx.x] = 0;
}

// The GLU kernels: matmul_rows_glu (By: matmul_rows_glu_by, which reads up;
// the others take it as a null pointer), with the cluster finish (_cl)
// and early weights (_early) or not.
#define GLU_KERNEL(name, BY, CL, EARLY)                                                                          \
    extern "C" __global__ void __launch_bounds__(256, 4) name(const unsigned short* xs, const unsigned short* w,   \
            float* y, float* part, int* counters, int M, int I, int K, int kchunk, int aligned,                    \
            unsigned short* parts, const float* up) {                                                             \
        __shared__ float ct[CL ? CL_ROWS * (BY ? 1 : 2) * 64 : 1];                                                \
        if (!EARLY) pdl_start();                                                                                  \
        rows_glu<BY, CL, EARLY>(xs, w, y, part, counters, M, I, K, kchunk, aligned, parts, up, ct);               \
    }
GLU_KERNEL(matmul_rows_glu, false, false, false)
GLU_KERNEL(matmul_rows_glu_by, true, false, false)
GLU_KERNEL(matmul_rows_glu_cl, false, true, false)
GLU_KERNEL(matmul_rows_glu_by_cl, true, true, false)
GLU_KERNEL(matmul_rows_glu_early, false, false, true)
GLU_KERNEL(matmul_rows_glu_by_early, true, false, true)
GLU_KERNEL(matmul_rows_glu_early_cl, false, true, true)
GLU_KERNEL(matmul_rows_glu_by_early_cl, true, true, true)

// matmul_rows_at: matmul_rows on the weights of expert sel[slot] of a
// stacked [E][…] weight, w + sel[slot]·stride elements: a mixture-of-experts
// layer's experts chosen on the device. The same arithmetic as matmul_rows
// on that expert's rows.
extern "C" __global__ void __launch_bounds__(256, 4) matmul_rows_at(const unsigned short* xs, const unsigned short* w,
        float* y, float* part, int* counters, int M, int N, int K, int kchunk, int aligned, const int* sel, int slot,
        size_t stride) {
    pdl_start(); // sel is the previous kernel's output
    matmul_rows<4, true, false>(xs, w + (size_t)sel[slot] * stride, part, M, N, K, kchunk, aligned);
    finish_splits(y, part, counters, M, N);
}

// matmul_rows_tokens: matmul_rows_at for many rows at once. Block z of the
// grid's third dimension computes row z of y ([gridDim.z][N]) from row
// z / xdiv of the M in xs, with expert sel[z·step + off]: a pass's slot j of
// every token (step k, off j, xdiv 1), or every token's every slot (step 1,
// off 0, xdiv k for the token's input, 1 for one input a slot). Each row is
// the bits of matmul_rows_at on it alone. K-split counters are per row and
// column group.
extern "C" __global__ void __launch_bounds__(256, 4) matmul_rows_tokens(const unsigned short* xs, const unsigned short* w,
        float* y, float* part, int* counters, int M, int N, int K, int kchunk, int aligned, const int* sel, int step,
        int off, size_t stride, int xdiv) {
    pdl_start();
    const int z = blockIdx.z;
    matmul_rows<4, true, true>(xs, w + (size_t)sel[z * step + off] * stride, part, M, N, K, kchunk, aligned, xdiv);
    finish_group(y, part, counters, z * gridDim.x + blockIdx.x, gridDim.z, N, z, z + 1);
}

// ---------------------------------------------------------------------------
// matmul_tiled: the same arithmetic for M > 16 (prefill, long verifies) with
// shared-memory tiles. A block computes 64 rows × 64 columns of one K split:
// every 32-wide K block, the block copies the three activation parts' 64 × 32
// tile and the weights' 64 × 32 tile into shared memory (cp.async, double
// buffered), and each of the 8 warps runs its 32 × 16 sub-tile's mmas from
// there. Each output's accumulation is matmul_mma's: per part, per K block in
// order, the first mma on elements 0-3 of each lane's 8-element chunk, then
// 4-7; the parts summed (lo + mid) + hi; the K split from the weight's shape.
// Activations and weights are read once per 64 columns and 64 rows instead
// of once per warp. Needs K % 8 == 0 and 16-byte aligned weights. (128-column
// tiles with 32 × 32 warp tiles, one block per multiprocessor for their 96
// accumulators a thread, ran 5-25% slower on the H200.)
#define TBM 64
#define TBN 64

// rows_in_order and rows_listed map a tile's row r to the activation row
// it takes (and the output row it writes), −1 past the rows: rows 0 … n − 1
// in order (matmul_tiled), or the n rows listed at at, divided by div
// (matmul_grouped: a choice's row n·k + j, or its token's n).
struct rows_in_order {
    int n;
    __device__ __forceinline__ int operator()(int r) const { return r < n ? r : -1; }
};
struct rows_listed {
    const int* at;
    int n, div;
    __device__ __forceinline__ int operator()(int r) const { return r < n ? at[r] / div : -1; }
};

// tiled_range runs the block's 64 × 64 tile of the product over K range
// [k0, k1) and returns each output's three parts summed (lo + mid) + hi in
// c: what matmul_tiled writes as a split's partial. Tile row r is
// activation row rows(m0 + r) of the M in xs. as and bs are the block's
// double-buffered shared tiles; every thread of the block calls it.
template <int P, class Rows>
__device__ __forceinline__ void tiled_range(const unsigned short* __restrict__ xs,
                                            const unsigned short* __restrict__ w, int M, int N, int K, int k0, int k1,
                                            int n0, int m0, unsigned short (*as)[P][TBM][32],
                                            unsigned short (*bs)[TBN][32], float c[2][2][4], Rows rows) {
    const int tid = threadIdx.x, lane = tid & 31, g = lane >> 2, t = lane & 3, wid = tid >> 5;
    const int wm = wid >> 2, wn = wid & 3; // warp sub-tile: rows wm·32.., columns wn·16..
    const size_t MK = (size_t)M * K;
    // Copies the K block at kb into buffer s: 256 activation chunks a part
    // (64 rows × 4) and 256 weight chunks, 16 bytes each.
    auto load = [&](int s, int kb) {
#pragma unroll
        for (int i = 0; i < P; i++) {
            const int c = tid + 256 * i, p = c >> 8, row = (c & 255) >> 2, kc = (c & 3) * 8, xr = rows(m0 + row);
            const bool ok = xr >= 0 && kb + kc < k1;
            cp16(&as[s][p][row][kc], ok ? xs + p * MK + (size_t)xr * K + kb + kc : xs, ok);
        }
        const int col = tid >> 2, kc = (tid & 3) * 8;
        const bool ok = n0 + col < N && kb + kc < k1;
        cp16(&bs[s][col][kc], ok ? w + (size_t)(n0 + col) * K + kb + kc : w, ok);
        asm volatile("cp.async.commit_group;\n" ::: "memory");
    };
    float acc[P][2][2][4];
#pragma unroll
    for (int p = 0; p < P; p++)
#pragma unroll
        for (int i = 0; i < 2; i++)
#pragma unroll
            for (int j = 0; j < 2; j++) acc[p][i][j][0] = acc[p][i][j][1] = acc[p][i][j][2] = acc[p][i][j][3] = 0.0f;
    const int nk = (k1 - k0 + 31) / 32;
    if (nk > 0) load(0, k0);
    for (int i = 0; i < nk; i++) {
        const int s = i & 1;
        if (i + 1 < nk) {
            load(s ^ 1, k0 + 32 * (i + 1));
            asm volatile("cp.async.wait_group 1;\n" ::: "memory");
        } else {
            asm volatile("cp.async.wait_group 0;\n" ::: "memory");
        }
        __syncthreads();
        uint4 q[2];
#pragma unroll
        for (int nt = 0; nt < 2; nt++) q[nt] = *(const uint4*)&bs[s][wn * 16 + nt * 8 + g][8 * t];
#pragma unroll
        for (int p = 0; p < P; p++) {
#pragma unroll
            for (int mt = 0; mt < 2; mt++) {
                const int r = wm * 32 + mt * 16 + g;
                const uint4 a0 = *(const uint4*)&as[s][p][r][8 * t];
                const uint4 a1 = *(const uint4*)&as[s][p][r + 8][8 * t];
#pragma unroll
                for (int nt = 0; nt < 2; nt++) mma_part(acc[p][mt][nt], q[nt], a0, a1);
            }
        }
        __syncthreads(); // the next iteration's copy overwrites this buffer
    }
#pragma unroll
    for (int mt = 0; mt < 2; mt++)
#pragma unroll
        for (int nt = 0; nt < 2; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                // One part: the sum three parts make when mid and lo are
                // zero, (0 + 0) + hi, so a −0 comes out as +0 there too.
                const float lo = P == 1 ? 0.0f : acc[P - 1][mt][nt][e], mid = P == 1 ? 0.0f : acc[P / 2][mt][nt][e];
                c[mt][nt][e] = __fadd_rn(__fadd_rn(lo, mid), acc[0][mt][nt][e]);
            }
}

// store_tile writes a thread's outputs c of the block's tile to o ([rows,
// N]): tile row r to row rows(m0 + r).
template <class Rows>
__device__ __forceinline__ void store_tile(float* o, const float c[2][2][4], int N, int n0, int m0, Rows rows) {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3, wid = threadIdx.x >> 5;
    const int wm = wid >> 2, wn = wid & 3;
#pragma unroll
    for (int mt = 0; mt < 2; mt++)
#pragma unroll
        for (int nt = 0; nt < 2; nt++) {
            const int i0 = m0 + wm * 32 + mt * 16 + g, r0 = rows(i0), r1 = rows(i0 + 8), n = n0 + wn * 16 + nt * 8 + 2 * t;
            if (r0 >= 0) {
                if (n < N) o[(size_t)r0 * N + n] = c[mt][nt][0];
                if (n + 1 < N) o[(size_t)r0 * N + n + 1] = c[mt][nt][1];
            }
            if (r1 >= 0) {
                if (n < N) o[(size_t)r1 * N + n] = c[mt][nt][2];
                if (n + 1 < N) o[(size_t)r1 * N + n + 1] = c[mt][nt][3];
            }
        }
}

// tiled_range_wide is tiled_range for a BM × BN tile of the product over K range
// [k0, k1) and returns each output's P parts summed (lo + mid) + hi in c
// (with one part, (0 + 0) + hi): what matmul_tiled writes as a split's
// partial. Its 8 warps each take a WM × WN sub-tile (2 × 4 of them). as and
// bs are the block's double-buffered shared tiles; every thread of the
// block calls it. Each output's accumulation does not depend on the tile
// shape: per K block in order, per part, one mma_part.
template <int P, int BM, int BN, int WM, int WN>
__device__ __forceinline__ void tiled_range_wide(const unsigned short* __restrict__ xs,
                                            const unsigned short* __restrict__ w, int M, int N, int K, int k0, int k1,
                                            int n0, int m0, unsigned short (*as)[P][BM][32],
                                            unsigned short (*bs)[BN][32], float c[WM / 16][WN / 8][4]) {
    static_assert((BM / WM) * (BN / WN) == 8, "8 warps a block");
    constexpr int MT = WM / 16, NT = WN / 8;
    const int tid = threadIdx.x, lane = tid & 31, g = lane >> 2, t = lane & 3, wid = tid >> 5;
    const int wm = wid / (BN / WN), wn = wid % (BN / WN); // warp sub-tile: rows wm·WM.., columns wn·WN..
    const size_t MK = (size_t)M * K;
    // Copies the K block at kb into buffer s: BM × 4 activation chunks a
    // part and BN × 4 weight chunks, 16 bytes each.
    auto load = [&](int s, int kb) {
#pragma unroll
        for (int i = 0; i < P * BM / 64; i++) {
            const int c = tid + 256 * i, p = c / (4 * BM), row = (c % (4 * BM)) >> 2, kc = (c & 3) * 8;
            const bool ok = m0 + row < M && kb + kc < k1;
            cp16(&as[s][p][row][kc], ok ? xs + p * MK + (size_t)(m0 + row) * K + kb + kc : xs, ok);
        }
#pragma unroll
        for (int i = 0; i < BN / 64; i++) {
            const int c = tid + 256 * i, col = c >> 2, kc = (c & 3) * 8;
            const bool ok = n0 + col < N && kb + kc < k1;
            cp16(&bs[s][col][kc], ok ? w + (size_t)(n0 + col) * K + kb + kc : w, ok);
        }
        asm volatile("cp.async.commit_group;\n" ::: "memory");
    };
    float acc[P][MT][NT][4];
#pragma unroll
    for (int p = 0; p < P; p++)
#pragma unroll
        for (int i = 0; i < MT; i++)
#pragma unroll
            for (int j = 0; j < NT; j++) acc[p][i][j][0] = acc[p][i][j][1] = acc[p][i][j][2] = acc[p][i][j][3] = 0.0f;
    const int nk = (k1 - k0 + 31) / 32;
    if (nk > 0) load(0, k0);
    for (int i = 0; i < nk; i++) {
        const int s = i & 1;
        if (i + 1 < nk) {
            load(s ^ 1, k0 + 32 * (i + 1));
            asm volatile("cp.async.wait_group 1;\n" ::: "memory");
        } else {
            asm volatile("cp.async.wait_group 0;\n" ::: "memory");
        }
        __syncthreads();
        uint4 q[NT];
#pragma unroll
        for (int nt = 0; nt < NT; nt++) q[nt] = *(const uint4*)&bs[s][wn * WN + nt * 8 + g][8 * t];
#pragma unroll
        for (int p = 0; p < P; p++) {
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                const int r = wm * WM + mt * 16 + g;
                const uint4 a0 = *(const uint4*)&as[s][p][r][8 * t];
                const uint4 a1 = *(const uint4*)&as[s][p][r + 8][8 * t];
#pragma unroll
                for (int nt = 0; nt < NT; nt++) mma_part(acc[p][mt][nt], q[nt], a0, a1);
            }
        }
        __syncthreads(); // the next iteration's copy overwrites this buffer
    }
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                // One part: the sum three parts make when mid and lo are
                // zero, (0 + 0) + hi, so a −0 comes out as +0 there too.
                const float lo = P == 1 ? 0.0f : acc[P - 1][mt][nt][e], mid = P == 1 ? 0.0f : acc[P / 2][mt][nt][e];
                c[mt][nt][e] = __fadd_rn(__fadd_rn(lo, mid), acc[0][mt][nt][e]);
            }
}

// store_tile_wide is store_tile for tiled_range_wide's tiles.
template <int BN, int WM, int WN>
__device__ __forceinline__ void store_tile_wide(float* o, const float c[WM / 16][WN / 8][4], int M, int N, int n0, int m0) {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3, wid = threadIdx.x >> 5;
    const int wm = wid / (BN / WN), wn = wid % (BN / WN);
#pragma unroll
    for (int mt = 0; mt < WM / 16; mt++)
#pragma unroll
        for (int nt = 0; nt < WN / 8; nt++) {
            const int r0 = m0 + wm * WM + mt * 16 + g, r1 = r0 + 8, n = n0 + wn * WN + nt * 8 + 2 * t;
            if (r0 < M) {
                if (n < N) o[(size_t)r0 * N + n] = c[mt][nt][0];
                if (n + 1 < N) o[(size_t)r0 * N + n + 1] = c[mt][nt][1];
            }
            if (r1 < M) {
                if (n < N) o[(size_t)r1 * N + n] = c[mt][nt][2];
                if (n + 1 < N) o[(size_t)r1 * N + n + 1] = c[mt][nt][3];
            }
        }
}
// (matmul_tiled and matmul_tiled1 keep tiled_range: written as
// tiled_range_wide with their shape, matmul_tiled's 31B prefill products
// took 6.2 s against 3.9 on the H200, twenty-first session.)

extern "C" __global__ void matmul_tiled(const unsigned short* __restrict__ xs, const unsigned short* __restrict__ w,
                                        float* y, float* part, int* counters, int M, int N, int K, int kchunk) {
    pdl_start();
    __shared__ __align__(16) unsigned short as[2][3][TBM][32];
    __shared__ __align__(16) unsigned short bs[2][TBN][32];
    const int n0 = blockIdx.x * TBN, m0 = blockIdx.z * TBM;
    const int k0 = blockIdx.y * kchunk, k1 = min(K, k0 + kchunk);
    float c[2][2][4];
    tiled_range<3>(xs, w, M, N, K, k0, k1, n0, m0, as, bs, c, rows_in_order{M});
    store_tile(gridDim.y == 1 ? y : part + (size_t)blockIdx.y * M * N, c, N, n0, m0, rows_in_order{M});
    finish_group(y, part, counters, blockIdx.z * gridDim.x + blockIdx.x, M, N, m0, min(M, m0 + TBM));
}

// matmul_tiled1: matmul_tiled on the activations' first part alone, x
// rounded to bf16 (a prompt pass at compute.PrecisionBF16): a third of the
// mmas and of the activation traffic. Its bits are matmul_tiled's (and so
// every product kernel's) on activations already rounded to bf16, whose
// mid and lo parts are zero; any M, since a row's sums do not depend on it.
extern "C" __global__ void matmul_tiled1(const unsigned short* __restrict__ xs, const unsigned short* __restrict__ w,
                                         float* y, float* part, int* counters, int M, int N, int K, int kchunk) {
    pdl_start();
    __shared__ __align__(16) unsigned short as[2][1][TBM][32];
    __shared__ __align__(16) unsigned short bs[2][TBN][32];
    const int n0 = blockIdx.x * TBN, m0 = blockIdx.z * TBM;
    const int k0 = blockIdx.y * kchunk, k1 = min(K, k0 + kchunk);
    float c[2][2][4];
    tiled_range<1>(xs, w, M, N, K, k0, k1, n0, m0, as, bs, c, rows_in_order{M});
    store_tile(gridDim.y == 1 ? y : part + (size_t)blockIdx.y * M * N, c, N, n0, m0, rows_in_order{M});
    finish_group(y, part, counters, blockIdx.z * gridDim.x + blockIdx.x, M, N, m0, min(M, m0 + TBM));
}

// matmul_grouped (P = 3) and matmul_grouped1 (P = 1, a bf16 pass's): a
// pass's expert products in one launch (compute.ExpertGrouper), grouped by
// expert as moe_group lists them in groups: starts[E + 1], tile starts[E +
// 1], then the choices' rows (n·k + j), expert e's at starts[e] …
// starts[e+1] − 1. Choice row i takes activation row i / xdiv of xs (M
// rows: a token's, or the choice's own) to output row i of y, with expert
// e's weights at w + e·stride. Block (x, t) takes columns [64x, 64x + 64)
// of tile t, 64 of its expert's choices from the tile's first; the grid
// holds the most tiles a pass can have, and blocks past the pass's exit.
// Each K split's partial is matmul_tiled's (matmul_tiled1's), and the block
// adds the splits in order from the first, as split_sum does: each row gets
// the bits the product kernels give it alone, and a pass's 128 experts
// take one launch, not four each.
template <int P>
__device__ __forceinline__ void grouped(const unsigned short* __restrict__ xs, const unsigned short* __restrict__ w,
                                        float* y, const int* groups, int E, int xdiv, int M, int N, int K, int kchunk,
                                        int splits, size_t stride, unsigned short (*as)[P][TBM][32],
                                        unsigned short (*bs)[TBN][32]) {
    const int *starts = groups, *tstarts = groups + E + 1, *rows = groups + 2 * (E + 1);
    const int ty = blockIdx.y;
    if (ty >= tstarts[E]) return; // past the pass's tiles
    int e = 0;                    // the tile's expert: the last whose tiles start at or before it
    for (int hi = E - 1; e < hi;) {
        const int mid = (e + hi + 1) >> 1;
        if (tstarts[mid] <= ty)
            e = mid;
        else
            hi = mid - 1;
    }
    const int m0 = (ty - tstarts[e]) * TBM, n0 = blockIdx.x * TBN, base = starts[e], cnt = starts[e + 1] - base;
    const unsigned short* we = w + (size_t)e * stride;
    float acc[2][2][4];
    for (int s = 0; s < splits; s++) {
        const int k0 = s * kchunk, k1 = min(K, k0 + kchunk);
        float c[2][2][4];
        tiled_range<P>(xs, we, M, N, K, k0, k1, n0, m0, as, bs, c, rows_listed{rows + base, cnt, xdiv});
#pragma unroll
        for (int i = 0; i < 2; i++)
#pragma unroll
            for (int j = 0; j < 2; j++)
#pragma unroll
                for (int q = 0; q < 4; q++) acc[i][j][q] = s == 0 ? c[i][j][q] : __fadd_rn(acc[i][j][q], c[i][j][q]);
    }
    store_tile(y, acc, N, n0, m0, rows_listed{rows + base, cnt, 1});
}

#define GROUPED_KERNEL(name, P)                                                                                  \
    extern "C" __global__ void name(const unsigned short* __restrict__ xs, const unsigned short* __restrict__ w,  \
                                    float* y, const int* groups, int E, int xdiv, int M, int N, int K, int kchunk, \
                                    int splits, size_t stride) {                                                 \
        pdl_start();                                                                                             \
        __shared__ __align__(16) unsigned short as[2][P][TBM][32];                                               \
        __shared__ __align__(16) unsigned short bs[2][TBN][32];                                                  \
        grouped<P>(xs, w, y, groups, E, xdiv, M, N, K, kchunk, splits, stride, as, bs);                          \
    }
GROUPED_KERNEL(matmul_grouped, 3)
GROUPED_KERNEL(matmul_grouped1, 1)

// matmul_tiled1w: matmul_tiled1 in 128 × 128 tiles, each warp 64 × 32 (its
// one part leaves the registers for them): each shared tile feeds twice the
// mmas. The same bits (each output's accumulation is the same), for prompt
// chunks of more than 64 rows.
extern "C" __global__ void __launch_bounds__(256, 2) matmul_tiled1w(const unsigned short* __restrict__ xs,
        const unsigned short* __restrict__ w, float* y, float* part, int* counters, int M, int N, int K, int kchunk) {
    pdl_start();
    __shared__ __align__(16) unsigned short as[2][1][128][32];
    __shared__ __align__(16) unsigned short bs[2][128][32];
    const int n0 = blockIdx.x * 128, m0 = blockIdx.z * 128;
    const int k0 = blockIdx.y * kchunk, k1 = min(K, k0 + kchunk);
    float c[4][4][4];
    tiled_range_wide<1, 128, 128, 64, 32>(xs, w, M, N, K, k0, k1, n0, m0, as, bs, c);
    store_tile_wide<128, 64, 32>(gridDim.y == 1 ? y : part + (size_t)blockIdx.y * M * N, c, M, N, n0, m0);
    finish_group<128>(y, part, counters, blockIdx.z * gridDim.x + blockIdx.x, M, N, m0, min(M, m0 + 128));
}

// sum_splits: y[i] = Σ_s part[s][i] in split order. It keeps its own loop
// rather than split_sum's: it is the order TestSplitFinishMatchesSumSplits
// holds every kernel's finish to.
extern "C" __global__ void sum_splits(float* y, const float* part, int n, int splits) {
    pdl_start();
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (size_t)n; i += (size_t)gridDim.x * blockDim.x) {
        float s = part[i];
        for (int j = 1; j < splits; j++) s = __fadd_rn(s, part[(size_t)j * n + i]);
        y[i] = s;
    }
}
