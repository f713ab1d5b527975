// Declarations that let CI compile the project's CUDA kernels with clang
// alone (no CUDA toolkit on the CI machine): `clang-16 -x cuda
// --cuda-device-only --cuda-gpu-arch=sm_90 -nocudainc -nocudalib -include
// this file`. It covers exactly what kernels/*.cu use; a kernel that needs
// more adds it here. (__syncthreads is a clang builtin.) On the GPU machine NVRTC compiles the same sources
// with its own headers.
#define __device__ __attribute__((device))
#define __global__ __attribute__((global))
#define __shared__ __attribute__((shared))
#define __launch_bounds__(t, b) __attribute__((launch_bounds(t, b)))
#define __align__(n) __attribute__((aligned(n)))
#define __forceinline__ __inline__ __attribute__((always_inline))
#include "__clang_cuda_builtin_vars.h"
typedef unsigned long size_t;
struct __attribute__((aligned(16))) uint4 { unsigned x, y, z, w; };
__device__ static inline int min(int a, int b) { return a < b ? a : b; }
__device__ static inline int max(int a, int b) { return a > b ? a : b; }
__device__ static inline float __uint_as_float(unsigned x) { return __builtin_bit_cast(float, x); }
__device__ static inline float fmaf(float a, float b, float c) { return __builtin_fmaf(a, b, c); }
__device__ static inline void __syncwarp(unsigned mask = 0xffffffffu) { __nvvm_bar_warp_sync(mask); }
__device__ static inline void __threadfence() { __nvvm_membar_gl(); }
__device__ static inline int atomicAdd(int* p, int v) { return __nvvm_atom_add_gen_i(p, v); }
__device__ static inline float __ldcg(const float* p) { return *p; }
__device__ static inline float __shfl_xor_sync(unsigned mask, float v, int lane) {
    return __nvvm_shfl_sync_bfly_f32(mask, v, lane, 0x1f);
}
__device__ static inline int __shfl_xor_sync(unsigned mask, int v, int lane) {
    return __nvvm_shfl_sync_bfly_i32(mask, v, lane, 0x1f);
}
__device__ static inline int __any_sync(unsigned mask, int pred) { return __nvvm_vote_any_sync(mask, pred); }
// ops.cu
__device__ static inline float __shfl_down_sync(unsigned mask, float v, unsigned delta) {
    return __nvvm_shfl_sync_down_f32(mask, v, delta, 0x1f);
}
__device__ static inline double __shfl_down_sync(unsigned mask, double v, unsigned delta) {
    unsigned long long b = __builtin_bit_cast(unsigned long long, v);
    int lo = __nvvm_shfl_sync_down_i32(mask, (int)b, delta, 0x1f), hi = __nvvm_shfl_sync_down_i32(mask, (int)(b >> 32), delta, 0x1f);
    return __builtin_bit_cast(double, ((unsigned long long)(unsigned)hi << 32) | (unsigned)lo);
}
__device__ static inline double __shfl_sync(unsigned mask, double v, int src) {
    unsigned long long b = __builtin_bit_cast(unsigned long long, v);
    int lo = __nvvm_shfl_sync_idx_i32(mask, (int)b, src, 0x1f), hi = __nvvm_shfl_sync_idx_i32(mask, (int)(b >> 32), src, 0x1f);
    return __builtin_bit_cast(double, ((unsigned long long)(unsigned)hi << 32) | (unsigned)lo);
}
struct __attribute__((aligned(8))) uint2 { unsigned x, y; };
struct __attribute__((aligned(8))) float2 { float x, y; };
struct __attribute__((aligned(16))) float4 { float x, y, z, w; };
__device__ static inline unsigned __float_as_uint(float x) { return __builtin_bit_cast(unsigned, x); }
__device__ static inline float __int_as_float(int x) { return __builtin_bit_cast(float, x); }
__device__ static inline float __fadd_rn(float a, float b) { return a + b; }
__device__ static inline float __fsub_rn(float a, float b) { return a - b; }
__device__ static inline float __fmul_rn(float a, float b) { return a * b; }
__device__ static inline float __fdiv_rn(float a, float b) { return a / b; }
__device__ static inline unsigned __float2uint_rn(float x) { return (unsigned)__builtin_rintf(x); }
extern "C" __device__ double exp(double);
extern "C" __device__ double tanh(double);
extern "C" __device__ double cos(double);
extern "C" __device__ double sin(double);
extern "C" __device__ double sqrt(double);
__device__ static inline unsigned long long __umul64hi(unsigned long long a, unsigned long long b) { return __nvvm_mulhi_ull(a, b); }
__device__ static inline double __longlong_as_double(long long x) { return __builtin_bit_cast(double, x); }
__device__ static inline double __dadd_rn(double a, double b) { return a + b; }
__device__ static inline double __dsub_rn(double a, double b) { return a - b; }
__device__ static inline double __dmul_rn(double a, double b) { return a * b; }
__device__ static inline float fmaxf(float a, float b) { return __builtin_fmaxf(a, b); }
