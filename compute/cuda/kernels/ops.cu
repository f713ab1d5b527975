// The CUDA backend's op set besides matmul. Every kernel computes each
// output with a fixed sequence of floating-point operations that depends
// only on that output's inputs, never on how many rows or queries share the
// launch: results are batch-invariant bit for bit, as on the CPU backend.
// Rounded products and sums are written __fmul_rn / __fadd_rn so the
// compiler cannot contract them into FMAs in some places and not others.
// Transcendentals are evaluated in double and rounded once, as the CPU
// backend does, so most results equal the CPU's bits.

#define DT_F32 0
#define DT_BF16 1
#define DT_F16 2

__device__ __forceinline__ float f16_to_f32(unsigned short h) {
    unsigned s = ((unsigned)h & 0x8000u) << 16, e = ((unsigned)h >> 10) & 0x1fu, m = (unsigned)h & 0x3ffu;
    if (e == 0) {
        float f = (float)m * 5.9604644775390625e-08f; // m · 2^-24, exact
        return s ? -f : f;
    }
    if (e == 31) return __uint_as_float(s | 0x7f800000u | (m << 13));
    return __uint_as_float(s | ((e + 112u) << 23) | (m << 13));
}

// load reads element i of a float tensor of dtype dt, widened exactly.
__device__ __forceinline__ float load(const void* p, int dt, size_t i) {
    if (dt == DT_F32) return ((const float*)p)[i];
    unsigned short h = ((const unsigned short*)p)[i];
    return dt == DT_BF16 ? __uint_as_float(((unsigned)h) << 16) : f16_to_f32(h);
}

// split_bf16 writes the three bf16 parts of x ([3][n]: hi = bf16(x),
// mid = bf16(x − hi), lo = bf16(x − hi − mid); the subtractions are exact)
// for the tensor-core matmul (matmul.cu).
extern "C" __global__ void split_bf16(unsigned short* parts, const float* x, int n) {
    pdl_start();
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (size_t)n; i += (size_t)gridDim.x * blockDim.x)
        emit(parts, n, i, x[i]);
}

__device__ __forceinline__ unsigned short f32_to_f16(float f) {
    unsigned u = __float_as_uint(f), s = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (unsigned short)(s | 0x7e00u | ((a >> 13) & 0x3ffu));
    if (a >= 0x477ff000u) return (unsigned short)(s | 0x7c00u);    // rounds to infinity
    if (a < 0x38800000u) {                                          // f16 subnormal or zero
        unsigned m = __float2uint_rn(__uint_as_float(a) * 16777216.0f); // exact scaling by 2^24
        return (unsigned short)(s | m);
    }
    unsigned r = a + 0xfffu + ((a >> 13) & 1u);
    return (unsigned short)(s | ((r - 0x38000000u) >> 13));
}

// convert copies n elements from src (dtype sd) to dst (dtype dd). Equal
// dtypes copy bits; F32 → BF16/F16 rounds; BF16/F16 → F32 widens.
extern "C" __global__ void convert(void* dst, int dd, const void* src, int sd, int n) {
    pdl_start();
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (size_t)n; i += (size_t)gridDim.x * blockDim.x) {
        if (dd == sd) {
            if (dd == DT_F32) ((unsigned*)dst)[i] = ((const unsigned*)src)[i];
            else ((unsigned short*)dst)[i] = ((const unsigned short*)src)[i];
        } else if (dd == DT_F32) {
            ((float*)dst)[i] = load(src, sd, i);
        } else {
            float v = ((const float*)src)[i];
            ((unsigned short*)dst)[i] = dd == DT_BF16 ? f32_to_bf16(v) : f32_to_f16(v);
        }
    }
}

// copy_words copies n 32-bit words. Small device-to-device copies inside a
// step (a layer's KV write) run as this kernel: a copy-engine node in a
// CUDA graph left the SMs idle around it (about 14 µs a copy on the H200).
extern "C" __global__ void copy_words(unsigned* dst, const unsigned* src, int n) {
    pdl_start();
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) dst[i] = src[i];
}

// split_cols: src's rows of W = n0 + n1 + n2 floats into d0 [M, n0],
// d1 [M, n1] and d2 [M, n2] (n2 may be 0): the products of a stacked matmul
// (MatMuls) as tensors of their own, in one launch.
extern "C" __global__ void split_cols(float* d0, float* d1, float* d2, const float* src, int M, int n0, int n1, int n2) {
    pdl_start();
    const int W = n0 + n1 + n2;
    const size_t total = (size_t)M * W;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        const size_t r = i / W;
        const int c = (int)(i % W);
        if (c < n0) d0[r * n0 + c] = src[i];
        else if (c < n0 + n1) d1[r * n1 + (c - n0)] = src[i];
        else d2[r * n2 + (c - n0 - n1)] = src[i];
    }
}

// moe_route: each token's top-k router output (vals, idx: k a token, TopK's
// order) to its experts in ascending id and their scales
// vals[j] / Σ vals · per_expert[idx[j]] (float32, the sum in j order): the
// host's arithmetic in model/gemma4's experts. One block a token, one
// thread of it; k is small.
extern "C" __global__ void moe_route(int* experts, float* scales, const float* vals, const int* idx, const void* pe,
                                     int pet, int k) {
    pdl_start();
    if (threadIdx.x != 0) return;
    const size_t row = (size_t)blockIdx.x * k; // one block a token
    experts += row, scales += row, vals += row, idx += row;
    float sum = 0.0f;
    for (int j = 0; j < k; j++) sum = __fadd_rn(sum, vals[j]);
    for (int j = 0; j < k; j++) { // insertion by id
        const int e = idx[j];
        const float s = __fmul_rn(__fdiv_rn(vals[j], sum), load(pe, pet, e));
        int i = j;
        for (; i > 0 && experts[i - 1] > e; i--) {
            experts[i] = experts[i - 1];
            scales[i] = scales[i - 1];
        }
        experts[i] = e;
        scales[i] = s;
    }
}

#define DT_I32 3 // gather only: an index table, copied bit for bit

// gather: out[i] = table[ids[i]] widened; grid.x = len(ids).
extern "C" __global__ void gather(float* out, const void* table, int dt, const int* ids, int D) {
    pdl_start();
    const size_t row = (size_t)ids[blockIdx.x] * D;
    for (int j = threadIdx.x; j < D; j += blockDim.x) {
        if (dt == DT_I32)
            ((int*)out)[(size_t)blockIdx.x * D + j] = ((const int*)table)[row + j];
        else
            out[(size_t)blockIdx.x * D + j] = load(table, dt, row + j);
    }
}

// add_rows: dst[rows[i]] += scale[i·ss]·src[i] for i in order, one thread
// per column, so repeated rows accumulate in the same order as on the CPU.
extern "C" __global__ void add_rows(float* dst, const float* src, const int* rows, const float* scale, int ss, int n,
                                    int D) {
    pdl_start();
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= D) return;
    for (int i = 0; i < n; i++) {
        float* d = dst + (size_t)rows[i] * D + j;
        const float s = src[(size_t)i * D + j];
        *d = __fadd_rn(*d, scale ? __fmul_rn(scale[(size_t)i * ss], s) : s);
    }
}

#define MOE_GROUP_MAX 1024 // the most experts moe_group takes (ExpertGrouper's moeGroupMax)

// moe_group lists a pass's nk expert choices (experts: [N, k], each row
// ascending) by expert, one block: groups gets starts[E + 1] (expert e's
// choices at starts[e] …), its 64-row tiles' starts[E + 1] (matmul.cu's
// TBM, tileRows in backend.go: the grouped products' tile), and the
// choices' rows n·k + j grouped by expert. Within an expert the order is
// the atomics', which no result depends on: each row's product is its own.
extern "C" __global__ void moe_group(const int* experts, int* groups, int nk, int E) {
    pdl_start();
    __shared__ int count[MOE_GROUP_MAX], cursor[MOE_GROUP_MAX];
    int *starts = groups, *tstarts = groups + E + 1, *rows = groups + 2 * (E + 1);
    for (int e = threadIdx.x; e < E; e += blockDim.x) count[e] = 0;
    __syncthreads();
    for (int i = threadIdx.x; i < nk; i += blockDim.x) atomicAdd(&count[experts[i]], 1);
    __syncthreads();
    if (threadIdx.x == 0) {
        int s = 0, ts = 0;
        for (int e = 0; e < E; e++) {
            starts[e] = cursor[e] = s;
            tstarts[e] = ts;
            s += count[e];
            ts += (count[e] + 63) / 64;
        }
        starts[E] = s;
        tstarts[E] = ts;
    }
    __syncthreads();
    for (int i = threadIdx.x; i < nk; i += blockDim.x) rows[atomicAdd(&cursor[experts[i]], 1)] = i;
}

// sum_experts: out[n][j] = Σ_s scale[n·k + s]·y[n·k + s][j], the k choices
// of token n added in slot order from +0, as add_rows adds them into a
// zeroed dst one choice at a time (AddExperts into Zeros), but every
// (token, column) at once.
extern "C" __global__ void sum_experts(float* out, const float* y, const float* scale, int N, int k, int D) {
    pdl_start();
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (size_t)N * D; i += (size_t)gridDim.x * blockDim.x) {
        const size_t n = i / D, j = i % D;
        float acc = 0.0f;
        for (int s = 0; s < k; s++) acc = __fadd_rn(acc, __fmul_rn(scale[n * k + s], y[(n * k + s) * D + j]));
        out[i] = acc;
    }
}

// concat joins rows of a [rows, da] and b [rows, db]; esize is 4 or 2 bytes.
extern "C" __global__ void concat(void* out, const void* a, const void* b, int rows, int da, int db, int esize) {
    pdl_start();
    const int w = da + db;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (size_t)rows * w; i += (size_t)gridDim.x * blockDim.x) {
        const size_t r = i / w;
        const int c = (int)(i % w);
        if (esize == 4) {
            ((unsigned*)out)[i] = c < da ? ((const unsigned*)a)[r * da + c] : ((const unsigned*)b)[r * db + c - da];
        } else {
            ((unsigned short*)out)[i] = c < da ? ((const unsigned short*)a)[r * da + c] : ((const unsigned short*)b)[r * db + c - da];
        }
    }
}

// binary: out = x op y with y (dtype yt) indexed by i % period; op 0 adds, 1 multiplies.
extern "C" __global__ void binary(float* out, const float* x, const void* y, int yt, int n, int period, int op) {
    pdl_start();
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (size_t)n; i += (size_t)gridDim.x * blockDim.x) {
        const float b = load(y, yt, i % period);
        out[i] = op == 0 ? __fadd_rn(x[i], b) : __fmul_rn(x[i], b);
    }
}

// unary: op 0 scales by s, 1 is GELU (tanh), 2 is the softcap s·tanh(x/s).
extern "C" __global__ void unary(float* out, const float* x, int n, int op, float s) {
    pdl_start();
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (size_t)n; i += (size_t)gridDim.x * blockDim.x) {
        const float v = x[i];
        if (op == 0) out[i] = __fmul_rn(v, s);
        else if (op == 1) out[i] = gelu(v);
        else out[i] = (float)((double)s * tanh((double)v / (double)s));
    }
}

#define RBLOCK 256 // threads of the attention, softmax and top-k blocks; part of their reduction order
#define NMAX 1024  // most threads of a norm's block (rowThreads in backend.go)

// block_tree0 reduces one value a thread by op in a fixed tree over the
// block (blockDim.x a power of two, at least 32; sh holds one value a
// thread): at each level s = blockDim.x/2, …, 1, thread t's value becomes
// op(its value, thread t + s's), and the result is thread 0's. Only thread
// 0 gets it. The levels from s = 32 up pair the same lane of two warps, so
// warp 0's lane l runs them down its own column of sh, and the last five
// are warp 0's shuffles: the same operations on the same operands as a
// tree through shared memory with a barrier a level, with one barrier in
// all (the first, which also publishes what the caller wrote before). A
// norm's two reductions had 8-10 barriers each. At 1,024 threads warp 0's
// lanes add 31 pairs each, which may cost what the barriers did; at 256
// (the E2B shape's norms, attention, softmax) 7. Warp 0's levels in
// registers (each lane loading its column's first-level pairs at once)
// gave the same bits and, on the H200, took rmsnorm2 at 5,376 wide from
// 12.1 to 11.7 µs but the 256-thread attention kernels from 19.1 to 20.1
// µs (sliding) and 31.2 to 33.5 (global), and 4k decode 1-4% slower, so the
// loop stays here; the norms take norm_sum_d, whose levels run in registers
// (twenty-sixth session: a 31B rmsnorm2 alone 9.8 → 8.3 µs).
#ifndef ATTN_STOP
#define ATTN_STOP 0 // attn_fused stopping part way, for timing builds (TestAttentionSpeed)
#endif
template <typename T, typename Op>
__device__ __forceinline__ T block_tree0(T v, T* sh, Op op) {
    sh[threadIdx.x] = v;
    __syncthreads();
    T r = v;
    if (threadIdx.x < 32) {
        const int lane = threadIdx.x;
        for (int s = blockDim.x >> 6; s > 0; s >>= 1) // s warps: the levels of 32·s threads
#pragma unroll 4
            for (int w = 0; w < s; w++) sh[32 * w + lane] = op(sh[32 * w + lane], sh[32 * (w + s) + lane]);
        r = sh[lane];
        for (int s = 16; s > 0; s >>= 1) r = op(r, __shfl_down_sync(0xffffffffu, r, s));
    }
    return r;
}

struct add_d {
    __device__ __forceinline__ double operator()(double a, double b) const { return a + b; }
};

// block_sum_d sums one double per thread in a fixed tree over the block's
// threads (sh holds one double per thread); every thread gets the sum.
__device__ double block_sum_d(double v, double* sh) {
    const double r0 = block_tree0(v, sh, add_d());
    if (threadIdx.x == 0) sh[0] = r0;
    __syncthreads();
    const double r = sh[0];
    __syncthreads(); // sh is free again
    return r;
}

// norm_sum_d is block_sum_d for a norm's block (rowThreads: 256, 512 or
// 1,024 threads; any other size takes block_sum_d): block_tree0's levels
// down to eight warps' entries run as each lane's loads of its column
// together, and the last three levels in its registers, instead of one
// level at a time through shared memory (warp 0 waited on 9 dependent
// shared round trips at 1,024 threads, while the block's other warps
// stood at the barrier: 30% of a 31B rmsnorm2's samples). The same
// additions of the same operands in the same order, so the same bits.
// norm_sums_d does it for N values a thread at once (sh holding N doubles
// a thread): N trees behind the same barriers.
template <int N>
__device__ __forceinline__ void norm_sums_d(double v[N], double* sh) {
    const int nw = blockDim.x >> 5;
    if (nw != 8 && nw != 16 && nw != 32) {
        for (int i = 0; i < N; i++) v[i] = block_sum_d(v[i], sh);
        return;
    }
#pragma unroll
    for (int i = 0; i < N; i++) sh[i * blockDim.x + threadIdx.x] = v[i];
    __syncthreads();
    if (threadIdx.x < 32) {
#pragma unroll
        for (int i = 0; i < N; i++) {
            const double* col = sh + i * blockDim.x + threadIdx.x; // entry w of the lane's column: col[32·w]
            double c[8];
#pragma unroll
            for (int w = 0; w < 8; w++) {
                if (nw == 8) c[w] = col[32 * w];
                else if (nw == 16) c[w] = col[32 * w] + col[32 * (w + 8)]; // the level s = 8
                else c[w] = (col[32 * w] + col[32 * (w + 16)]) + (col[32 * (w + 8)] + col[32 * (w + 24)]); // s = 16, 8
            }
#pragma unroll
            for (int s = 4; s > 0; s >>= 1)
#pragma unroll
                for (int w = 0; w < s; w++) c[w] = c[w] + c[w + s];
            double r = c[0];
            for (int s = 16; s; s >>= 1) r += __shfl_down_sync(0xffffffffu, r, s); // block_tree0's shuffles
            if (threadIdx.x == 0) sh[i * blockDim.x] = r; // every lane has read its column (the shuffles converge the warp)
        }
    }
    __syncthreads();
#pragma unroll
    for (int i = 0; i < N; i++) v[i] = sh[i * blockDim.x];
    __syncthreads(); // sh is free again
}
__device__ double norm_sum_d(double v, double* sh) {
    double a[1] = {v};
    norm_sums_d<1>(a, sh);
    return a[0];
}

// The norms take one block per row, and a row of D elements always gets
// the same number of threads, rowThreads(D) in backend.go (256 up to 1536
// elements, 512 up to 3072, else 1024): thread t sums elements
// t + u·blockDim.x in order, then the block's tree. Every kernel that
// normalises a row of D (rmsnorm, rmsnorm2, rmsnorm_rope, qkv_norms)
// therefore reduces it in the same order, so fused and unfused sequences
// give the same bits. A decode step's norms are single blocks, bound by
// their chains of dependent instructions: 256 threads on a 5,376-wide row
// took 30 µs on the H200, and four times the threads cut each one's chain
// by four.

//
// Rows of at least four elements a thread, in whole 4-element chunks
// (chunked), are taken a chunk at a time instead: thread t owns chunks
// t + u·blockDim.x and sums their squares chunk by chunk, element by
// element. Every kernel follows the same rule for a given D, so the
// guarantee above holds. A chunk is one 16-byte load (and a bf16 weight's
// one 8-byte load) where the row is aligned and four loads where it is
// not, the same values either way: a 31B rmsnorm2 (one 1,024-thread block)
// was bound by issuing 27,000 instructions, most of them per-element
// addresses, bounds tests and weight-type branches.
__device__ __forceinline__ bool chunked(int D) { return (D & 3) == 0 && D >= 4 * (int)blockDim.x; }

__device__ __forceinline__ float4 f4(float x, float y, float z, float w) {
    float4 v;
    v.x = x, v.y = y, v.z = z, v.w = w;
    return v;
}

__device__ __forceinline__ float2 f2(float x, float y) {
    float2 v;
    v.x = x, v.y = y;
    return v;
}

__device__ __forceinline__ uint2 u2(unsigned x, unsigned y) {
    uint2 v;
    v.x = x, v.y = y;
    return v;
}

// ld4 is elements j..j+3 of row p (al: p is 16-byte aligned).
__device__ __forceinline__ float4 ld4(const float* p, int j, bool al) {
    if (al) return *(const float4*)(p + j);
    return f4(p[j], p[j + 1], p[j + 2], p[j + 3]);
}

// ldw4 is elements j..j+3 of a weight of dtype wt, widened (1 without one).
__device__ __forceinline__ float4 ldw4(const void* w, int wt, int j) {
    if (!w) return f4(1.0f, 1.0f, 1.0f, 1.0f);
    if (wt == DT_BF16 && ((size_t)w & 7) == 0) {
        const uint2 h = *(const uint2*)((const unsigned short*)w + j);
        return f4(__uint_as_float(h.x << 16), __uint_as_float(h.x & 0xffff0000u), __uint_as_float(h.y << 16),
                  __uint_as_float(h.y & 0xffff0000u));
    }
    if (wt == DT_F32) return ld4((const float*)w, j, ((size_t)w & 15) == 0);
    return f4(load(w, wt, j), load(w, wt, j + 1), load(w, wt, j + 2), load(w, wt, j + 3));
}

// sq4 adds a chunk's squares to ss in element order.
__device__ __forceinline__ double sq4(double ss, float4 v) {
    ss += (double)v.x * (double)v.x;
    ss += (double)v.y * (double)v.y;
    ss += (double)v.z * (double)v.z;
    return ss + (double)v.w * (double)v.w;
}

// row_ss is this thread's share of a row's sum of squares: its elements
// (or chunks) in order.
__device__ __forceinline__ double row_ss(const float* xr, int D) {
    double ss = 0;
    if (chunked(D)) {
        const bool al = ((size_t)xr & 15) == 0;
        for (int c = threadIdx.x; 4 * c < D; c += blockDim.x) ss = sq4(ss, ld4(xr, 4 * c, al));
    } else {
        for (int j = threadIdx.x; j < D; j += blockDim.x) ss += (double)xr[j] * (double)xr[j];
    }
    return ss;
}

// rscale is 1/sqrt(mean(x²) + eps) of a row of D from its sum of squares,
// in double, rounded once.
__device__ __forceinline__ float rscale(double sum, int D, float eps) {
    return (float)(1.0 / sqrt(sum / (double)D + (double)eps));
}

// row_rscale is a row of D's 1/sqrt(mean(x²) + eps); every thread of the
// block gets it.
__device__ __forceinline__ float row_rscale(const float* xr, int D, float eps, double* sh) {
    return rscale(norm_sum_d(row_ss(xr, D), sh), D, eps);
}

// normed is element j of a row scaled by r and by the weight, if any.
__device__ __forceinline__ float normed(const float* xr, int j, float r, const void* w, int wt) {
    const float v = __fmul_rn(xr[j], r);
    return w ? __fmul_rn(v, load(w, wt, j)) : v;
}

#define RCACHE 6 // elements a thread holds of a register-cached row (rmsnorm, rmsnorm2): rows up to 6·rowThreads(D)

// cached_rscale is row_rscale for a row held in registers, thread t's
// elements t + u·blockDim.x: the same sums in the same order.
__device__ __forceinline__ float cached_rscale(const float xv[RCACHE], int D, float eps, double* sh) {
    double ss = 0;
#pragma unroll
    for (int u = 0; u < RCACHE; u++)
        if (threadIdx.x + u * blockDim.x < D) ss += (double)xv[u] * (double)xv[u];
    ss = norm_sum_d(ss, sh);
    return (float)(1.0 / sqrt(ss / (double)D + (double)eps));
}

// cached_row loads thread t's elements t + u·blockDim.x of row xr into
// registers, with the weight's (1 past D or without one) and the
// residual's (0 without one).
__device__ __forceinline__ void cached_row(float xv[RCACHE], float wv[RCACHE], float rv[RCACHE], const float* xr,
                                           const void* w, int wt, const float* rr, int D) {
#pragma unroll
    for (int u = 0; u < RCACHE; u++) {
        const int j = threadIdx.x + u * blockDim.x;
        const bool in = j < D;
        xv[u] = in ? xr[j] : 0.0f;
        wv[u] = in && w ? load(w, wt, j) : 1.0f;
        rv[u] = in && rr ? rr[j] : 0.0f;
    }
}

// cached_store writes a register-held row normalised by r, times the
// weight and plus the residual when given, as row yr and its split (element
// base + j of parts).
__device__ __forceinline__ void cached_store(float* yr, const float xv[RCACHE], const float wv[RCACHE],
                                             const float rv[RCACHE], float r, bool w, bool res, int D,
                                             unsigned short* parts, size_t n, size_t base) {
#pragma unroll
    for (int u = 0; u < RCACHE; u++) {
        const int j = threadIdx.x + u * blockDim.x;
        if (j < D) {
            float v = __fmul_rn(xv[u], r);
            if (w) v = __fmul_rn(v, wv[u]);
            if (res) v = __fadd_rn(rv[u], v);
            yr[j] = v;
            emit(parts, n, base + j, v);
        }
    }
}

#define CCACHE 2 // chunks a thread holds of a register-cached chunked row: rows up to 8·blockDim.x

// A chunked row held in registers: thread t's chunks t + u·blockDim.x of
// the row, the weight's (1 past D or without one) and the residual's (0
// past D or without one).
struct crow {
    float4 x[CCACHE], w[CCACHE], r[CCACHE];
};

// crow_weights loads a chunked row's weight chunks into w (1 past D or
// without one), crow_acts its x and residual chunks into c.
__device__ __forceinline__ void crow_weights(float4 w4[CCACHE], const void* w, int wt, int D) {
#pragma unroll
    for (int u = 0; u < CCACHE; u++) {
        const int j = 4 * (threadIdx.x + u * blockDim.x);
        w4[u] = j < D ? ldw4(w, wt, j) : f4(1.0f, 1.0f, 1.0f, 1.0f);
    }
}

__device__ __forceinline__ void crow_acts(crow& c, const float* xr, const float* rr, int D) {
    const bool ax = ((size_t)xr & 15) == 0, ar = ((size_t)rr & 15) == 0;
    const float4 zero = f4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
    for (int u = 0; u < CCACHE; u++) {
        const int j = 4 * (threadIdx.x + u * blockDim.x);
        const bool in = j < D;
        c.x[u] = in ? ld4(xr, j, ax) : zero;
        c.r[u] = in && rr ? ld4(rr, j, ar) : zero;
    }
}

// norm_start is pdl_start for a norm whose weights are model weights
// (early, from the host: no kernel writes them) that the block loads
// first: their loads, from memory the products have swept out of L2,
// fly while the kernel before finishes, instead of after the wait. The
// same loads, so the same bits.
#define norm_start(early, loads) \
    do {                         \
        if (early) {             \
            loads;               \
            pdl_start();         \
        } else {                 \
            pdl_start();         \
            loads;               \
        }                        \
    } while (0)

// crow_rscale is cached_rscale for a chunked row: row_rscale's sums.
__device__ __forceinline__ float crow_rscale(const crow& c, int D, float eps, double* sh) {
    double ss = 0;
#pragma unroll
    for (int u = 0; u < CCACHE; u++)
        if (4 * (threadIdx.x + u * blockDim.x) < D) ss = sq4(ss, c.x[u]);
    ss = norm_sum_d(ss, sh);
    return (float)(1.0 / sqrt(ss / (double)D + (double)eps));
}

// crow_norm is element by element cached_store's value: the row scaled by
// r, times the weight when given, plus the residual when given.
__device__ __forceinline__ float4 crow_norm(const crow& c, int u, float r, bool w, bool res) {
    float v[4] = {c.x[u].x, c.x[u].y, c.x[u].z, c.x[u].w};
    const float wv[4] = {c.w[u].x, c.w[u].y, c.w[u].z, c.w[u].w}, rv[4] = {c.r[u].x, c.r[u].y, c.r[u].z, c.r[u].w};
#pragma unroll
    for (int e = 0; e < 4; e++) {
        v[e] = __fmul_rn(v[e], r);
        if (w) v[e] = __fmul_rn(v[e], wv[e]);
        if (res) v[e] = __fadd_rn(rv[e], v[e]);
    }
    return f4(v[0], v[1], v[2], v[3]);
}

// st4 writes a chunk at element j of row p (al: p is 16-byte aligned).
__device__ __forceinline__ void st4(float* p, int j, float4 v, bool al) {
    if (al) {
        *(float4*)(p + j) = v;
        return;
    }
    p[j] = v.x, p[j + 1] = v.y, p[j + 2] = v.z, p[j + 3] = v.w;
}

// emit4 is emit for elements i..i+3 (i a multiple of 4, as n is when D
// is): each part plane's four values in one 8-byte store where aligned,
// and each pair's parts by split3x2's conversion instructions (Nsight
// Compute had split3's software rounding as a fifth of a 31B rmsnorm2's
// instructions).
__device__ __forceinline__ void emit4(unsigned short* parts, size_t n, size_t i, float4 v) {
    if (!parts) return;
    if (((size_t)parts & 7) != 0 || (n & 3) != 0) {
        emit(parts, n, i, v.x), emit(parts, n, i + 1, v.y), emit(parts, n, i + 2, v.z), emit(parts, n, i + 3, v.w);
        return;
    }
    unsigned p[3][2]; // each plane's two pairs
    split3x2(v.x, v.y, p[0][0], p[1][0], p[2][0]);
    split3x2(v.z, v.w, p[0][1], p[1][1], p[2][1]);
#pragma unroll
    for (int k = 0; k < 3; k++) *(uint2*)(parts + k * n + i) = u2(p[k][0], p[k][1]);
}

// gelu_mul: out = gelu(g)·u, with out's split; four elements a thread at a
// time where every row is 16-byte aligned (a prompt pass's 88 million a
// 31B layer), the same values.
extern "C" __global__ void gelu_mul(float* out, const float* g, const float* u, int n, unsigned short* parts) {
    pdl_start();
    const size_t i0 = blockIdx.x * (size_t)blockDim.x + threadIdx.x, step = (size_t)gridDim.x * blockDim.x;
    if ((n & 3) == 0 && (((size_t)out | (size_t)g | (size_t)u) & 15) == 0) {
        for (size_t c = i0; c < (size_t)n / 4; c += step) {
            const float4 a = *(const float4*)(g + 4 * c), b = *(const float4*)(u + 4 * c);
            const float4 v = f4(__fmul_rn(gelu(a.x), b.x), __fmul_rn(gelu(a.y), b.y), __fmul_rn(gelu(a.z), b.z),
                                __fmul_rn(gelu(a.w), b.w));
            *(float4*)(out + 4 * c) = v;
            emit4(parts, n, 4 * c, v);
        }
        return;
    }
    for (size_t i = i0; i < (size_t)n; i += step) {
        const float v = __fmul_rn(gelu(g[i]), u[i]);
        out[i] = v;
        emit(parts, n, i, v);
    }
}

// crow_store writes a chunked row normalised (crow_norm) as row yr and its
// split (element base + j of parts).
__device__ __forceinline__ void crow_store(float* yr, const crow& c, float r, bool w, bool res, int D,
                                           unsigned short* parts, size_t n, size_t base) {
    const bool al = ((size_t)yr & 15) == 0;
#pragma unroll
    for (int u = 0; u < CCACHE; u++) {
        const int j = 4 * (threadIdx.x + u * blockDim.x);
        if (j < D) {
            const float4 v = crow_norm(c, u, r, w, res);
            st4(yr, j, v, al);
            emit4(parts, n, base + j, v);
        }
    }
}

// rmsnorm: one block per row. With res, the row is added to res's row
// after the norm: the bits of Add(res, RMSNorm(x)).
//
// Rows up to RCACHE·blockDim.x elements are loaded into registers all at
// once (x, the weight and the residual), which leaves one memory round trip
// instead of one per blockDim.x elements per pass. The sums are the same,
// thread by thread and in the same order, so the bits are too (cache = 0
// takes the loop for any D, for the test that says so).
extern "C" __global__ void __launch_bounds__(NMAX, 1) rmsnorm(float* out, const float* x, const void* w, int wt, int D,
                                                           float eps, const float* res, unsigned short* parts,
                                                           size_t n, int cache, int early) {
    __shared__ double sh[NMAX];
    const float* xr = x + (size_t)blockIdx.x * D;
    float* yr = out + (size_t)blockIdx.x * D;
    const float* rr = res ? res + (size_t)blockIdx.x * D : 0;
    if (cache && chunked(D) && D <= 4 * CCACHE * (int)blockDim.x) {
        crow c;
        norm_start(early, crow_weights(c.w, w, wt, D));
        crow_acts(c, xr, rr, D);
        crow_store(yr, c, crow_rscale(c, D, eps, sh), w, rr, D, parts, n, (size_t)blockIdx.x * D);
        return;
    }
    pdl_start();
    if (cache && D <= RCACHE * (int)blockDim.x) {
        float xv[RCACHE], wv[RCACHE], rv[RCACHE];
        cached_row(xv, wv, rv, xr, w, wt, rr, D);
        cached_store(yr, xv, wv, rv, cached_rscale(xv, D, eps, sh), w, rr, D, parts, n, (size_t)blockIdx.x * D);
        return;
    }
    const float r = row_rscale(xr, D, eps, sh);
    for (int j = threadIdx.x; j < D; j += blockDim.x) {
        float v = normed(xr, j, r, w, wt);
        if (rr) v = __fadd_rn(rr[j], v);
        yr[j] = v;
        emit(parts, n, (size_t)blockIdx.x * D + j, v);
    }
}

// rmsnorm2: a layer boundary's two norms in one pass, one block per row of
// at most RCACHE·blockDim.x elements: y = res + RMSNorm(x)·w1, times the
// scalar s[0] when s is given, then out = RMSNorm(y)·w2 with out's split
// emitted. Each stage is rmsnorm's cached path (thread by thread, in the
// same order) and the scaling binary's multiply, so the bits are those of
// the three kernels in sequence.
extern "C" __global__ void __launch_bounds__(NMAX, 1) rmsnorm2(float* y, float* out, const float* x, const float* res,
                                                            const void* w1, int w1t, const void* s, int st,
                                                            const void* w2, int w2t, int D, float eps,
                                                            unsigned short* parts, size_t n, int early) {
    __shared__ double sh[NMAX];
    const size_t row = (size_t)blockIdx.x * D;
    if (chunked(D)) { // the same stages a chunk at a time
        crow c;
        float4 w2c[CCACHE];
        float sc = 1.0f;
        norm_start(early, (crow_weights(c.w, w1, w1t, D), crow_weights(w2c, w2, w2t, D), sc = s ? load(s, st, 0) : 1.0f));
        crow_acts(c, x + row, res + row, D);
        const float r = crow_rscale(c, D, eps, sh);
        const bool al = ((size_t)(y + row) & 15) == 0;
#pragma unroll
        for (int u = 0; u < CCACHE; u++) {
            const int j = 4 * (threadIdx.x + u * blockDim.x);
            float4 v = crow_norm(c, u, r, w1, true);
            if (s) v = f4(__fmul_rn(v.x, sc), __fmul_rn(v.y, sc), __fmul_rn(v.z, sc), __fmul_rn(v.w, sc));
            c.x[u] = v;
            c.w[u] = w2c[u];
            if (j < D) st4(y + row, j, v, al);
        }
        crow_store(out + row, c, crow_rscale(c, D, eps, sh), w2, false, D, parts, n, row);
        return;
    }
    pdl_start();
    float xv[RCACHE], wv[RCACHE], rv[RCACHE];
    cached_row(xv, wv, rv, x + row, w1, w1t, res + row, D);
    // (Loading w2 and the scalar here, before the first reduction, gave
    // the same bits and no gain on the H200, with the operands in L2 or
    // flushed from it: 11.3 and 14.0 µs at 5,376 wide.)
    const float r = cached_rscale(xv, D, eps, sh);
    const float sc = s ? load(s, st, 0) : 1.0f;
#pragma unroll
    for (int u = 0; u < RCACHE; u++) {
        const int j = threadIdx.x + u * blockDim.x;
        float v = __fmul_rn(xv[u], r);
        if (w1) v = __fmul_rn(v, wv[u]);
        v = __fadd_rn(rv[u], v);
        if (s) v = __fmul_rn(v, sc);
        xv[u] = v;
        wv[u] = j < D && w2 ? load(w2, w2t, j) : 1.0f;
        if (j < D) y[row + j] = v;
    }
    cached_store(out + row, xv, wv, rv, cached_rscale(xv, D, eps, sh), w2, false, D, parts, n, row);
}

// angle is the cosine and sine of position p at frequency f, in double,
// rounded once.
__device__ __forceinline__ void angle(float p, float f, float& c, float& s) {
    const double a = (double)__fmul_rn(p, f);
    c = (float)cos(a), s = (float)sin(a);
}

// turn writes the pair (j, j + half) rotated by an angle's c and s, or
// unrotated where its frequency is 0 (partial rotary).
__device__ __forceinline__ void turn(float* yr, int j, int half, float x0, float x1, float c, float s, bool f0) {
    if (f0) {
        yr[j] = x0;
        yr[j + half] = x1;
        return;
    }
    yr[j] = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s));
    yr[j + half] = __fadd_rn(__fmul_rn(x1, c), __fmul_rn(x0, s));
}

// rotate writes the pair (j, j + half) rotated by position p at frequency f
// (unrotated where f is 0: partial rotary).
__device__ __forceinline__ void rotate(float* yr, int j, int half, float x0, float x1, float p, float f) {
    float c = 1.0f, s = 0.0f;
    if (f != 0.0f) angle(p, f, c, s);
    turn(yr, j, half, x0, x1, c, s, f == 0.0f);
}

// rmsnorm_rope: RoPE(RMSNorm(x)) in one pass, one block (rowThreads(d),
// as rmsnorm) per (token, head) row of d: rmsnorm's scale and rope's
// rotation, the bits of the two kernels in sequence.
extern "C" __global__ void __launch_bounds__(NMAX, 1) rmsnorm_rope(float* out, const float* x, const void* w, int wt, float eps,
                                        const int* pos, const float* freq, int H, int d, int half) {
    pdl_start();
    __shared__ double sh[NMAX];
    const int t = blockIdx.x / H;
    const float* xr = x + (size_t)blockIdx.x * d;
    float* yr = out + (size_t)blockIdx.x * d;
    const float r = row_rscale(xr, d, eps, sh);
    const float p = (float)pos[t];
    for (int j = threadIdx.x; j < half; j += blockDim.x)
        rotate(yr, j, half, normed(xr, j, r, w, wt), normed(xr, j + half, r, w, wt), p, freq[j]);
    for (int j = 2 * half + threadIdx.x; j < d; j += blockDim.x) yr[j] = normed(xr, j, r, w, wt);
}

// qkv_args are qkv_norms' and qkv_norms_warp's arguments.
struct qkv_args {
    float *qo, *ko, *vo;
    const float *q, *k, *v;
    const void *qw, *kw;
    int qwt, kwt;
    float eps;
    const int* pos;
    const float* freq;
    int Hq, Hk, d, half;
    const unsigned long long* kvp;
    const int* tslot;
};

// qkv_row resolves row i of qkv_norms' rows: its input, its output and its
// weight, and whether it is a value head (no weight, no rotation).
__device__ __forceinline__ bool qkv_row(const qkv_args& a, int i, int& t, const float*& xr, float*& yr, const void*& w,
                                        int& wt) {
    const int per = a.Hq + 2 * a.Hk, h = i % per, d = a.d, Hk = a.Hk;
    t = i / per;
    w = 0, wt = 0;
    if (h < a.Hq) {
        xr = a.q + ((size_t)t * a.Hq + h) * d, yr = a.qo + ((size_t)t * a.Hq + h) * d, w = a.qw, wt = a.qwt;
        return false;
    }
    if (h < a.Hq + Hk) {
        xr = a.k + ((size_t)t * Hk + h - a.Hq) * d, w = a.kw, wt = a.kwt;
        yr = (a.kvp ? (float*)a.kvp[2 * a.tslot[2 * t]] + (size_t)a.tslot[2 * t + 1] * Hk * d : a.ko + (size_t)t * Hk * d) +
             (size_t)(h - a.Hq) * d;
        return false;
    }
    xr = a.v + ((size_t)t * Hk + h - a.Hq - Hk) * d;
    yr = (a.kvp ? (float*)a.kvp[2 * a.tslot[2 * t] + 1] + (size_t)a.tslot[2 * t + 1] * Hk * d : a.vo + (size_t)t * Hk * d) +
         (size_t)(h - a.Hq - Hk) * d;
    return true;
}

// qkv_store writes a row normalised by r, elements j0, j0 + stride, …,
// rotated by the angles of cs (cos and sin a pair, its token's) where
// given, else by those it computes.
__device__ __forceinline__ void qkv_store(const qkv_args& a, int t, const float* xr, float* yr, const void* w, int wt,
                                          bool value, float r, int j0, int stride, const float* cs) {
    if (value) {
        for (int j = j0; j < a.d; j += stride) yr[j] = normed(xr, j, r, 0, 0);
        return;
    }
    const float p = (float)a.pos[t];
    for (int j = j0; j < a.half; j += stride) {
        const float x0 = normed(xr, j, r, w, wt), x1 = normed(xr, j + a.half, r, w, wt);
        if (cs)
            turn(yr, j, a.half, x0, x1, cs[2 * j], cs[2 * j + 1], a.freq[j] == 0.0f);
        else
            rotate(yr, j, a.half, x0, x1, p, a.freq[j]);
    }
    for (int j = 2 * a.half + j0; j < a.d; j += stride) yr[j] = normed(xr, j, r, w, wt);
}

#define QKV_PARAMS                                                                                          \
    float *qo, float *ko, float *vo, const float *q, const float *k, const float *v, const void *qw, int qwt, \
        const void *kw, int kwt, float eps, const int *pos, const float *freq, int Hq, int Hk, int d, int half, \
        const unsigned long long *kvp, const int *tslot
#define QKV_ARGS {qo, ko, vo, q, k, v, qw, kw, qwt, kwt, eps, pos, freq, Hq, Hk, d, half, kvp, tslot}

// qkv_norms: a layer's per-head norms in one launch, one block per
// (token, head row): the query heads (qw, then RoPE), the key heads (kw,
// then RoPE) and the value heads (no weight, no rotation; v may be k).
// Each row is rmsnorm_rope's or rmsnorm's arithmetic, so the bits are those
// of the three kernels. With kvp (a key and a value cache a run of tokens:
// a batch's rows each write a cache of their own) token t's key and value
// heads go to slot tslot[2t + 1] of run tslot[2t]'s caches instead of to
// ko and vo.
extern "C" __global__ void __launch_bounds__(NMAX, 1) qkv_norms(QKV_PARAMS) {
    pdl_start();
    const qkv_args a = QKV_ARGS;
    __shared__ double sh[NMAX];
    int t, wt;
    const float* xr;
    float* yr;
    const void* w;
    const bool value = qkv_row(a, blockIdx.x, t, xr, yr, w, wt);
    qkv_store(a, t, xr, yr, w, wt, value, row_rscale(xr, a.d, a.eps, sh), threadIdx.x, blockDim.x, 0);
}

// warp_tree256 is block_tree0 over a 256-thread block's values, thread
// l + 32j's in lane l's v[j], run by one warp: block_tree0's levels of
// 128, 64 and 32 threads down each lane's column, then its shuffles. Every
// lane gets the result. warp_sum256 is block_sum_d's sum.
template <typename T, typename Op>
__device__ __forceinline__ T warp_tree256(T v[8], Op op) {
#pragma unroll
    for (int s = 4; s > 0; s >>= 1)
#pragma unroll
        for (int j = 0; j < s; j++) v[j] = op(v[j], v[j + s]);
    T r = v[0];
    for (int s = 16; s > 0; s >>= 1) r = op(r, __shfl_down_sync(0xffffffffu, r, s));
    return __shfl_sync(0xffffffffu, r, 0);
}
__device__ __forceinline__ double warp_sum256(double v[8]) { return warp_tree256(v, add_d()); }

// warp_rscale is row_rscale for a row that a block of 256 threads
// (rowThreads(D) = 256: D ≤ 1536) would normalise, computed by one warp:
// lane l stands in for threads l + 32j, j < 8, summing each one's elements
// in its order, then warp_sum256. The same additions of the same operands,
// so the same bits, without a block's barriers: a prompt pass's head rows
// are many and short.
__device__ __forceinline__ float warp_rscale(const float* xr, int D, float eps) {
    const int lane = threadIdx.x & 31, T = 256;
    const bool ch = (D & 3) == 0 && D >= 4 * T, al = ((size_t)xr & 15) == 0;
    double v[8];
#pragma unroll
    for (int j = 0; j < 8; j++) {
        double ss = 0;
        if (ch) {
            for (int c = lane + 32 * j; 4 * c < D; c += T) ss = sq4(ss, ld4(xr, 4 * c, al));
        } else {
            for (int e = lane + 32 * j; e < D; e += T) ss += (double)xr[e] * (double)xr[e];
        }
        v[j] = ss;
    }
    return (float)(1.0 / sqrt(warp_sum256(v) / (double)D + (double)eps));
}

// qkv_norms_warp is qkv_norms with a block a token and a warp a row
// (heads of at most 1,536: warp_rscale): the token's angles are computed
// once, into shared memory, rather than once a head (double cosines and
// sines were most of a row's time), and a row's reduction takes no
// barrier. The same bits.
#define QKV_HALF 768
extern "C" __global__ void __launch_bounds__(256, 4) qkv_norms_warp(QKV_PARAMS) {
    pdl_start();
    __shared__ float cs[2 * QKV_HALF];
    const qkv_args a = QKV_ARGS;
    const int tok = blockIdx.x, per = Hq + 2 * Hk;
    const float p = (float)pos[tok];
    for (int j = threadIdx.x; j < half; j += blockDim.x) angle(p, freq[j], cs[2 * j], cs[2 * j + 1]);
    __syncthreads();
    for (int h = threadIdx.x >> 5; h < per; h += blockDim.x >> 5) {
        int t, wt;
        const float* xr;
        float* yr;
        const void* w;
        const bool value = qkv_row(a, tok * per + h, t, xr, yr, w, wt);
        qkv_store(a, t, xr, yr, w, wt, value, warp_rscale(xr, d, eps), threadIdx.x & 31, 32, cs);
    }
}

// rope: one block per (token, head) row of d values; pairs (j, j+half).
extern "C" __global__ void rope(float* out, const float* x, const int* pos, const float* freq, int H, int d, int half) {
    pdl_start();
    const int t = blockIdx.x / H;
    const float* xr = x + (size_t)blockIdx.x * d;
    float* yr = out + (size_t)blockIdx.x * d;
    const float p = (float)pos[t];
    for (int j = threadIdx.x; j < half; j += blockDim.x) rotate(yr, j, half, xr[j], xr[j + half], p, freq[j]);
    for (int j = 2 * half + threadIdx.x; j < d; j += blockDim.x) yr[j] = xr[j];
}

// fmax_nan is max that propagates NaN, as Go's max.
__device__ __forceinline__ float fmax_nan(float a, float b) {
    if (a != a || b != b) return __int_as_float(0x7fc00000);
    return a > b ? a : b;
}

struct max_nan {
    __device__ __forceinline__ float operator()(float a, float b) const { return fmax_nan(a, b); }
};

// softmax: one block per row.
extern "C" __global__ void softmax(float* out, const float* x, int D) {
    pdl_start();
    __shared__ double sh[RBLOCK];
    __shared__ float shm[RBLOCK];
    const float* xr = x + (size_t)blockIdx.x * D;
    float* yr = out + (size_t)blockIdx.x * D;
    float m = -__int_as_float(0x7f800000);
    for (int j = threadIdx.x; j < D; j += RBLOCK) m = fmax_nan(m, xr[j]);
    m = block_tree0(m, shm, max_nan());
    if (threadIdx.x == 0) shm[0] = m;
    __syncthreads();
    const double mx = shm[0];
    double sum = 0;
    for (int j = threadIdx.x; j < D; j += RBLOCK) sum += exp((double)xr[j] - mx);
    sum = block_sum_d(sum, sh);
    for (int j = threadIdx.x; j < D; j += RBLOCK) yr[j] = (float)(exp((double)xr[j] - mx) / sum);
}

// above reports whether (a, ia) ranks above (b, ib): NaN first (lowest
// index among NaNs), then larger values, ties by lower index.
__device__ __forceinline__ bool above(float a, int ia, float b, int ib) {
    if (ib < 0) return ia >= 0;
    if (ia < 0) return false;
    const bool an = a != a, bn = b != b;
    if (an || bn) return an && (!bn || ia < ib);
    return a > b || (a == b && ia < ib);
}

// block_best reduces one candidate per thread to the block's best.
__device__ void block_best(float* v, int* i, float* shv, int* shi) {
    shv[threadIdx.x] = *v;
    shi[threadIdx.x] = *i;
    __syncthreads();
    for (int s = RBLOCK / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s && above(shv[threadIdx.x + s], shi[threadIdx.x + s], shv[threadIdx.x], shi[threadIdx.x])) {
            shv[threadIdx.x] = shv[threadIdx.x + s];
            shi[threadIdx.x] = shi[threadIdx.x + s];
        }
        __syncthreads();
    }
    *v = shv[0];
    *i = shi[0];
    __syncthreads();
}

// argmax_part and argmax_finish are topk with k = 1 over wide rows (an LM
// head's vocabulary) in two launches: one block per row was a single
// multiprocessor reading 1 MB (about 200 µs on the H200). above is a total
// order, so the best of the slices' bests is the row's best.
// argmax_part: grid (R, P); block p of row r takes elements
// [p·span, (p+1)·span) and writes its best to pv, pi[r·P + p].
extern "C" __global__ void argmax_part(float* pv, int* pi, const float* x, int D, int span) {
    pdl_start();
    __shared__ float shv[RBLOCK];
    __shared__ int shi[RBLOCK];
    const float* xr = x + (size_t)blockIdx.x * D;
    const int lo = blockIdx.y * span, hi = min(D, lo + span);
    float bv = 0.0f;
    int bi = -1;
    for (int j = lo + threadIdx.x; j < hi; j += RBLOCK) {
        const float v = xr[j];
        if (above(v, j, bv, bi)) bv = v, bi = j;
    }
    block_best(&bv, &bi, shv, shi);
    if (threadIdx.x == 0) {
        const size_t o = (size_t)blockIdx.x * gridDim.y + blockIdx.y;
        pv[o] = bv;
        pi[o] = bi;
    }
}

// argmax_finish: one block per row, the best of its P candidates.
extern "C" __global__ void argmax_finish(float* vals, int* idx, const float* pv, const int* pi, int P) {
    pdl_start();
    __shared__ float shv[RBLOCK];
    __shared__ int shi[RBLOCK];
    float bv = 0.0f;
    int bi = -1;
    for (int j = threadIdx.x; j < P; j += RBLOCK) {
        const size_t o = (size_t)blockIdx.x * P + j;
        if (above(pv[o], pi[o], bv, bi)) bv = pv[o], bi = pi[o];
    }
    block_best(&bv, &bi, shv, shi);
    if (threadIdx.x == 0) {
        if (vals) vals[blockIdx.x] = bv;
        idx[blockIdx.x] = bi;
    }
}

// keyed_above reports whether (a, key ka, position ia) ranks above (b, kb,
// ib) for argmax_keyed: a number above NaN (NaN never wins), a larger value,
// ties by the smaller key; position −1 is no candidate. The order is total
// on numbers with distinct keys, so the reduction's shape cannot matter.
__device__ __forceinline__ bool keyed_above(float a, int ka, int ia, float b, int kb, int ib) {
    if (ib < 0) return ia >= 0;
    if (ia < 0) return false;
    const bool an = a != a, bn = b != b;
    if (an || bn) return !an && bn;
    return a > b || (a == b && ka < kb);
}

// argmax_keyed: one block per row; out[row] is the key of the row's best
// value (the row's first key when every value is NaN).
extern "C" __global__ void argmax_keyed(int* out, const float* x, const int* keys, int D) {
    pdl_start();
    __shared__ float shv[RBLOCK];
    __shared__ int shk[RBLOCK], shi[RBLOCK];
    const float* xr = x + (size_t)blockIdx.x * D;
    const int* kr = keys + (size_t)blockIdx.x * D;
    float v = 0.0f;
    int k = 0, i = -1;
    for (int j = threadIdx.x; j < D; j += RBLOCK)
        if (keyed_above(xr[j], kr[j], j, v, k, i)) v = xr[j], k = kr[j], i = j;
    shv[threadIdx.x] = v;
    shk[threadIdx.x] = k;
    shi[threadIdx.x] = i;
    __syncthreads();
    for (int s = RBLOCK / 2; s > 0; s >>= 1) {
        const int t = threadIdx.x;
        if (t < s && keyed_above(shv[t + s], shk[t + s], shi[t + s], shv[t], shk[t], shi[t])) {
            shv[t] = shv[t + s];
            shk[t] = shk[t + s];
            shi[t] = shi[t + s];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) out[blockIdx.x] = shi[0] < 0 || shv[0] != shv[0] ? kr[0] : shk[0];
}

// topk: one block per row; k rounds, each picking the best element ranking
// strictly below the previous pick (k = 1 is argmax).
extern "C" __global__ void topk(float* vals, int* idx, const float* x, int D, int k) {
    pdl_start();
    __shared__ float shv[RBLOCK];
    __shared__ int shi[RBLOCK];
    const float* xr = x + (size_t)blockIdx.x * D;
    float pv = 0.0f;
    int pi = -1;
    for (int r = 0; r < k; r++) {
        float bv = 0.0f;
        int bi = -1;
        for (int j = threadIdx.x; j < D; j += RBLOCK) {
            const float v = xr[j];
            if (pi >= 0 && !above(pv, pi, v, j)) continue;
            if (above(v, j, bv, bi)) {
                bv = v;
                bi = j;
            }
        }
        block_best(&bv, &bi, shv, shi);
        if (threadIdx.x == 0) {
            if (vals) vals[(size_t)blockIdx.x * k + r] = bv;
            idx[(size_t)blockIdx.x * k + r] = bi;
        }
        pv = bv;
        pi = bi;
    }
}

// topk_sort finds each row's k best (above's order) by sorting tiles: block
// (r, c) sorts tile c of row r's candidates, at most TOPK_TILE of them, and
// keeps its k best, so each pass cuts a row's n candidates to
// ceil(n / TOPK_TILE)·k until one tile is left. A candidate is a 64-bit key
// whose ascending order is above's: rank_key(value) above the index (NaN
// first; −0 as +0; ties by lower index), and ~0 for no candidate. The first
// pass reads x (in == nullptr: candidates are x's D values); later ones the
// last pass's keys (n a row). The last pass (out == nullptr) writes values,
// read back from x, and indices. Every pass is exact, so the result is the
// k-pass topk's, in a few sorts instead of k sweeps of the row.
#define TOPK_TILE 2048
__device__ __forceinline__ unsigned long long rank_key(float v, int i) {
    unsigned u = __float_as_uint(v == 0.0f ? 0.0f : v);
    u = (u & 0x80000000u) ? ~u : (u | 0x80000000u); // ascending with v
    if (v != v) u = 0xffffffffu;                       // NaN ranks first
    return ((unsigned long long)(~u) << 32) | (unsigned)i;
}
extern "C" __global__ void topk_sort(unsigned long long* out, float* vals, int* idx, const float* x,
                                     const unsigned long long* in, int D, int n, int k, int tile) {
    pdl_start();
    __shared__ unsigned long long s[TOPK_TILE];
    const int r = blockIdx.x, lo = blockIdx.y * tile;
    for (int j = threadIdx.x; j < tile; j += blockDim.x) {
        const int at = lo + j;
        unsigned long long key = ~0ull;
        if (at < n) key = in ? in[(size_t)r * n + at] : rank_key(x[(size_t)r * D + at], at);
        s[j] = key;
    }
    // Bitonic sort, ascending.
    for (int size = 2; size <= tile; size <<= 1) {
        for (int stride = size >> 1; stride > 0; stride >>= 1) {
            __syncthreads();
            for (int t = threadIdx.x; t < tile / 2; t += blockDim.x) {
                const int i = 2 * t - (t & (stride - 1)), j = i + stride;
                const unsigned long long a = s[i], b = s[j];
                if ((a > b) == ((i & size) == 0)) {
                    s[i] = b;
                    s[j] = a;
                }
            }
        }
    }
    __syncthreads();
    for (int j = threadIdx.x; j < k; j += blockDim.x) {
        const unsigned long long key = s[j];
        if (out) {
            out[((size_t)r * gridDim.y + blockIdx.y) * k + j] = key;
        } else {
            const int i = (int)(unsigned)key;
            if (vals) vals[(size_t)r * k + j] = x[(size_t)r * D + i];
            idx[(size_t)r * k + j] = i;
        }
    }
}

// Attention, in three kernels. The host orders each batch row's keys by
// position: span[b] holds the row's first and last key positions (2b and
// 2b + 1; 0 and −1 for a row without keys) and slot_of[b][r] the slot
// holding position span[2b] + r (or −1). The kernels visit only offsets up
// to the last key, whatever the cache's capacity S: skipping slots that
// hold nothing leaves every sum as it was.
// so every sum below runs in position order, in chunks anchored at absolute
// positions. A query's result therefore depends only on the keys it sees,
// not on how many queries share the launch, the cache's capacity or where a
// ring buffer wrapped.
#define ATTN_CHUNK 1024 // positions per score block and per value split

__device__ __forceinline__ bool visible(int kp, int qp, int causal, int window) {
    return (!causal || kp <= qp) && (window <= 0 || kp > qp - window);
}

// store_block_max writes the block's maximum of m (NaN if any is) to dst,
// by block_tree0 over shm (a float a thread), whose fixed order also fixes
// which zero a tie of +0 and −0 gives.
__device__ __forceinline__ void store_block_max(float m, float* shm, float* dst) {
    m = block_tree0(m, shm, max_nan());
    if (threadIdx.x == 0) *dst = m;
}

// Attention's flags (the values kernels' last argument): ATTN_PACKED
// (TANDEM_CUDA_ATTN_PACKED) has the value sums read (slot, weight) pairs,
// the same bits.
#define ATTN_PACKED 2
// ATTN_COLS4 (TANDEM_CUDA_ATTN_COLS4; value rows in 16-byte chunks) has a
// thread of the unpacked value sums take four adjacent columns with one
// 16-byte load a key, the same bits.
#define ATTN_COLS4 4

// slot_weight is a key's value slot (−1: skipped) and its weight e, read
// by the packed value sums as one 8-byte shared load.
struct __align__(8) slot_weight {
    int s;
    float e;
};

// kv_base is batch row b's first key (which 0) or value (1) row: where the
// call passes a table of its rows' caches (kvp: a key and a value pointer a
// row, a serving step's requests each with a cache of its own), that row's
// cache; else rows lie b·rows elements into one tensor. Only the address
// changes, so a row's bits are the same either way.
__device__ __forceinline__ const float* kv_base(const float* t, const unsigned long long* kvp, int b, int which,
                                                size_t rows) {
    return kvp ? (const float*)kvp[2 * b + which] : t + (size_t)b * rows;
}

// scores_pass writes the scores of row bl = blockIdx.y's keys in chunk z
// of their offsets from the row's first position, scr[r] =
// float32(q·k)·scale for each visible key r, and returns the thread's
// maximum of them (qs: the query, loaded here). A thread loads its key 32
// elements ahead of their sums. Loading more at once (128 elements),
// staging keys through shared memory by coalesced loads, and keeping two
// chunks in flight (the next one's loads before this one's sums, with the
// values two batches ahead) all kept these bits; the first two lost on the
// H200 (the staged kernel took the 31B step from 22.8 to 23.9 ms) and the
// third gained nothing (19.8 against 19.1 µs alone, 24.4 against 24.6 with
// L2 flushed, and no step faster), so none stayed.
__device__ __forceinline__ float scores_pass(const float* q, const float* k, float* scr, const int* slot_of,
                                             const int* span, const int* qpos, int L, int Hq, int Hkv, int S, int D,
                                             float scale, int causal, int window, int z, int chunk, float* qs,
                                             const unsigned long long* kvp) {
    const int h = blockIdx.x, bl = blockIdx.y, b = bl / L, kvh = h / (Hq / Hkv);
    const size_t bh = (size_t)bl * Hq + h;
    for (int j = threadIdx.x; j < D; j += RBLOCK) qs[j] = q[bh * D + j];
    __syncthreads();
    const int qp = qpos ? qpos[bl] : 0, mp = span[2 * b];
    float m = -__int_as_float(0x7f800000);
    const int r0 = z * chunk, r1 = min(min(r0 + chunk, S), span[2 * b + 1] - mp + 1);
    // One thread per key, summing q·k in element order (a warp per key with
    // a butterfly was tried: faster, but its different rounding flipped a
    // near-tied MoE route of the 26B fixture, so the order stays). Keys
    // are read 4·CH elements at a time with 16-byte loads, ahead of the
    // sums.
    constexpr int CH = 8; // four-float chunks a load step
    const float* kb = kv_base(k, kvp, b, 0, (size_t)S * Hkv * D) + (size_t)kvh * D;
    const bool vec = D % (4 * CH) == 0 && ((size_t)kb & 15) == 0;
    for (int r = r0 + threadIdx.x; r < r1; r += RBLOCK) {
        const int s = slot_of[(size_t)b * S + r];
        if (s < 0 || !visible(mp + r, qp, causal, window)) continue;
        const float* kr = kb + (size_t)s * Hkv * D;
        float dot = 0.0f;
        if (vec) {
            for (int j = 0; j < D; j += 4 * CH) {
                float4 kk[CH];
#pragma unroll
                for (int u = 0; u < CH; u++) kk[u] = *(const float4*)(kr + j + 4 * u);
#pragma unroll
                for (int u = 0; u < CH; u++) {
                    const float* qj = qs + j + 4 * u;
                    dot = fmaf(qj[0], kk[u].x, dot);
                    dot = fmaf(qj[1], kk[u].y, dot);
                    dot = fmaf(qj[2], kk[u].z, dot);
                    dot = fmaf(qj[3], kk[u].w, dot);
                }
            }
        } else {
            for (int j = 0; j < D; j++) dot = fmaf(qs[j], kr[j], dot);
        }
        const float v = __fmul_rn(dot, scale);
        scr[r] = v;
        m = fmax_nan(m, v);
    }
    return m;
}

// attn_scores: grid (Hq, B·L, ceil(S/chunk)). Writes each visible key's
// score sc[bh][r] and each block's max. chunk (key offsets a block) only
// spreads the work: a score is the same whichever block computes it, and
// the maximum of the blocks' maxima is exact in any grouping.
extern "C" __global__ void attn_scores(const float* q, const float* k, float* sc, float* cmax, const int* slot_of,
                                       const int* span, const int* qpos, int L, int Hq, int Hkv, int S, int D,
                                       float scale, int causal, int window, int chunk,
                                       const unsigned long long* kvp) {
    pdl_start();
    __shared__ float qs[512];
    __shared__ float shm[RBLOCK];
    const size_t bh = (size_t)blockIdx.y * Hq + blockIdx.x;
    const float m = scores_pass(q, k, sc + bh * S, slot_of, span, qpos, L, Hq, Hkv, S, D, scale, causal, window,
                                blockIdx.z, chunk, qs, kvp);
    store_block_max(m, shm, cmax + bh * gridDim.z + blockIdx.z);
}

// ldv loads W adjacent floats (16- or 8-byte aligned for W = 4 or 2).
__device__ __forceinline__ void ldv(float (&o)[1], const float* p) { o[0] = *p; }
__device__ __forceinline__ void ldv(float (&o)[2], const float* p) {
    const float2 t = *(const float2*)p;
    o[0] = t.x, o[1] = t.y;
}
__device__ __forceinline__ void ldv(float (&o)[4], const float* p) {
    const float4 t = *(const float4*)p;
    o[0] = t.x, o[1] = t.y, o[2] = t.z, o[3] = t.w;
}

// value_sums is values_pass's unpacked sums (finish(j, sum) takes column
// j's): W adjacent columns a thread (W = 4 with ATTN_COLS4, value rows in
// 16-byte chunks), each key's W values in one load, VB keys' loads ahead of
// their sums. Every column sums its keys in position order, skipping the
// keys without a slot or a weight, so W does not change the bits. The sums
// were bound by issuing instructions (8.8 cycles an instruction, 3,300 a
// warp for 128 keys, in Nsight Compute); four columns a thread take about
// a third as many a column. Each key's weight is loaded beside its slot,
// not behind the slot's test: the loop this replaced did so and ran a 31B
// sliding layer's four-column sums in 18.2 µs, and with the load behind
// the test (a branch and a load a key) they took 20.2.
template <int W, int VB, typename Finish>
__device__ __forceinline__ void value_sums(const float* vb, size_t vstride, const int* ss, const float* es, int olo,
                                           int ohi, int Dv, Finish finish) {
    for (int j = W * threadIdx.x; j < Dv; j += W * RBLOCK) {
        const float* vj = vb + j;
        float acc[W];
#pragma unroll
        for (int w = 0; w < W; w++) acc[w] = 0.0f;
        int o = olo;
        for (; o + VB <= ohi; o += VB) {
            float vv[VB][W];
#pragma unroll
            for (int u = 0; u < VB; u++) {
                const int s = ss[o + u];
                if (s >= 0) {
                    ldv(vv[u], vj + (size_t)s * vstride);
                } else {
#pragma unroll
                    for (int w = 0; w < W; w++) vv[u][w] = 0.0f;
                }
            }
#pragma unroll
            for (int u = 0; u < VB; u++) {
                const float e = es[o + u];
                if (ss[o + u] >= 0 && e != 0.0f)
#pragma unroll
                    for (int w = 0; w < W; w++) acc[w] = __fadd_rn(acc[w], __fmul_rn(e, vv[u][w]));
            }
        }
        for (; o < ohi; o++) {
            const int s = ss[o];
            const float e = es[o];
            if (s < 0 || e == 0.0f) continue;
            float v1[W];
            ldv(v1, vj + (size_t)s * vstride);
#pragma unroll
            for (int w = 0; w < W; w++) acc[w] = __fadd_rn(acc[w], __fmul_rn(e, v1[w]));
        }
#pragma unroll
        for (int w = 0; w < W; w++) finish(j + w, acc[w]);
    }
}

// values_pass is split blockIdx.z of row blockIdx.y's values for head
// blockIdx.x, from the scores scr[r] (r the offset from the row's first
// position) and their maximum mx over all chunks. Split i covers the
// absolute positions of chunk (first >> 10) + i. It writes the split's
// Σ e (double, fixed tree) and Σ float32(e)·v (float32, position order),
// with e = exp(score − max). With out (one split only) it writes the
// normalised result instead, with attn_combine's arithmetic for one split
// (and its split to parts), and attn_combine is not launched. Values are
// loaded VB = 16 at a time ahead of their sums, in position order (64
// ahead gave the same bits and no gain on the H200, and so did two batches
// in flight). Copying 128 KiB of value rows at a time into shared memory
// by cp.async, the first group while attn_fused summed the scores, kept
// the bits too but lost (twelfth session: a sliding layer's call 19.1 ->
// 22.7 µs, the E2B step 4.07 -> 4.24-4.28 ms), although Nsight Compute had
// the value loads as the kernel's longest wait; the copies likely queued
// the scores' key loads, which are on the critical path.
//
// packed (ATTN_PACKED): the value sums were bound by instructions (8.8
// cycles an instruction, a warp's 3,300 of them for 128 keys, in Nsight
// Compute on the 31B shape), each key costing two shared loads, two tests
// and the sums. Packed, the first loop stores a key's slot and weight as
// one pair, with slot −1 for every key the sums skip (e = 0 included), so
// each key costs one shared load and one test, and a head wider than the
// block (512) has both of a thread's columns summed in one pass over the
// keys instead of two. The same keys are summed in the same order.
__device__ __forceinline__ void values_pass(const float* v, const float* scr, float mx, float* pv, double* pe,
                                            const int* slot_of, const int* span, const int* qpos, int L, int Hq,
                                            int Hkv, int S, int Dv, int nsplit, int causal, int window, float* out,
                                            unsigned short* parts, size_t n, int flags,
                                            const unsigned long long* kvp) {
    const bool packed = flags & ATTN_PACKED;
    __shared__ float es[ATTN_CHUNK];
    __shared__ int ss[ATTN_CHUNK];
    __shared__ slot_weight se[ATTN_CHUNK];
    __shared__ double sh[RBLOCK];
    const int h = blockIdx.x, bl = blockIdx.y, b = bl / L, kvh = h / (Hq / Hkv);
    const size_t bh = (size_t)bl * Hq + h;
    const int qp = qpos ? qpos[bl] : 0, mp = span[2 * b];
    const int p0 = ((mp >> 10) + (int)blockIdx.z) << 10; // first position of this split
    // Only offsets whose position lies in [first, last] can hold a key; values
    // are loaded VB at a time ahead of their (ordered) sums.
    const int olo = mp - p0 > 0 ? mp - p0 : 0, ohi = min(ATTN_CHUNK, min(mp + S, span[2 * b + 1] + 1) - p0);
    double part = 0;
    for (int o = threadIdx.x; o < ohi; o += RBLOCK) {
        const int r = p0 + o - mp;
        int s = -1;
        float e = 0.0f;
        if (r >= 0 && r < S) {
            s = slot_of[(size_t)b * S + r];
            if (s >= 0 && visible(p0 + o, qp, causal, window)) {
                const double ed = exp((double)scr[r] - (double)mx);
                part += ed;
                e = (float)ed;
            } else {
                s = -1;
            }
        }
        if (packed) {
            se[o] = slot_weight{e != 0.0f ? s : -1, e};
        } else {
            es[o] = e;
            ss[o] = s;
        }
    }
    const double total = block_sum_d(part, sh); // __syncthreads inside also publishes es, ss, se
    const size_t vstride = (size_t)Hkv * Dv;
    const float* vb = kv_base(v, kvp, b, 1, (size_t)S * vstride) + (size_t)kvh * Dv;
    constexpr int VB = 16;
    // finish writes column j's sum: normalised (attn_combine of one split,
    // whose sums start from zero) or as the split's partial.
    auto finish = [&](int j, float acc) {
        if (out) {
            const double e = 0.0 + total;
            const float a = __fadd_rn(0.0f, acc), r = e > 0 ? (float)((double)a / e) : 0.0f;
            out[bh * Dv + j] = r;
            emit(parts, n, bh * Dv + j, r);
            return;
        }
        pv[(bh * nsplit + blockIdx.z) * Dv + j] = acc;
    };
    if (packed) {
        // Columns j and j + RBLOCK (heads wider than the block) in one pass
        // over the keys: each key's pair is read once for both, and the
        // two sums, each in position order, interleave.
        for (int j = threadIdx.x; j < Dv; j += 2 * RBLOCK) {
            const bool two = j + RBLOCK < Dv;
            const float* vj = vb + j;
            float a0 = 0.0f, a1 = 0.0f;
            int o = olo;
            for (; o + VB <= ohi; o += VB) {
                slot_weight p[VB];
                float v0[VB], v1[VB];
#pragma unroll
                for (int u = 0; u < VB; u++) {
                    p[u] = se[o + u];
                    const float* row = vj + (size_t)(p[u].s > 0 ? p[u].s : 0) * vstride;
                    v0[u] = p[u].s >= 0 ? row[0] : 0.0f;
                    v1[u] = p[u].s >= 0 && two ? row[RBLOCK] : 0.0f;
                }
#pragma unroll
                for (int u = 0; u < VB; u++)
                    if (p[u].s >= 0) {
                        a0 = __fadd_rn(a0, __fmul_rn(p[u].e, v0[u]));
                        a1 = __fadd_rn(a1, __fmul_rn(p[u].e, v1[u]));
                    }
            }
            for (; o < ohi; o++) {
                const slot_weight p = se[o];
                if (p.s < 0) continue;
                const float* row = vj + (size_t)p.s * vstride;
                a0 = __fadd_rn(a0, __fmul_rn(p.e, row[0]));
                if (two) a1 = __fadd_rn(a1, __fmul_rn(p.e, row[RBLOCK]));
            }
            finish(j, a0);
            if (two) finish(j + RBLOCK, a1);
        }
    } else if (flags & ATTN_COLS4) {
        value_sums<4, VB>(vb, vstride, ss, es, olo, ohi, Dv, finish);
    } else {
        value_sums<1, VB>(vb, vstride, ss, es, olo, ohi, Dv, finish);
    }
    if (!out && threadIdx.x == 0) pe[bh * nsplit + blockIdx.z] = total;
}

// attn_values: grid (Hq, B·L, nsplit), block RBLOCK: values_pass with the
// exact maximum over the nscore chunk maxima.
extern "C" __global__ void attn_values(const float* v, const float* sc, const float* cmax, float* pv, double* pe,
                                       const int* slot_of, const int* span, const int* qpos, int L, int Hq, int Hkv,
                                       int S, int Dv, int nscore, int nsplit, int causal, int window, float* out,
                                       unsigned short* parts, size_t n, int flags, const unsigned long long* kvp) {
    pdl_start();
    const size_t bh = (size_t)blockIdx.y * Hq + blockIdx.x;
    float mx = -__int_as_float(0x7f800000);
    for (int i = 0; i < nscore; i++) mx = fmax_nan(mx, cmax[bh * nscore + i]);
    values_pass(v, sc + bh * S, mx, pv, pe, slot_of, span, qpos, L, Hq, Hkv, S, Dv, nsplit, causal, window, out,
                parts, n, flags, kvp);
}

// attn_fused: attn_scores and attn_values in one block, for passes whose
// every row's keys lie in one position chunk and whose values kernel
// combines its one split (decode and verify at contexts within a chunk,
// and every sliding layer's window that does not straddle two; grid
// (Hq, B·L), TANDEM_CUDA_ATTN_FUSED=1). The scores stay in shared memory,
// and the maximum is the block's own: every chunk of offsets past the
// first holds no key, so attn_values' fold over their maxima (−∞) leaves
// the first chunk's as it is. The same arithmetic in the same order, so
// the same bits, and one launch and one round trip through memory fewer.
extern "C" __global__ void attn_fused(const float* q, const float* k, const float* v, const int* slot_of,
                                      const int* span, const int* qpos, int L, int Hq, int Hkv, int S, int D, int Dv,
                                      float scale, int causal, int window, float* out, unsigned short* parts,
                                      size_t n, int flags, const unsigned long long* kvp) {
    pdl_start();
    __shared__ float qs[512];
    __shared__ float shm[RBLOCK];
    __shared__ float scs[ATTN_CHUNK];
    float m = scores_pass(q, k, scs, slot_of, span, qpos, L, Hq, Hkv, S, D, scale, causal, window, 0, ATTN_CHUNK, qs,
                          kvp);
    if (ATTN_STOP == 1) { // timing builds only (TestAttentionSpeed): the scores alone
        if (m == 12345.0f) out[0] = m; // keeps the scores from being optimised away
        return;
    }
    m = block_tree0(m, shm, max_nan());
    if (threadIdx.x == 0) shm[0] = m;
    __syncthreads(); // publishes the scores and their maximum
    if (ATTN_STOP == 2) { // the scores and their maximum
        if (shm[0] == 12345.0f) out[0] = shm[0];
        return;
    }
    const float mx = fmax_nan(-__int_as_float(0x7f800000), shm[0]);
    values_pass(v, scs, mx, 0, 0, slot_of, span, qpos, L, Hq, Hkv, S, Dv, 1, causal, window, out, parts, n, flags,
                kvp);
}

// cp_async16 copies 16 bytes from global to shared memory without a
// register (sm_80); cp_async_commit closes a group of copies and
// cp_async_wait<N> waits until at most N of the thread's groups are in
// flight.
__device__ __forceinline__ void cp_async16(void* dst, const void* src) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(smem_addr(dst)), "l"(src) : "memory");
#endif
}
__device__ __forceinline__ void cp_async_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;" ::: "memory");
#endif
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
#endif
}

// cluster_arrive and cluster_wait are cluster_sync's halves: a block may
// work between telling the cluster it is done with their shared memory and
// waiting for the others to be done with its own.
__device__ __forceinline__ void cluster_arrive() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
#endif
}
__device__ __forceinline__ void cluster_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
#endif
}

// cluster_score is a key's score as attn_fused sums it: q·k in element
// order (the key's row at kp, the query at qs, both 16-byte aligned), times
// scale.
__device__ __forceinline__ float cluster_score(const float* kp, const float* qs, int D, float scale) {
    float dot = 0.0f;
    for (int j = 0; j < D; j += 4) {
        const float4 kk = *(const float4*)(kp + j), qq = *(const float4*)(qs + j);
        dot = fmaf(qq.x, kk.x, dot);
        dot = fmaf(qq.y, kk.y, dot);
        dot = fmaf(qq.z, kk.z, dot);
        dot = fmaf(qq.w, kk.w, dot);
    }
    return __fmul_rn(dot, scale);
}

// cluster_column is column j's value sum over a row's nk key offsets from
// position mp (its last position last): each split's sum over its keys in
// position order (values_pass), then the splits added in order from zero
// (attn_combine). A key counts where its slot is not −1 and its weight
// (es) not zero; its values are row r of vst, W apart.
__device__ __forceinline__ float cluster_column(const float* vst, int W, int j, const float* es, const int* sslot, int mp,
                                                int S, int last, int nk, int nsplit) {
    float acc = 0.0f;
    for (int i = 0; i < nsplit; i++) {
        const int p0 = ((mp >> 10) + i) << 10;
        const int r0 = max(0, p0 - mp), r1 = min(min(ATTN_CHUNK, min(mp + S, last + 1) - p0) + p0 - mp, nk);
        float a = 0.0f;
#pragma unroll 8
        for (int r = r0; r < r1; r++) {
            const float ef = es[r];
            if (sslot[r] >= 0 && ef != 0.0f) a = __fadd_rn(a, __fmul_rn(ef, vst[(size_t)r * W + j]));
        }
        acc = __fadd_rn(acc, a);
    }
    return acc;
}

// attn_cluster is attn_fused with a (head, row)'s work spread over a
// thread block cluster of C blocks (grid (Hq·C, B·L), cluster (C, 1, 1);
// TANDEM_CUDA_ATTN_CLUSTER). attn_fused runs a head on one multiprocessor,
// and its threads load their key 32 elements and their values 16 keys at a
// time, each load waiting for the sums before it: 16-32 memory round trips
// in a row. Here block c copies the keys [c·kpb, (c+1)·kpb) whole and
// columns [c·W, (c+1)·W) of every key's value row into shared memory, all
// at once (cp.async), and the cluster's blocks share the scores through
// distributed shared memory. The arithmetic is attn_fused's, op for op: a
// key's score is the same fma chain in element order; every block takes
// the maximum and Σ e over all the row's scores with attn_fused's thread
// assignment and trees; and each column sums its keys in position order.
// So the bits are attn_fused's.
//
// Rows whose keys straddle position chunks (a sliding window past a
// multiple of 1,024; TANDEM_CUDA_ATTN_CLUSTER_SPLITS) are the split path's
// work: attn_scores, attn_values a split (chunk of positions) and
// attn_combine. With nsplit of them, each block takes every split's Σ e
// and value sums as attn_values does and adds the splits in order as
// attn_combine does, so the bits are that path's. With one split the
// combine's arithmetic is attn_fused's finish.
//
// Dynamic shared memory, in floats: the query (D), the scores, the keys'
// slots (−1: not summed) and weights (nkmax each, indexed by offset r), the
// block's keys (kpbmax rows of D + 4: a thread reading its key's row in
// 16-byte steps hits other banks than its neighbours), and its value
// columns (nkmax rows of W). D, Dv, nkmax and W are multiples of 4 and the
// rows of k and v start on 16 bytes (checked by the host).
// attn_cluster_rounds (TANDEM_CUDA_ATTN_CLUSTER_ROUNDS) is attn_cluster for
// rows whose keys and value columns would not fit a block's shared memory
// at once (a 31B sliding window of 1,024 keys: 261 KiB a block at 8 blocks
// a cluster): a block copies its keys KG at a time and its value columns
// VG keys at a time, each into one of two buffers while the other is
// summed. The same operations in the same order: a split's value sum runs
// over its keys in position order across the rounds, and the splits are
// added in order as before. Its shared memory: the query, the scores,
// slots and weights as attn_cluster's, then two key buffers of KG rows of
// D + 4 and two value buffers of VG rows of W.
//
// attn_cluster_normed is attn_cluster with qkv_norms' work for rows of one
// query (decode) folded in (head_norms): q holds the raw queries, and each
// block normalises and rotates its query head itself, as qkv_norms' block
// a row would (rowThreads(D) = RBLOCK for D ≤ 1536: the same reduction).
// Where the layer has keys of its own (hn.k), the row's new key, at offset
// qp − mp, is copied by no block: the block holding that offset computes
// it into its key rows, every block its value columns, and block 0 of the
// kv head's first query head writes both into the cache slot the row's
// table names for them (the host checks it is the slot QKVNorms would
// write). The same operations on the same operands as qkv_norms and then
// attn_cluster, so the same bits, one launch fewer a layer.
struct head_norms {
    const float *k, *v; // the raw new keys and values, [B, Hkv, D] (v may be k); nil: queries only
    const void *qw, *kw;
    int qwt, kwt;
    float eps;
    const float* freq;
    int half;
};

// fold_pre is a thread's share of attn_cluster_normed's rows known before
// the kernel before it is done, read before griddepcontrol.wait: its pair
// j = threadIdx.x's angle and the weights of elements j, j + half and
// 2·half + j (the host folds heads of at most 512 with at most RBLOCK
// elements past the pairs: a thread an element). The positions' table is
// uploaded by a copy queued before this kernel; the rest are model weights
// (the host checks).
struct fold_pre {
    float c, s, wq[3], wk[3];
    bool f0;
};

__device__ __forceinline__ fold_pre fold_start(const head_norms& hn, int qp, int D) {
    fold_pre f;
    f.c = 1.0f, f.s = 0.0f, f.f0 = true;
    const int j = threadIdx.x, at[3] = {j, j + hn.half, 2 * hn.half + j};
    if (j < hn.half) {
        const float fr = hn.freq[j];
        f.f0 = fr == 0.0f;
        if (!f.f0) angle((float)qp, fr, f.c, f.s);
    }
#pragma unroll
    for (int u = 0; u < 3; u++) {
        const bool in = u < 2 ? j < hn.half : at[2] < D;
        f.wq[u] = in && hn.qw ? load(hn.qw, hn.qwt, at[u]) : 1.0f;
        f.wk[u] = in && hn.kw ? load(hn.kw, hn.kwt, at[u]) : 1.0f;
    }
    return f;
}

// weighed is normed's arithmetic with the weight's element read before:
// x scaled by r, then by w where there is a weight.
__device__ __forceinline__ float weighed(float x, float r, bool has, float w) {
    const float v = __fmul_rn(x, r);
    return has ? __fmul_rn(v, w) : v;
}

// fold_rows is a thread's share of attn_cluster_normed's raw rows: the
// sums of squares of its elements t and t + RBLOCK (row_ss's for heads of
// at most 512) of the query, the key (where its block holds the new key)
// and the value, and its value elements.
struct fold_rows {
    double ss[3];
    float v[2];
};

// fold_load loads a thread's elements of the raw rows xq, xk (nil unless
// the block holds the new key) and xv (nil for queries alone), all before
// any is used, so that they are in flight before the block's copies (which
// they would otherwise queue behind), and leaves the query's and the key's
// in qs and krow for their pairs' owners (fold_finish).
__device__ __forceinline__ fold_rows fold_load(const float* xq, float* qs, const float* xk, float* krow,
                                               const float* xv, int D) {
    float x[3][2];
    const int t = threadIdx.x;
#pragma unroll
    for (int u = 0; u < 2; u++) {
        const int e = t + u * RBLOCK;
        x[0][u] = e < D ? xq[e] : 0.0f;
        x[1][u] = xk && e < D ? xk[e] : 0.0f;
        x[2][u] = xv && e < D ? xv[e] : 0.0f;
    }
    fold_rows f;
#pragma unroll
    for (int i = 0; i < 3; i++) {
        double ss = 0;
#pragma unroll
        for (int u = 0; u < 2; u++)
            if (t + u * RBLOCK < D) ss += (double)x[i][u] * (double)x[i][u];
        f.ss[i] = ss;
    }
#pragma unroll
    for (int u = 0; u < 2; u++) {
        const int e = t + u * RBLOCK;
        if (e < D) {
            qs[e] = x[0][u];
            if (krow) krow[e] = x[1][u];
        }
        f.v[u] = x[2][u];
    }
    return f;
}

// fold_finish normalises the rows fold_load left: the query in qs and the
// key in krow in place, rotated (each pair by its owner thread), the key
// into kcache too where this block writes the cache, and the thread's
// value elements into the block's columns [c0, c0 + w) of vcol and, with
// vcache, the cache's row: qkv_store's arithmetic, with fold_start's
// angles and weights. The three sums reduce together, each in
// row_rscale's order; their barriers publish fold_load's rows.
__device__ __forceinline__ void fold_finish(const head_norms& hn, const fold_pre& f, fold_rows& fr, float* qs,
                                            float* krow, float* kcache, float* vcol, float* vcache, int c0, int w,
                                            int D) {
    __shared__ double sh3[3 * RBLOCK];
    norm_sums_d<3>(fr.ss, sh3);
    float r[3];
#pragma unroll
    for (int i = 0; i < 3; i++) r[i] = rscale(fr.ss[i], D, hn.eps);
    const int j = threadIdx.x, half = hn.half, j2 = 2 * half + j;
    if (j < half) {
        turn(qs, j, half, weighed(qs[j], r[0], hn.qw, f.wq[0]), weighed(qs[j + half], r[0], hn.qw, f.wq[1]), f.c, f.s,
             f.f0);
        if (krow) {
            const float x0 = weighed(krow[j], r[1], hn.kw, f.wk[0]), x1 = weighed(krow[j + half], r[1], hn.kw, f.wk[1]);
            turn(krow, j, half, x0, x1, f.c, f.s, f.f0);
            if (kcache) turn(kcache, j, half, x0, x1, f.c, f.s, f.f0);
        }
    }
    if (j2 < D) {
        qs[j2] = weighed(qs[j2], r[0], hn.qw, f.wq[2]);
        if (krow) {
            krow[j2] = weighed(krow[j2], r[1], hn.kw, f.wk[2]);
            if (kcache) kcache[j2] = krow[j2];
        }
    }
    if (!hn.k) return;
#pragma unroll
    for (int u = 0; u < 2; u++) {
        const int e = j + u * RBLOCK;
        if (e >= D) continue;
        const float x = __fmul_rn(fr.v[u], r[2]); // normed without a weight
        if (e >= c0 && e < c0 + w) vcol[e - c0] = x;
        if (vcache) vcache[e] = x;
    }
}

template <bool Rounds, bool Fold>
__device__ __forceinline__ void attn_cluster_body(const float* q, const float* k, const float* v, const int* slot_of,
                                                  const int* span, const int* qpos, int L, int Hq, int Hkv, int S,
                                                  int D, int Dv, float scale, int causal, int window, float* out,
                                                  unsigned short* parts, size_t n, int C, int nkmax, int kpbmax, int W,
                                                  int nsplit, int KG, int VG, const unsigned long long* kvp,
                                                  const head_norms& hn) {
    extern __shared__ float4 dyn4[];
    __shared__ float shm[RBLOCK];
    __shared__ double sh[RBLOCK];
    fold_pre pre;
    if (Fold) pre = fold_start(hn, qpos ? qpos[blockIdx.y] : 0, D);
    pdl_start();
    float* qs = (float*)dyn4;
    float* scs = qs + D;
    int* sslot = (int*)(scs + nkmax);
    float* es = (float*)(sslot + nkmax);
    float* kst = es + nkmax;
    float* vst = kst + (size_t)(Rounds ? 2 * KG : kpbmax) * (D + 4);
    const int c = blockIdx.x % C, h = blockIdx.x / C, bl = blockIdx.y, b = bl / L, kvh = h / (Hq / Hkv);
    const size_t bh = (size_t)bl * Hq + h;
    const int qp = qpos ? qpos[bl] : 0, mp = span[2 * b];
    // The row's key offsets, r < nk (at most nkmax: the host takes rows of
    // up to ATTN_CHUNK positions).
    const int nk = max(0, min(S, span[2 * b + 1] - mp + 1));
    const int kpb = (nk + C - 1) / C, k0 = min(nk, c * kpb), k1 = min(nk, k0 + kpb), D4 = D / 4;
    const int c0 = c * W, w = max(0, min(W, Dv - c0)), W4 = w / 4;
    // The new key's offset, which the copies skip (attn_cluster_normed with
    // keys of the layer's own; −1 matches no offset), and the block whose
    // keys hold it: it normalises the key into its row, and in the cluster
    // of the kv head's first query head writes the key and value into the
    // cache.
    const int rnew = Fold && hn.k ? qp - mp : -1;
    float* krow = Fold && rnew >= k0 && rnew < k1 ? kst + (size_t)(rnew - k0) * (D + 4) : 0;
    const bool writer = krow && h % (Hq / Hkv) == 0;
    fold_rows raw;
    if (Fold)
        raw = fold_load(q + bh * D, qs, krow ? hn.k + ((size_t)bl * Hkv + kvh) * D : 0, krow,
                        hn.k ? hn.v + ((size_t)bl * Hkv + kvh) * D : 0, D);
    else
        for (int j = threadIdx.x; j < D; j += RBLOCK) qs[j] = q[bh * D + j];
    for (int r = threadIdx.x; r < nk; r += RBLOCK) {
        const int s = slot_of[(size_t)b * S + r];
        sslot[r] = s >= 0 && visible(mp + r, qp, causal, window) ? s : -1;
    }
    __syncthreads();
    const size_t vstride = (size_t)Hkv * Dv;
    const float* vb = kv_base(v, kvp, b, 1, (size_t)S * vstride) + (size_t)kvh * Dv + c0;
    const float* kbase = kv_base(k, kvp, b, 0, (size_t)S * Hkv * D) + (size_t)kvh * D;
    // copy_keys queues keys [a, z) of the block's into rows from kb; copy_values
    // the block's columns of keys [a, z) of the row into rows from vd.
    auto copy_keys = [&](int a, int z, float* kb) {
        for (int i = threadIdx.x; i < (z - a) * D4; i += RBLOCK) {
            const int kr = i / D4, j = i - kr * D4, s = sslot[a + kr];
            if (s >= 0 && a + kr != rnew) cp_async16(kb + (size_t)kr * (D + 4) + 4 * j, kbase + (size_t)s * Hkv * D + 4 * j);
        }
    };
    auto copy_values = [&](int a, int z, float* vd) {
        for (int i = threadIdx.x; i < (z - a) * W4; i += RBLOCK) {
            const int r = i / W4, j = i - r * W4, s = sslot[a + r];
            if (s >= 0 && a + r != rnew) cp_async16(vd + (size_t)r * W + 4 * j, vb + (size_t)s * vstride + 4 * j);
        }
    };
    // score sums each of keys [a, z)'s q·k in element order from its row at kb.
    auto score = [&](int a, int z, const float* kb) {
        for (int kr = threadIdx.x; kr < z - a; kr += RBLOCK) {
            if (sslot[a + kr] < 0) continue;
            scs[a + kr] = cluster_score(kb + (size_t)kr * (D + 4), qs, D, scale);
        }
    };
    if (Rounds) {
        // Key rounds of KG, two buffers: round g + 1's copies fly while
        // round g is summed.
        const int nr = (k1 - k0 + KG - 1) / KG;
        if (nr > 0) copy_keys(k0, min(k1, k0 + KG), kst);
        cp_async_commit();
        for (int g = 0; g < nr; g++) {
            const int a = k0 + g * KG;
            if (g + 1 < nr) copy_keys(a + KG, min(k1, a + 2 * KG), kst + (size_t)((g + 1) & 1) * KG * (D + 4));
            cp_async_commit();
            cp_async_wait<1>();
            __syncthreads(); // round g's keys are in
            score(a, min(k1, a + KG), kst + (size_t)(g & 1) * KG * (D + 4));
            __syncthreads(); // its buffer is free for round g + 2
        }
        // The first two value rounds fly while the scores are gathered.
        copy_values(0, min(nk, VG), vst);
        cp_async_commit();
        copy_values(min(nk, VG), min(nk, 2 * VG), vst + (size_t)VG * W);
        cp_async_commit();
    } else {
        // This block's keys, then its value columns of every key, each a
        // group of copies: the scores wait for the first only.
        copy_keys(k0, k1, kst);
        cp_async_commit();
        copy_values(0, nk, vst);
        cp_async_commit();
        if (Fold) { // while the copies fly
            float *kcache = 0, *vcache = 0;
            if (writer) {
                const int s = sslot[rnew];
                kcache = (float*)kbase + (size_t)s * Hkv * D;
                vcache = (float*)kv_base(v, kvp, b, 1, (size_t)S * vstride) + (size_t)kvh * Dv + (size_t)s * vstride;
            }
            fold_finish(hn, pre, raw, qs, krow, kcache, vst + (size_t)max(rnew, 0) * W, vcache, c0, w, D);
        }
        cp_async_wait<1>();
        __syncthreads(); // the block's keys are in
        score(k0, k1, kst);
    }
    cluster_sync(); // every block's scores are written
    for (int r = threadIdx.x; r < nk; r += RBLOCK) {
        const int owner = r / kpb;
        if (owner != c && sslot[r] >= 0) scs[r] = cluster_ld(scs + r, owner);
    }
    cluster_arrive(); // done with the other blocks' shared memory
    __syncthreads();
    // scores_pass's maximum: thread t over offsets t + u·RBLOCK, then the tree.
    float m = -__int_as_float(0x7f800000);
    for (int r = threadIdx.x; r < nk; r += RBLOCK)
        if (sslot[r] >= 0) m = fmax_nan(m, scs[r]);
    m = block_tree0(m, shm, max_nan());
    if (threadIdx.x == 0) shm[0] = m;
    __syncthreads();
    const float mx = fmax_nan(-__int_as_float(0x7f800000), shm[0]);
    // values_pass's weights and Σ e, split by split: split i covers the
    // positions [p0, p0 + ATTN_CHUNK), p0 = ((mp >> 10) + i) << 10, and
    // thread t its offsets o = t + u·RBLOCK, position p0 + o being offset
    // r from mp. attn_combine adds the splits' Σ e in split order.
    double e = 0;
    for (int i = 0; i < nsplit; i++) {
        const int p0 = ((mp >> 10) + i) << 10;
        const int ohi = min(ATTN_CHUNK, min(mp + S, span[2 * b + 1] + 1) - p0);
        double part = 0;
        for (int o = threadIdx.x; o < ohi; o += RBLOCK) {
            const int r = p0 + o - mp;
            if (r < 0 || r >= nk) continue;
            float ef = 0.0f;
            if (sslot[r] >= 0) {
                const double ed = exp((double)scs[r] - (double)mx);
                part += ed;
                ef = (float)ed;
            }
            es[r] = ef;
        }
        e += block_sum_d(part, sh); // publishes es too
    }
    if (Rounds) {
        // Value rounds of VG keys in position order, two buffers. A
        // column's running sum a is its current split's (split si of key
        // r: the chunk of position mp + r, counted from mp's); crossing
        // into the next split adds it to acc, as attn_combine adds the
        // splits, and the splits past the row's last add their zeros.
        const int nr = (nk + VG - 1) / VG;
        float a = 0.0f, acc = 0.0f;
        int cur = 0;
        for (int g = 0; g < nr; g++) {
            cp_async_wait<1>();
            __syncthreads(); // round g's values are in
            const float* vg = vst + (size_t)(g & 1) * VG * W;
            if (threadIdx.x < w) {
                const int j = threadIdx.x;
                for (int r = g * VG; r < min(nk, (g + 1) * VG); r++) {
                    for (const int si = ((mp + r) >> 10) - (mp >> 10); cur < si; cur++) {
                        acc = __fadd_rn(acc, a);
                        a = 0.0f;
                    }
                    const float ef = es[r];
                    if (sslot[r] >= 0 && ef != 0.0f) a = __fadd_rn(a, __fmul_rn(ef, vg[(size_t)(r - g * VG) * W + j]));
                }
            }
            __syncthreads(); // its buffer is free for round g + 2
            if (g + 2 < nr) copy_values((g + 2) * VG, min(nk, (g + 3) * VG), vst + (size_t)(g & 1) * VG * W);
            cp_async_commit();
        }
        if (threadIdx.x < w) {
            for (; cur < nsplit; cur++) {
                acc = __fadd_rn(acc, a);
                a = 0.0f;
            }
            const float res = e > 0 ? (float)((double)acc / e) : 0.0f;
            out[bh * Dv + c0 + threadIdx.x] = res;
            emit(parts, n, bh * Dv + c0 + threadIdx.x, res);
        }
    } else {
        cp_async_wait<0>();
        __syncthreads(); // the value columns are in
        for (int j = threadIdx.x; j < w; j += RBLOCK) {
            const float acc = cluster_column(vst, W, j, es, sslot, mp, S, span[2 * b + 1], nk, nsplit);
            const float res = e > 0 ? (float)((double)acc / e) : 0.0f;
            out[bh * Dv + c0 + j] = res;
            emit(parts, n, bh * Dv + c0 + j, res);
        }
    }
    cluster_wait(); // no block leaves while another reads its scores
}

extern "C" __global__ void __launch_bounds__(RBLOCK, 4)
    attn_cluster(const float* q, const float* k, const float* v, const int* slot_of, const int* span, const int* qpos,
                 int L, int Hq, int Hkv, int S, int D, int Dv, float scale, int causal, int window, float* out,
                 unsigned short* parts, size_t n, int C, int nkmax, int kpbmax, int W, int nsplit,
                 const unsigned long long* kvp) {
    attn_cluster_body<false, false>(q, k, v, slot_of, span, qpos, L, Hq, Hkv, S, D, Dv, scale, causal, window, out,
                                    parts, n, C, nkmax, kpbmax, W, nsplit, 0, 0, kvp, head_norms{});
}

extern "C" __global__ void __launch_bounds__(RBLOCK, 4)
    attn_cluster_normed(const float* q, const float* k, const float* v, const int* slot_of, const int* span,
                        const int* qpos, int L, int Hq, int Hkv, int S, int D, int Dv, float scale, int causal,
                        int window, float* out, unsigned short* parts, size_t n, int C, int nkmax, int kpbmax, int W,
                        int nsplit, const unsigned long long* kvp, const float* kn, const float* vn, const void* qw,
                        int qwt, const void* kw, int kwt, float eps, const float* freq, int half) {
    attn_cluster_body<false, true>(q, k, v, slot_of, span, qpos, L, Hq, Hkv, S, D, Dv, scale, causal, window, out,
                                   parts, n, C, nkmax, kpbmax, W, nsplit, 0, 0, kvp,
                                   head_norms{kn, vn, qw, kw, qwt, kwt, eps, freq, half});
}

extern "C" __global__ void __launch_bounds__(RBLOCK, 4)
    attn_cluster_rounds(const float* q, const float* k, const float* v, const int* slot_of, const int* span,
                        const int* qpos, int L, int Hq, int Hkv, int S, int D, int Dv, float scale, int causal,
                        int window, float* out, unsigned short* parts, size_t n, int C, int nkmax, int kpbmax, int W,
                        int nsplit, int KG, int VG, const unsigned long long* kvp) {
    attn_cluster_body<true, false>(q, k, v, slot_of, span, qpos, L, Hq, Hkv, S, D, Dv, scale, causal, window, out,
                                   parts, n, C, nkmax, kpbmax, W, nsplit, KG, VG, kvp, head_norms{});
}

// attn_cluster_group is attn_cluster for a cluster of R = QG·L rows: QG
// query heads of one kv head (QG divides Hq/Hkv) at each of a batch row's
// L queries (a verify; grid ((Hq/QG)·C, B), cluster (C, 1, 1), blocks of
// GROUP_THREADS). attn_cluster takes a cluster a (head, row), and a 31B
// verify's four queries of 32 heads are 128 of them, more than fit the
// device beside the o product, so they took attn_fused: a block a (head,
// row), each loading its kv head's keys and values alone (24.9 µs a layer
// stamped, against a step's attn_cluster 15.2). Here block c copies keys
// [c·kpb, (c+1)·kpb) and value columns [c·W, (c+1)·W) once for the R rows
// (every key one of them sees), and each row's work is attn_cluster's op
// for op: a score is the same fma chain; the maximum and each split's Σ e
// take block_tree0's order over 256 threads through warp_tree256 (a warp a
// row, lane l standing in for threads l + 32j), from exponentials all the
// block's threads computed; each column sums its keys in position order.
// So the bits are attn_cluster's, which are attn_fused's. A block has four
// times attn_cluster's threads, since it does R rows' work: at 256 the
// rows' score chains, exponentials and column sums ran one after another
// in each thread, and a 31B verify's layer took 20 µs against attn_fused's
// 15.5 (a thread a key for four rows, or four columns, took longer still).
//
// Dynamic shared memory: the rows' exponentials (R·nkmax doubles, row i
// at i·nkmax), then in floats the R queries (R·D, their rows on 16 bytes:
// checked by the host); their scores, slots (−1: not summed by the row)
// and weights (R·nkmax each); the keys' slots for the copies (nkmax); the
// block's keys (kpbmax rows of D + 4) and its value columns (nkmax rows of
// W).
#define ATTN_GROUP_MAX 8 // a cluster's most rows: a warp each for the trees
#define GROUP_THREADS 1024
extern "C" __global__ void __launch_bounds__(GROUP_THREADS, 1)
    attn_cluster_group(const float* q, const float* k, const float* v, const int* slot_of, const int* span,
                       const int* qpos, int L, int Hq, int Hkv, int S, int D, int Dv, float scale, int causal,
                       int window, float* out, unsigned short* parts, size_t n, int C, int nkmax, int kpbmax, int W,
                       int nsplit, int QG, const unsigned long long* kvp) {
    extern __shared__ float4 dyn4[];
    __shared__ double erow[ATTN_GROUP_MAX];
    __shared__ float mxs[ATTN_GROUP_MAX];
    __shared__ int qps[ATTN_GROUP_MAX];
    pdl_start();
    const int R = QG * L, T = GROUP_THREADS; // R ≤ ATTN_GROUP_MAX: the host's plan
    double* eds = (double*)dyn4;
    float* qs = (float*)(eds + (size_t)R * nkmax);
    float* scs = qs + (size_t)R * D;
    int* sslot = (int*)(scs + (size_t)R * nkmax);
    float* es = (float*)(sslot + (size_t)R * nkmax);
    int* sb = (int*)(es + (size_t)R * nkmax);
    float* kst = (float*)(sb + nkmax);
    float* vst = kst + (size_t)kpbmax * (D + 4);
    const int c = blockIdx.x % C, h0 = blockIdx.x / C * QG, b = blockIdx.y, kvh = h0 / (Hq / Hkv);
    const int mp = span[2 * b], nk = max(0, min(S, span[2 * b + 1] - mp + 1));
    // Row i is head h0 + i / L at query i % L: batch row b·L + i % L.
    auto bh_of = [&](int i) { return (size_t)(b * L + i % L) * Hq + h0 + i / L; };
    // The queries by asynchronous copies, a group of their own (read one by
    // one, each thread's loads and stores waited out an L2 round trip
    // each), and the rows' query positions, read once.
    const int D4 = D / 4;
    for (int e = threadIdx.x; e < R * D4; e += T) {
        const int i = e / D4, j = e - i * D4;
        cp_async16(qs + (size_t)i * D + 4 * j, q + bh_of(i) * D + 4 * j);
    }
    cp_async_commit();
    if (threadIdx.x < L) qps[threadIdx.x] = qpos ? qpos[b * L + threadIdx.x] : 0;
    __syncthreads();
    for (int r = threadIdx.x; r < nk; r += T) {
        const int s = slot_of[(size_t)b * S + r];
        bool any = false;
        for (int i = 0; i < R; i++) {
            const bool on = s >= 0 && visible(mp + r, qps[i % L], causal, window);
            sslot[i * nkmax + r] = on ? s : -1;
            any |= on;
        }
        sb[r] = any ? s : -1;
    }
    __syncthreads();
    const int kpb = (nk + C - 1) / C, k0 = min(nk, c * kpb), k1 = min(nk, k0 + kpb);
    const int c0 = c * W, w = max(0, min(W, Dv - c0)), W4 = w / 4;
    const size_t vstride = (size_t)Hkv * Dv;
    const float* vb = kv_base(v, kvp, b, 1, (size_t)S * vstride) + (size_t)kvh * Dv + c0;
    const float* kbase = kv_base(k, kvp, b, 0, (size_t)S * Hkv * D) + (size_t)kvh * D;
    // The block's keys, then its value columns of every key, each a group
    // of copies: the scores wait for the queries' and the keys' only.
    for (int i = threadIdx.x; i < (k1 - k0) * D4; i += T) {
        const int kr = i / D4, j = i - kr * D4, s = sb[k0 + kr];
        if (s >= 0) cp_async16(kst + (size_t)kr * (D + 4) + 4 * j, kbase + (size_t)s * Hkv * D + 4 * j);
    }
    cp_async_commit();
    for (int i = threadIdx.x; i < nk * W4; i += T) {
        const int r = i / W4, j = i - r * W4, s = sb[r];
        if (s >= 0) cp_async16(vst + (size_t)r * W + 4 * j, vb + (size_t)s * vstride + 4 * j);
    }
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads(); // the queries and the block's keys are in
    const int nb = k1 - k0;
    for (int e = threadIdx.x; e < R * nb; e += T) {
        const int i = e / nb, r = k0 + e - i * nb;
        if (sslot[i * nkmax + r] >= 0)
            scs[i * nkmax + r] = cluster_score(kst + (size_t)(r - k0) * (D + 4), qs + (size_t)i * D, D, scale);
    }
    cluster_sync(); // every block's scores are written
    // The other blocks' scores, four reads in flight a thread before their
    // stores (a read and its store a time waited out each round trip).
    for (int e0 = threadIdx.x; e0 < R * nk; e0 += 4 * T) {
        float sv[4];
        int at[4];
#pragma unroll
        for (int u = 0; u < 4; u++) {
            const int e = e0 + u * T, i = e / nk, r = e - i * nk;
            at[u] = e < R * nk && r / kpb != c && sslot[i * nkmax + r] >= 0 ? i * nkmax + r : -1;
            sv[u] = at[u] >= 0 ? cluster_ld(scs + at[u], r / kpb) : 0.0f;
        }
#pragma unroll
        for (int u = 0; u < 4; u++)
            if (at[u] >= 0) scs[at[u]] = sv[u];
    }
    cluster_arrive(); // done with the other blocks' shared memory
    __syncthreads();
    // A warp a row: attn_cluster's maximum, thread t's share (offsets
    // t + u·256) in lane t % 32's entry t / 32.
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    if (wid < R) {
        const int* si = sslot + wid * nkmax;
        const float* sci = scs + wid * nkmax;
        float mv[8];
#pragma unroll
        for (int j = 0; j < 8; j++) {
            float m = -__int_as_float(0x7f800000);
            for (int r = lane + 32 * j; r < nk; r += 256)
                if (si[r] >= 0) m = fmax_nan(m, sci[r]);
            mv[j] = m;
        }
        const float mx = fmax_nan(-__int_as_float(0x7f800000), warp_tree256(mv, max_nan()));
        if (lane == 0) mxs[wid] = mx;
    }
    __syncthreads();
    // Every (row, key)'s exponential at once, as attn_cluster's threads
    // take theirs: e = exp(score − max) in double, and its float weight.
    for (int e = threadIdx.x; e < R * nk; e += T) {
        const int i = e / nk, at = i * nkmax + e - i * nk;
        double ed = 0;
        if (sslot[at] >= 0) ed = exp((double)scs[at] - (double)mxs[i]);
        eds[at] = ed;
        es[at] = sslot[at] >= 0 ? (float)ed : 0.0f;
    }
    __syncthreads();
    // A warp a row: each split's Σ e, thread t's share (its offsets o = t +
    // u·256 in the split's chunk, in order) in lane t % 32's entry t / 32.
    if (wid < R) {
        const int* si = sslot + wid * nkmax;
        const double* ei = eds + wid * nkmax;
        double e = 0;
        for (int sp = 0; sp < nsplit; sp++) {
            const int p0 = ((mp >> 10) + sp) << 10;
            const int ohi = min(ATTN_CHUNK, min(mp + S, span[2 * b + 1] + 1) - p0);
            double part[8];
#pragma unroll
            for (int j = 0; j < 8; j++) {
                double pt = 0;
                for (int o = lane + 32 * j; o < ohi; o += 256) {
                    const int r = p0 + o - mp;
                    if (r >= 0 && r < nk && si[r] >= 0) pt += ei[r];
                }
                part[j] = pt;
            }
            e += warp_tree256(part, add_d());
        }
        if (lane == 0) erow[wid] = e;
    }
    cp_async_wait<0>();
    __syncthreads(); // Σ e and the value columns are in
    for (int e = threadIdx.x; e < R * w; e += T) {
        const int i = e / w, j = e - i * w;
        const float acc = cluster_column(vst, W, j, es + i * nkmax, sslot + i * nkmax, mp, S, span[2 * b + 1], nk, nsplit);
        const double et = erow[i];
        const float res = et > 0 ? (float)((double)acc / et) : 0.0f;
        const size_t o = bh_of(i) * Dv + c0 + j;
        out[o] = res;
        emit(parts, n, o, res);
    }
    cluster_wait(); // no block leaves while another reads its scores
}

// Query-tiled variants for passes with many queries per row (prefill): a
// block serves QT consecutive queries of one batch row and one head, so each
// key and value row is read once per QT queries instead of once per query.
// Every query's arithmetic is the per-query kernels' (the same fma chain per
// key, the same thread-strided double partials and tree, the same ordered
// value sums), so a query's result does not depend on the tiling
// (TestBatchInvariance compares tiled verify rows with untiled decode).
#define QT 8

// attn_scores_tiled: grid (Hq, B·ceil(L/QT), nscore).
extern "C" __global__ void attn_scores_tiled(const float* q, const float* k, float* sc, float* cmax,
                                             const int* slot_of, const int* span, const int* qpos,
                                             int L, int Hq, int Hkv, int S, int D, float scale, int causal, int window) {
    pdl_start();
    __shared__ float qs[QT][512];
    __shared__ float shm[QT][RBLOCK / 32];
    const int h = blockIdx.x, tiles = (L + QT - 1) / QT, b = blockIdx.y / tiles, l0 = (blockIdx.y % tiles) * QT;
    const int nq = min(QT, L - l0), kvh = h / (Hq / Hkv), bl0 = b * L + l0;
    for (int i = threadIdx.x; i < nq * D; i += RBLOCK) {
        const int j = i / D, d = i % D;
        qs[j][d] = q[((size_t)(bl0 + j) * Hq + h) * D + d];
    }
    __syncthreads();
    int qp[QT];
    float m[QT];
#pragma unroll
    for (int j = 0; j < QT; j++) {
        qp[j] = qpos && j < nq ? qpos[bl0 + j] : 0;
        m[j] = -__int_as_float(0x7f800000);
    }
    const int mp = span[2 * b];
    const int r0 = blockIdx.z * ATTN_CHUNK, r1 = min(min(r0 + ATTN_CHUNK, S), span[2 * b + 1] - mp + 1);
    const bool vec = (D & 31) == 0 && ((size_t)k & 15) == 0;
    for (int r = r0 + threadIdx.x; r < r1; r += RBLOCK) {
        const int s = slot_of[(size_t)b * S + r];
        if (s < 0) continue;
        const float* kr = k + (((size_t)b * S + s) * Hkv + kvh) * D;
        float dot[QT];
#pragma unroll
        for (int j = 0; j < QT; j++) dot[j] = 0.0f;
        if (vec) {
            for (int d = 0; d < D; d += 32) {
                float4 kk[8];
#pragma unroll
                for (int u = 0; u < 8; u++) kk[u] = *(const float4*)(kr + d + 4 * u);
#pragma unroll
                for (int u = 0; u < 8; u++)
#pragma unroll
                    for (int j = 0; j < QT; j++) {
                        const float* qj = &qs[j][d + 4 * u];
                        dot[j] = fmaf(qj[0], kk[u].x, dot[j]);
                        dot[j] = fmaf(qj[1], kk[u].y, dot[j]);
                        dot[j] = fmaf(qj[2], kk[u].z, dot[j]);
                        dot[j] = fmaf(qj[3], kk[u].w, dot[j]);
                    }
            }
        } else {
            for (int d = 0; d < D; d++) {
                const float kd = kr[d];
#pragma unroll
                for (int j = 0; j < QT; j++) dot[j] = fmaf(qs[j][d], kd, dot[j]);
            }
        }
#pragma unroll
        for (int j = 0; j < QT; j++) {
            if (j < nq && visible(mp + r, qp[j], causal, window)) {
                const float v = __fmul_rn(dot[j], scale);
                sc[((size_t)(bl0 + j) * Hq + h) * S + r] = v;
                m[j] = fmax_nan(m[j], v);
            }
        }
    }
    // Each query's maximum over the block (exact whatever the order).
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
    for (int j = 0; j < QT; j++) {
        float v = m[j];
        for (int off = 16; off > 0; off >>= 1) v = fmax_nan(v, __shfl_xor_sync(0xffffffffu, v, off));
        if (lane == 0) shm[j][warp] = v;
    }
    __syncthreads();
    if (threadIdx.x < nq) {
        float v = shm[threadIdx.x][0];
        for (int i = 1; i < RBLOCK / 32; i++) v = fmax_nan(v, shm[threadIdx.x][i]);
        cmax[((size_t)(bl0 + threadIdx.x) * Hq + h) * gridDim.z + blockIdx.z] = v;
    }
}

// tiled_value_sums is attn_values_tiled's value sums with W adjacent
// columns a thread, each key's W values in one load: each column's sum is
// the same, in the same order. The sums cost about four instructions a
// column, key and query with one column a thread (a shared load and a test
// of the weight besides the multiply and the add), against one and a
// quarter a key element and query for the scores; W columns share the
// weight's load and test.
template <int W>
__device__ __forceinline__ void tiled_value_sums(const float* vb, size_t vstride, const int* ss,
                                                 float (*es)[ATTN_CHUNK], int olo, int ohi, int Dv, int nq, float* pv,
                                                 size_t pvrow, size_t pvq) {
    for (int d = W * threadIdx.x; d < Dv; d += W * RBLOCK) {
        const float* vd = vb + d;
        float acc[QT][W];
#pragma unroll
        for (int j = 0; j < QT; j++)
#pragma unroll
            for (int w = 0; w < W; w++) acc[j][w] = 0.0f;
        for (int o = olo; o < ohi; o++) {
            const int s = ss[o];
            if (s < 0) continue;
            float vv[W];
            ldv(vv, vd + (size_t)s * vstride);
#pragma unroll
            for (int j = 0; j < QT; j++) {
                const float e = es[j][o];
                if (e != 0.0f)
#pragma unroll
                    for (int w = 0; w < W; w++) acc[j][w] = __fadd_rn(acc[j][w], __fmul_rn(e, vv[w]));
            }
        }
        for (int j = 0; j < nq; j++)
#pragma unroll
            for (int w = 0; w < W; w++) pv[pvrow + j * pvq + d + w] = acc[j][w];
    }
}

// attn_values_tiled: grid (Hq, B·ceil(L/QT), nsplit). cols (1, 2 or 4,
// dividing Dv, the values aligned to it) is tiled_value_sums' W.
extern "C" __global__ void attn_values_tiled(const float* v, const float* sc, const float* cmax, float* pv, double* pe,
                                             const int* slot_of, const int* span, const int* qpos,
                                             int L, int Hq, int Hkv, int S, int Dv, int nscore, int nsplit, int causal, int window,
                                             int cols) {
    pdl_start();
    __shared__ float es[QT][ATTN_CHUNK];
    __shared__ int ss[ATTN_CHUNK];
    __shared__ double sh[RBLOCK];
    const int h = blockIdx.x, tiles = (L + QT - 1) / QT, b = blockIdx.y / tiles, l0 = (blockIdx.y % tiles) * QT;
    const int nq = min(QT, L - l0), kvh = h / (Hq / Hkv), bl0 = b * L + l0;
    const int mp = span[2 * b];
    const int p0 = ((mp >> 10) + (int)blockIdx.z) << 10; // first position of this split
    const int olo = mp - p0 > 0 ? mp - p0 : 0, ohi = min(ATTN_CHUNK, min(mp + S, span[2 * b + 1] + 1) - p0);
    float mx[QT];
    int qp[QT];
    double part[QT];
#pragma unroll
    for (int j = 0; j < QT; j++) {
        mx[j] = -__int_as_float(0x7f800000);
        const size_t bh = (size_t)(bl0 + min(j, nq - 1)) * Hq + h;
        for (int i = 0; i < nscore; i++) mx[j] = fmax_nan(mx[j], cmax[bh * nscore + i]);
        qp[j] = qpos && j < nq ? qpos[bl0 + j] : 0;
        part[j] = 0;
    }
    for (int o = threadIdx.x; o < ohi; o += RBLOCK) {
        const int r = p0 + o - mp;
        int s = -1;
        if (r >= 0 && r < S) s = slot_of[(size_t)b * S + r];
        ss[o] = s;
#pragma unroll
        for (int j = 0; j < QT; j++) {
            float e = 0.0f;
            if (s >= 0 && j < nq && visible(p0 + o, qp[j], causal, window)) {
                const double ed = exp((double)sc[((size_t)(bl0 + j) * Hq + h) * S + r] - (double)mx[j]);
                part[j] += ed;
                e = (float)ed;
            }
            es[j][o] = e;
        }
    }
    double total[QT];
#pragma unroll
    for (int j = 0; j < QT; j++) total[j] = block_sum_d(part[j], sh); // publishes es, ss too
    const size_t vstride = (size_t)Hkv * Dv;
    const float* vb = v + (size_t)b * S * vstride + (size_t)kvh * Dv;
    // Query j's partials for this split start at pvrow + j·pvq.
    const size_t pvrow = (((size_t)bl0 * Hq + h) * nsplit + blockIdx.z) * Dv, pvq = (size_t)Hq * nsplit * Dv;
    if (cols == 4)
        tiled_value_sums<4>(vb, vstride, ss, es, olo, ohi, Dv, nq, pv, pvrow, pvq);
    else if (cols == 2)
        tiled_value_sums<2>(vb, vstride, ss, es, olo, ohi, Dv, nq, pv, pvrow, pvq);
    else
        tiled_value_sums<1>(vb, vstride, ss, es, olo, ohi, Dv, nq, pv, pvrow, pvq);
    if (threadIdx.x < nq) pe[((size_t)(bl0 + threadIdx.x) * Hq + h) * nsplit + blockIdx.z] = total[threadIdx.x];
}

// attn_combine: grid (Hq, B·L). Sums the splits in order and normalises; a
// query that sees no key gets zeros.
extern "C" __global__ void attn_combine(float* out, const float* pv, const double* pe, int Hq, int Dv, int nsplit,
                                        unsigned short* parts, size_t n) {
    pdl_start();
    const size_t bh = (size_t)blockIdx.y * Hq + blockIdx.x;
    double e = 0;
    for (int i = 0; i < nsplit; i++) e += pe[bh * nsplit + i];
    for (int j = threadIdx.x; j < Dv; j += blockDim.x) {
        float acc = 0.0f;
        for (int i = 0; i < nsplit; i++) acc = __fadd_rn(acc, pv[(bh * nsplit + i) * Dv + j]);
        const float v = e > 0 ? (float)((double)acc / e) : 0.0f;
        out[bh * Dv + j] = v;
        emit(parts, n, bh * Dv + j, v);
    }
}

// Go's math/rand/v2 PCG: a 128-bit LCG (state = state·mul + inc mod 2^128)
// whose Uint64 is the DXSM output of the advanced state, for
// random_uniform. u64 pairs are (hi, lo).
typedef unsigned long long u64;
#define PCG_MUL_HI 2549297995355413924ULL
#define PCG_MUL_LO 4865540595714422341ULL
#define PCG_INC_HI 6364136223846793005ULL
#define PCG_INC_LO 1442695040888963407ULL

// mul128 is a·b mod 2^128, as Go's next() computes state·mul.
__device__ __forceinline__ void mul128(u64 ahi, u64 alo, u64 bhi, u64 blo, u64& hi, u64& lo) {
    lo = alo * blo;
    hi = __umul64hi(alo, blo) + ahi * blo + alo * bhi;
}

// add128 is a + b mod 2^128.
__device__ __forceinline__ void add128(u64 ahi, u64 alo, u64 bhi, u64 blo, u64& hi, u64& lo) {
    lo = alo + blo;
    hi = ahi + bhi + (lo < alo ? 1ULL : 0ULL);
}

// pcg_jump advances state (hi, lo) by k steps: the map x → mul·x + inc
// applied k times is x → M·x + C, composed from its powers of two.
__device__ __forceinline__ void pcg_jump(u64& hi, u64& lo, u64 k) {
    u64 mh = 0, ml = 1, ch = 0, cl = 0;                                 // the map so far: x → M·x + C
    u64 bmh = PCG_MUL_HI, bml = PCG_MUL_LO, bch = PCG_INC_HI, bcl = PCG_INC_LO; // the map 2^i steps
    for (; k; k >>= 1) {
        if (k & 1) { // (M, C) ← (B.m·M, B.m·C + B.c)
            u64 th, tl;
            mul128(bmh, bml, mh, ml, mh, ml);
            mul128(bmh, bml, ch, cl, th, tl);
            add128(th, tl, bch, bcl, ch, cl);
        }
        u64 th, tl; // B ← B∘B: (B.m², B.m·B.c + B.c)
        mul128(bmh, bml, bch, bcl, th, tl);
        add128(th, tl, bch, bcl, bch, bcl);
        mul128(bmh, bml, bmh, bml, bmh, bml);
    }
    u64 th, tl;
    mul128(mh, ml, hi, lo, th, tl);
    add128(th, tl, ch, cl, hi, lo);
}

// pcg_uint64 advances the state one step and returns the DXSM output.
__device__ __forceinline__ u64 pcg_uint64(u64& hi, u64& lo) {
    u64 th, tl;
    mul128(hi, lo, PCG_MUL_HI, PCG_MUL_LO, th, tl);
    add128(th, tl, PCG_INC_HI, PCG_INC_LO, hi, lo);
    u64 h = hi;
    h ^= h >> 32;
    h *= 0xda942042e4dd58b5ULL;
    h ^= h >> 48;
    h *= lo | 1;
    return h;
}

// random_uniform fills elements [off, off + n) of dst (dtype dt) as
// compute.RandomFill says: element e is the (e mod blk)th draw u of the
// stream rand.NewPCG(key, e / blk), float32(center + half·(2u − 1)) in
// Go's operations (no fused multiply-add), stored rounded to nearest even.
// A thread takes sub consecutive elements of one stream (sub divides
// blk), jumping the stream to the first.
extern "C" __global__ void random_uniform(void* dst, int dt, u64 off, u64 n, u64 key, int blk, int sub, u64 centerBits,
                                          u64 halfBits) {
    pdl_start();
    const u64 t = (u64)blockIdx.x * blockDim.x + threadIdx.x, per = (u64)(blk / sub);
    const u64 j = t / per, e0 = j * (u64)blk + (t % per) * (u64)sub;
    if (e0 >= n) return;
    const u64 e1 = e0 + (u64)sub < n ? e0 + (u64)sub : n;
    const double center = __longlong_as_double((long long)centerBits), half = __longlong_as_double((long long)halfBits);
    u64 hi = key, lo = j;
    pcg_jump(hi, lo, e0 - j * (u64)blk);
    for (u64 e = e0; e < e1; e++) {
        const u64 x = pcg_uint64(hi, lo) << 11 >> 11;
        const double u = (double)x / 9007199254740992.0; // 2^53, as Float64
        const float v = (float)__dadd_rn(center, __dmul_rn(half, __dsub_rn(__dmul_rn(2.0, u), 1.0)));
        const u64 i = off + e;
        if (dt == DT_F32) ((float*)dst)[i] = v;
        else if (dt == DT_BF16) ((unsigned short*)dst)[i] = f32_to_bf16(v);
        else ((unsigned short*)dst)[i] = f32_to_f16(v);
    }
}

// spin keeps one thread busy for ns nanoseconds: work queued behind it then
// runs back to back, however slowly the host issues it (for measurements).
extern "C" __global__ void spin(int ns) {
    pdl_start();
    const unsigned long long t0 = globaltimer();
    while (globaltimer() - t0 < (unsigned long long)ns) {
    }
}

// attn_flash is Attention for a bf16 prompt pass (PrecisionBF16): scores
// and value sums as bf16 tensor-core products with f32 accumulation, over
// key tiles of FK positions anchored at absolute positions, each row's
// softmax kept online (its running maximum and sum rescaling its sums). A
// query's result depends only on the keys it sees, in position order,
// whatever other queries share its block: a tile with no key it sees adds
// exact zeros and rescales by exactly one. Each row's arithmetic:
//
//	x_s  = float32(bf16(q)·bf16(k_s)) · scale · log2(e)   (mma, in order over d)
//	m    = max(m, max_s x_s);  α = 2^(m_old − m)             (2^ by ex2.approx)
//	O    = α·O + Σ_s bf16(2^(x_s − m))·bf16(v_s)          (mma, a tile at a time)
//	l    = α·l + Σ_s 2^(x_s − m);  out = O · (1/l)
//
// The keys and values come from attn_kv_bf16 (below): bf16, in position
// order from the row's first position rounded down to a multiple of FK
// (pbase), P of them a row and head, keys as rows of D and values
// transposed (rows of P), with kvalid[p − pbase] saying which positions
// hold a key. Two buffers: the next key and value tile is copied by
// cp.async while the block works on this one.
//
// Grid (Hq, B·ceil(L/FQ), ceil(Dv/(FW·CG))), blocks of CG groups of FQ/16
// warps of 16 queries each; a group takes FW of the value columns (the
// sums of 256 columns a warp already hold 128 registers a thread): a
// 512-wide head's two halves are two groups of one block (CG = 2), which
// share its tiles. A head of D > FW scores as the sum of two halves'
// products, d < FW and d ≥ FW: with two groups, warps w and w + 4 each
// take a half and the low warp the softmax, handing the weights back
// through shared memory, so neither computes the other's products; with
// one, a warp takes both halves in turn. Dynamic shared memory: the
// queries' rows and two stages of a key tile's rows (D + 8 bf16 each: the
// fragment loads hit 32 banks), of the value tile (FW·CG rows of FK + 8)
// and of the tile's flags, then the pairs' exchange (16 words a lane).
#define FQ 64
#define FK 32
#define FW 256
#define KS (FK + 8) // a value tile row's stride: FK keys and 8 of padding
#define FO 72       // a staged output row's stride, in floats: 64 columns and 8 of padding (float2 stores without conflicts)

// bar_pair is a barrier of the two warps of column-group pair rg (named
// barriers 1–4; 0 is __syncthreads's). barrier.sync, not bar.sync (its
// .aligned form): the two warps reach it from different code, and warps
// of other pairs not at all (compute-sanitizer's synccheck flagged it).
__device__ __forceinline__ void bar_pair(int rg) { asm volatile("barrier.sync %0, 64;" ::"r"(1 + rg) : "memory"); }

// ex2 is 2^x by the hardware's approximation (ex2.approx.ftz: about two
// ulps, 2^−∞ = 0): one instruction where exp2f takes a dozen, and as
// deterministic.
__device__ __forceinline__ float ex2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}
extern "C" __global__ void __launch_bounds__(256, 1)
    attn_flash(const float* q, const unsigned short* kb16, const unsigned short* vt16, const unsigned char* kvalid,
               const int* span, const int* qpos, int L, int Hq, int Hkv, int D, int Dv, int P, float scale,
               int causal, int window, float* out, unsigned short* parts, size_t n) {
    pdl_start();
    extern __shared__ __align__(16) unsigned short fsm[];
    const int h = blockIdx.x, tiles = (L + FQ - 1) / FQ, b = blockIdx.y / tiles, l0 = (blockIdx.y % tiles) * FQ;
    // CG column groups of FW: blocks of 128·CG threads, warp w taking rows
    // 16·(w % 4) on and columns FW·(w / 4) on of the block's FW·CG.
    const int CG = blockDim.x >> 7, BW = FW * CG;
    const int nq = min(FQ, L - l0), kvh = h / (Hq / Hkv), c0 = blockIdx.z * BW, bwc = min(BW, Dv - c0);
    const int DS = D + 8;
    unsigned short* qs = fsm;                                 // FQ × DS
    const unsigned qs_a = smem_addr(qs);
    unsigned short* ks0 = qs + FQ * DS;                       // 2 × FK × DS
    unsigned short* vt0 = ks0 + 2 * FK * DS;                  // 2 × BW × KS: vt[c][j] = v of key j, column c0 + c
    unsigned char* fl0 = (unsigned char*)(vt0 + 2 * BW * KS); // 2 × FK
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int rg = warp & 3, cw = (warp >> 2) * FW, wc = min(FW, bwc - cw); // wc ≤ 0: no columns for this warp
    // A wide head (D > FW) in two column groups: warps w and w + 4 (the
    // low and the high warp of pair w) each score their half of d.
    const bool pair = CG == 2 && D > FW, hiw = warp >= 4;
    float* xb = (float*)(fl0 + 2 * FK); // a pair's exchange: 16 words a lane (pair ? 4 pairs : none)
    const int r0 = rg * 16 + g, r1 = r0 + 8; // this thread's two query rows in the block
    // The block's key positions: the row's span, cut to what its queries
    // can see.
    const int mp = span[2 * b], last = span[2 * b + 1], pbase = mp / FK * FK;
    int lo = mp, hi = last;
    if (qpos && (causal || window > 0)) {
        int qmin = 0x7fffffff, qmax = -0x7fffffff;
        for (int r = 0; r < nq; r++) {
            const int p = qpos[b * L + l0 + r];
            qmin = min(qmin, p);
            qmax = max(qmax, p);
        }
        if (window > 0) lo = max(lo, qmin - window + 1);
        if (causal) hi = min(hi, qmax);
    }
    const int first = hi < lo ? 0 : (lo / FK) * FK, ntiles = hi < lo ? 0 : (hi - first) / FK + 1;
    const size_t bh = (size_t)b * Hkv + kvh;
    const unsigned short* kh = kb16 + bh * P * D;
    const unsigned short* vh = vt16 + (bh * Dv + c0) * P;
    const unsigned char* fh = kvalid + (size_t)b * P;
    // stage copies tile i (positions first + i·FK on) into buffer i & 1,
    // by shared addresses and pointers stepped a piece at a time (address
    // arithmetic was a quarter of the kernel's instructions). Thread x copies
    // the key tile's 16-byte pieces x, x + blockDim.x, …: row j, piece d8,
    // a column of pieces where blockDim.x is a multiple of the row's D8,
    // else stepping by (dj, dd); and the value tile's columns vc0, vc0 +
    // vstep, …, keys vj … vj + 7.
    const unsigned ks_a = smem_addr(ks0), vt_a = smem_addr(vt0);
    const int D8 = D >> 3, j0 = threadIdx.x / D8, d80 = threadIdx.x % D8, dj = blockDim.x / D8, dd = blockDim.x % D8;
    const int vstep = blockDim.x / (FK / 8), vc0 = threadIdx.x / (FK / 8), vj = (threadIdx.x % (FK / 8)) * 8;
    auto stage = [&](int i) {
        const int o = first + i * FK - pbase, s = i & 1;
        if (dd == 0) {
            unsigned ka = ks_a + 2 * (s * FK * DS + j0 * DS + 8 * d80);
            const unsigned short* kg = kh + (size_t)(o + j0) * D + 8 * d80;
            for (int j = j0; j < FK; j += dj, ka += 2 * dj * DS, kg += (size_t)dj * D) cp16s(ka, kg, true);
        } else {
            for (int j = j0, d8 = d80; j < FK;) {
                cp16s(ks_a + 2 * (s * FK * DS + j * DS + 8 * d8), kh + (size_t)(o + j) * D + 8 * d8, true);
                j += dj, d8 += dd;
                if (d8 >= D8) d8 -= D8, j++;
            }
        }
        unsigned va = vt_a + 2 * (s * BW * KS + vc0 * KS + vj);
        const unsigned short* vg = vh + (size_t)vc0 * P + o + vj;
        for (int col = vc0; col < BW; col += vstep, va += 2 * vstep * KS, vg += (size_t)vstep * P) cp16s(va, vg, col < bwc);
        if (threadIdx.x < FK / 16) cp16(fl0 + s * FK + threadIdx.x * 16, fh + o + threadIdx.x * 16, true);
        asm volatile("cp.async.commit_group;\n" ::: "memory");
    };
    if (ntiles > 0) stage(0);
    // The queries, as bf16 rows (16-byte loads where q's rows are aligned,
    // eight in flight a thread where blockDim.x is a multiple of the row's
    // D4 pieces: each load's wait was a seventh of the kernel's stalls).
    const int D4 = D >> 2;
    const bool qal = ((size_t)q & 15) == 0;
    auto qrow = [&](int r, int d) {
        float4 x = f4(0.0f, 0.0f, 0.0f, 0.0f);
        if (r < nq) x = ld4(q + ((size_t)(b * L + l0 + r) * Hq + h) * D, d, qal); // q may be a view at any offset
        return x;
    };
    if (blockDim.x % D4 == 0) {
        const int d = (threadIdx.x % D4) * 4, rs = blockDim.x / D4;
#pragma unroll 8
        for (int r = threadIdx.x / D4; r < FQ; r += rs) {
            const float4 x = qrow(r, d);
            *(uint2*)(qs + r * DS + d) = u2(bf16x2(x.x, x.y), bf16x2(x.z, x.w));
        }
    } else {
        for (int i = threadIdx.x; i < FQ * D4; i += blockDim.x) {
            const int r = i / D4, d = (i % D4) * 4;
            const float4 x = qrow(r, d);
            *(uint2*)(qs + r * DS + d) = u2(bf16x2(x.x, x.y), bf16x2(x.z, x.w));
        }
    }
    const bool ok0 = r0 < nq, ok1 = r1 < nq;
    const int qp0 = qpos && ok0 ? qpos[b * L + l0 + r0] : 0, qp1 = qpos && ok1 ? qpos[b * L + l0 + r1] : 0;
    // The warp's rows' lowest and highest positions: a tile that every one
    // of them sees whole, with a key at every position, needs no mask.
    int wlo = 0x7fffffff, whi = -0x7fffffff;
    if (ok0) wlo = min(wlo, qp0), whi = max(whi, qp0);
    if (ok1) wlo = min(wlo, qp1), whi = max(whi, qp1);
    for (int x = 1; x < 32; x <<= 1) {
        wlo = min(wlo, __shfl_xor_sync(0xffffffffu, wlo, x));
        whi = max(whi, __shfl_xor_sync(0xffffffffu, whi, x));
    }
    const float sl2 = scale * 1.4426950408889634f, ninf = -__int_as_float(0x7f800000);
    float o[FW / 8][4];
#pragma unroll
    for (int c = 0; c < FW / 8; c++) o[c][0] = o[c][1] = o[c][2] = o[c][3] = 0.0f;
    float m0 = ninf, m1 = ninf, l0s = 0.0f, l1s = 0.0f;
    for (int it = 0; it < ntiles; it++) {
        if (it + 1 < ntiles) {
            stage(it + 1); // into the buffer the previous tile used: the barrier below ended its reads
            asm volatile("cp.async.wait_group 1;\n" ::: "memory");
        } else {
            asm volatile("cp.async.wait_group 0;\n" ::: "memory");
        }
        __syncthreads(); // tile it has landed for every thread (and, first, the queries)
        const int p0 = first + it * FK, s = it & 1;
        const unsigned ks = ks_a + 2 * s * FK * DS, vt = vt_a + 2 * (s * BW + cw) * KS; // vt: this warp's columns
        const unsigned char* fl = fl0 + s * FK;
        if (rg * 16 < nq && (wc > 0 || pair)) { // else no query of this warp's rows, or no column (nor a pair's half)
            // Fragments by ldmatrix: lane T gives the address of row T % 8
            // of 8 × 8 matrix T / 8 (the same values as lane-by-lane loads).
            const int mi = lane >> 3, mr = lane & 7;
            const unsigned qa = qs_a + 2 * ((rg * 16 + mr + 8 * (mi & 1)) * DS + 8 * (mi >> 1));
            const unsigned ka = ks + 2 * ((mr + 8 * (mi >> 1)) * DS + 8 * (mi & 1));
            // qk adds the products of d0 ≤ d < d1 to acc, in order over d.
            auto qk = [&](float (&acc)[FK / 8][4], int d0, int d1) {
#pragma unroll
                for (int j = 0; j < FK / 8; j++) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
                for (int d = d0; d < d1; d += 16) {
                    unsigned a[4];
                    ldsm4s(a, qa + 2 * d);
#pragma unroll
                    for (int j = 0; j < FK / 8; j += 2) { // keys j·8 … j·8 + 15: two n tiles
                        unsigned kf[4];
                        ldsm4s(kf, ka + 2 * (j * 8 * DS + d));
                        mma16816(acc[j], a[0], a[1], a[2], a[3], kf[0], kf[1]);
                        mma16816(acc[j + 1], a[0], a[1], a[2], a[3], kf[2], kf[3]);
                    }
                }
            };
            // A head wider than FW scores as the sum of its first FW
            // columns' products and the rest's (lo + hi): one warp after the
            // other, or the two warps of a column-group pair, each its half.
            float sc[FK / 8][4];
            qk(sc, pair && hiw ? FW : 0, D > FW && !(pair && hiw) ? FW : D);
            if (D > FW && !pair) {
                float sh[FK / 8][4];
                qk(sh, FW, D);
#pragma unroll
                for (int j = 0; j < FK / 8; j++)
#pragma unroll
                    for (int e = 0; e < 4; e++) sc[j][e] = sc[j][e] + sh[j][e];
            }
            // A pair's high warp hands its half of the scores to the low
            // warp and takes back the weights (pa), the rescaling (al) and
            // the sums' parts (s): the low warp's softmax, bit for bit.
            float* xw = xb + rg * 16 * 32 + lane; // slot k of this lane: xw[32k]
            float al0, al1, s0, s1;
            unsigned pa[FK / 8][2]; // the weights as bf16 pairs: the value sums' A fragments
            if (pair && hiw) {
#pragma unroll
                for (int k = 0; k < 16; k++) xw[32 * k] = sc[k >> 2][k & 3];
                bar_pair(rg);
                bar_pair(rg);
#pragma unroll
                for (int j = 0; j < FK / 8; j++) pa[j][0] = __float_as_uint(xw[32 * 2 * j]), pa[j][1] = __float_as_uint(xw[32 * (2 * j + 1)]);
                al0 = xw[32 * 8], al1 = xw[32 * 9], s0 = xw[32 * 10], s1 = xw[32 * 11];
            } else {
                if (pair) {
                    bar_pair(rg);
#pragma unroll
                    for (int k = 0; k < 16; k++) sc[k >> 2][k & 3] = sc[k >> 2][k & 3] + xw[32 * k];
                }
                // Mask, scale, and the rows' new maxima. A tile each of the
                // warp's rows sees whole (every position a key, none past its
                // own or out of its window) takes the scaling alone: the same
                // values (rows past the block's queries are never written).
                const uint4 f0 = *(const uint4*)fl, f1 = *(const uint4*)(fl + 16);
                const bool whole = (f0.x & f0.y & f0.z & f0.w & f1.x & f1.y & f1.z & f1.w) == 0x01010101u &&
                                   (!causal || p0 + FK - 1 <= wlo) && (window <= 0 || p0 > whi - window);
                float t0 = ninf, t1 = ninf;
                if (whole) {
#pragma unroll
                    for (int j = 0; j < FK / 8; j++)
#pragma unroll
                        for (int e = 0; e < 2; e++) {
                            sc[j][e] *= sl2;
                            sc[j][2 + e] *= sl2;
                            t0 = fmaxf(t0, sc[j][e]);
                            t1 = fmaxf(t1, sc[j][2 + e]);
                        }
                } else {
#pragma unroll
                    for (int j = 0; j < FK / 8; j++)
#pragma unroll
                        for (int e = 0; e < 2; e++) {
                            const int kj = j * 8 + 2 * t + e, p = p0 + kj;
                            const bool key = fl[kj] != 0;
                            sc[j][e] = ok0 && key && visible(p, qp0, causal, window) ? sc[j][e] * sl2 : ninf;
                            sc[j][2 + e] = ok1 && key && visible(p, qp1, causal, window) ? sc[j][2 + e] * sl2 : ninf;
                            t0 = fmaxf(t0, sc[j][e]);
                            t1 = fmaxf(t1, sc[j][2 + e]);
                        }
                }
                t0 = fmaxf(t0, __shfl_xor_sync(0xffffffffu, t0, 1));
                t0 = fmaxf(t0, __shfl_xor_sync(0xffffffffu, t0, 2));
                t1 = fmaxf(t1, __shfl_xor_sync(0xffffffffu, t1, 1));
                t1 = fmaxf(t1, __shfl_xor_sync(0xffffffffu, t1, 2));
                const float n0 = fmaxf(m0, t0), n1 = fmaxf(m1, t1);
                // A row that has seen no key yet keeps zeros (α = 1, every e = 0).
                al0 = n0 == ninf ? 1.0f : ex2(m0 - n0), al1 = n1 == ninf ? 1.0f : ex2(m1 - n1);
                m0 = n0;
                m1 = n1;
                s0 = 0.0f, s1 = 0.0f;
#pragma unroll
                for (int j = 0; j < FK / 8; j++) {
                    const float e0 = n0 == ninf ? 0.0f : ex2(sc[j][0] - n0), e1 = n0 == ninf ? 0.0f : ex2(sc[j][1] - n0);
                    const float e2 = n1 == ninf ? 0.0f : ex2(sc[j][2] - n1), e3 = n1 == ninf ? 0.0f : ex2(sc[j][3] - n1);
                    s0 += e0 + e1;
                    s1 += e2 + e3;
                    pa[j][0] = bf16x2(e0, e1);
                    pa[j][1] = bf16x2(e2, e3);
                }
                if (pair) { // this lane's own slots, read above: no other lane's
#pragma unroll
                    for (int j = 0; j < FK / 8; j++) xw[32 * 2 * j] = __uint_as_float(pa[j][0]), xw[32 * (2 * j + 1)] = __uint_as_float(pa[j][1]);
                    xw[32 * 8] = al0, xw[32 * 9] = al1, xw[32 * 10] = s0, xw[32 * 11] = s1;
                    bar_pair(rg);
                }
            }
            l0s = l0s * al0 + s0;
            l1s = l1s * al1 + s1;
            // Most tiles leave every row's maximum where it was (α = 1 for
            // the whole warp): the sums stay as they are, bit for bit.
            if (wc > 0 && __any_sync(0xffffffffu, al0 != 1.0f || al1 != 1.0f)) {
#pragma unroll
                for (int c = 0; c < FW / 8; c++) {
                    o[c][0] *= al0;
                    o[c][1] *= al0;
                    o[c][2] *= al1;
                    o[c][3] *= al1;
                }
            }
            const unsigned va = vt + 2 * ((mr + 8 * (mi >> 1)) * KS + 8 * (mi & 1));
#pragma unroll
            for (int j = 0; j < FK / 16; j++) {
                if (wc <= 0) break; // a pair's high warp without columns
                const unsigned a0 = pa[2 * j][0], a1 = pa[2 * j][1], a2 = pa[2 * j + 1][0], a3 = pa[2 * j + 1][1];
                // Every column of the group, past the value rows too (their
                // tile rows are zeros, and their sums never written): a
                // loop without an exit keeps o in registers.
#pragma unroll
                for (int c = 0; c < FW / 8; c += 2) { // columns c·8 … c·8 + 15: two n tiles
                    unsigned vf[4];
                    ldsm4s(vf, va + 2 * (c * 8 * KS + j * 16));
                    mma16816(o[c], a0, a1, a2, a3, vf[0], vf[1]);
                    mma16816(o[c + 1], a0, a1, a2, a3, vf[2], vf[3]);
                }
            }
        }
        __syncthreads(); // every warp is done with this tile's buffer before it is refilled
    }
    // Each row's sum over its quad, in a fixed order, and its reciprocal.
    l0s += __shfl_xor_sync(0xffffffffu, l0s, 1);
    l0s += __shfl_xor_sync(0xffffffffu, l0s, 2);
    l1s += __shfl_xor_sync(0xffffffffu, l1s, 1);
    l1s += __shfl_xor_sync(0xffffffffu, l1s, 2);
    const float i0 = l0s > 0.0f ? 1.0f / l0s : 0.0f, i1 = l1s > 0.0f ? 1.0f / l1s : 0.0f;
    // The outputs: each warp stages its 16 rows 64 columns at a time in
    // shared memory of its own (the tiles' buffers, free once every warp is
    // past the loop), then writes them as whole rows' 16-byte pieces. A
    // division, a store and a split an element, unrolled, made the kernel
    // a third longer and most of its instruction-fetch stalls.
    __syncthreads();
    float* ws = (float*)fsm + warp * (16 * FO);
    const int rr = lane >> 4, c4 = (lane & 15) * 4;
#pragma unroll
    for (int q0 = 0; q0 < FW / 8; q0 += 8) { // n tiles q0 … q0 + 7: columns 8·q0 … 8·q0 + 63
#pragma unroll
        for (int c = 0; c < 8; c++) {
            *(float2*)(ws + g * FO + c * 8 + 2 * t) = f2(__fmul_rn(o[q0 + c][0], i0), __fmul_rn(o[q0 + c][1], i0));
            *(float2*)(ws + (g + 8) * FO + c * 8 + 2 * t) = f2(__fmul_rn(o[q0 + c][2], i1), __fmul_rn(o[q0 + c][3], i1));
        }
        __syncwarp();
        const int col = 8 * q0 + c4;
        for (int k = 0; k < 8; k++) {
            const int r = rg * 16 + 2 * k + rr;
            if (r < nq && col < wc) {
                const size_t i = ((size_t)(b * L + l0 + r) * Hq + h) * Dv + c0 + cw + col;
                const float4 v = *(const float4*)(ws + (2 * k + rr) * FO + c4);
                *(float4*)(out + i) = v;
                emit4(parts, n, i, v);
            }
        }
        __syncwarp();
    }
}

// attn_kv_bf16 lays a pass's keys and values out for attn_flash: for each
// batch row b and key head, positions pbase … pbase + P − 1 in order
// (pbase: the row's first position span[2b] rounded down to FK; the
// key at position p from slot slot_of[b·S + p − span[2b]], zeros where no
// slot holds one), keys as bf16 rows of D and values transposed, bf16 rows
// of P a column; kvalid[b·P + p − pbase] is 1 where a key is. Grid
// (P / FK, Hkv, B): a block takes FK positions, the values through a
// shared tile of FK × 64 columns at a time so that both the loads and the
// transposed stores are coalesced.
extern "C" __global__ void attn_kv_bf16(const float* k, const float* v, const int* slot_of, const int* span, int S,
                                        int Hkv, int D, int Dv, int P, unsigned short* kb16,
                                        unsigned short* vt16, unsigned char* kvalid, const unsigned long long* kvp,
                                        int vec) {
    pdl_start();
    __shared__ int slot[FK];
    __shared__ float tile[FK][65];
    const int b = blockIdx.z, h = blockIdx.y, o0 = blockIdx.x * FK;
    const int mp = span[2 * b], last = span[2 * b + 1], pbase = mp / FK * FK;
    if (threadIdx.x < FK) {
        const int p = pbase + o0 + threadIdx.x, off = p - mp;
        const int s = p >= mp && p <= last && off < S ? slot_of[(size_t)b * S + off] : -1;
        slot[threadIdx.x] = s;
        if (h == 0) kvalid[(size_t)b * P + o0 + threadIdx.x] = s >= 0;
    }
    __syncthreads();
    const float* kr = kv_base(k, kvp, b, 0, (size_t)S * Hkv * D) + (size_t)h * D;
    const float* vr = kv_base(v, kvp, b, 1, (size_t)S * Hkv * Dv) + (size_t)h * Dv;
    const size_t bh = (size_t)b * Hkv + h;
    const int D4 = D >> 2;
    for (int i = threadIdx.x; i < FK * D4; i += blockDim.x) {
        const int j = i / D4, d = (i % D4) * 4, s = slot[j];
        float4 x = f4(0.0f, 0.0f, 0.0f, 0.0f);
        if (s >= 0) x = ld4(kr + (size_t)s * Hkv * D, d, vec);
        *(uint2*)(kb16 + (bh * P + o0 + j) * D + d) = u2(f32_to_bf16(x.x) | (unsigned)f32_to_bf16(x.y) << 16,
                                                         f32_to_bf16(x.z) | (unsigned)f32_to_bf16(x.w) << 16);
    }
    for (int d0 = 0; d0 < Dv; d0 += 64) {
        __syncthreads(); // the previous columns' reads of tile are done
        for (int i = threadIdx.x; i < FK * 64; i += blockDim.x) {
            const int j = i / 64, d = i % 64, s = slot[j];
            tile[j][d] = s >= 0 && d0 + d < Dv ? vr[(size_t)s * Hkv * Dv + d0 + d] : 0.0f;
        }
        __syncthreads();
        for (int i = threadIdx.x; i < FK * 64; i += blockDim.x) {
            const int d = i / FK, j = i % FK;
            if (d0 + d < Dv) vt16[(bh * Dv + d0 + d) * P + o0 + j] = f32_to_bf16(tile[j][d]);
        }
    }
}
