package cuda

import (
	"log/slog"
	"math"
	"os"
	"strings"
)

// liveSettings are the switches (TANDEM_CUDA_*) consulted at every call
// rather than once at start-up, each with how it is read: at start-up
// (init) and again by ReadSettings, one parse for both. Graphs, PDL,
// attention tiling and the library and cache paths are read once, where
// they are declared.
var liveSettings = []struct {
	name string
	set  func(v string)
}{
	{"TANDEM_CUDA_CHECKPOINT", func(string) {
		checkpointEvery = envInt("TANDEM_CUDA_CHECKPOINT", 1, 0, 64)
		checkpoints = checkpointEvery > 0
	}},
	{"TANDEM_CUDA_ROUTE", func(v string) { routeOnDevice = v != "0" }},
	{"TANDEM_CUDA_ROUTE_ROWS", func(v string) { routeRows = v != "0" }},
	{"TANDEM_CUDA_MOE_BATCH", func(v string) { batchExperts = v != "0" }},
	{"TANDEM_CUDA_MOE_GROUPED", func(v string) { groupExperts = v != "0" }},
	{"TANDEM_CUDA_STACK", func(v string) { stackMatMuls = v != "0" }},
	{"TANDEM_CUDA_SEGMENTS", func(v string) { segmentOutputs = v != "0" }},
	{"TANDEM_CUDA_MATMUL", func(v string) { warpMatMul, tiledMatMul = v == "warp", v != "mma8" }},
	{"TANDEM_CUDA_ROWS", func(string) { rowsKernel = rowsDefault() }},
	{"TANDEM_CUDA_EARLY_WEIGHTS", func(v string) { earlyWeights = v != "0" }},
	{"TANDEM_CUDA_EARLY_NORMS", func(v string) { earlyNorms = v != "0" }},
	{"TANDEM_CUDA_SPLIT", setSplitMode},
	{"TANDEM_CUDA_SPLITS_FOR", func(v string) {
		m, err := parseSplitsFor(v)
		if err != nil {
			slog.Warn("cuda: ignored", "err", err)
		}
		splitsFor = m
	}},
	{"TANDEM_CUDA_FUSE", func(v string) { fusedOps = v != "0" }},
	{"TANDEM_CUDA_NORM2", func(v string) { fusedNorm2 = v != "0" }},
	{"TANDEM_CUDA_NORM_WARPS", func(v string) {
		switch v {
		case "0":
			normWarpTokens = math.MaxInt
		case "all":
			normWarpTokens = 0
		default: // from N tokens on
			normWarpTokens = envInt("TANDEM_CUDA_NORM_WARPS", normWarpDefault, 1, 1<<20)
		}
	}},
	{"TANDEM_CUDA_COMBINE", func(v string) { combineInValuesOn = v != "0" }},
	{"TANDEM_CUDA_RECYCLE", func(v string) { modelRecycle = v != "0" }},
	{"TANDEM_CUDA_ATTN_FUSED", func(v string) { fusedAttention = v != "0" }},
	{"TANDEM_CUDA_ATTN_PACKED", func(v string) { attnPacked = v == "1" }},
	{"TANDEM_CUDA_ATTN_COLS4", func(v string) {
		attnCols4, attnCols4Min = v != "0", attnCols4Wide
		if v == "all" {
			attnCols4Min = 0
		}
	}},
	{"TANDEM_CUDA_ATTN_CLUSTER", func(string) { attnClusterBlocks = envInt("TANDEM_CUDA_ATTN_CLUSTER", 8, 0, 16) }},
	{"TANDEM_CUDA_ATTN_SHARE", func(string) { attnClusterShare = envInt("TANDEM_CUDA_ATTN_SHARE", 75, 1, 100) }},
	{"TANDEM_CUDA_ATTN_GROUP", func(v string) { attnGroup, attnGroupAlways = v != "0", v == "all" }},
	{"TANDEM_CUDA_NORMED_ATTN", func(string) {
		normedAttnBlocks = envInt("TANDEM_CUDA_NORMED_ATTN", normedAttnDefault, 0, 16)
	}},
	{"TANDEM_CUDA_ATTN_GROUP_ROWS", func(string) { attnGroupRows = envInt("TANDEM_CUDA_ATTN_GROUP_ROWS", attnGroupMax, 1, attnGroupMax) }},
	{"TANDEM_CUDA_ATTN_CLUSTER_SPLITS", func(v string) { attnClusterSplits = v != "0" }},
	{"TANDEM_CUDA_ATTN_CLUSTER_ROUNDS", func(v string) { attnClusterRounds = v == "1" }},
	{"TANDEM_CUDA_ATTN_SCORE_CHUNK", func(string) {
		attnScoreChunk = envInt("TANDEM_CUDA_ATTN_SCORE_CHUNK", 256, 32, attnChunk)
	}},
	{"TANDEM_CUDA_ATTN_ALL_KEYS", func(v string) { attnAllKeys = v == "1" }},
	{"TANDEM_CUDA_ATTN_TILED_COLS", func(string) { attnTiledCols = envInt("TANDEM_CUDA_ATTN_TILED_COLS", 2, 1, 4) }},
	{"TANDEM_CUDA_ATTN_ROWS", func(v string) { attnRows = v != "0" }},
	{"TANDEM_CUDA_GLU", func(v string) { gluFused = v != "0" }},
	{"TANDEM_CUDA_GLU_SPLIT", func(v string) { gluSplit = v == "1" }},
	{"TANDEM_CUDA_CLUSTER", func(v string) { clusterFinish = v != "0" }},
	{"TANDEM_CUDA_POOL_GC", func(string) { poolGCEvery = envInt("TANDEM_CUDA_POOL_GC", 2048, 0, 1<<30) }},
	{"TANDEM_CUDA_DROP", setDropped},
	{"TANDEM_CUDA_DROP_ZERO", func(v string) { dropZero = v == "1" }},
	{"TANDEM_CUDA_ROWS_TILES", func(string) { rowsTiles = envInt("TANDEM_CUDA_ROWS_TILES", 4, 1, 4) }},
	{"TANDEM_CUDA_TILED1_WIDE", func(v string) { tiled1Wide = v != "0" }},
	{"TANDEM_CUDA_PROMPT_BLAS", func(v string) { promptBLAS = v != "0" }},
	{"TANDEM_CUDA_PROMPT_FLASH", func(v string) { promptFlash = v != "0" }},
	{"TANDEM_CUDA_FLASH_GROUPS", func(string) { flashMaxGroups = envInt("TANDEM_CUDA_FLASH_GROUPS", 2, 1, 2) }},
}

// dropped names kernels that launch and launchCluster skip
// (TANDEM_CUDA_DROP=rmsnorm2,attn_cluster, or with "+", which bench
// --sweep leaves inside a setting; Attention checks it for its cluster
// launches too): every result after them is wrong, but a step's time
// without them bounds what fusing them away could save, with programmatic
// launch and graphs as they really run, which a kernel profile's
// back-to-back times do not show. Dropping a kernel whose output picks
// tokens (argmax, top-k) can feed garbage ids to a gather.
var dropped map[string]bool

// dropZero has a dropped attention kernel's output and its split written
// as zeros (TANDEM_CUDA_DROP_ZERO=1, with TANDEM_CUDA_DROP=attn_cluster,
// attn_cluster_rounds or attn_fused): what follows then runs on finite
// values. Left as they were,
// the pool's stale bytes made NaN logits, and the host's fallback for NaN
// steps (9-10 ms a step) hid what the attention had cost.
var dropZero bool

func setDropped(v string) {
	var d map[string]bool
	for _, name := range strings.FieldsFunc(v, func(r rune) bool { return r == ',' || r == '+' || r == ' ' }) {
		if d == nil {
			d = map[string]bool{}
		}
		d[name] = true
	}
	if d != nil {
		slog.Warn("TANDEM_CUDA_DROP skips kernels: every result is wrong; it is for measuring what they cost", "kernels", v)
	}
	dropped = d
}

// ReadSettings reads the live switches again from the environment, so that
// one process can measure several of them with the model built once
// (tandem bench --sweep; building the 31B shape's weights takes a minute).
// Call it only between passes: nothing else may be recording.
func (b *Backend) ReadSettings() {
	readLive()
	if b.pool != nil {
		b.pool.mu.Lock()
		b.pool.bgEvery = poolGCEvery
		b.pool.mu.Unlock()
	}
}

func init() { readLive() }

// readLive sets every live switch from the environment.
func readLive() {
	for _, s := range liveSettings {
		s.set(os.Getenv(s.name))
	}
}

// Live reports whether ReadSettings reads the switch name again.
func Live(name string) bool {
	for _, s := range liveSettings {
		if s.name == name {
			return true
		}
	}
	return false
}

// setSplitMode reads TANDEM_CUDA_SPLIT: "fill" (also when unset) or
// "warps".
func setSplitMode(v string) {
	switch v {
	case "", "fill":
		splitMode = "fill"
	case "warps":
		splitMode = v
	default:
		splitMode = "fill"
		slog.Warn("ignoring an environment setting", "name", "TANDEM_CUDA_SPLIT", "value", v, "want", "fill or warps")
	}
}
