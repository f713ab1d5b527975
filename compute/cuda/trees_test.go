package cuda

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// treeRefSource computes the block reductions the way they were before
// block_tree0, one level of a shared-memory tree per barrier, next to the
// kernels' own block_sum_d and store_block_max (ops.cu, compiled with it).
const treeRefSource = `
extern "C" __global__ void test_trees(const double* x, double* got, double* want, const float* xf, float* gotf,
                                      float* wantf, double* gotw, double* gotn, float* gotwf) {
    __shared__ double sh[1024], ref[1024];
    __shared__ float shf[1024], reff[1024];
    const int t = threadIdx.x;
    const size_t i = (size_t)blockIdx.x * blockDim.x + t;
    ref[t] = x[i];
    reff[t] = xf[i];
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (t < s) {
            ref[t] += ref[t + s];
            reff[t] = fmax_nan(reff[t], reff[t + s]);
        }
        __syncthreads();
    }
    got[i] = block_sum_d(x[i], sh); // every thread's copy
    gotn[i] = norm_sum_d(x[i], sh);
    store_block_max(xf[i], shf, gotf + blockIdx.x);
    if (t == 0) {
        want[blockIdx.x] = ref[0];
        wantf[blockIdx.x] = reff[0];
    }
    if (blockDim.x == 256 && t < 32) { // warp_sum256 and warp_tree256: the block's sum and maximum by its first warp alone
        double v[8];
        float vf[8];
        for (int j = 0; j < 8; j++) {
            v[j] = x[(size_t)blockIdx.x * 256 + t + 32 * j];
            vf[j] = xf[(size_t)blockIdx.x * 256 + t + 32 * j];
        }
        const double w = warp_sum256(v);
        const float wf = warp_tree256(vf, max_nan());
        if (t == 0) gotw[blockIdx.x] = w, gotwf[blockIdx.x] = wf;
    }
}
`

// TestBlockTreesKeepTheirOrder protects block_tree0: block_sum_d
// (softmax's and attention's sums), norm_sum_d (the norms': its levels in
// registers) and store_block_max (attention's chunk maxima) give the bits
// of a tree through shared memory with one barrier a level, for every
// block size the kernels use. The doubles span
// sixty binary orders of magnitude, so another pairing or order of the
// additions changes the sum; the maxima include NaNs and zeros of both
// signs, where fmax_nan's operand order shows.

func TestBlockTreesKeepTheirOrder(t *testing.T) {
	b := backendOrSkip(t)
	ks, err := b.dev.Compile(opsSource+treeRefSource, "trees.cu", "test_trees")
	if err != nil {
		t.Fatal(err)
	}
	checkTrees(t, b, ks["test_trees"])
}

func checkTrees(t *testing.T, b *Backend, k Kernel) {
	t.Helper()
	var err error
	const blocks = 64
	r := rand.New(rand.NewPCG(31, 32))
	for _, threads := range []int{32, 64, 128, 256, 512, 1024} {
		n := blocks * threads
		x := make([]byte, 8*n)
		xf := make([]byte, 4*n)
		for i := range n {
			v := math.Ldexp(r.NormFloat64(), r.IntN(61)-30)
			binary.LittleEndian.PutUint64(x[8*i:], math.Float64bits(v))
			f := float32(r.NormFloat64())
			switch blk := i / threads; {
			case blk%4 == 1 && r.IntN(threads) == 0:
				f = float32(math.NaN())
			case blk%4 == 2: // every value a zero of either sign: the maximum's sign is the tree's
				f = float32(math.Copysign(0, float64(r.IntN(2)*2-1)))
			}
			binary.LittleEndian.PutUint32(xf[4*i:], math.Float32bits(f))
		}
		bufs := make([]Buffer, 9)
		for j, size := range []int{8 * n, 8 * n, 8 * blocks, 4 * n, 4 * blocks, 4 * blocks, 8 * blocks, 8 * n, 4 * blocks} {
			if bufs[j], err = b.dev.Alloc(size); err != nil {
				t.Fatal(err)
			}
			defer b.dev.Free(bufs[j])
		}
		if err := b.dev.Upload(bufs[0], x); err != nil {
			t.Fatal(err)
		}
		if err := b.dev.Upload(bufs[3], xf); err != nil {
			t.Fatal(err)
		}
		if err := b.dev.LaunchAsync(k, [3]uint32{blocks, 1, 1}, [3]uint32{uint32(threads), 1, 1}, 0,
			bufs[0], bufs[1], bufs[2], bufs[3], bufs[4], bufs[5], bufs[6], bufs[7], bufs[8]); err != nil {
			t.Fatal(err)
		}
		got, want, gotn := make([]byte, 8*n), make([]byte, 8*blocks), make([]byte, 8*n)
		gotf, wantf, gotw, gotwf := make([]byte, 4*blocks), make([]byte, 4*blocks), make([]byte, 8*blocks), make([]byte, 4*blocks)
		for j, dst := range map[int][]byte{1: got, 2: want, 4: gotf, 5: wantf, 6: gotw, 7: gotn, 8: gotwf} {
			if err := b.dev.Download(dst, bufs[j]); err != nil {
				t.Fatal(err)
			}
		}
		name := fmt.Sprintf("%d threads", threads)
		for blk := range blocks {
			w := binary.LittleEndian.Uint64(want[8*blk:])
			for th := range threads {
				if g := binary.LittleEndian.Uint64(got[8*(blk*threads+th):]); g != w {
					t.Fatalf("%s, block %d, thread %d: block_sum_d %v, the one-barrier-a-level tree %v",
						name, blk, th, math.Float64frombits(g), math.Float64frombits(w))
				}
				if g := binary.LittleEndian.Uint64(gotn[8*(blk*threads+th):]); g != w {
					t.Fatalf("%s, block %d, thread %d: norm_sum_d %v, the one-barrier-a-level tree %v",
						name, blk, th, math.Float64frombits(g), math.Float64frombits(w))
				}
			}
			if g := binary.LittleEndian.Uint64(gotw[8*blk:]); threads == 256 && g != w {
				t.Fatalf("%s, block %d: warp_sum256 %v, the one-barrier-a-level tree %v", name, blk, math.Float64frombits(g), math.Float64frombits(w))
			}
			if g, w := binary.LittleEndian.Uint32(gotf[4*blk:]), binary.LittleEndian.Uint32(wantf[4*blk:]); g != w {
				t.Fatalf("%s, block %d: store_block_max %#x, the one-barrier-a-level tree %#x", name, blk, g, w)
			}
			if g, w := binary.LittleEndian.Uint32(gotwf[4*blk:]), binary.LittleEndian.Uint32(wantf[4*blk:]); threads == 256 && g != w {
				t.Fatalf("%s, block %d: warp_tree256's maximum %#x, the one-barrier-a-level tree %#x", name, blk, g, w)
			}
		}
	}
}
