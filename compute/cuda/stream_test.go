package cuda

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"tandem/compute"
)

// streamSource holds kernels that read a decode product's weights the way
// matmul_rows_wide does, or laid out otherwise, and do nothing else with
// them (compiled after matmul.cu, whose wload_step they share). Each xors
// what it read into a word that is stored only if it equals a constant, so
// the loads stay.
const streamSource = `
// stream_rows: matmul_rows_wide's weight loads (G = 2 column groups of 8
// rows, U = 2 chunks a K step, wload_step) on its grid, without the mmas.
extern "C" __global__ void __launch_bounds__(256, 4) stream_rows(const unsigned short* w, unsigned* sink, int N,
                                                                 int K, int kchunk) {
    extern __shared__ char occupancy[]; // sized by the launch, only to cap blocks a multiprocessor
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3, wid = threadIdx.x >> 5;
    const int n0 = (blockIdx.x * 8 + wid) * 16;
    if (n0 >= N) return;
    const int k0 = blockIdx.y * kchunk, k1 = min(K, k0 + kchunk);
    bool ok[2];
    const unsigned short* wr[2];
    for (int i = 0; i < 2; i++) {
        ok[i] = n0 + 8 * i + g < N;
        wr[i] = w + (size_t)(ok[i] ? n0 + 8 * i + g : 0) * K;
    }
    unsigned acc = 0;
    for (int kb = k0; kb < k1; kb += 64) {
        uint4 q[2][2];
        for (int i = 0; i < 2; i++) wload_step<2, true>(q[i], wr[i], kb, t, k1, ok[i], true);
        for (int i = 0; i < 2; i++)
            for (int u = 0; u < 2; u++) acc ^= q[i][u].x ^ q[i][u].y ^ q[i][u].z ^ q[i][u].w;
    }
    if (acc == 0x9e3779b9u) sink[0] = acc + occupancy[0];
}

// stream_tiled: the same bytes a warp step as stream_rows (16 rows × 64
// elements, 2 KB), but stored as one run: a warp's rows of one K split lie
// step after step, so each step reads 2 KB in a row instead of 128 bytes
// from each of 16 rows.
extern "C" __global__ void __launch_bounds__(256, 4) stream_tiled(const uint4* w, unsigned* sink, int N, int K,
                                                                  int kchunk) {
    extern __shared__ char occupancy[];
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, tile = blockIdx.x * 8 + wid;
    if (tile * 16 >= N) return;
    const int k0 = blockIdx.y * kchunk, k1 = min(K, k0 + kchunk), steps = (k1 - k0 + 63) / 64;
    const uint4* base = w + ((size_t)tile * gridDim.y + blockIdx.y) * 2 * kchunk; // 16 · kchunk elements
    unsigned acc = 0;
    for (int s = 0; s < steps; s++) {
        uint4 q[4];
        for (int j = 0; j < 4; j++) {
            const uint4* p = base + s * 128 + 32 * j + lane;
            asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];"
                         : "=r"(q[j].x), "=r"(q[j].y), "=r"(q[j].z), "=r"(q[j].w)
                         : "l"(p));
        }
        for (int j = 0; j < 4; j++) acc ^= q[j].x ^ q[j].y ^ q[j].z ^ q[j].w;
    }
    if (acc == 0x9e3779b9u) sink[0] = acc + occupancy[0];
}

// stream_flat: every thread reads 16 bytes at a time, a grid's width apart:
// the plainest read of n16 chunks.
extern "C" __global__ void stream_flat(const uint4* w, unsigned* sink, size_t n16) {
    unsigned acc = 0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n16; i += (size_t)gridDim.x * blockDim.x) {
        uint4 q;
        asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
                     : "=r"(q.x), "=r"(q.y), "=r"(q.z), "=r"(q.w)
                     : "l"(w + i));
        acc ^= q.x ^ q.y ^ q.z ^ q.w;
    }
    if (acc == 0x9e3779b9u) sink[0] = acc;
}
`

// TestWeightStreamSpeed says where a decode product's time goes between its
// weight reads and the rest (the mmas, the activations, the split
// partials): on the published shapes it times matmul_rows_wide at one row
// beside kernels that only read the same weights, in its pattern (16 rows,
// 128 bytes of each a warp step), in 2 KB runs (the same bytes a warp
// step, laid out tile by tile), and flat, at its four blocks a
// multiprocessor and at the eight its registers would otherwise allow.
// Split products are also timed without their finish (the last block of
// each column group summing the splits' partials), and with the cluster
// finish (TANDEM_CUDA_CLUSTER) instead. Asserts nothing. On the
// H200 (eleventh session) the 31B products ran at
// 3.4-3.6 TB/s, their loads alone at 3.7-3.9, in 2 KB runs 3.9-4.0 and a
// flat read at 4.0-4.4 (above the copy's 4.0); the E2B products took
// 10.7-12 µs against 6.2-7.2 for their weights alone.
func TestWeightStreamSpeed(t *testing.T) {
	g := backendOrSkip(t)
	if testing.Short() {
		t.Skip("timing")
	}
	ks, err := g.dev.Compile(MatMulSource+streamSource, "stream.cu", "stream_rows", "stream_tiled", "stream_flat")
	if err != nil {
		t.Fatal(err)
	}
	defer restoreMatMul()()
	rowsKernel, clusterFinish = "matmul_rows_wide", false // the counted finish, where a line does not say otherwise
	sink := g.alloc(compute.F32, 1)
	r := rand.New(rand.NewPCG(11, 12))
	launch := func(k Kernel, grid [3]uint32, shmem uint32, args ...any) {
		if err := g.dev.LaunchAsync(k, grid, [3]uint32{256, 1, 1}, shmem, args...); err != nil {
			t.Fatal(err)
		}
	}
	const four = 48 << 10 // shared memory a block that leaves room for four a multiprocessor
	for _, s := range []struct {
		name string
		N, K int
	}{{"31B MLP down", 5376, 21504}, {"31B MLP gate", 21504, 5376}, {"31B LM head", 262144, 5376},
		{"E2B MLP down", 1536, 6144}, {"E2B MLP gate", 6144, 1536}} {
		splits, chunk := splitK(s.N, s.K)
		bytes := float64(2 * s.N * s.K)
		rate := func(d time.Duration) string {
			return fmt.Sprintf("%v %.0f GB/s", d.Round(100*time.Nanosecond), bytes/d.Seconds()/1e9)
		}
		w := weight(g, compute.BF16, randF32(r, s.N*s.K), s.N, s.K)
		x := g.FromF32(randF32(r, s.K), 1, s.K)
		tiles := (s.N + 15) / 16
		tiledW := g.alloc(compute.BF16, tiles*splits*16*chunk)
		grid := [3]uint32{uint32((s.N + 127) / 128), uint32(splits), 1}
		line := fmt.Sprintf("%s (N=%d K=%d, %d splits of %d):  matmul_rows_wide %s", s.name, s.N, s.K, splits, chunk,
			rate(deviceTime(t, g, 20, func() { g.MatMul(x, w) })))
		if splits > 1 {
			// The same launch without the finish (no counters: each split
			// writes its partials and nothing sums them), for what the last
			// blocks' sums and the count before them cost.
			xs, part := g.splitParts(x, s.K), g.alloc(compute.F32, splits*s.N)
			line += "  without its finish " + rate(deviceTime(t, g, 20, func() {
				launch(g.k["matmul_rows_wide"], grid, 0, ptrOf(xs), ptrOf(w), ptrOf(part), ptrOf(part), nil, 1, s.N, s.K,
					chunk, alignedRows(s.K, w, 0), segNone, segNone)
			}))
			if splits <= g.maxCluster {
				clusterFinish, clusterAlways = true, true
				line += fmt.Sprintf("  with the cluster finish (%d clusters, %d fit) %s", grid[0],
					g.clusterFit["matmul_rows_wide_cl"][splits], rate(deviceTime(t, g, 20, func() { g.MatMul(x, w) })))
				if s.N*s.K < wideMin { // the kernel these products get: matmul_rows
					rowsKernel = "matmul_rows" // its split is the narrow kernel's
					ns, _ := splitK(s.N, s.K)
					line += fmt.Sprintf("  matmul_rows (%d splits) %s, with the cluster finish (%d clusters, %d fit) ", ns,
						rate(deviceTime(t, g, 20, func() {
							clusterFinish = false
							g.MatMul(x, w)
						})), (s.N+63)/64, g.clusterFit["matmul_rows_cl"][min(ns, 16)])
					clusterFinish = true
					line += rate(deviceTime(t, g, 20, func() { g.MatMul(x, w) }))
					rowsKernel = "matmul_rows_wide"
				}
				clusterFinish, clusterAlways = false, false
			}
		}
		for _, v := range []struct {
			name   string
			k      Kernel
			shmem  uint32
			weight *compute.Tensor
		}{{"its loads", ks["stream_rows"], four, w}, {"its loads at 8 blocks", ks["stream_rows"], 0, w},
			{"2 KB runs", ks["stream_tiled"], four, tiledW}, {"2 KB runs at 8 blocks", ks["stream_tiled"], 0, tiledW}} {
			line += "  " + v.name + " " + rate(deviceTime(t, g, 20, func() {
				launch(v.k, grid, v.shmem, ptrOf(v.weight), ptrOf(sink), s.N, s.K, chunk)
			}))
		}
		n16 := s.N * s.K / 8
		line += "  flat " + rate(deviceTime(t, g, 20, func() {
			launch(ks["stream_flat"], [3]uint32{uint32(8 * g.dev.SMs), 1, 1}, 0, ptrOf(w), ptrOf(sink), n16) // size_t: the slot's 8 bytes
		}))
		t.Log(line)
	}
	if bw, err := g.CopyBandwidth(); err == nil {
		t.Logf("copy bandwidth %.0f GB/s", bw/1e9)
	}
}

// flushSource reads a buffer larger than L2, to evict what a timed kernel
// would otherwise find there.
const flushSource = `
extern "C" __global__ void l2_flush(const uint4* w, unsigned* sink, int n16) {
    unsigned acc = 0;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n16; i += gridDim.x * blockDim.x) {
        const uint4 q = w[i];
        acc ^= q.x ^ q.y ^ q.z ^ q.w;
    }
    if (acc == 0x9e3779b9u) sink[0] = acc;
}
`

// l2Flusher returns a function that queues a read of 256 MiB (five times
// the H200's L2), so that the kernel queued after it finds its operands in
// memory, as a decode step's kernels do between their products' weights.
// deviceTime leaves the flush out.
func l2Flusher(t *testing.T, g *Backend) func() {
	t.Helper()
	ks, err := g.dev.Compile(flushSource, "flush.cu", "l2_flush")
	if err != nil {
		t.Fatal(err)
	}
	const n16 = 256 << 20 / 16
	buf, sink := g.alloc(compute.F32, 4*n16), g.alloc(compute.F32, 1)
	return func() {
		if err := g.dev.LaunchAsync(ks["l2_flush"], [3]uint32{uint32(4 * g.dev.SMs), 1, 1}, [3]uint32{256, 1, 1}, 0,
			ptrOf(buf), ptrOf(sink), n16); err != nil {
			t.Fatal(err)
		}
	}
}

// TestClusterSplitSpeed says whether a split count chosen for the cluster
// finish would pay on the 31B shape, whose products' clusters do not all
// fit the device at fillSplit's counts (the MLP down product's 42 clusters
// of 12, with room for 37): each product at every split count from 2 to
// 16, with the counted finish and with the cluster finish, beside how many
// of its clusters fit. Asserts nothing.
func TestClusterSplitSpeed(t *testing.T) {
	g := backendOrSkip(t)
	if testing.Short() || g.maxCluster == 0 {
		t.Skip("timing; clusters")
	}
	defer restoreMatMul()()
	rowsKernel = "matmul_rows_wide"
	r := rand.New(rand.NewPCG(13, 14))
	for _, s := range []struct {
		name string
		N, K int
	}{{"31B MLP down", 5376, 21504}, {"31B q|k|v", 16384, 5376}, {"31B o", 5376, 8192}} {
		w := weight(g, compute.BF16, randF32(r, s.N*s.K), s.N, s.K)
		x := g.FromF32(randF32(r, s.K), 1, s.K)
		splitFixed = 0
		def, _ := splitK(s.N, s.K)
		line := fmt.Sprintf("%s (N=%d K=%d, %d splits by default):", s.name, s.N, s.K, def)
		for n := 2; n <= g.maxCluster; n++ {
			splitFixed = n
			clusterFinish, clusterAlways = false, false
			counted := deviceTime(t, g, 20, func() { g.MatMul(x, w) })
			clusterFinish, clusterAlways = true, true
			cl := deviceTime(t, g, 20, func() { g.MatMul(x, w) })
			line += fmt.Sprintf("  %d: %v, cluster %v (%d of %d fit)", n, counted.Round(100*time.Nanosecond),
				cl.Round(100*time.Nanosecond), g.clusterFit["matmul_rows_wide_cl"][n], (s.N+127)/128)
		}
		t.Log(line)
	}
}
