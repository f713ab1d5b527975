// Device functions shared by ops.cu and matmul.cu: put before each of them
// when they are compiled (commonSource in kernels.go), so a kernel of either
// file that writes the same value computes it with the same code.

// Rounding to nearest even, as compute.F32ToBF16 and compute.F32ToF16.
__device__ __forceinline__ unsigned short f32_to_bf16(float f) {
    unsigned u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u);
    return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

// emit writes the three bf16 parts of v (hi, mid, lo: split_bf16's
// arithmetic) at index i of parts ([3][n]) when the caller asked for them:
// a producer of a matmul's input saves the matmul its split.
__device__ __forceinline__ void emit(unsigned short* parts, size_t n, size_t i, float v) {
    if (!parts) return;
    const unsigned short h = f32_to_bf16(v);
    const float r = v - __uint_as_float(((unsigned)h) << 16);
    const unsigned short m = f32_to_bf16(r);
    parts[i] = h;
    parts[n + i] = m;
    parts[2 * n + i] = f32_to_bf16(r - __uint_as_float(((unsigned)m) << 16));
}

#define SQRT_2_OVER_PI 0.7978845608028654

__device__ __forceinline__ float gelu(float v) {
    const double x = v;
    return (float)(0.5 * x * (1.0 + tanh(SQRT_2_OVER_PI * (x + 0.044715 * x * x * x))));
}
