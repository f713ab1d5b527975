// Device functions shared by ops.cu and matmul.cu: put before each of them
// when they are compiled (commonSource in kernels.go), so a kernel of either
// file that writes the same value computes it with the same code.

// Rounding to nearest even, as compute.F32ToBF16 and compute.F32ToF16.
__device__ __forceinline__ unsigned short f32_to_bf16(float f) {
    unsigned u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u);
    return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

// bf16x2 is f32_to_bf16(lo) | f32_to_bf16(hi) << 16 by one conversion
// instruction: the same bits for every number (not for NaNs, which it
// keeps NaN).
__device__ __forceinline__ unsigned bf16x2(float lo, float hi) {
    unsigned r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

// split3 is v's three bf16 parts: hi = bf16(v), mid = bf16(v − hi),
// lo = bf16(v − hi − mid) (the subtractions are exact).
__device__ __forceinline__ void split3(float v, unsigned short& h, unsigned short& m, unsigned short& l) {
    h = f32_to_bf16(v);
    const float r = v - __uint_as_float(((unsigned)h) << 16);
    m = f32_to_bf16(r);
    l = f32_to_bf16(r - __uint_as_float(((unsigned)m) << 16));
}

// split3x2 is split3 of a and b at once, each part as a bf16x2 pair (a in
// the low half): the same bits for every number and infinity (not for
// NaNs, which bf16x2 keeps NaN).
__device__ __forceinline__ void split3x2(float a, float b, unsigned& h, unsigned& m, unsigned& l) {
    h = bf16x2(a, b);
    const float ra = a - __uint_as_float(h << 16), rb = b - __uint_as_float(h & 0xffff0000u);
    m = bf16x2(ra, rb);
    l = bf16x2(ra - __uint_as_float(m << 16), rb - __uint_as_float(m & 0xffff0000u));
}

// emit writes the three bf16 parts of v (split3, split_bf16's arithmetic)
// at index i of parts ([3][n]) when the caller asked for them: a producer
// of a matmul's input saves the matmul its split.
__device__ __forceinline__ void emit(unsigned short* parts, size_t n, size_t i, float v) {
    if (!parts) return;
    split3(v, parts[i], parts[n + i], parts[2 * n + i]);
}

// Step stamps (TANDEM_CUDA_STAMPS=1 compiles them in; cuda/stamps.go):
// while tandem_stamps is set, thread 0 of block (0, 0, 0) of every kernel
// writes the global timer into the next slot as it passes its wait for
// the kernel before (pdl_start), so that a real step's kernels, run under
// programmatic launch and in graphs, can be told apart: the time from one
// kernel's release to the next one's is the first kernel's share of the
// step. Without TANDEM_STAMPS, stamp() is empty.
// globaltimer is the GPU's global nanosecond timer.
__device__ __forceinline__ unsigned long long globaltimer() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

#ifdef TANDEM_STAMPS
extern "C" {
__device__ unsigned long long* tandem_stamps = 0;
__device__ int tandem_stamp_n = 0;
__device__ int tandem_stamp_cap = 0;
}
__device__ __forceinline__ void stamp() {
    if ((threadIdx.x | threadIdx.y | threadIdx.z | blockIdx.x | blockIdx.y | blockIdx.z) != 0) return;
    unsigned long long* s = *(unsigned long long* volatile*)&tandem_stamps;
    if (!s) return;
    const unsigned long long t = globaltimer();
    const int i = atomicAdd(&tandem_stamp_n, 1);
    if (i < tandem_stamp_cap) s[i] = t;
}
#else
__device__ __forceinline__ void stamp() {}
#endif

// pdl_start begins every kernel. A kernel launched with programmatic
// stream serialization (TANDEM_CUDA_PDL) may be scheduled while the kernel
// before it in the stream still runs; griddepcontrol.wait holds each thread
// until that kernel has finished and its writes are visible, so nothing is
// read or written before it. launch_dependents then lets the next kernel be
// scheduled early in turn. Without the launch attribute (or below sm_90)
// both are no-ops.
__device__ __forceinline__ void pdl_start() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" :::);
#endif
    stamp();
}

// pdl_start_for is pdl_start inside a function whose pointers a and b are
// __restrict__: passing them to the wait keeps the compiler from moving
// their loads and stores above it (a restrict pointer the asm does not
// take might be assumed untouched by its memory clobber).
__device__ __forceinline__ void pdl_start_for(const void* a, const void* b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::"l"(a), "l"(b) : "memory");
    asm volatile("griddepcontrol.launch_dependents;" :::);
#endif
    stamp();
}

#define SQRT_2_OVER_PI 0.7978845608028654

__device__ __forceinline__ float gelu(float v) {
    const double x = v;
    return (float)(0.5 * x * (1.0 + tanh(SQRT_2_OVER_PI * (x + 0.044715 * x * x * x))));
}

// smem_addr is p's address in the block's shared memory window.
__device__ __forceinline__ unsigned smem_addr(const void* p) {
    unsigned long long a;
    asm("cvta.to.shared.u64 %0, %1;" : "=l"(a) : "l"(p));
    return (unsigned)a;
}

// cluster_sync is a barrier of every thread of the block's cluster
// (sm_90), with the cluster's shared-memory writes before it visible after.
__device__ __forceinline__ void cluster_sync() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("barrier.cluster.arrive.aligned;\n\tbarrier.cluster.wait.aligned;" ::: "memory");
#endif
}

// cluster_ld reads the float at p, an address in this block's shared
// memory, from the block of cluster rank r.
__device__ __forceinline__ float cluster_ld(const float* p, unsigned r) {
    float v = 0.0f;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    unsigned a;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(a) : "r"(smem_addr(p)), "r"(r));
    asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(a) : "memory");
#endif
    return v;
}


// mma16816 is c += a·b for one m16n8k16 tile: bf16 a (16 × 16, row-major
// fragments a0-a3) and b (16 × 8, column-major b0-b1), f32 c.
__device__ __forceinline__ void mma16816(float c[4], unsigned a0, unsigned a1, unsigned a2, unsigned a3, unsigned b0, unsigned b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// cp16 copies 16 bytes from global to shared memory asynchronously, or
// writes zeros when !ok (src is then not read); cp16s takes the shared
// address itself (smem_addr's), which a loop can step without converting a
// generic pointer each time.
__device__ __forceinline__ void cp16s(unsigned dst, const void* src, bool ok) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(ok ? 16 : 0) : "memory");
}
__device__ __forceinline__ void cp16(void* dst, const void* src, bool ok) { cp16s(smem_addr(dst), src, ok); }

// ldsm4s loads four 8 × 8 bf16 matrices from shared memory (ldmatrix):
// lane T gives the address of row T % 8 of matrix T / 8 (16 bytes,
// aligned), and receives in r[i] its fragment of matrix i: row T / 4,
// columns 2(T % 4) and 2(T % 4) + 1, the layout of mma16816's operands,
// from a shared address (smem_addr's).
__device__ __forceinline__ void ldsm4s(unsigned r[4], unsigned a) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}
