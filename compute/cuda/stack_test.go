package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"tandem/compute"
	"tandem/compute/cpu"
)

// TestMatMulsStacked protects MatMuls on stacked weights (a loader's q, k,
// v or gate, up): each product is its columns of one MatMul over the stack
// (a view for one row, a copy for several), a row's result does not depend
// on the other rows (decode, verify and prefill agree), the products stay
// within MatMul's tolerance of the CPU's separate products, and weights
// that are not one stack run as separate MatMuls. With segment outputs
// (TANDEM_CUDA_SEGMENTS) a verify's products are written apart by the
// rows kernel itself: the same bits, in the K-split kernels' finish and in
// a direct write, with column groups that straddle two products.
func TestMatMulsStacked(t *testing.T) {
	g := backendOrSkip(t)
	defer func(s bool) { segmentOutputs = s }(segmentOutputs)
	defer restoreMatMul()()
	for _, tc := range []struct {
		name   string
		parts  []int
		K      int
		kernel string // the rows kernel; auto picks by size
	}{
		// K wide enough for the stack's K split to differ from its parts'.
		{"31B q k v, split K", []int{4096, 1024, 1024}, 5376, "auto"},
		{"odd widths, one split", []int{300, 77, 41}, 600, "auto"},
		{"odd widths, one split, wide kernel", []int{300, 77, 41}, 600, "matmul_rows_wide"},
		{"two products, split K", []int{1000, 1000}, 1536, "auto"},
		{"two products, split K, wide kernel", []int{1000, 1000}, 1536, "matmul_rows_wide"},
		{"odd widths, split K, wide kernel", []int{300, 77, 41}, 1536, "matmul_rows_wide"},
		{"31B q k v, split K, early weights", []int{4096, 1024, 1024}, 5376, "matmul_rows_wide_early"},
	} {
		for _, segs := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/segments=%v", tc.name, segs), func(t *testing.T) {
				segmentOutputs, rowsKernel = segs, tc.kernel
				checkStacked(t, g, tc.parts, tc.K)
			})
		}
	}
}

func checkStacked(t *testing.T, g *Backend, parts []int, K int) {
	c := cpu.New(0)
	r := rand.New(rand.NewPCG(13, uint64(K)))
	total := 0
	for _, n := range parts {
		total += n
	}
	wdata := randF32(r, total*K)
	whole := weight(g, compute.BF16, wdata, total, K)
	var ws, apart, onCPU []*compute.Tensor
	off := 0
	for _, n := range parts {
		ws = append(ws, g.Slice(whole, off, off+n))
		apart = append(apart, weight(g, compute.BF16, wdata[off*K:(off+n)*K], n, K))
		onCPU = append(onCPU, weight(c, compute.BF16, wdata[off*K:(off+n)*K], n, K))
		off += n
	}
	xdata := randF32(r, 130*K)
	single := make([][][]float32, 130) // single[row][product]
	for _, M := range []int{1, 2, 4, 5, 8, 13, 17, 20, 130} {
		x := g.FromF32(xdata[:M*K], M, K)
		got := g.MatMuls(x, ws...)
		if segmentOutputs && M >= 2 && (M <= rowsMaxM || tilesFor(M, 1, 1) != "") {
			// The rows kernel wrote the products apart: views of one
			// allocation, product i at its first column times M.
			first, start := memOf(got[0]), 0
			for i, n := range parts {
				if m := memOf(got[i]); m.blk != first.blk || m.ptr-first.ptr != uintptr(start*M*4) {
					t.Fatalf("M=%d product %d: not the segment at column %d of one output (split_cols ran?)", M, i, start)
				}
				start += n
			}
		}
		full := g.ToF32(g.MatMul(x, whole))
		off := 0
		for i, n := range parts {
			if got[i].Dim(0) != M || got[i].Dim(1) != n {
				t.Fatalf("M=%d product %d: shape %v, want [%d %d]", M, i, got[i].Shape(), M, n)
			}
			p := g.ToF32(got[i])
			for row := range M {
				want := full[row*total+off : row*total+off+n]
				if err := sameBits(p[row*n:(row+1)*n], want); err != nil {
					t.Fatalf("M=%d product %d row %d: not its columns of the stack's product: %v", M, i, row, err)
				}
				if single[row] == nil {
					one := g.MatMuls(g.FromF32(xdata[row*K:(row+1)*K], 1, K), ws...)
					for _, o := range one {
						single[row] = append(single[row], g.ToF32(o))
					}
				}
				if err := sameBits(p[row*n:(row+1)*n], single[row][i]); err != nil {
					t.Fatalf("M=%d product %d row %d: differs from the row alone: %v", M, i, row, err)
				}
			}
			off += n
		}
	}
	// Within MatMul's tolerance of the CPU's separate products.
	x := xdata[:4*K]
	got := g.MatMuls(g.FromF32(x, 4, K), ws...)
	for i := range parts {
		want := c.ToF32(c.MatMul(c.FromF32(x, 4, K), onCPU[i]))
		p := g.ToF32(got[i])
		for j := range want {
			if d := math.Abs(float64(p[j]-want[j])) / (1 + math.Abs(float64(want[j]))); d > 2e-4 {
				t.Fatalf("product %d element %d: %v, CPU %v", i, j, p[j], want[j])
			}
		}
	}
	// Separate allocations are no stack: the bits of separate MatMuls.
	xt := g.FromF32(x, 4, K)
	sep := g.MatMuls(xt, apart...)
	for i := range parts {
		if err := sameBits(g.ToF32(sep[i]), g.ToF32(g.MatMul(xt, apart[i]))); err != nil {
			t.Fatalf("unstacked product %d: %v", i, err)
		}
	}
	if g.stacked(apart) != nil || g.stacked(ws[:1]) != nil || g.stacked([]*compute.Tensor{ws[1], ws[0]}) != nil {
		t.Fatal("weights that are not consecutive rows of one tensor were taken for a stack")
	}
}
