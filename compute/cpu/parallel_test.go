package cpu

import (
	"fmt"
	"sync"
	"testing"

	"tandem/compute"
)

func TestParallelForCoversEachItemOnce(t *testing.T) {
	for _, threads := range []int{1, 2, 3, 8} {
		for _, n := range []int{0, 1, 2, 7, 31, 32, 33, 1000} {
			for _, cost := range []int{1, minGoroutineWork} {
				b := New(threads)
				var mu sync.Mutex
				seen := make([]int, n)
				b.parallelFor(n, cost, func(lo, hi int) {
					mu.Lock()
					defer mu.Unlock()
					for i := lo; i < hi; i++ {
						seen[i]++
					}
				})
				for i, c := range seen {
					if c != 1 {
						t.Fatalf("threads %d n %d cost %d: item %d visited %d times", threads, n, cost, i, c)
					}
				}
			}
		}
	}
}

// Every op must give the same bits whatever the thread count: the shapes are
// large enough that threads > 1 really fans out.
func TestThreadCountDoesNotChangeBits(t *testing.T) {
	type result = [][]float32
	run := func(b *Backend) result {
		r := newRand(21)
		var out result
		add := func(ts ...*compute.Tensor) {
			for _, x := range ts {
				if x.DType() == compute.I32 {
					ids := b.ToI32(x)
					f := make([]float32, len(ids))
					for i, v := range ids {
						f[i] = float32(v)
					}
					out = append(out, f)
					continue
				}
				out = append(out, b.ToF32(x))
			}
		}
		const M, K, N = 40, 300, 130
		x := b.FromF32(randVec(r, M*K, 2), M, K)
		for _, dt := range weightDTypes {
			add(b.MatMul(x, weight(t, b, dt, roundTo(dt, randVec(r, N*K, 1)), N, K)))
		}
		const L, S, Hq, Hkv, D = 6, 200, 8, 2, 64
		q := b.FromF32(randVec(r, L*Hq*D, 1), 1, L, Hq, D)
		k := b.FromF32(randVec(r, S*Hkv*D, 1), 1, S, Hkv, D)
		v := b.FromF32(randVec(r, S*Hkv*D, 1), 1, S, Hkv, D)
		add(b.Attention(q, k, v, compute.AttentionOptions{Mask: compute.Causal, Window: 50, QueryPos: seqPos(1, L, S-L)}))
		big := b.FromF32(randVec(r, 64*2048, 3), 64, 2048)
		add(b.RMSNorm(big, weight(t, b, compute.BF16, roundTo(compute.BF16, randVec(r, 2048, 1)), 2048), 1e-6))
		add(b.RMSNorm(big, nil, 1e-6))
		add(b.RoPE(big.Reshape(64, 8, 256), make([]int32, 64), compute.DefaultRoPE(256, 1e4)))
		add(b.Softmax(big), b.GeluTanh(big), b.GeluMul(big, big), b.Softcap(big, 30), b.Scale(big, 0.7))
		add(b.Add(big, big), b.Mul(big, b.Slice(big, 0, 1)))
		add(b.Argmax(big))
		add(b.TopK(big, 8))
		add(b.Gather(weight(t, b, compute.BF16, roundTo(compute.BF16, randVec(r, 100*2048, 1)), 100, 2048), []int32{5, 99, 0, 5}))
		dst := b.FromF32(randVec(r, 8*2048, 1), 8, 2048)
		b.AddRows(dst, b.Slice(big, 0, 6), []int32{1, 3, 1, 7, 0, 1}, []float32{0.5, 0.25, 2, 1, 3, 0.125})
		add(dst)
		return out
	}
	want := run(New(1))
	for _, threads := range []int{2, 4, 7} {
		got := run(New(threads))
		for i := range want {
			requireSameBits(t, fmt.Sprintf("threads %d, result %d", threads, i), got[i], want[i])
		}
	}
}
