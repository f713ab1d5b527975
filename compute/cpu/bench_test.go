package cpu

import (
	"fmt"
	"runtime"
	"testing"

	"tandem/compute"
)

// streamBytes is how much weight data the GEMV benchmark cycles through, so
// that it measures streaming from DRAM as decode does (every layer's weights
// once per token), not re-reading a matrix that sits in the last-level cache.
const streamBytes = 256 << 20

// fillBF16 writes pseudo-random normal bf16 values (no subnormals or NaNs,
// which could take slow paths) quickly.
func fillBF16(w []uint16, seed uint32) {
	s := seed | 1
	for i := range w {
		s ^= s << 13
		s ^= s >> 17
		s ^= s << 5
		w[i] = 0x3c00 + uint16(s&0x07ff) | uint16(s>>16)&0x8000 // ±[2^-7, 2^1)
	}
}

// BenchmarkGEMV is the decode hot path: one token (M = 1) through bf16
// weights, named K×N (input × output features). Throughput is weight bytes
// per second; x-of-memcpy compares it with the copy baseline (the "memcpy"
// sub-benchmark, reported the same way as bytes of buffer per second).
func BenchmarkGEMV(b *testing.B) {
	be := New(0)
	for _, s := range []struct{ K, N int }{{2048, 2048}, {1536, 6144}, {6144, 1536}, {4096, 4096}} {
		b.Run(fmt.Sprintf("bf16_%dx%d", s.K, s.N), func(b *testing.B) {
			size := s.N * s.K
			copies := max(1, streamBytes/(2*size))
			ws := make([]*compute.Tensor, copies)
			for i := range ws {
				w := make([]uint16, size)
				fillBF16(w, uint32(i+1))
				ws[i] = compute.NewTensor(compute.BF16, []int{s.N, s.K}, w)
			}
			x := be.FromF32(randVec(newRand(1), s.K, 1), 1, s.K)
			b.SetBytes(int64(2 * size))
			b.ResetTimer()
			for i := range b.N {
				be.MatMul(x, ws[i%copies])
			}
			b.StopTimer()
			bw := float64(2*size) * float64(b.N) / b.Elapsed().Seconds()
			b.ReportMetric(bw/CopyBandwidth(), "x-of-memcpy")
		})
	}
	b.Run("memcpy_256MiB", func(b *testing.B) {
		src, dst := make([]byte, streamBytes), make([]byte, streamBytes)
		copy(dst, src)
		b.SetBytes(streamBytes)
		b.ResetTimer()
		for range b.N {
			parallelCopy(dst, src, runtime.GOMAXPROCS(0))
		}
	})
}

// BenchmarkMatMul covers speculative verify (M = 4) and prefill (M = 64)
// with bf16 weights; GFLOP/s counts 2·M·N·K.
func BenchmarkMatMul(b *testing.B) {
	be := New(0)
	for _, M := range []int{4, 64} {
		for _, s := range []struct{ K, N int }{{2048, 2048}, {1536, 6144}} {
			b.Run(fmt.Sprintf("M%d_bf16_%dx%d", M, s.K, s.N), func(b *testing.B) {
				w := make([]uint16, s.N*s.K)
				fillBF16(w, 7)
				wt := compute.NewTensor(compute.BF16, []int{s.N, s.K}, w)
				x := be.FromF32(randVec(newRand(1), M*s.K, 1), M, s.K)
				b.SetBytes(int64(2 * s.N * s.K))
				b.ResetTimer()
				for range b.N {
					be.MatMul(x, wt)
				}
				b.StopTimer()
				b.ReportMetric(2*float64(M*s.N*s.K)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		}
	}
}

// BenchmarkAttention is one decode step of a Gemma-4-E2B-like layer (8 query
// heads, 1 KV head, head dim 256) over S cached keys; the byte rate counts
// the K and V rows read.
func BenchmarkAttention(b *testing.B) {
	be := New(0)
	const Hq, Hkv, D = 8, 1, 256
	for _, S := range []int{512, 4096} {
		b.Run(fmt.Sprintf("decode_S%d", S), func(b *testing.B) {
			r := newRand(3)
			q := be.FromF32(randVec(r, Hq*D, 1), 1, 1, Hq, D)
			k := be.FromF32(randVec(r, S*Hkv*D, 1), 1, S, Hkv, D)
			v := be.FromF32(randVec(r, S*Hkv*D, 1), 1, S, Hkv, D)
			opt := compute.AttentionOptions{Mask: compute.Causal, QueryPos: []int32{int32(S - 1)}}
			b.SetBytes(int64(2 * S * Hkv * D * 4))
			b.ResetTimer()
			for range b.N {
				be.Attention(q, k, v, opt)
			}
		})
	}
}
