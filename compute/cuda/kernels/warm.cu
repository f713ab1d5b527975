// l2_warm asks L2 for the first n bytes at p (16-byte aligned, n a
// multiple of 16): a model weight that a product a few kernels later will
// stream, fetched while the kernels in between (norms, attention) leave
// the memory bus idle. It reads nothing into registers and writes
// nothing, so no result changes; the bulk prefetch is a hint the memory
// system may drop.
//
// Under programmatic launch it lets the next kernel be scheduled first,
// then waits for the kernel before it to finish, and only then asks for
// the bytes: the prefetch starts when the product before it has stopped
// streaming, and the kernel after it, which waits for this one, still
// sees every write of the kernel before (this one ends after them).
#define WARM_PIECE 32768 // bytes a prefetch instruction asks for

extern "C" __global__ void l2_warm(const char* p, unsigned long long n) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" :::);
    asm volatile("griddepcontrol.wait;" ::: "memory");
    const unsigned long long step = (unsigned long long)gridDim.x * blockDim.x * WARM_PIECE;
    for (unsigned long long off = ((unsigned long long)blockIdx.x * blockDim.x + threadIdx.x) * WARM_PIECE; off < n;
         off += step) {
        const unsigned size = (unsigned)(n - off < WARM_PIECE ? n - off : WARM_PIECE);
        unsigned long long g; // the .global address of a generic pointer
        asm("cvta.to.global.u64 %0, %1;" : "=l"(g) : "l"(p + off));
        asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(g), "r"(size) : "memory");
    }
#endif
}
