package computetest

import (
	"math/rand/v2"
	"testing"
)

// TestPCGJumpMatchesMathRand protects the method random_uniform (ops.cu)
// and RandomWeighting share: a stream jumped ahead by k steps and then
// stepped gives math/rand/v2's PCG outputs from its kth on, across the
// powers of two the jump composes and at the runs' and blocks' edges.
func TestPCGJumpMatchesMathRand(t *testing.T) {
	for _, seed := range [][2]uint64{{0, 0}, {1, 2}, {0x9e3779b97f4a7c15, 1 << 20}, {^uint64(0), 12345}} {
		ref := rand.NewPCG(seed[0], seed[1])
		want := make([]uint64, 70000)
		for i := range want {
			want[i] = ref.Uint64()
		}
		for _, k := range []uint64{0, 1, 2, 3, 255, 4095, 4096, 4097, 65535, 65536, 69990} {
			s := PCGJump(PCGState{Hi: seed[0], Lo: seed[1]}, k)
			for i := k; i < min(k+10, uint64(len(want))); i++ {
				if got := s.Uint64(); got != want[i] {
					t.Fatalf("seed %v, jumped %d: output %d is %#x, math/rand/v2 gives %#x", seed, k, i, got, want[i])
				}
			}
		}
	}
}
