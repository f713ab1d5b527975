package cuda

import (
	"cmp"
	_ "embed"
	"fmt"
	"hash/maphash"
	"log/slog"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"tandem/compute"
)

//go:embed kernels/ops.cu
var opsFile string

// opsSource is ops.cu as compiled: after the shared device functions.
var opsSource = commonSource + opsFile

var (
	_ compute.Backend       = (*Backend)(nil)
	_ compute.MemoryInfo    = (*Backend)(nil)
	_ compute.Recorder      = (*Backend)(nil)
	_ compute.Fused         = (*Backend)(nil)
	_ compute.FusedBoundary = (*Backend)(nil)
	_ compute.FusedQKV      = (*Backend)(nil)
	_ compute.Checkpointer  = (*Backend)(nil)
)

// Backend implements compute.Backend on one GPU. Tensors live in device
// memory (Tensor.Data() is a *mem); host slices in op arguments (positions,
// ids) are uploaded per call. Ops are queued asynchronously on one stream;
// ToF32 and ToI32 wait for them.
//
// Like the CPU backend, every op is batch-invariant: a row's (or query's)
// result has the same bits whatever else shares the call. The results
// differ from the CPU backend's in the last bits where the reduction order
// differs (matmul, attention); tests bound those differences.
type Backend struct {
	dev   *Device
	pool  *pool
	stage *staging
	late  lateRead // ReadLate's pinned memory
	k     map[string]Kernel
	// precision is the products' (compute.Precisioner): a prompt pass's
	// products at PrecisionBF16 take matmul_tiled1.
	precision atomic.Uint32

	mu        sync.Mutex
	ropes     map[*compute.RoPE]*compute.Tensor // uploaded frequency tables
	tables    tableMemo                         // see table
	splits    []splitEntry                      // see splitParts
	counters  *compute.Tensor                   // splitCounters zeros, reset by the kernels after use
	sites     map[string]bool                   // recording sites seen (BeginRecord)
	recSite   string                            // the site being recorded, for Checkpoint ("" outside one)
	recPart   int                               // its parts launched so far
	recCalls  int                               // Checkpoint calls within it (checkpointEvery)
	spunAt    time.Time                         // last Spin, until the next download
	issued    []time.Duration                   // see IssueTimes
	fusedN    int                               // attn_fused launches, for the test that they happen
	cols4N    int                               // attention passes that ask the untiled values kernels for four columns a thread (attnCols4)
	gluN      int                               // matmul_rows_glu launches, likewise
	clusterN  int                               // launches of the rows kernels' cluster-finish variants, likewise
	attnClN   int                               // attn_cluster launches, likewise
	roundsN   int                               // attn_cluster_rounds launches, likewise
	clGroupN  int                               // attn_cluster_group launches, likewise
	normedN   int                               // attn_cluster_normed launches, likewise
	earlyN    int                               // products run by an _early kernel (earlyWeights), likewise
	tiled1N   int                               // products run by matmul_tiled1 or matmul_tiled1w (PrecisionBF16), likewise
	tiled1wN  int                               // those by matmul_tiled1w, likewise
	tilesN    int                               // products run by a multi-tile rows kernel (tilesFor), likewise
	attnRowsN int                               // attention passes over a table of rows' caches (AttentionRows), likewise
	ltN       int                               // products run by cuBLASLt (promptBLAS), likewise
	flashN    int                               // attention passes run by attn_flash (promptFlash), likewise

	flashSmem int // the dynamic shared memory attn_flash may take (0: it cannot run)

	ltOnce sync.Once
	lt     *Lt // cuBLASLt for bf16 prompt products; nil until the first, or where it cannot load

	// attnClusterSmem is the most dynamic shared memory an attn_cluster
	// block may take and attnClusterMax its most blocks a cluster (0: the
	// kernel cannot be launched as a cluster).
	attnClusterSmem, attnClusterMax int
	attnClusterFit                  [17][attnClusterSmemMax/attnSmemUnit + 1]int // attnClustersHeld's table: by blocks a cluster and units of shared memory
	attnGroupFit                    [17][attnClusterSmemMax/attnSmemUnit + 1]int // attnGroupHeld's, for attn_cluster_group

	// maxCluster is the most K splits a cluster-finish launch takes: 16
	// where the kernels allow non-portable cluster sizes, 8 where not, 0
	// where the device has no clusters. clusterFit[k][s] is how many
	// clusters of s blocks of the cluster-finish kernel k the device holds
	// at once.
	maxCluster int
	clusterFit map[string][17]int

	// attn_values_tiled launches by columns a thread (attnTiledCols: 1, 2, 4)
	tiledColsN [5]int

	bwOnce sync.Once
	bw     float64
	bwErr  error
}

var kernelNames = map[string][]string{
	"ops.cu": {"convert", "gather", "add_rows", "concat", "binary", "unary", "gelu_mul", "rmsnorm", "rope", "softmax", "topk", "attn_scores", "attn_values", "attn_combine", "spin",
		"attn_scores_tiled", "attn_values_tiled", "rmsnorm_rope", "split_bf16", "argmax_keyed", "copy_words", "argmax_part", "argmax_finish", "split_cols", "topk_sort", "rmsnorm2", "moe_route", "qkv_norms", "qkv_norms_warp", "attn_fused",
		"attn_cluster", "attn_cluster_rounds", "attn_cluster_group", "attn_cluster_normed", "random_uniform", "attn_flash", "attn_kv_bf16", "sum_experts", "moe_group"},
	"matmul.cu": {"matmul_f32_warp", "matmul_bf16_warp", "matmul_f16_warp", "sum_splits",
		"matmul_mma1", "matmul_mma8", "matmul_mma1n", "matmul_mma8n", "matmul_rows", "matmul_rows_plain", "matmul_tiled", "matmul_tiled1", "matmul_tiled1w", "matmul_rows_at", "matmul_rows_tokens", "matmul_rows_glu", "matmul_rows_glu_by",
		"matmul_rows_wide", "matmul_rows_early", "matmul_rows_wide_early", "matmul_rows_cl", "matmul_rows_wide_cl", "matmul_rows_glu_cl", "matmul_rows_glu_by_cl",
		"matmul_rows_early_cl", "matmul_rows_wide_early_cl", "matmul_rows_glu_early", "matmul_rows_glu_by_early",
		"matmul_rows_glu_early_cl", "matmul_rows_glu_by_early_cl", "matmul_grouped", "matmul_grouped1"},
}

// New opens GPU ordinal and compiles the kernels for it.
func New(ordinal int) (*Backend, error) {
	dev, err := Open(ordinal)
	if err != nil {
		return nil, err
	}
	b := &Backend{dev: dev, pool: newPool(dev), stage: newStaging(dev), k: map[string]Kernel{}, ropes: map[*compute.RoPE]*compute.Tensor{}}
	b.tables.seed = maphash.MakeSeed()
	if waveWarps == 0 {
		waveWarps = 32 * dev.SMs // the rows kernels: four blocks of eight warps a multiprocessor
	}
	for name, src := range map[string]string{"ops.cu": opsSource, "matmul.cu": MatMulSource} {
		if stampsBuild {
			src = "#define TANDEM_STAMPS 1\n" + src
		}
		ks, err := dev.Compile(src, name, kernelNames[name]...)
		if err != nil {
			dev.Close()
			return nil, err
		}
		for n, k := range ks {
			b.k[n] = k
		}
	}
	b.counters = b.Zeros(compute.I32, splitCounters)
	for _, n := range []int{flashSmemMax, flashSmemSmall} {
		if err := dev.SetFuncAttribute(b.k["attn_flash"], funcAttrMaxDynamicShared, int32(n)); err != nil {
			slog.Debug("cuda: attn_flash's shared memory", "bytes", n, "err", err)
			continue
		}
		b.flashSmem = n
		break
	}
	if dev.Clusters() {
		b.maxCluster = 16
		b.clusterFit = map[string][17]int{}
		for _, name := range clusterOf {
			if err := dev.SetFuncAttribute(b.k[name], funcAttrNonPortableCluster, 1); err != nil {
				slog.Debug("cuda: clusters of more than 8 blocks are not allowed", "kernel", name, "err", err)
				b.maxCluster = 8
			}
			var fit [17]int // past maxCluster never read
			for s := 2; s <= 16; s++ {
				n, err := dev.MaxActiveClusters(b.k[name], [3]uint32{256, 1, 1}, [3]uint32{1, uint32(s), 1}, 0)
				if err != nil {
					slog.Debug("cuda: cluster occupancy", "kernel", name, "blocks", s, "err", err)
				}
				fit[s] = n
			}
			b.clusterFit[name] = fit
		}
		// attn_cluster's blocks hold a head's keys and value columns:
		// allow them most of a multiprocessor's shared memory. Its
		// variants have the same block size and register cap, and the
		// rounds variant the same static shared memory, so one occupancy
		// table serves them; attn_cluster_normed's 6 KiB more of static
		// shared memory (its norms' trees) can make the table promise it
		// more clusters at once than fit, which costs time, never a
		// failed launch (200 + 9 KiB a block is under sm_90's 227).
		// attn_cluster_group has a table of its own.
		ok, most := true, 16
		for _, name := range []string{"attn_cluster", "attn_cluster_rounds", "attn_cluster_group", "attn_cluster_normed"} {
			k := b.k[name]
			if err := dev.SetFuncAttribute(k, funcAttrMaxDynamicShared, attnClusterSmemMax); err != nil {
				slog.Debug("cuda: attn_cluster's shared memory", "kernel", name, "err", err)
				ok = false
			}
			if dev.SetFuncAttribute(k, funcAttrNonPortableCluster, 1) != nil {
				most = 8
			}
		}
		if ok {
			b.attnClusterSmem, b.attnClusterMax = attnClusterSmemMax, most
			b.askAttnClusterFit()
		}
	}
	return b, nil
}

// BeginRecord implements compute.Recorder: the ops until EndRecord are
// captured into a CUDA graph (see graph.go; TANDEM_CUDA_GRAPHS=0 turns
// graphs off).
// Profiling runs unrecorded.
func (b *Backend) BeginRecord(site string) {
	// Whatever happens below, no earlier recording is checkpointed any
	// more (one a panic left open included).
	b.mu.Lock()
	b.recSite = ""
	b.mu.Unlock()
	if b.dev.profiling.Load() {
		b.dev.profileSite(site)
		return
	}
	if !b.dev.Graphs() {
		return
	}
	// A site is recorded from its second step on: capturing and
	// instantiating a graph costs more than launching its ops once, and
	// many shapes (a long prompt's chunks) come once.
	b.mu.Lock()
	if b.sites == nil {
		b.sites = map[string]bool{}
	}
	seen := b.sites[site]
	if !seen && len(b.sites) < 4096 {
		b.sites[site] = true
	}
	if seen {
		b.recSite, b.recPart, b.recCalls = site, 0, 0
	}
	b.mu.Unlock()
	if !seen {
		return
	}
	// The staging ring must not wrap inside a recording (wrapping waits
	// for the device, which ends it): start from a ring with room.
	b.stage.makeRoom(b.dev, stagingBytes/2)
	b.dev.beginRecord(site)
}

// EndRecord implements compute.Recorder.
func (b *Backend) EndRecord() {
	b.mu.Lock()
	b.recSite = ""
	b.mu.Unlock()
	b.dev.profileSite("")
	b.dev.endRecord()
}

// checkpoints turns Checkpoint on; TANDEM_CUDA_CHECKPOINT=0 records every
// pass whole, for comparisons. A P = 0 round of the 31B shape went from
// 39.4 to 36.0 ms with it on the H200. TANDEM_CUDA_CHECKPOINT=N takes
// every Nth of the model's checkpoints (checkpointEvery; 1 by default):
// fewer graphs a verify, each longer before the device starts on it.
var checkpoints bool // TANDEM_CUDA_CHECKPOINT, read by liveSettings (settings.go)

var checkpointEvery = 1 // TANDEM_CUDA_CHECKPOINT, read by liveSettings

// Checkpoint implements compute.Checkpointer: the recording so far is
// launched, and the rest of the step is recorded as the next part of the
// site ("site/1", "site/2", …), a graph of its own updated step to step
// like the first. Outside a recording it does nothing.
func (b *Backend) Checkpoint() {
	if !checkpoints || b.dev.profiling.Load() {
		return
	}
	b.mu.Lock()
	site := b.recSite
	if site == "" {
		b.mu.Unlock()
		return
	}
	if b.recCalls++; b.recCalls%max(1, checkpointEvery) != 0 {
		b.mu.Unlock()
		return
	}
	b.recPart++
	part := fmt.Sprintf("%s/%d", site, b.recPart)
	b.mu.Unlock()
	// beginRecord ends (and launches) the recording so far first, in the
	// same handoff to the device thread. No makeRoom here: BeginRecord left
	// the step half the staging ring, and waiting for the device would undo
	// the overlap this is for.
	b.dev.beginRecord(part)
}

// Name implements compute.Backend.
func (b *Backend) Name() string { return "cuda" }

// Device is the GPU the backend runs on.
func (b *Backend) Device() *Device { return b.dev }

// PoolStats returns the counts of the backend's pooled allocations so far:
// how many blocks it handed out, how many of them were new device memory,
// and how many collections it started to get garbage tensors back.
func (b *Backend) PoolStats() PoolStats { return b.pool.snapshot() }

// MemInfo implements compute.MemoryInfo: the GPU's free and total bytes,
// free counting the blocks the backend's pool caches for reuse (an
// allocation the driver refuses returns them and retries), so that a
// process that has already run (bench's direct decoding before its
// engine's) does not see them as taken.
func (b *Backend) MemInfo() (free, total uint64, err error) {
	free, total, err = b.dev.MemInfo()
	b.pool.mu.Lock()
	cached := uint64(b.pool.cached)
	b.pool.mu.Unlock()
	return min(free+cached, total), total, err
}

// Sync waits for queued work and reports an asynchronous failure.
func (b *Backend) Sync() error { return b.dev.Sync() }

// Close releases the GPU. Tensors of this backend must not be used after.
func (b *Backend) Close() {
	if b.lt != nil {
		if err := b.lt.Close(); err != nil {
			slog.Debug("cuda: closing cuBLASLt", "err", err)
		}
	}
	b.pool.release()
	b.dev.Close()
}

// mem is a tensor's device storage: a view starting at ptr inside blk.
type mem struct {
	ptr uintptr
	blk *block
}

func (m *mem) buf() Buffer { return Buffer{ptr: m.ptr, Size: m.blk.size} }

func dtCode(dt compute.DType) int {
	switch dt {
	case compute.F32:
		return 0
	case compute.BF16:
		return 1
	case compute.F16:
		return 2
	}
	panic(fmt.Sprintf("cuda: unsupported float dtype %v", dt))
}

func memOf(t *compute.Tensor) *mem {
	m, ok := t.Data().(*mem)
	if !ok {
		panic(fmt.Sprintf("cuda: tensor %v is not a CUDA tensor (%T)", t, t.Data()))
	}
	return m
}

func ptrOf(t *compute.Tensor) Buffer { return memOf(t).buf() }

func checkShape(shape []int) {
	for _, d := range shape {
		if d < 0 {
			panic(fmt.Sprintf("cuda: negative dimension in shape %v", shape))
		}
	}
}

// alloc makes an uninitialised tensor. Out of memory panics with an error
// wrapping ErrOutOfMemory (model code turns it into a returned error).
func (b *Backend) alloc(dt compute.DType, shape ...int) *compute.Tensor {
	checkShape(shape)
	blk, err := b.pool.get(compute.NumElements(shape) * dt.Size())
	if err != nil {
		panic(err)
	}
	return compute.NewTensor(dt, shape, &mem{ptr: blk.ptr, blk: blk})
}

// recycle hands op-internal scratch (uploaded index arrays, partial sums)
// back to the pool as soon as its last use is queued, instead of when the
// collector finds it: decode would otherwise allocate fresh device memory
// for every op's scratch until the next collection.
func (b *Backend) recycle(ts ...*compute.Tensor) {
	for _, t := range ts {
		if t != nil {
			b.pool.recycle(memOf(t).blk)
		}
	}
}

// modelRecycle turns on compute.Recycler for a model's intermediates
// (TANDEM_CUDA_RECYCLE=0 turns it off). The twentieth session's host
// profile had 0.41 ms of an E2B step's 2.7 ms of issuing in registering
// cleanups for blocks the collector had returned; recycled by their owner,
// the twenty-fourth session's E2B steps took 0.26 ms less issuing and
// 0.03–0.1 ms less time, the 31B ones 0.06–0.1 ms less.
var modelRecycle = true // TANDEM_CUDA_RECYCLE, read by liveSettings

// Recycle implements compute.Recycler: unless TANDEM_CUDA_RECYCLE=0 each
// tensor's block (a view's whole allocation) goes back to the pool at
// once, its cleanup still registered, instead of when the collector finds
// it. Weights are never pooled, and recycle ignores them.
func (b *Backend) Recycle(ts ...*compute.Tensor) {
	if modelRecycle {
		b.recycle(ts...)
	}
}

// kernel is the loaded kernel name, and whether to launch it: false where
// TANDEM_CUDA_DROP skips it.
func (b *Backend) kernel(name string) (Kernel, bool) {
	k, ok := b.k[name]
	if !ok {
		panic("cuda: kernel " + name + " not loaded")
	}
	return k, !dropped[name]
}

func (b *Backend) launch(name string, grid [3]uint32, threads int, args ...any) {
	k, run := b.kernel(name)
	if !run {
		return
	}
	if err := b.dev.LaunchAsync(k, grid, [3]uint32{uint32(threads), 1, 1}, 0, args...); err != nil {
		panic(err)
	}
}

// launchCluster is launch with the blocks of each column (gridDim.y of
// them) in one thread block cluster.
func (b *Backend) launchCluster(name string, grid [3]uint32, threads int, args ...any) {
	k, run := b.kernel(name)
	if !run {
		return
	}
	if err := b.dev.LaunchClusterAsync(k, grid, [3]uint32{uint32(threads), 1, 1}, [3]uint32{1, grid[1], 1}, 0, args...); err != nil {
		panic(err)
	}
	b.clusterN++
}

// grid1 sizes a grid-stride launch over n elements.
func grid1(n int) [3]uint32 {
	return [3]uint32{uint32(max(1, min((n+255)/256, 8192))), 1, 1}
}

// upload copies host bytes into a new pooled buffer.
func (b *Backend) upload(p unsafe.Pointer, n int, dt compute.DType, shape ...int) *compute.Tensor {
	t := b.alloc(dt, shape...)
	if n > 0 {
		src := unsafe.Slice((*byte)(p), n)
		if !b.stage.upload(b.dev, memOf(t).ptr, src) {
			if err := b.dev.Upload(ptrOf(t), src); err != nil {
				panic(err)
			}
		}
	}
	return t
}

func (b *Backend) ints(xs []int32) *compute.Tensor {
	return b.upload(unsafe.Pointer(unsafe.SliceData(xs)), 4*len(xs), compute.I32, len(xs))
}

func (b *Backend) floats(xs []float32) *compute.Tensor {
	return b.upload(unsafe.Pointer(unsafe.SliceData(xs)), 4*len(xs), compute.F32, len(xs))
}

// Zeros implements compute.Backend.
func (b *Backend) Zeros(dt compute.DType, shape ...int) *compute.Tensor {
	t := b.alloc(dt, shape...)
	b.zero(memOf(t).ptr, t.Len()*dt.Size())
	return t
}

// zero queues n zero bytes at ptr on the device's stream.
func (b *Backend) zero(ptr uintptr, n int) {
	if n > 0 {
		b.dev.post(func() error {
			return b.dev.d.check("cuMemsetD8Async", b.dev.d.cuMemsetD8Async(ptr, 0, uint64(n), b.dev.stream))
		})
	}
}

// FromF32 implements compute.Backend.
func (b *Backend) FromF32(data []float32, shape ...int) *compute.Tensor {
	if n := compute.NumElements(shape); n != len(data) {
		panic(fmt.Sprintf("cuda: FromF32: %d values for shape %v (%d elements)", len(data), shape, n))
	}
	return b.upload(unsafe.Pointer(unsafe.SliceData(data)), 4*len(data), compute.F32, shape...)
}

// FromI32 implements compute.Backend.
func (b *Backend) FromI32(data []int32, shape ...int) *compute.Tensor {
	if n := compute.NumElements(shape); n != len(data) {
		panic(fmt.Sprintf("cuda: FromI32: %d values for shape %v (%d elements)", len(data), shape, n))
	}
	return b.upload(unsafe.Pointer(unsafe.SliceData(data)), 4*len(data), compute.I32, shape...)
}

// Weight implements compute.Backend: the bytes are copied to the device
// once, into an allocation of their exact size.
func (b *Backend) Weight(dt compute.DType, shape []int, raw []byte) (*compute.Tensor, error) {
	n, err := weightElems(dt, shape)
	if err != nil {
		return nil, err
	}
	if want := n * dt.Size(); len(raw) != want {
		return nil, fmt.Errorf("cuda: weight %v%v needs %d bytes, got %d", dt, shape, want, len(raw))
	}
	blk, err := b.pool.exact(len(raw))
	if err != nil {
		return nil, fmt.Errorf("cuda: weight %v%v: %w", dt, shape, err)
	}
	if err := b.dev.Upload(Buffer{ptr: blk.ptr, Size: blk.size}, raw); err != nil {
		return nil, err
	}
	return compute.NewTensor(dt, shape, &mem{ptr: blk.ptr, blk: blk}), nil
}

var _ compute.RandomWeighter = (*Backend)(nil)

// RandomWeight implements compute.RandomWeighter with random_uniform: a
// thread draws a run of randomRun elements of one stream, jumped to the
// first, so a 62 GB random model is made in the GPU's time to write it
// rather than the host's to draw and copy it.
func (b *Backend) RandomWeight(dt compute.DType, shape []int, fills []compute.RandomFill) (*compute.Tensor, error) {
	if dt != compute.F32 && dt != compute.BF16 && dt != compute.F16 {
		return nil, fmt.Errorf("cuda: random weight of dtype %v", dt)
	}
	n, err := weightElems(dt, shape)
	if err != nil {
		return nil, err
	}
	byOff := slices.SortedFunc(slices.Values(fills), func(a, b compute.RandomFill) int { return cmp.Compare(a.Off, b.Off) })
	next := 0 // the fills must tile the weight: pooled memory is not cleared
	for _, f := range byOff {
		if f.Off != next || f.N < 0 || f.Off+f.N > n || f.Block < 1 {
			return nil, fmt.Errorf("cuda: random weight %v%v: a fill of %d elements at %d in blocks of %d (the fills must cover each element once)",
				dt, shape, f.N, f.Off, f.Block)
		}
		next += f.N
	}
	if next != n {
		return nil, fmt.Errorf("cuda: random weight %v%v: the fills cover %d of %d elements", dt, shape, next, n)
	}
	blk, err := b.pool.exact(n * dt.Size())
	if err != nil {
		return nil, fmt.Errorf("cuda: weight %v%v: %w", dt, shape, err)
	}
	buf := Buffer{ptr: blk.ptr, Size: blk.size}
	for _, f := range fills {
		if f.N == 0 {
			continue
		}
		run := randomRun
		if f.Block%run != 0 {
			run = f.Block
		}
		threads := (f.N + f.Block - 1) / f.Block * (f.Block / run)
		b.launch("random_uniform", [3]uint32{uint32((threads + 255) / 256), 1, 1}, 256, buf, dtCode(dt), uint64(f.Off),
			uint64(f.N), f.Key, f.Block, run, math.Float64bits(f.Center), math.Float64bits(f.HalfWidth))
	}
	return compute.NewTensor(dt, shape, &mem{ptr: blk.ptr, blk: blk}), nil
}

// randomRun is how many elements of a stream a thread of random_uniform
// draws (computetest.SubBlock, which checks the method on the host).
const randomRun = 4096

// weightElems is the element count of a weight of dtype dt and shape, or
// an error for a dtype without a size, a negative dimension or a size
// past the int range.
func weightElems(dt compute.DType, shape []int) (int, error) {
	size := dt.Size()
	if size == 0 {
		return 0, fmt.Errorf("cuda: weight of unsupported dtype %v", dt)
	}
	n := 1
	for _, d := range shape {
		if d < 0 {
			return 0, fmt.Errorf("cuda: weight with negative dimension in shape %v", shape)
		}
		if d != 0 && n > math.MaxInt/size/d {
			return 0, fmt.Errorf("cuda: weight shape %v is too large", shape)
		}
		n *= d
	}
	return n, nil
}

func (b *Backend) download(dst unsafe.Pointer, n int, t *compute.Tensor) {
	if n == 0 {
		return
	}
	b.noteIssued()
	if err := b.dev.Download(unsafe.Slice((*byte)(dst), n), ptrOf(t)); err != nil {
		panic(err)
	}
}

// noteIssued records, after a Spin, how long the host took to issue the
// work up to its first read of a result (IssueTimes).
func (b *Backend) noteIssued() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.spunAt.IsZero() {
		b.issued = append(b.issued, time.Since(b.spunAt))
		b.spunAt = time.Time{}
	}
}

// ToF32 implements compute.Backend.
func (b *Backend) ToF32(t *compute.Tensor) []float32 {
	if t.Len() == 0 {
		return []float32{}
	}
	t = b.asF32(t)
	out := make([]float32, t.Len())
	b.download(unsafe.Pointer(unsafe.SliceData(out)), 4*len(out), t)
	return out
}

// asF32 is t, or a copy widened to F32 when it is BF16 or F16.
func (b *Backend) asF32(t *compute.Tensor) *compute.Tensor {
	if t.DType() == compute.F32 {
		return t
	}
	w := b.alloc(compute.F32, t.Len())
	b.Copy(w, 0, t.Reshape(t.Len()))
	return w
}

var _ compute.Prefetcher = (*Backend)(nil)

// Prefetch implements compute.Prefetcher.
func (b *Backend) Prefetch(t *compute.Tensor) func() []uint32 {
	if t.DType().Size() != 4 {
		panic(fmt.Sprintf("cuda: Prefetch of %v", t))
	}
	b.noteIssued()
	n := t.Len()
	if n == 0 {
		return func() []uint32 { return []uint32{} }
	}
	wait := b.dev.DownloadAsync(ptrOf(t), 4*n)
	return func() []uint32 {
		out := make([]uint32, n)
		if err := wait(unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(out))), 4*n)); err != nil {
			panic(err)
		}
		return out
	}
}

// ToI32 implements compute.Backend.
func (b *Backend) ToI32(t *compute.Tensor) []int32 {
	if t.DType() != compute.I32 {
		panic(fmt.Sprintf("cuda: ToI32 of %v", t))
	}
	out := make([]int32, t.Len())
	b.download(unsafe.Pointer(unsafe.SliceData(out)), 4*len(out), t)
	return out
}

func (b *Backend) view(t *compute.Tensor, shape []int, elem int) *compute.Tensor {
	m := memOf(t)
	return compute.NewTensor(t.DType(), shape, &mem{ptr: m.ptr + uintptr(elem*t.DType().Size()), blk: m.blk})
}

// Index implements compute.Backend.
func (b *Backend) Index(t *compute.Tensor, i int) *compute.Tensor {
	if t.Rank() == 0 || i < 0 || i >= t.Dim(0) {
		panic(fmt.Sprintf("cuda: Index %d of %v", i, t))
	}
	return b.view(t, t.Shape()[1:], i*compute.NumElements(t.Shape()[1:]))
}

// Slice implements compute.Backend.
func (b *Backend) Slice(t *compute.Tensor, start, end int) *compute.Tensor {
	if t.Rank() == 0 || start < 0 || end < start || end > t.Dim(0) {
		panic(fmt.Sprintf("cuda: Slice [%d, %d) of %v", start, end, t))
	}
	shape := append([]int{end - start}, t.Shape()[1:]...)
	return b.view(t, shape, start*compute.NumElements(t.Shape()[1:]))
}

// kernelCopyBytes bounds the same-dtype copies Copy runs as a kernel;
// larger ones (a cache growing, a prefix snapshot) go to the copy engine.
const kernelCopyBytes = 16 << 20

// Copy implements compute.Backend with the CPU backend's conversions.
func (b *Backend) Copy(dst *compute.Tensor, start int, src *compute.Tensor) {
	b.forgetWrites(dst)
	if dst.Rank() == 0 || src.Rank() == 0 || !compute.SameShape(dst.Shape()[1:], src.Shape()[1:]) ||
		start < 0 || start+src.Dim(0) > dst.Dim(0) {
		panic(fmt.Sprintf("cuda: Copy %v into %v at %d", src, dst, start))
	}
	n := src.Len()
	if n == 0 {
		return
	}
	d := b.view(dst, src.Shape(), start*compute.NumElements(src.Shape()[1:]))
	dd, sd := dst.DType(), src.DType()
	if dd == sd {
		dp, sp, bytes := memOf(d).ptr, memOf(src).ptr, uint64(n*dd.Size())
		if bytes%4 == 0 && dp%4 == 0 && sp%4 == 0 && bytes <= kernelCopyBytes {
			b.launch("copy_words", grid1(int(bytes/4)), 256, ptrOf(d), ptrOf(src), int(bytes/4))
			return
		}
		// The asynchronous copy: the plain cuMemcpyDtoD made the host wait
		// for the device (a KV write per layer then serialised host and GPU).
		b.dev.post(func() error {
			return b.dev.d.check("cuMemcpyDtoDAsync", b.dev.d.cuMemcpyDtoDAsync(dp, sp, bytes, b.dev.stream))
		})
		return
	}
	if !(dd == compute.F32 && sd.IsFloat()) && !(sd == compute.F32 && (dd == compute.BF16 || dd == compute.F16)) {
		panic(fmt.Sprintf("cuda: Copy %v into %v", src, dst))
	}
	b.launch("convert", grid1(n), 256, ptrOf(d), dtCode(dd), ptrOf(src), dtCode(sd), n)
}

// MatMul implements compute.Backend with the warp-per-column kernel, whose
// per-row arithmetic does not depend on the number of rows.
func (b *Backend) MatMul(x, w *compute.Tensor) *compute.Tensor { return b.matMul(x, w, kSplit{}) }

// matMul is MatMul with the K split sk (zero: splitK's).
func (b *Backend) matMul(x, w *compute.Tensor, sk kSplit) *compute.Tensor {
	K := x.Dim(-1)
	if x.DType() != compute.F32 || w.Rank() != 2 || w.Dim(1) != K {
		panic(fmt.Sprintf("cuda: MatMul of %v and %v", x, w))
	}
	N, M := w.Dim(0), x.Rows()
	shape := append(append([]int(nil), x.Shape()[:x.Rank()-1]...), N)
	y := b.alloc(compute.F32, shape...)
	if M == 0 || N == 0 {
		return y
	}
	if K == 0 {
		return b.Zeros(compute.F32, shape...)
	}
	if w.DType() == compute.BF16 && !warpMatMul {
		b.matmulMMA(y, x, w, M, N, K, nil, nil, sk)
		return y
	}
	x = b.promptInput(x)
	name := map[compute.DType]string{compute.F32: "matmul_f32_warp", compute.BF16: "matmul_bf16_warp", compute.F16: "matmul_f16_warp"}[w.DType()]
	if name == "" {
		panic(fmt.Sprintf("cuda: MatMul with %v weights", w))
	}
	b.launch(name, [3]uint32{uint32((N + 7) / 8), 1, 1}, MatMulBlock, ptrOf(x), ptrOf(w), ptrOf(y), M, N, K)
	return y
}

// routeOnDevice turns on compute.Router: a lone token's experts chosen and
// applied on the device (26B-A4B decode 37 → 79 tok/s on the H200, no sync
// per layer); TANDEM_CUDA_ROUTE=0 routes on the host, for comparisons.
var routeOnDevice bool // TANDEM_CUDA_ROUTE, read by liveSettings

// routeRows routes a pass of up to maxRouteRows tokens (a verify) on the
// device too: every token's slot j in one launch
// (matmul_rows_tokens), so the pass launches what a lone token's step does
// plus two gathers a slot, reads nothing back per layer and is recorded
// whole, at the price of reading an expert once per token that chose it
// rather than once per pass. The host path reads the choice back 30 times
// a 26B-A4B verify, which took 4-5 decode steps; with it (and
// batchExperts) a 26B-A4B round at P = 0 went from 54.4 to 15.6 ms on the
// H200. TANDEM_CUDA_ROUTE_ROWS=0 routes such passes on the host.
var routeRows bool // TANDEM_CUDA_ROUTE_ROWS, read by liveSettings

const maxRouteRows = 8

var _ compute.Router = (*Backend)(nil)

// Routes implements compute.Router: bf16 expert weights, which the rows
// kernel takes at a device-chosen expert (matmul_rows_at, and
// matmul_rows_tokens for a pass of several tokens).
func (b *Backend) Routes(w *compute.Tensor, tokens int) bool {
	if tokens != 1 && (!routeRows || tokens < 1 || tokens > maxRouteRows) {
		return false
	}
	// A bf16 prompt pass never routes here, at any token count: its
	// experts take one path for every chunk of a prompt, so that chunking
	// does not change its bits (the grouped products, or with
	// TANDEM_CUDA_MOE_GROUPED=0 the host path's cuBLASLt products, whose
	// bits the routed kernels do not share).
	if b.bf16() {
		return false
	}
	// With stacking off the host path runs an expert's gate and up apart,
	// each split by its own shape, where MatMulAt runs them as one.
	return routeOnDevice && stackMatMuls && w != nil && w.Rank() == 3 && w.DType() == compute.BF16 && !warpMatMul &&
		rowsMaxM >= 1 && rowsArithmetic[rowsKernel]
}

// RouteExperts implements compute.Router with moe_route, a block a token.
func (b *Backend) RouteExperts(vals, idx, perExpert *compute.Tensor) (experts, scales *compute.Tensor) {
	f32(vals, "RouteExperts")
	N, k := vals.Rows(), vals.Dim(-1)
	if idx.DType() != compute.I32 || idx.Len() != vals.Len() || idx.Dim(-1) != k || N < 1 || k == 0 || !perExpert.DType().IsFloat() {
		panic(fmt.Sprintf("cuda: RouteExperts of %v, %v with %v", vals, idx, perExpert))
	}
	experts, scales = b.alloc(compute.I32, N, k), b.alloc(compute.F32, N, k)
	b.launch("moe_route", [3]uint32{uint32(N), 1, 1}, 32, ptrOf(experts), ptrOf(scales), ptrOf(vals), ptrOf(idx),
		ptrOf(perExpert), dtCode(perExpert.DType()), k)
	return experts, scales
}

// MatMulAt implements compute.Router: the rows kernel on expert
// experts[r, slot]'s rows [off, off+n), chosen on the device, for each
// token row r (matmul_rows_at for one, matmul_rows_tokens for several).
func (b *Backend) MatMulAt(x, w, experts *compute.Tensor, slot, off, n int) *compute.Tensor {
	N, k := x.Rows(), experts.Dim(-1)
	if N < 1 || experts.Len() != N*k || slot < 0 || slot >= k {
		panic(fmt.Sprintf("cuda: MatMulAt of %v, expert %d of %v", x, slot, experts))
	}
	return b.expertMatMul("MatMulAt", x, w, experts, off, n, expertAt{step: k, off: slot, xdiv: 1, rows: N})
}

// expertMatMul is MatMulAt and MatMulExperts: y [at.rows, cols], each row
// the rows kernel's product of its input row with rows [off, off+cols) of
// the expert at picks from experts.
func (b *Backend) expertMatMul(op string, x, w, experts *compute.Tensor, off, cols int, at expertAt) *compute.Tensor {
	K := x.Dim(-1)
	if x.DType() != compute.F32 || w.Rank() != 3 || w.DType() != compute.BF16 || w.Dim(2) != K || K == 0 ||
		off < 0 || cols < 1 || off+cols > w.Dim(1) || experts.DType() != compute.I32 {
		panic(fmt.Sprintf("cuda: %s of %v and rows [%d, %d) of %v, experts %v", op, x, off, off+cols, w, experts))
	}
	y := b.alloc(compute.F32, at.rows, cols)
	at.sel, at.stride = ptrOf(experts), w.Dim(1)*K
	rows := b.view(w, []int{cols, K}, off*K) // expert 0's; the kernel moves to the chosen one
	b.matmulMMA(y, x, rows, x.Rows(), cols, K, &at, nil, kSplit{})
	return y
}

// AddRowAt implements compute.Router: add_rows with row r's scale read at
// scales[r, slot].
func (b *Backend) AddRowAt(dst, src, scales *compute.Tensor, slot int) {
	b.forgetWrites(dst)
	D, N, k := dst.Dim(-1), dst.Rows(), scales.Dim(-1)
	if dst.DType() != compute.F32 || src.DType() != compute.F32 || src.Rows() != N || src.Dim(-1) != D ||
		scales.DType() != compute.F32 || scales.Len() != N*k || slot < 0 || slot >= k {
		panic(fmt.Sprintf("cuda: AddRowAt of %v into %v scaled by %d of %v", src, dst, slot, scales))
	}
	b.addRows(dst, src, b.table(tokenRows(N)), at(ptrOf(scales), slot), k, N)
}

// addRows launches add_rows: dst[rows[i]] += scale[i·ss]·src[i] for the n
// rows of src, in order (scale nil: unscaled).
func (b *Backend) addRows(dst, src, rows *compute.Tensor, scale any, ss, n int) {
	if D := dst.Dim(-1); D > 0 && n > 0 {
		b.launch("add_rows", [3]uint32{uint32((D + 255) / 256), 1, 1}, 256, ptrOf(dst), ptrOf(src), ptrOf(rows), scale, ss, n, D)
	}
}

// batchExperts runs a pass's expert choices all at once
// (compute.ExpertBatcher): per MoE layer a few launches instead of four a
// choice, 32 a token on the 26B-A4B shape, whose decode step is bound by
// its launches (with routeRows, 26B-A4B decode went from 79 to 117 tok/s
// on the H200). TANDEM_CUDA_MOE_BATCH=0 launches each choice on its own.
var batchExperts bool // TANDEM_CUDA_MOE_BATCH, read by liveSettings

var _ compute.ExpertBatcher = (*Backend)(nil)

// BatchesExperts implements compute.ExpertBatcher.
func (b *Backend) BatchesExperts() bool { return batchExperts }

// MatMulExperts implements compute.ExpertBatcher: matmul_rows_tokens with
// a block row a choice.
func (b *Backend) MatMulExperts(x, w, experts *compute.Tensor, off, cols int) *compute.Tensor {
	M, N, k := x.Rows(), experts.Rows(), experts.Dim(-1)
	if (M != N && M != N*k) || experts.Len() != N*k || k == 0 {
		panic(fmt.Sprintf("cuda: MatMulExperts of %v, experts %v", x, experts))
	}
	xdiv := 1
	if M == N && k > 1 {
		xdiv = k
	}
	return b.expertMatMul("MatMulExperts", x, w, experts, off, cols, expertAt{step: 1, xdiv: xdiv, rows: N * k})
}

// tokenRows is the index table 0, 1, …, n−1.
func tokenRows(n int) []int32 {
	rows := make([]int32, n)
	for i := range rows {
		rows[i] = int32(i)
	}
	return rows
}

// groupExperts runs a prompt pass's expert products grouped by expert
// (compute.ExpertGrouper: matmul_grouped, one launch a product for all the
// experts), where the host path made four launches and a gather a chosen
// expert; TANDEM_CUDA_MOE_GROUPED=0 runs the host path, for comparisons.
var groupExperts bool // TANDEM_CUDA_MOE_GROUPED, read by liveSettings

var _ compute.ExpertGrouper = (*Backend)(nil)

// GroupsExperts implements compute.ExpertGrouper: weights whose rows are
// 16-byte aligned (the tiled kernels' loads), of at most moeGroupMax
// experts, with stacking on, so that an expert's gate and up are one
// product split by the stack's shape on the host path too, and with the
// tiled kernels' arithmetic in use.
func (b *Backend) GroupsExperts(w *compute.Tensor) bool {
	if !groupExperts || !stackMatMuls || !tiledMatMul || warpMatMul || w == nil || w.Rank() != 3 ||
		w.DType() != compute.BF16 || w.Dim(0) > moeGroupMax {
		return false
	}
	return alignedRows(w.Dim(2), w, w.Dim(1)*w.Dim(2)) == 1
}

// moeGroupMax is the most experts moe_group takes (MOE_GROUP_MAX in ops.cu).
const moeGroupMax = 1024

// GroupExperts implements compute.ExpertGrouper with moe_group, one block:
// I32 [starts (E + 1), tile starts (E + 1), the N·k choices' rows].
func (b *Backend) GroupExperts(experts *compute.Tensor, E int) *compute.Tensor {
	nk := experts.Len()
	if experts.DType() != compute.I32 || E < 1 || E > moeGroupMax {
		panic(fmt.Sprintf("cuda: GroupExperts of %v among %d", experts, E))
	}
	groups := b.alloc(compute.I32, 2*(E+1)+nk)
	b.launch("moe_group", [3]uint32{1, 1, 1}, 1024, ptrOf(experts), ptrOf(groups), nk, E)
	return groups
}

// MatMulGrouped implements compute.ExpertGrouper with matmul_grouped
// (matmul_grouped1 at bf16): a block a 64-column tile of 64 of an expert's
// choices, all K splits of it, the splits added in order; the grid holds
// the most tiles N·k choices of E experts can make. Its weights' rows must
// be 16-byte aligned (GroupsExperts).
func (b *Backend) MatMulGrouped(x, w, groups *compute.Tensor, off, cols int) *compute.Tensor {
	M, K, E := x.Rows(), x.Dim(-1), w.Dim(0)
	nk := groups.Len() - 2*(E+1)
	if x.DType() != compute.F32 || w.Rank() != 3 || w.DType() != compute.BF16 || w.Dim(2) != K || K == 0 ||
		off < 0 || cols < 1 || off+cols > w.Dim(1) || groups.DType() != compute.I32 || M < 1 || nk < 1 || nk%M != 0 ||
		alignedRows(K, w, w.Dim(1)*K) != 1 {
		panic(fmt.Sprintf("cuda: MatMulGrouped of %v and rows [%d, %d) of %v, groups %v", x, off, off+cols, w, groups))
	}
	y := b.alloc(compute.F32, nk, cols)
	name := "matmul_grouped"
	if b.bf16() {
		name = "matmul_grouped1" // the split's first part: x rounded to bf16
	}
	splits, chunk := splitK(cols, K)
	xs := b.splitParts(x, M*K)
	tiles := (nk+tileRows-1)/tileRows + min(E, nk) // each chosen expert's last tile may be part full
	b.launch(name, [3]uint32{uint32((cols + tileRows - 1) / tileRows), uint32(tiles), 1}, 256,
		ptrOf(xs), ptrOf(b.view(w, []int{cols, K}, off*K)), ptrOf(y), ptrOf(groups), E, nk/M, M, cols, K, chunk,
		splits, uint64(w.Dim(1)*K))
	return y
}

// tileRows is the tiled kernels' tile height (and width): TBM in matmul.cu.
const tileRows = 64

// SumExperts implements compute.ExpertBatcher with sum_experts: every
// (token, column) at once, each token's choices added in order.
func (b *Backend) SumExperts(y, scales *compute.Tensor) *compute.Tensor {
	N, k := scales.Rows(), scales.Dim(-1)
	if y.DType() != compute.F32 || scales.DType() != compute.F32 || k == 0 || y.Rows() != N*k {
		panic(fmt.Sprintf("cuda: SumExperts of %v scaled by %v", y, scales))
	}
	D := y.Dim(-1)
	out := b.alloc(compute.F32, N, D)
	if N*D > 0 {
		b.launch("sum_experts", grid1(N*D), 256, ptrOf(out), ptrOf(y), ptrOf(scales), N, k, D)
	}
	return out
}

// stackMatMuls turns MatMuls of stacked weights into one product;
// TANDEM_CUDA_STACK=0 runs them as separate MatMuls, for comparisons.
var stackMatMuls bool // TANDEM_CUDA_STACK, read by liveSettings

var _ compute.Stacker = (*Backend)(nil)

// MatMuls implements compute.Stacker. Weights that are consecutive rows of
// one tensor (a loader's stack) run as one product over the whole stack,
// whose K split is chosen from the stack's shape; the products are then
// views of its output: of its columns for one row, of its segments for up
// to five rows with segment outputs (the rows kernel writes the products
// apart), and otherwise copies of its columns (split_cols). Anything else
// runs as separate MatMuls.
func (b *Backend) MatMuls(x *compute.Tensor, ws ...*compute.Tensor) []*compute.Tensor {
	return b.matMuls(x, ws, b.stacked(ws), kSplit{})
}

// matMuls is MatMuls of ws, stacked as whole (nil: not stacked), the
// stacked product with the K split sk (zero: splitK's).
func (b *Backend) matMuls(x *compute.Tensor, ws []*compute.Tensor, whole *compute.Tensor, sk kSplit) []*compute.Tensor {
	out := make([]*compute.Tensor, len(ws))
	// A bf16 prompt pass runs each product on cuBLASLt by itself where it
	// can: each output is then its own, with no split of the stack's (a
	// 31B 4k prefill spent 47 ms in split_cols), and the choice depends on
	// the weights alone.
	if whole != nil && b.bf16() && !slices.ContainsFunc(ws, func(w *compute.Tensor) bool { return !b.ltTakes(w) }) {
		whole = nil
	}
	if whole == nil {
		for i, w := range ws {
			out[i] = b.MatMul(x, w)
		}
		return out
	}
	M, K := x.Rows(), x.Dim(-1)
	lead := x.Shape()[:x.Rank()-1]
	var y *compute.Tensor
	if M > 1 && segmentOutputs && !b.bf16() && x.DType() == compute.F32 && whole.DType() == compute.BF16 && !warpMatMul && K > 0 &&
		whole.Dim(0) > 0 && whole.Dim(1) == K {
		// A rows kernel writes the products one after another.
		segs := [2]int{ws[0].Dim(0), whole.Dim(0)}
		if len(ws) == 3 {
			segs[1] = segs[0] + ws[1].Dim(0)
		}
		y = b.alloc(compute.F32, M, whole.Dim(0))
		if b.matmulMMA(y, x, whole, M, whole.Dim(0), K, nil, &segs, sk) {
			off := 0
			for i, w := range ws {
				out[i] = b.view(y, append(append([]int(nil), lead...), w.Dim(0)), off*M)
				off += w.Dim(0)
			}
			return out
		}
		// Not a rows kernel: y is [M, N], split below.
	} else {
		y = b.matMul(x, whole, sk)
	}
	off := 0
	for i, w := range ws {
		shape := append(append([]int(nil), lead...), w.Dim(0))
		if M == 1 {
			out[i] = b.view(y, shape, off)
		} else {
			out[i] = b.alloc(compute.F32, shape...)
		}
		off += w.Dim(0)
	}
	if M > 1 { // one launch splits the columns (stacked holds at most three)
		d := [3]any{}
		n := [3]int{}
		for i, w := range ws {
			d[i], n[i] = ptrOf(out[i]), w.Dim(0)
		}
		b.launch("split_cols", grid1(M*whole.Dim(0)), 256, d[0], d[1], d[2], ptrOf(y), M, n[0], n[1], n[2])
		b.recycle(y)
	}
	return out
}

// gluFused runs GeluMatMuls of up to five rows as matmul_rows_glu: the
// stacked gate|up product with gelu_mul in its own kernel, the same bits
// and one launch fewer a layer (TANDEM_CUDA_GLU=0 turns it off; live). On
// the H200 (twelfth session) the 31B step went from 20.84 to 20.74 ms and
// its P = 0 round from 24.65 to 24.21; E2B lost 70 of its 463 kernels but
// barely moved (244-246 tok/s either way).
var gluFused = true // read by liveSettings

var _ compute.GeluGater = (*Backend)(nil)

// GeluMatMuls implements compute.GeluGater with matmul_rows_glu, for the
// rows the rows kernels take and weights MatMuls stacks. The K split is
// the stacked product's, so each output's sums are the ones GeluMul reads
// after MatMuls.
func (b *Backend) GeluMatMuls(x, gate, up *compute.Tensor) (*compute.Tensor, bool) {
	if !gluFused || b.bf16() || gate.Rank() != 2 || up.Rank() != 2 || gate.Dim(0) != up.Dim(0) {
		return nil, false
	}
	ws := []*compute.Tensor{gate, up}
	whole := b.stacked(ws)
	if whole == nil {
		return nil, false
	}
	var sk kSplit
	if gluSplit {
		sk = gluSplitK(whole.Dim(0), whole.Dim(1))
	}
	if y, ok := b.rowsGLU(x, whole, gate.Dim(0), nil, sk); ok || !gluSplit {
		return y, ok
	}
	// Every other pass takes the stacked product at the same split, so a
	// row's bits do not depend on the pass it is in (compute.GeluMatMuls'
	// own fallback would take splitK's).
	gu := b.matMuls(x, ws, whole, sk)
	return b.GeluMul(gu[0], gu[1]), true
}

// GeluMatMulBy implements compute.GeluGater with matmul_rows_glu_by: the
// product's K split is MatMul's of gate alone.
func (b *Backend) GeluMatMulBy(x, gate, up *compute.Tensor) (*compute.Tensor, bool) {
	if !gluFused || b.bf16() || gate.Rank() != 2 || up.DType() != compute.F32 || up.Rows() != x.Rows() || up.Dim(-1) != gate.Dim(0) {
		return nil, false
	}
	return b.rowsGLU(x, gate, gate.Dim(0), up, kSplit{})
}

// rowsGLU launches matmul_rows_glu on w = gate|up ([2I, K]), or with up
// matmul_rows_glu_by on w = gate ([I, K]), K split by sk (zero: splitK's);
// ok false where the unfused ops would not take a rows kernel.
func (b *Backend) rowsGLU(x, w *compute.Tensor, I int, up *compute.Tensor, sk kSplit) (*compute.Tensor, bool) {
	if x.DType() != compute.F32 || w.DType() != compute.BF16 || w.Rank() != 2 || warpMatMul ||
		!rowsArithmetic[rowsKernel] {
		return nil, false
	}
	M, K, N := x.Rows(), x.Dim(-1), w.Dim(0)
	if M < 1 || M > min(rowsMaxM, 5) || K == 0 || I == 0 || w.Dim(1) != K {
		return nil, false
	}
	splits, chunk := sk.of(N, K) // the unfused product's split
	grid := [3]uint32{uint32((I + gluBlockCols/2 - 1) / (gluBlockCols / 2)), uint32(splits), 1}
	if splits > 1 && (int(grid[0]) > splitCounters || sumSplitsOnly) {
		return nil, false
	}
	al := alignedRows(K, w, 0)
	y := b.alloc(compute.F32, append(append([]int(nil), x.Shape()[:x.Rank()-1]...), I)...)
	name := "matmul_rows_glu"
	if up != nil {
		name = "matmul_rows_glu_by"
	}
	name = b.early(name, w)
	cluster := b.clusterKernel(name, splits, int(grid[0]))
	part := y
	if splits > 1 && cluster == "" {
		part = b.alloc(compute.F32, splits*M*N)
	}
	xs := b.splitParts(x, M*K)
	parts, pp := b.emitParts(y)
	var upArg any // every GLU kernel takes up, null but for matmul_rows_glu_by
	if up != nil {
		upArg = ptrOf(up)
	}
	args := []any{ptrOf(xs), ptrOf(w), ptrOf(y), ptrOf(part), ptrOf(b.counters), M, I, K, chunk, al, pp, upArg}
	if cluster != "" {
		b.launchCluster(cluster, grid, 256, args...)
	} else {
		b.launch(name, grid, 256, args...)
	}
	if parts != nil {
		b.remember(y, parts)
	}
	if part != y {
		b.recycle(part)
	}
	b.gluN++
	return y, true
}

// segmentOutputs has the rows kernels write a stacked product of several
// rows (up to five: a verify) as its products one after another, so no
// split_cols copies them apart (on; TANDEM_CUDA_SEGMENTS=0 turns it off).
// The 31B shape's P = 0 round spent 0.5 ms in 115 split_cols calls.
var segmentOutputs bool // TANDEM_CUDA_SEGMENTS, read by liveSettings

// stacked returns ws as one [ΣN, K] view when they are consecutive rows of
// one allocation (two or three, one dtype and width), or nil.
func (b *Backend) stacked(ws []*compute.Tensor) *compute.Tensor {
	if !stackMatMuls || len(ws) < 2 || len(ws) > 3 {
		return nil
	}
	first := memOf(ws[0])
	rows, next := 0, first.ptr
	for _, w := range ws {
		m := memOf(w)
		if w.Rank() != 2 || w.DType() != ws[0].DType() || w.Dim(1) != ws[0].Dim(1) || m.blk != first.blk || m.ptr != next {
			return nil
		}
		rows += w.Dim(0)
		next += uintptr(w.Len() * w.DType().Size())
	}
	return b.view(ws[0], []int{rows, ws[0].Dim(1)}, 0)
}

// M > 16 (prefill) runs matmul_tiled, the shared-memory kernel (pinned
// bitwise to matmul_mma8 by TestMatMulVariantsMatch; 9-10× its speed at
// M = 128 on the H200). For comparisons, TANDEM_CUDA_MATMUL=warp runs the
// CUDA-core kernel for bf16 weights too and =mma8 the streaming kernel for
// M > 16.
var warpMatMul, tiledMatMul bool // TANDEM_CUDA_MATMUL, read by liveSettings

// The tensor-core kernels by M: the rows kernel up to rowsMaxM (three tile
// rows per activation row in a 16-row tile), mma1Kernel up to 16 rows, and
// mma8Kernel (eight 16-row tiles per weight load) beyond. All give the
// same bits; the variables let tests compare variants. The defaults stream
// weights past L1 with a 256-byte L2 prefetch, which doubled M = 1
// bandwidth on the H200 (docs/gpu.md).
var (
	rowsMaxM   = 5
	rowsKernel string // TANDEM_CUDA_ROWS (rowsDefault), read by liveSettings
	mma1Kernel = "matmul_mma1n"
	mma8Kernel = "matmul_mma8n"
)

// rowsDefault is the rows kernel: "auto" picks by the weight's size
// (rowsFor); TANDEM_CUDA_ROWS=narrow or =wide takes one kernel for every
// weight, for comparisons.
func rowsDefault() string {
	switch os.Getenv("TANDEM_CUDA_ROWS") {
	case "narrow":
		return "matmul_rows"
	case "wide":
		return "matmul_rows_wide"
	}
	return "auto"
}

// wideMin is the weight size (elements) from which "auto" takes
// matmul_rows_wide: 16 columns a warp, half the activation loads per
// weight byte. On the H200 it streamed the 31B shapes 12-19% faster at
// one row and 19-23% at four (the LM head at 4.2 TB/s), and was 3-10%
// slower on the E2B shape's products of 3-9 million elements, where
// latency rules. The bits are matmul_rows' either way.
const wideMin = 32 << 20

// rowsFor is the rows kernel for an N × K weight.
func rowsFor(N, K int) string {
	if rowsKernel != "auto" {
		return rowsKernel
	}
	if N*K >= wideMin {
		return "matmul_rows_wide"
	}
	return "matmul_rows"
}

// rowsArithmetic holds the rows kernel settings whose bits are
// matmul_rows' (the arithmetic matmul_rows_at and matmul_rows_tokens
// repeat at a chosen expert), and blockCols the columns a block of each
// kernel covers (64 when absent).
var (
	rowsArithmetic = map[string]bool{"auto": true, "matmul_rows": true, "matmul_rows_plain": true, "matmul_rows_wide": true,
		"matmul_rows_early": true, "matmul_rows_wide_early": true}
	blockCols = map[string]int{"matmul_rows_wide": 128, "matmul_rows_wide_early": 128}
)

// tileKernels are the multi-tile rows kernels (TILES_KERNELS in
// matmul.cu), each with its _early, _cl and _early_cl variants, and the
// columns a block of each covers.
var tileKernels = map[string]int{"matmul_rows_wide2": 128, "matmul_rows_wide2n": 64, "matmul_rows_wide3": 128, "matmul_rows_wide4": 128}

func init() {
	for name, cols := range tileKernels {
		e := name + "_early"
		kernelNames["matmul.cu"] = append(kernelNames["matmul.cu"], name, e, name+"_cl", e+"_cl")
		blockCols[name], blockCols[e] = cols, cols
		earlyOf[name] = e
		clusterOf[name], clusterOf[e] = name+"_cl", e+"_cl"
	}
}

// rowsTiles is the most 16-row tiles the multi-tile rows kernels
// (matmul_rows_wide2 … 4) take, five activation rows a tile: products of 6
// to 5·rowsTiles rows run there instead of matmul_mma1n or the tiled
// kernel (TANDEM_CUDA_ROWS_TILES, live; 1 turns them off). The same bits.
var rowsTiles = 4

// tilesFor is the multi-tile rows kernel for M rows of an N × K weight,
// or "" where none takes them. Two tiles of a weight of wideMin elements
// or more take one column group a warp (matmul_rows_wide2n), the reverse
// of rowsFor's choice for one tile; TANDEM_CUDA_ROWS=narrow or =wide
// takes the one or the other for every weight.
func tilesFor(M, N, K int) string {
	t := (M + 4) / 5
	if M <= 5 || t > rowsTiles || rowsMaxM < 5 || !rowsArithmetic[rowsKernel] {
		return ""
	}
	name := fmt.Sprintf("matmul_rows_wide%d", t)
	if t == 2 && (rowsKernel == "auto" && N*K >= wideMin || rowsKernel != "auto" && !strings.Contains(rowsKernel, "wide")) {
		name += "n"
	}
	return name
}

// earlyWeights runs the rows and GLU kernels' _early variants for products
// with a model weight (TANDEM_CUDA_EARLY_WEIGHTS=0 turns it off; live):
// their first weight loads go out before griddepcontrol.wait, so under
// programmatic launch (plain decode steps) a product's weights start
// streaming while the kernel before it still finishes. Only a weight
// qualifies: no kernel writes one, so reading it early cannot see a stale
// value. The same bits. In the ninth session it moved decode within the
// noise (31B 43.9 → 44.1 tok/s, E2B 206 → 212); with the cluster finish
// and the shorter steps of the fourteenth, the E2B step went 3.30 → 3.19-3.20
// ms and the 31B step 19.98-20.01 → 19.72-19.73, in two alternations each.
var earlyWeights = true // TANDEM_CUDA_EARLY_WEIGHTS, read by liveSettings

// earlyOf names the rows and GLU kernels' _early variants.
var earlyOf = map[string]string{"matmul_rows": "matmul_rows_early", "matmul_rows_wide": "matmul_rows_wide_early",
	"matmul_rows_glu": "matmul_rows_glu_early", "matmul_rows_glu_by": "matmul_rows_glu_by_early"}

// isWeight reports whether t is a model weight (Backend.Weight): no kernel
// writes one, so it may be read before the kernel ahead has finished, or
// warmed into L2 ahead of its product.
func isWeight(t *compute.Tensor) bool {
	m := memOf(t)
	return m.blk != nil && m.blk.fixed
}

// early is kernel name's _early variant for a product with weight w where
// earlyWeights asks for one and w is a model weight, else name.
func (b *Backend) early(name string, w *compute.Tensor) string {
	e, ok := earlyOf[name]
	if !ok || !earlyWeights || !isWeight(w) {
		return name
	}
	b.earlyN++
	return e
}

// envInt reads a whole number in [lo, hi] from the environment variable
// name: def when it is unset, and def with a warning when it is not such a
// number.
func envInt(name string, def, lo, hi int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		slog.Warn("ignoring an environment setting", "name", name, "value", v, "want", fmt.Sprintf("a whole number from %d to %d", lo, hi))
		return def
	}
	return n
}

// splitWarps is how many warps splitK's warp rule aims for, and splitMinK
// the fewest elements of K a split takes under it. The K split is part of
// the arithmetic (it sets the summation order), fixed for the process and
// never chosen per call; tests vary it to measure.
var splitWarps = 16384

const splitMinK = 512

// splitK picks how many K ranges a weight's columns are split into, from
// the weight's shape and the GPU alone (never from M, which would break
// batch invariance): by fillSplit's model of waves, or with
// TANDEM_CUDA_SPLIT=warps (and on no device) by the older rule of enough
// warps to keep every SM streaming, at least 512 elements of K a split.
func splitK(N, K int) (splits, chunk int) { return splitKCols(N, K, blockColsOf(rowsFor(N, K))) }

// splitKCols is splitK with fillSplit counting blocks of cols columns.
func splitKCols(N, K, cols int) (splits, chunk int) {
	fixed := splitFixed
	if fixed == 0 {
		fixed = splitsFor[[2]int{N, K}]
	}
	switch {
	case fixed > 0:
		splits = max(1, min(fixed, K/32))
	case splitMode == "fill" && waveWarps > 0:
		splits = fillSplit(N, K, waveWarps, cols)
	default:
		groups := (N + 7) / 8
		splits = max(1, min((splitWarps+groups-1)/groups, K/splitMinK))
	}
	chunk = ((K+splits-1)/splits + 31) &^ 31
	return (K + chunk - 1) / chunk, chunk
}

// kSplit is a product's K split (splits ranges of chunk), or zero for
// splitK's.
type kSplit struct{ splits, chunk int }

// of is k, or splitK's split of an N × K weight where k is zero.
func (k kSplit) of(N, K int) (splits, chunk int) {
	if k.splits > 0 {
		return k.splits, k.chunk
	}
	return splitK(N, K)
}

// gluSplit gives a stacked gate|up product the K split fillSplit counts
// for matmul_rows_glu, whose blocks cover 128 stacked columns (64 of the
// gate and the same 64 of up), on every path that product takes: the GLU
// kernel for up to five rows, and the stacked product and gelu_mul for
// more (GeluMatMuls). splitK counts the kernel the stacked product alone
// would take, which for the E2B MLP (12288 × 1536, matmul_rows: 64
// columns a block) is twice the GLU kernel's warps: 2 splits, a third of
// the H200's wave; 4 forced ran the product in 13.2 µs stamped against
// 15.8-16.8 (twenty-ninth session), and this rule gives 5 there. The split
// is part of the bits. Written without a GPU (TANDEM_CUDA_GLU_SPLIT=1;
// live, off by default): TestGLUSplitKeepsRowsInvariant, then timing.
var gluSplit bool // TANDEM_CUDA_GLU_SPLIT, read by liveSettings

// gluBlockCols is how many of a stacked gate|up's columns a
// matmul_rows_glu block covers: 64 of the gate and the same 64 of up.
const gluBlockCols = 128

// gluSplitK is gluSplit's split of a stacked gate|up weight of N × K.
func gluSplitK(N, K int) kSplit {
	splits, chunk := splitKCols(N, K, gluBlockCols)
	return kSplit{splits, chunk}
}

// splitMode is TANDEM_CUDA_SPLIT: "fill" (the default) takes fillSplit's
// count, "warps" the warp rule. The warp rule gave the 31B MLP's 21504 ×
// 5376 product 7 splits: 9,408 warps, 2.2 waves of the H200's 4,224, so
// its last wave ran a fifth full; with fill's 3 it ran 64.5 against 71.6
// µs (TestMatMulSpeed), and the E2B products, which the warp rule gave 3
// splits filling half a wave, get 10-16. Whole steps: 31B 22.7 → 21.1 ms,
// E2B 4.8 → 4.2 ms (docs/benchmarks.md, "Tenth session").
var splitMode string // TANDEM_CUDA_SPLIT, read by liveSettings

// splitCost is fillSplit's cost of a warp beyond its run, in elements of K.
// Between 0 and 512 it changes only the LM heads' choice, which at 0 would
// split 12 ways; 128 keeps them whole (4,100 GB/s unsplit).
const splitCost = 128

// waveWarps is how many warps of the rows kernels the GPU holds at once:
// four blocks of eight warps a multiprocessor (256 threads of 64 registers
// fill the 64K registers four times). Set when a backend opens its device.
var waveWarps int

// splitsFor puts the products of the named weight shapes in the given
// numbers of K splits (TANDEM_CUDA_SPLITS_FOR=NxK=S+NxK=S, live; for
// measuring). The split is part of the arithmetic, so a product's bits
// change with it, on every path alike: a row still has the same bits
// alone or beside others. The twenty-fifth session found the 31B step's
// attention costing it more than its kernels take, and the o product
// after it launching more blocks than fit beside attention's: its split
// count is what to sweep.
var splitsFor map[[2]int]int

// parseSplitsFor reads TANDEM_CUDA_SPLITS_FOR's value: shapes NxK=S
// joined by '+', ' ' or ';', S from 1 to 64.
func parseSplitsFor(v string) (map[[2]int]int, error) {
	var m map[[2]int]int
	for _, f := range strings.FieldsFunc(v, func(r rune) bool { return r == '+' || r == ' ' || r == ';' }) {
		var n, k, s int
		if _, err := fmt.Sscanf(f, "%dx%d=%d", &n, &k, &s); err != nil || n < 1 || k < 1 || s < 1 || s > 64 ||
			f != fmt.Sprintf("%dx%d=%d", n, k, s) {
			return nil, fmt.Errorf("TANDEM_CUDA_SPLITS_FOR: %q is not NxK=S (S from 1 to 64)", f)
		}
		if m == nil {
			m = map[[2]int]int{}
		}
		m[[2]int{n, k}] = s
	}
	return m, nil
}

// splitFixed, when positive, puts every product in that many K splits (at
// most one a 32 elements): TestMatMulSpeed's sweep.
var splitFixed int

// fillSplit models a rows-kernel product's time as its waves times each
// warp's run (chunk + splitCost elements of K, the cost standing for a
// warp's ramp-up and its partial's write) and returns the cheapest split
// count, the fewest on a tie. cols is how many columns a block of eight
// warps covers. A split takes at least 128 elements and there are at most
// 16: every split writes an [M, N] partial, which at a prefill chunk's M is
// tens of megabytes. TestMatMulSpeed's sweep of the wide kernel over 1-25
// splits is where the model comes from: the 31B MLP (1,344 warps a split)
// is fastest at 3 splits (0.95 of a wave), slower at 4 (1.27 waves, so 2),
// and the E2B products, which fill a fraction of a wave, get faster with
// every split until they fill one.
func fillSplit(N, K, wave, cols int) int {
	warps := (N + cols - 1) / cols * 8
	best, bestCost := 1, math.Inf(1)
	for s := 1; s <= max(1, min(16, K/128)); s++ {
		chunk := ((K+s-1)/s + 31) &^ 31
		if (K+chunk-1)/chunk < s {
			continue // the same chunks as a smaller count
		}
		cost := math.Ceil(float64(warps*s)/float64(wave)) * float64(chunk+splitCost)
		if cost < bestCost {
			best, bestCost = s, cost
		}
	}
	return best
}

// blockColsOf is the columns a block of the rows kernel k covers.
func blockColsOf(k string) int {
	if c := blockCols[k]; c > 0 {
		return c
	}
	return 64
}

// expertAt picks a matmul's weights on the device: output row z is input
// row z / xdiv times the rows of expert sel[z·step + off], stride elements
// after the previous expert's (MatMulAt, MatMulExperts).
type expertAt struct {
	sel               Buffer
	step, off, stride int
	xdiv, rows        int // rows: of the output
}

// alignedRows is the matmul kernels' aligned flag: 1 when every weight row
// (of K elements from w's start, and for experts their weights stride
// elements apart; 0 for one weight) starts on 16 bytes, so rows are read
// 16 bytes at a time.
func alignedRows(K int, w *compute.Tensor, stride int) int {
	if K%8 == 0 && stride%8 == 0 && memOf(w).ptr%16 == 0 {
		return 1
	}
	return 0
}

// matmulMMA runs the tensor-core kernel: x split into three bf16 parts,
// the product per K split, and the splits summed in order. With at, w is
// expert 0's rows and the kernel (the rows kernel, each token a row of its
// own) moves to the expert the device chose for the token. With segs
// (columns [0, segs[0]), [segs[0], segs[1]) and [segs[1], N) being separate
// products), a rows kernel writes y as those products one after another;
// it reports whether it did (other kernels write the plain [M, N]).
func (b *Backend) matmulMMA(y, x, w *compute.Tensor, M, N, K int, at *expertAt, segs *[2]int, sk kSplit) bool {
	splits, chunk := sk.of(N, K)
	R := M // output rows
	if at != nil {
		R = at.rows
	}
	stride := 0 // elements between experts' weights
	if at != nil {
		stride = at.stride
	}
	al := alignedRows(K, w, stride)
	// A prompt pass's product at PrecisionBF16 takes matmul_tiled1 for any
	// M where the tiled kernel runs; elsewhere its activations are rounded
	// first (their mid and lo parts then zero: the same bits).
	one := b.bf16() && at == nil && al == 1
	if one && b.promptLt(N, K) { // ltTakes(w) for a plain product
		xs := b.splitParts(x, M*K) // its first part: x rounded to bf16
		if err := b.lt.MatMulAsync(ptrOf(y), ptrOf(xs), ptrOf(w), M, N, K); err != nil {
			panic(err)
		}
		b.ltN++
		return false
	}
	if b.bf16() && !one {
		x = b.promptInput(x)
	}
	tiles := ""
	if at == nil && !one {
		tiles = tilesFor(M, N, K)
	}
	tiled := at == nil && M > 16 && tiles == "" && tiledMatMul && al == 1 // a pass of one (matmul_tiled1) is taken first below
	lone := at != nil && M == 1 && R == 1
	name, rows := mma1Kernel, false
	switch {
	case one:
	case lone:
		name = "matmul_rows_at"
	case at != nil:
		name = "matmul_rows_tokens"
	case M <= min(rowsMaxM, 5): // three tile rows per activation row fit five rows
		name, rows = rowsFor(N, K), true
	case tiles != "":
		name, rows = tiles, true
		b.tilesN++
	case M > 16:
		name = mma8Kernel
	}
	if rows {
		name = b.early(name, w)
	}
	cols := blockColsOf(name)
	cluster := "" // the cluster-finish variant, which needs no partials in memory
	if rows && !sumSplitsOnly {
		cluster = b.clusterKernel(name, splits, (N+cols-1)/cols)
	}
	out := y
	if splits > 1 && cluster == "" {
		out = b.alloc(compute.F32, splits*R*N)
	}
	xs := b.splitParts(x, M*K)
	// Every kernel takes (xs, w, y, part, counters, M, N, K, kchunk) and
	// the mma kernels the alignment flag too; grid (column groups of 64,
	// splits, row tiles of 64 for the tiled kernel).
	grid := [3]uint32{uint32((N + cols - 1) / cols), uint32(splits), 1}
	tail := []any{M, N, K, chunk, al}
	switch {
	case lone:
		tail = append(tail, at.sel, at.off, at.stride)
	case at != nil: // a block of the third dimension an output row
		grid[2], tail = uint32(R), append(tail, at.sel, at.step, at.off, at.stride, at.xdiv)
	case one:
		name, grid[2], tail = "matmul_tiled1", uint32((M+tileRows-1)/tileRows), tail[:4]
		if tiled1Wide && M > 64 {
			name, grid[0], grid[2] = "matmul_tiled1w", uint32((N+127)/128), uint32((M+127)/128)
			b.tiled1wN++
		}
		b.tiled1N++
	case tiled:
		name, grid[2], tail = "matmul_tiled", uint32((M+tileRows-1)/tileRows), tail[:4]
	}
	var yArg, counters any = ptrOf(y), ptrOf(b.counters)
	separate := splits > 1 && cluster == "" && (int(grid[0]*grid[2]) > splitCounters || sumSplitsOnly)
	if separate { // more tiles than counters: sum the splits in a kernel of their own
		yArg, counters = ptrOf(out), nil
	}
	segmented := rows && segs != nil && !separate
	if rows { // the rows kernels take the segments' bounds last
		b1, b2 := segNone, segNone
		if segmented {
			b1, b2 = segs[0], segs[1]
		}
		tail = append(tail, b1, b2)
	}
	args := append([]any{ptrOf(xs), ptrOf(w), yArg, ptrOf(out), counters}, tail...)
	if cluster != "" {
		b.launchCluster(cluster, grid, 256, args...)
	} else {
		b.launch(name, grid, 256, args...)
	}
	if separate {
		b.launch("sum_splits", grid1(R*N), 256, ptrOf(y), ptrOf(out), R*N, splits)
	}
	if out != y {
		b.recycle(out)
	}
	return segmented
}

// clusterFinish runs split products of the rows kernels (and the GLU
// kernels) as thread block clusters, one cluster a column group's K
// splits, which sum their partials through each other's shared memory in
// split order instead of through L2 after a count (the _cl kernels in
// matmul.cu; TANDEM_CUDA_CLUSTER=0 turns it off, live). The same bits. On
// the H200 (thirteenth session) the E2B step went from 3.69-3.72 to 3.51-3.53 ms
// (269-271 → 284-285 tok/s; 170 → 176 at 4k), though a product timed
// alone took as long either way (E2B MLP down 11.5 against 11.6 µs); the
// 31B products' clusters do not all fit at once, so they keep the counted
// finish (50.4 tok/s either way).
var clusterFinish = true // TANDEM_CUDA_CLUSTER, read by liveSettings

// clusterOf names the kernels' cluster-finish variants.
var clusterOf = map[string]string{"matmul_rows": "matmul_rows_cl", "matmul_rows_wide": "matmul_rows_wide_cl",
	"matmul_rows_glu": "matmul_rows_glu_cl", "matmul_rows_glu_by": "matmul_rows_glu_by_cl",
	"matmul_rows_early": "matmul_rows_early_cl", "matmul_rows_wide_early": "matmul_rows_wide_early_cl",
	"matmul_rows_glu_early": "matmul_rows_glu_early_cl", "matmul_rows_glu_by_early": "matmul_rows_glu_by_early_cl"}

// clusterKernel is the cluster-finish variant of kernel name for a product
// of groups column groups in splits K splits, or "" where it takes none:
// the switch is off, the product is not split, its splits exceed the
// device's clusters, or its clusters would not all fit on the device at
// once (a cluster's blocks start together, so the device holds fewer
// blocks as clusters than plainly; on the H200 the 31B MLP products, 504
// blocks that fit one wave as plain blocks, took 80-87 µs as clusters
// against 66).
func (b *Backend) clusterKernel(name string, splits, groups int) string {
	cl := clusterOf[name]
	if !clusterFinish || splits < 2 || splits > b.maxCluster || cl == "" || groups > b.clusterFit[cl][splits] && !clusterAlways {
		return ""
	}
	return cl
}

// clusterAlways takes the cluster finish however many clusters the device
// holds at once (tests, and TestWeightStreamSpeed's comparison).
var clusterAlways bool

// segNone is SEG_NONE in matmul.cu: no segments, the plain layout.
const segNone = 0x7fffffff

// sumSplitsOnly has every split product summed by sum_splits, whose order
// the kernels' own finish must match (TestSplitFinishMatchesSumSplits).
var sumSplitsOnly bool

// splitCounters is the number of column-group counters the matmul kernels
// use to let the last K split of a group sum the partials.
const splitCounters = 1 << 16

var _ compute.Precisioner = (*Backend)(nil)

// promptBLAS has bf16 prompt products of aligned bf16 weights run through
// cuBLASLt, one algorithm a weight shape whatever the rows (Lt.Plan), where
// the library loads and has one for the shape; elsewhere they take
// matmul_tiled1 (TANDEM_CUDA_PROMPT_BLAS=0 always does; live, but switch it
// only between prompts: a prompt's chunks must all take one path). Its
// bits are its own, not matmul_tiled1's: a row's result still does not
// depend on the rows beside it (TestLtRowInvariance).
var promptBLAS = true

// ltTakes reports whether a bf16 prompt pass's product with weight w runs
// on cuBLASLt (matmulMMA: bf16 weights in 16-byte rows, promptLt).
func (b *Backend) ltTakes(w *compute.Tensor) bool {
	return w.Rank() == 2 && w.DType() == compute.BF16 && !warpMatMul && alignedRows(w.Dim(1), w, 0) == 1 && b.promptLt(w.Dim(0), w.Dim(1))
}

// promptLt reports whether an N × K product of a bf16 prompt pass runs on
// cuBLASLt (promptBLAS), loading it at the first such product.
func (b *Backend) promptLt(N, K int) bool {
	if !promptBLAS || K%8 != 0 || N%4 != 0 {
		return false
	}
	b.ltOnce.Do(func() {
		lt, err := b.dev.NewLt()
		if err != nil {
			slog.Warn("cuda: bf16 prompt products keep the project's kernels", "err", err)
			return
		}
		b.lt = lt
	})
	if b.lt == nil {
		return false
	}
	ok, err := b.lt.Plan(N, K)
	if err != nil {
		slog.Warn("cuda: cuBLASLt plan failed; the shape keeps the project's kernels", "N", N, "K", K, "err", err)
	}
	return ok
}

// tiled1Wide has bf16 prompt products of more than 64 rows take
// matmul_tiled1w's 128 × 128 tiles (the same bits as matmul_tiled1's 64 ×
// 64; TANDEM_CUDA_TILED1_WIDE=0 turns it off, live).
var tiled1Wide = true

// SetPrecision implements compute.Precisioner.
func (b *Backend) SetPrecision(p compute.Precision) compute.Precision {
	return compute.Precision(b.precision.Swap(uint32(p)))
}

// bf16 reports whether products round their activations to bf16.
func (b *Backend) bf16() bool { return compute.Precision(b.precision.Load()) == compute.PrecisionBF16 }

// promptInput is x rounded to bf16 where products take it so (bf16), for
// the kernels other than matmul_tiled1, which read the split's first part:
// a rounded x's mid and lo parts are zero, so every kernel gives
// matmul_tiled1's bits.
func (b *Backend) promptInput(x *compute.Tensor) *compute.Tensor {
	if !b.bf16() {
		return x
	}
	h := b.alloc(compute.BF16, x.Shape()...)
	b.Copy(h, 0, x)
	r := b.alloc(compute.F32, x.Shape()...)
	b.Copy(r, 0, h)
	b.recycle(h)
	return r
}

// splitEntry is a tensor's remembered split: its three bf16 parts.
type splitEntry struct {
	x     *mem
	n     int
	parts *compute.Tensor
}

// maxSplits and maxSplitBytes bound the splits the backend remembers (a
// prefill chunk's split is tens of megabytes).
const (
	maxSplits     = 8
	maxSplitBytes = 256 << 20
)

// splitParts returns x's three bf16 parts (hi, mid, lo: [3][n]). Splits are
// remembered: the q, k and v projections (and gate and up) share their
// input, and with fused kernels the op that made x may have written its
// parts already. Tensors are written only when made, except through Copy
// and AddRows, which forget what they overwrite.
func (b *Backend) splitParts(x *compute.Tensor, n int) *compute.Tensor {
	m := memOf(x)
	b.mu.Lock()
	for _, e := range b.splits {
		if e.x == m && e.n == n {
			b.mu.Unlock()
			return e.parts
		}
	}
	b.mu.Unlock()
	xs := b.alloc(compute.BF16, 3, n)
	b.launch("split_bf16", grid1(n), 256, ptrOf(xs), ptrOf(x), n)
	b.remember(x, xs)
	return xs
}

// remember records parts as t's split.
func (b *Backend) remember(t, parts *compute.Tensor) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.splits = append(b.splits, splitEntry{memOf(t), t.Len(), parts})
	total := 0
	for _, e := range b.splits {
		total += 6 * e.n
	}
	for len(b.splits) > 1 && (len(b.splits) > maxSplits || total > maxSplitBytes) {
		total -= 6 * b.splits[0].n
		b.splits[0] = splitEntry{}
		b.splits = b.splits[1:]
	}
}

// forgetWrites drops the splits of tensors that share dst's memory: it is
// being written.
func (b *Backend) forgetWrites(dst *compute.Tensor) {
	blk := memOf(dst).blk
	b.mu.Lock()
	defer b.mu.Unlock()
	kept := b.splits[:0]
	for _, e := range b.splits {
		if e.x.blk != blk {
			kept = append(kept, e)
		}
	}
	clear(b.splits[len(kept):])
	b.splits = kept
}

// emitParts allocates the split of a producer's output when fused kernels
// are on (the producer writes it; see emit in ops.cu), and returns it with
// its kernel argument (a null pointer when off).
func (b *Backend) emitParts(out *compute.Tensor) (*compute.Tensor, any) {
	if !fusedOps || out.Len() == 0 {
		return nil, nil
	}
	parts := b.alloc(compute.BF16, 3, out.Len())
	return parts, ptrOf(parts)
}

// Spin queues a kernel that keeps the GPU busy for d, so that work queued
// behind it runs back to back however slowly the host issues it: kernel
// timings taken behind a spin measure the device alone. Measurement only.
func (b *Backend) Spin(d time.Duration) {
	b.launch("spin", [3]uint32{1, 1, 1}, 1, int(min(d, time.Second).Nanoseconds()))
	b.mu.Lock()
	b.spunAt = time.Now()
	b.mu.Unlock()
}

// IssueTimes reports, and forgets, the host time from each Spin to the
// next download: with the device held by the spin, how long the host took
// to issue the work in between (a decode step's launches, for bench).
func (b *Backend) IssueTimes() []time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := b.issued
	b.issued = nil
	return out
}

// Gather implements compute.Backend.
func (b *Backend) Gather(table *compute.Tensor, ids []int32) *compute.Tensor {
	if table.Rank() != 2 {
		panic(fmt.Sprintf("cuda: Gather from %v", table))
	}
	V, D := table.Dim(0), table.Dim(1)
	for _, id := range ids {
		if id < 0 || int(id) >= V {
			panic(fmt.Sprintf("cuda: Gather id %d out of range for %v", id, table))
		}
	}
	if len(ids) == 0 || D == 0 {
		return b.gather(table, len(ids), nil)
	}
	idx := b.ints(ids)
	out := b.gather(table, len(ids), ptrOf(idx))
	b.recycle(idx)
	return out
}

// gather launches the gather of n rows of table by the ids at device
// address ids: an I32 table's rows are copied as I32, a float table's
// widened to F32.
func (b *Backend) gather(table *compute.Tensor, n int, ids any) *compute.Tensor {
	D := table.Dim(1)
	dt, code := compute.F32, 3 // DT_I32 in ops.cu
	if table.DType() == compute.I32 {
		dt = compute.I32
	} else {
		code = dtCode(table.DType())
	}
	out := b.alloc(dt, n, D)
	if n > 0 && D > 0 {
		b.launch("gather", [3]uint32{uint32(n), 1, 1}, 256, ptrOf(out), ptrOf(table), code, ids, D)
	}
	return out
}

// GatherAt implements compute.Backend.
func (b *Backend) GatherAt(table, ids *compute.Tensor) *compute.Tensor {
	if table.Rank() != 2 || ids.DType() != compute.I32 || ids.Rank() != 1 {
		panic(fmt.Sprintf("cuda: GatherAt from %v with ids %v", table, ids))
	}
	return b.gather(table, ids.Dim(0), ptrOf(ids))
}

// AddRows implements compute.Backend.
func (b *Backend) AddRows(dst, src *compute.Tensor, rows []int32, scale []float32) {
	b.forgetWrites(dst)
	if dst.DType() != compute.F32 || src.DType() != compute.F32 || dst.Rank() == 0 || src.Rank() != 2 ||
		src.Dim(0) != len(rows) || src.Dim(1) != dst.Dim(-1) || (scale != nil && len(scale) != len(rows)) {
		panic(fmt.Sprintf("cuda: AddRows of %v into %v with %d rows, %d scales", src, dst, len(rows), len(scale)))
	}
	D, R := dst.Dim(-1), dst.Rows()
	for _, r := range rows {
		if r < 0 || int(r) >= R {
			panic(fmt.Sprintf("cuda: AddRows row %d out of range for %v", r, dst))
		}
	}
	if len(rows) == 0 || D == 0 {
		return
	}
	idx := b.ints(rows)
	var sc any
	if scale != nil {
		st := b.floats(scale)
		defer b.recycle(st)
		sc = ptrOf(st)
	}
	b.addRows(dst, src, idx, sc, 1, len(rows))
	b.recycle(idx)
}

// Concat implements compute.Backend.
func (b *Backend) Concat(x, y *compute.Tensor) *compute.Tensor {
	if x.Rank() == 0 || x.Rank() != y.Rank() || x.DType() != y.DType() || x.DType().Size() == 8 ||
		!compute.SameShape(x.Shape()[:x.Rank()-1], y.Shape()[:y.Rank()-1]) {
		panic(fmt.Sprintf("cuda: Concat of %v and %v", x, y))
	}
	da, db := x.Dim(-1), y.Dim(-1)
	shape := append(append([]int(nil), x.Shape()[:x.Rank()-1]...), da+db)
	out := b.alloc(x.DType(), shape...)
	if n := out.Len(); n > 0 {
		b.launch("concat", grid1(n), 256, ptrOf(out), ptrOf(x), ptrOf(y), out.Rows(), da, db, x.DType().Size())
	}
	return out
}

// RMSNorm implements compute.Backend.
func (b *Backend) RMSNorm(x, w *compute.Tensor, eps float32) *compute.Tensor {
	f32(x, "RMSNorm")
	D := x.Dim(-1)
	wp, wt := normWeight(x, w, D, "RMSNorm")
	return b.rmsnorm(x, wp, wt, D, eps, nil, earlyNorm(w))
}

// rowCache lets rmsnorm hold rows of up to 6144 elements in registers
// (one memory round trip instead of one per block of elements per pass;
// the same bits). Tests turn it off to compare.
var rowCache = 1

// rowThreads is the block size of every norm of a row of D elements
// (rmsnorm, rmsnorm2, rmsnorm_rope, qkv_norms): part of the row's reduction
// order, so a function of D alone, the same whichever kernel normalises
// it. About six elements a thread (RCACHE in ops.cu), 256 to 1024 threads:
// a decode step's norm is one block, bound by its chain of dependent
// instructions, so more threads with shorter chains finish sooner.
func rowThreads(D int) int {
	n := 256
	for n < 1024 && n*6 < D {
		n *= 2
	}
	return n
}

// earlyNorms lets the norm kernels load their weights before
// griddepcontrol.wait where every weight is a model weight (or none),
// as the products' _early variants do (TANDEM_CUDA_EARLY_NORMS=0 turns it
// off; live). A step's norms read their weights from memory the products
// have swept out of L2, and Nsight Compute had those loads as a fifth of an
// E2B rmsnorm2 and a tenth of a 31B one. The same bits.
var earlyNorms = true // TANDEM_CUDA_EARLY_NORMS, read by liveSettings

// earlyNorm is rmsnorm's and rmsnorm2's early argument for weights ws (nil:
// none): 1 where earlyNorms asks for it and each is a model weight.
func earlyNorm(ws ...*compute.Tensor) int {
	if !earlyNorms {
		return 0
	}
	for _, w := range ws {
		if w != nil && !isWeight(w) {
			return 0
		}
	}
	return 1
}

// rmsnorm launches the norm of x's rows of D, plus res when given, and
// with fused kernels on writes the result's split too; early is
// earlyNorm's for its weight.
func (b *Backend) rmsnorm(x *compute.Tensor, wp any, wt, D int, eps float32, res any, early int) *compute.Tensor {
	out := b.alloc(compute.F32, x.Shape()...)
	if R := x.Rows(); R > 0 && D > 0 {
		parts, pp := b.emitParts(out)
		b.launch("rmsnorm", [3]uint32{uint32(R), 1, 1}, rowThreads(D), ptrOf(out), ptrOf(x), wp, wt, D, eps, res, pp, out.Len(), rowCache, early)
		if parts != nil {
			b.remember(out, parts)
		}
	}
	return out
}

// normWeight checks a norm's weight against rows of D and returns its
// kernel arguments (a null pointer for none).
func normWeight(x, w *compute.Tensor, D int, op string) (any, int) {
	if w == nil {
		return nil, 0
	}
	if w.Len() != D {
		panic(fmt.Sprintf("cuda: %s of %v with weight %v", op, x, w))
	}
	return ptrOf(w), dtCode(w.DType())
}

// fusedOps turns on the fused kernels, pinned bitwise to the op sequences
// they replace by TestFusedOpsMatch; TANDEM_CUDA_FUSE=0 runs the sequences
// instead, for comparisons.
var fusedOps bool // TANDEM_CUDA_FUSE, read by liveSettings

// AddRMSNorm implements compute.Fused: rmsnorm adds the residual row as
// it writes.
func (b *Backend) AddRMSNorm(r, x, w *compute.Tensor, eps float32) *compute.Tensor {
	if !fusedOps {
		return b.Add(r, b.RMSNorm(x, w, eps))
	}
	f32(x, "AddRMSNorm")
	f32(r, "AddRMSNorm")
	if !compute.SameShape(r.Shape(), x.Shape()) {
		panic(fmt.Sprintf("cuda: AddRMSNorm of %v onto %v", x, r))
	}
	D := x.Dim(-1)
	wp, wt := normWeight(x, w, D, "AddRMSNorm")
	return b.rmsnorm(x, wp, wt, D, eps, ptrOf(r), earlyNorm(w))
}

// rcacheElems is the longest row rmsnorm2 takes (RCACHE·NMAX in ops.cu).
const rcacheElems = 6 * 1024

// fusedNorm2 turns on rmsnorm2 and qkv_norms (31B decode 34.0 → 35.2
// tok/s on the H200); TANDEM_CUDA_NORM2=0 runs the op sequences instead.
var fusedNorm2 bool // TANDEM_CUDA_NORM2, read by liveSettings

// AddRMSNormNorm implements compute.FusedBoundary: rmsnorm2 runs both norms of a
// row (and the scaling) in one pass; rows longer than rcacheElems run the
// sequence.
func (b *Backend) AddRMSNormNorm(r, x, w1, s, w2 *compute.Tensor, eps float32) (y, h *compute.Tensor) {
	D := x.Dim(-1)
	if !fusedOps || !fusedNorm2 || D > rcacheElems {
		return compute.AddRMSNormNormUnfused(b, r, x, w1, s, w2, eps)
	}
	f32(x, "AddRMSNormNorm")
	f32(r, "AddRMSNormNorm")
	if !compute.SameShape(r.Shape(), x.Shape()) || (s != nil && s.Len() != 1) {
		panic(fmt.Sprintf("cuda: AddRMSNormNorm of %v onto %v scaled by %v", x, r, s))
	}
	w1p, w1t := normWeight(x, w1, D, "AddRMSNormNorm")
	w2p, w2t := normWeight(x, w2, D, "AddRMSNormNorm")
	var sp any
	st := 0
	if s != nil {
		sp, st = ptrOf(s), dtCode(s.DType())
	}
	y, h = b.alloc(compute.F32, x.Shape()...), b.alloc(compute.F32, x.Shape()...)
	if R := x.Rows(); R > 0 && D > 0 {
		parts, pp := b.emitParts(h)
		b.launch("rmsnorm2", [3]uint32{uint32(R), 1, 1}, rowThreads(D), ptrOf(y), ptrOf(h), ptrOf(x), ptrOf(r), w1p, w1t, sp, st, w2p, w2t, D, eps, pp, h.Len(),
			earlyNorm(w1, s, w2))
		if parts != nil {
			b.remember(h, parts)
		}
	}
	return y, h
}

// normWarpTokens is the fewest tokens whose head norms take a warp a row
// (qkv_norms_warp, the same bits) rather than a block: a prompt pass's
// rows are many and short, and a block's barriers cost more than its
// reduction (31B 4k prefill: qkv_norms 57 ms of 626). Decode steps and
// verifies keep a block a row, which spreads their few rows over more of
// the device. TANDEM_CUDA_NORM_WARPS=0 turns it off, "all" takes it at
// every size, N from N tokens on.
var normWarpTokens = normWarpDefault // TANDEM_CUDA_NORM_WARPS, read by liveSettings

const normWarpDefault = 64

// QKVNorms implements compute.FusedQKV with qkv_norms, or qkv_norms_warp
// for passes of normWarpTokens tokens or more (off, like rmsnorm2, with
// TANDEM_CUDA_NORM2=0). Its rows take rmsnorm_rope's two-pass scale
// rather than rmsnorm's register cache: the same bits, and heads of at most
// 512 elements gain little from the cache.
func (b *Backend) QKVNorms(q, k, v, qw, kw *compute.Tensor, eps float32, pos []int32, r *compute.RoPE, dst []compute.KVRun) (qo, ko, vo *compute.Tensor) {
	if !fusedOps || !fusedNorm2 {
		return compute.QKVNormsUnfused(b, q, k, v, qw, kw, eps, pos, r, dst)
	}
	T, Hq, d, err := compute.CheckRoPE(q, pos, r)
	if err != nil {
		panic("cuda: " + err.Error())
	}
	Tk, Hk, dk, err := compute.CheckRoPE(k, pos, r)
	if err != nil || Tk != T || dk != d || !compute.SameShape(v.Shape(), k.Shape()) {
		panic(fmt.Sprintf("cuda: QKVNorms of %v, %v and %v (%v)", q, k, v, err))
	}
	f32(q, "QKVNorms")
	f32(k, "QKVNorms")
	f32(v, "QKVNorms")
	qp, qt := normWeight(q, qw, d, "QKVNorms")
	kp, kt := normWeight(k, kw, d, "QKVNorms")
	if err := compute.CheckQKVInto(k, dst); err != nil {
		panic("cuda: " + err.Error())
	}
	qo = b.alloc(compute.F32, q.Shape()...)
	// One run of slots is written as ko and vo; several through a table of
	// their caches (kvRows: the table attention's rows read) and one of
	// each token's run and slot.
	var kout, vout, kvp, tslot any
	switch len(dst) {
	case 0:
		ko, vo = b.alloc(compute.F32, k.Shape()...), b.alloc(compute.F32, v.Shape()...)
		kout, vout = ptrOf(ko), ptrOf(vo)
	case 1:
		kout, vout = at(ptrOf(dst[0].K), dst[0].Slot*Hk*d), at(ptrOf(dst[0].V), dst[0].Slot*Hk*d)
	default:
		kv := make([]compute.AttentionRow, len(dst))
		ts := make([]int32, 0, 2*T)
		for i, x := range dst {
			kv[i] = compute.AttentionRow{K: x.K, V: x.V}
			for s := range x.N {
				ts = append(ts, int32(i), int32(x.Slot+s))
			}
		}
		kvp, tslot = ptrOf(b.kvRows(kv)), ptrOf(b.table(ts))
	}
	for _, x := range dst {
		b.forgetWrites(x.K)
		b.forgetWrites(x.V)
	}
	if n := T * (Hq + 2*Hk); n > 0 && d > 0 {
		args := []any{ptrOf(qo), kout, vout, ptrOf(q), ptrOf(k), ptrOf(v), qp, qt, kp, kt, eps, ptrOf(b.table(pos)),
			ptrOf(b.ropeTable(r)), Hq, Hk, d, r.Dim / 2, kvp, tslot}
		if rowThreads(d) == 256 && T >= normWarpTokens { // half ≤ d/2 ≤ 768: QKV_HALF
			b.launch("qkv_norms_warp", [3]uint32{uint32(T), 1, 1}, 256, args...)
		} else {
			b.launch("qkv_norms", [3]uint32{uint32(n), 1, 1}, rowThreads(d), args...)
		}
	}
	if dst != nil {
		return qo, nil, nil
	}
	return qo, ko, vo
}

// RMSNormRoPE implements compute.Fused: one kernel normalises each head's
// row and rotates it.
func (b *Backend) RMSNormRoPE(x, w *compute.Tensor, eps float32, pos []int32, r *compute.RoPE) *compute.Tensor {
	if !fusedOps {
		return b.RoPE(b.RMSNorm(x, w, eps), pos, r)
	}
	T, H, d, err := compute.CheckRoPE(x, pos, r)
	if err != nil {
		panic("cuda: " + err.Error())
	}
	f32(x, "RMSNormRoPE")
	wp, wt := normWeight(x, w, d, "RMSNormRoPE")
	out := b.alloc(compute.F32, x.Shape()...)
	if T*H > 0 && d > 0 {
		b.launch("rmsnorm_rope", [3]uint32{uint32(T * H), 1, 1}, rowThreads(d), ptrOf(out), ptrOf(x), wp, wt, eps,
			ptrOf(b.table(pos)), ptrOf(b.ropeTable(r)), H, d, r.Dim/2)
	}
	return out
}

func (b *Backend) ropeTable(r *compute.RoPE) *compute.Tensor {
	b.mu.Lock()
	defer b.mu.Unlock()
	t, ok := b.ropes[r]
	if !ok {
		t = b.floats(r.InvFreq)
		b.ropes[r] = t
	}
	return t
}

// RoPE implements compute.Backend.
func (b *Backend) RoPE(x *compute.Tensor, pos []int32, r *compute.RoPE) *compute.Tensor {
	T, H, d, err := compute.CheckRoPE(x, pos, r)
	if err != nil {
		panic("cuda: " + err.Error())
	}
	f32(x, "RoPE")
	out := b.alloc(compute.F32, x.Shape()...)
	if T*H > 0 && d > 0 {
		b.launch("rope", [3]uint32{uint32(T * H), 1, 1}, 128, ptrOf(out), ptrOf(x), ptrOf(b.table(pos)), ptrOf(b.ropeTable(r)), H, d, r.Dim/2)
	}
	return out
}

func f32(t *compute.Tensor, op string) {
	if t.DType() != compute.F32 {
		panic(fmt.Sprintf("cuda: %s wants an F32 tensor, got %v", op, t))
	}
	memOf(t)
}

// Add implements compute.Backend.
func (b *Backend) Add(x, y *compute.Tensor) *compute.Tensor { return b.binary(x, y, "Add", 0) }

// Mul implements compute.Backend.
func (b *Backend) Mul(x, y *compute.Tensor) *compute.Tensor { return b.binary(x, y, "Mul", 1) }

func (b *Backend) binary(x, y *compute.Tensor, name string, op int) *compute.Tensor {
	f32(x, name)
	n := x.Len()
	period, err := compute.BroadcastPeriod(x, y)
	if err != nil {
		panic(fmt.Sprintf("cuda: %s: %v", name, err))
	}
	out := b.alloc(compute.F32, x.Shape()...)
	if n > 0 {
		b.launch("binary", grid1(n), 256, ptrOf(out), ptrOf(x), ptrOf(y), dtCode(y.DType()), n, max(period, 1), op)
	}
	return out
}

func (b *Backend) unary(x *compute.Tensor, op int, s float32, name string) *compute.Tensor {
	f32(x, name)
	out := b.alloc(compute.F32, x.Shape()...)
	if n := x.Len(); n > 0 {
		b.launch("unary", grid1(n), 256, ptrOf(out), ptrOf(x), n, op, s)
	}
	return out
}

// Scale implements compute.Backend.
func (b *Backend) Scale(x *compute.Tensor, s float32) *compute.Tensor {
	return b.unary(x, 0, s, "Scale")
}

// GeluTanh implements compute.Backend.
func (b *Backend) GeluTanh(x *compute.Tensor) *compute.Tensor { return b.unary(x, 1, 0, "GeluTanh") }

// Softcap implements compute.Backend.
func (b *Backend) Softcap(x *compute.Tensor, c float32) *compute.Tensor {
	return b.unary(x, 2, c, "Softcap")
}

// GeluMul implements compute.Backend.
func (b *Backend) GeluMul(gate, up *compute.Tensor) *compute.Tensor {
	f32(gate, "GeluMul")
	f32(up, "GeluMul")
	if !compute.SameShape(gate.Shape(), up.Shape()) {
		panic(fmt.Sprintf("cuda: GeluMul of %v and %v", gate, up))
	}
	out := b.alloc(compute.F32, gate.Shape()...)
	if n := gate.Len(); n > 0 {
		parts, pp := b.emitParts(out)
		b.launch("gelu_mul", grid1(n), 256, ptrOf(out), ptrOf(gate), ptrOf(up), n, pp)
		if parts != nil {
			b.remember(out, parts)
		}
	}
	return out
}

// Softmax implements compute.Backend.
func (b *Backend) Softmax(x *compute.Tensor) *compute.Tensor {
	f32(x, "Softmax")
	out := b.alloc(compute.F32, x.Shape()...)
	if R, D := x.Rows(), x.Dim(-1); R > 0 && D > 0 {
		b.launch("softmax", [3]uint32{uint32(R), 1, 1}, 256, ptrOf(out), ptrOf(x), D)
	}
	return out
}

// Argmax implements compute.Backend.
func (b *Backend) Argmax(x *compute.Tensor) *compute.Tensor {
	f32(x, "Argmax")
	if x.Rank() == 0 || (x.Dim(-1) == 0 && compute.NumElements(x.Shape()[:x.Rank()-1]) > 0) {
		panic(fmt.Sprintf("cuda: Argmax of %v", x))
	}
	out := b.alloc(compute.I32, x.Rows())
	b.argmax(nil, ptrOf(out), x)
	return out
}

// A TopK of 1 (and Argmax) over rows of at least argmaxSplitMin elements (a
// vocabulary) runs as argmax_part over slices of argmaxSpan, then
// argmax_finish; narrower rows as topk, one block a row.
const (
	argmaxSplitMin = 16384
	argmaxSpan     = 4096
)

// argmax writes each row's best value (when vals is not nil) and index.
func (b *Backend) argmax(vals any, idx Buffer, x *compute.Tensor) {
	R, D := x.Rows(), x.Dim(-1)
	if R == 0 {
		return
	}
	if D < argmaxSplitMin {
		b.launch("topk", [3]uint32{uint32(R), 1, 1}, 256, vals, idx, ptrOf(x), D, 1)
		return
	}
	P := (D + argmaxSpan - 1) / argmaxSpan
	pv, pi := b.alloc(compute.F32, R*P), b.alloc(compute.I32, R*P)
	b.launch("argmax_part", [3]uint32{uint32(R), uint32(P), 1}, 256, ptrOf(pv), ptrOf(pi), ptrOf(x), D, argmaxSpan)
	b.launch("argmax_finish", [3]uint32{uint32(R), 1, 1}, 256, vals, idx, ptrOf(pv), ptrOf(pi), P)
	b.recycle(pv, pi)
}

// ArgmaxKeyed implements compute.Backend.
func (b *Backend) ArgmaxKeyed(x, keys *compute.Tensor) *compute.Tensor {
	f32(x, "ArgmaxKeyed")
	if keys.DType() != compute.I32 || !compute.SameShape(x.Shape(), keys.Shape()) || x.Rank() == 0 ||
		(x.Dim(-1) == 0 && x.Rows() > 0) {
		panic(fmt.Sprintf("cuda: ArgmaxKeyed of %v by %v", x, keys))
	}
	R := x.Rows()
	out := b.alloc(compute.I32, R)
	if R > 0 {
		b.launch("argmax_keyed", [3]uint32{uint32(R), 1, 1}, 256, ptrOf(out), ptrOf(x), ptrOf(keys), x.Dim(-1))
	}
	return out
}

// TopK implements compute.Backend. A k of 1 is argmax; larger ones sort
// tiles (topk_sort), which takes a vocabulary's 64 best in three short
// passes where topk's k sweeps of the row took milliseconds. A k past half
// a tile, which the sorts cannot cut, makes topk's k passes.
func (b *Backend) TopK(x *compute.Tensor, k int) (values, indices *compute.Tensor) {
	f32(x, "TopK")
	if x.Rank() == 0 || k < 0 || k > x.Dim(-1) {
		panic(fmt.Sprintf("cuda: TopK %d of %v", k, x))
	}
	shape := append(append([]int(nil), x.Shape()[:x.Rank()-1]...), k)
	values, indices = b.alloc(compute.F32, shape...), b.alloc(compute.I32, shape...)
	R := compute.NumElements(x.Shape()[:x.Rank()-1])
	switch {
	case R == 0 || k == 0:
	case k == 1:
		b.argmax(ptrOf(values), ptrOf(indices), x)
	case k <= topKTile/2:
		b.topKSort(values, indices, x, R, k)
	default:
		b.launch("topk", [3]uint32{uint32(R), 1, 1}, 256, ptrOf(values), ptrOf(indices), ptrOf(x), x.Dim(-1), k)
	}
	return values, indices
}

// topKTile is topk_sort's TOPK_TILE: the most candidates one block sorts.
const topKTile = 2048

// topKSort runs topk_sort's passes over x's R rows: each cuts a row's n
// candidates to one tile's k best per tile, until one tile holds them all.
func (b *Backend) topKSort(values, indices, x *compute.Tensor, R, k int) {
	D := x.Dim(-1)
	n := D
	var in *compute.Tensor // the last pass's keys, two I32 words each; nil: read x
	inPtr := func() any {
		if in == nil {
			return nil
		}
		return ptrOf(in)
	}
	for {
		tile := topKTile
		for tile/2 >= max(n, 2) {
			tile /= 2
		}
		tiles := (n + tile - 1) / tile
		if tiles == 1 {
			b.launch("topk_sort", [3]uint32{uint32(R), 1, 1}, 256, nil, ptrOf(values), ptrOf(indices), ptrOf(x), inPtr(), D, n, k, tile)
			break
		}
		out := b.alloc(compute.I32, R*tiles*k*2)
		b.launch("topk_sort", [3]uint32{uint32(R), uint32(tiles), 1}, 256, ptrOf(out), nil, nil, ptrOf(x), inPtr(), D, n, k, tile)
		if in != nil {
			b.recycle(in)
		}
		in, n = out, tiles*k
	}
	if in != nil {
		b.recycle(in)
	}
}
