package cuda

import (
	"math"
	"testing"

	"tandem/compute"
)

// TestReadSettings protects bench --sweep: every switch ReadSettings
// covers takes a new value from the environment, and with the environment
// clear every one is back at its default.
func TestReadSettings(t *testing.T) {
	b := &Backend{pool: newPool(nil)}
	t.Cleanup(b.ReadSettings) // after the environment is restored (cleanups run last first)
	cases := []struct {
		env, value string
		on, def    func() bool
	}{
		{"TANDEM_CUDA_CHECKPOINT", "0", func() bool { return !checkpoints }, func() bool { return checkpoints }},
		{"TANDEM_CUDA_ROUTE", "0", func() bool { return !routeOnDevice }, func() bool { return routeOnDevice }},
		{"TANDEM_CUDA_ROUTE_ROWS", "0", func() bool { return !routeRows }, func() bool { return routeRows }},
		{"TANDEM_CUDA_MOE_BATCH", "0", func() bool { return !batchExperts }, func() bool { return batchExperts }},
		{"TANDEM_CUDA_MOE_GROUPED", "0", func() bool { return !groupExperts }, func() bool { return groupExperts }},
		{"TANDEM_CUDA_STACK", "0", func() bool { return !stackMatMuls }, func() bool { return stackMatMuls }},
		{"TANDEM_CUDA_SEGMENTS", "0", func() bool { return !segmentOutputs }, func() bool { return segmentOutputs }},
		{"TANDEM_CUDA_MATMUL", "warp", func() bool { return warpMatMul && tiledMatMul }, func() bool { return !warpMatMul && tiledMatMul }},
		{"TANDEM_CUDA_ROWS", "wide", func() bool { return rowsKernel == "matmul_rows_wide" }, func() bool { return rowsKernel == "auto" }},
		{"TANDEM_CUDA_EARLY_WEIGHTS", "0", func() bool { return !earlyWeights }, func() bool { return earlyWeights }},
		{"TANDEM_CUDA_EARLY_NORMS", "0", func() bool { return !earlyNorms }, func() bool { return earlyNorms }},
		{"TANDEM_CUDA_SPLIT", "warps", func() bool { return splitMode == "warps" }, func() bool { return splitMode == "fill" }},
		{"TANDEM_CUDA_SPLITS_FOR", "5376x8192=9", func() bool { return splitsFor[[2]int{5376, 8192}] == 9 }, func() bool { return splitsFor == nil }},
		{"TANDEM_CUDA_FUSE", "0", func() bool { return !fusedOps }, func() bool { return fusedOps }},
		{"TANDEM_CUDA_NORM2", "0", func() bool { return !fusedNorm2 }, func() bool { return fusedNorm2 }},
		{"TANDEM_CUDA_NORM_WARPS", "0", func() bool { return normWarpTokens == math.MaxInt }, func() bool { return normWarpTokens == normWarpDefault }},
		{"TANDEM_CUDA_COMBINE", "0", func() bool { return !combineInValuesOn }, func() bool { return combineInValuesOn }},
		{"TANDEM_CUDA_RECYCLE", "0", func() bool { return !modelRecycle }, func() bool { return modelRecycle }},
		{"TANDEM_CUDA_ATTN_FUSED", "0", func() bool { return !fusedAttention }, func() bool { return fusedAttention }},
		{"TANDEM_CUDA_ATTN_PACKED", "1", func() bool { return attnPacked }, func() bool { return !attnPacked }},
		{"TANDEM_CUDA_ATTN_COLS4", "0", func() bool { return !attnCols4 }, func() bool { return attnCols4 }},
		{"TANDEM_CUDA_ATTN_CLUSTER", "0", func() bool { return attnClusterBlocks == 0 }, func() bool { return attnClusterBlocks == 8 }},
		{"TANDEM_CUDA_ATTN_SHARE", "100", func() bool { return attnClusterShare == 100 }, func() bool { return attnClusterShare == 75 }},
		{"TANDEM_CUDA_ATTN_GROUP_ROWS", "4", func() bool { return attnGroupRows == 4 }, func() bool { return attnGroupRows == 8 }},
		{"TANDEM_CUDA_NORMED_ATTN", "16", func() bool { return normedAttnBlocks == 16 }, func() bool { return normedAttnBlocks == normedAttnDefault }},
		{"TANDEM_CUDA_ATTN_GROUP", "all", func() bool { return attnGroup && attnGroupAlways }, func() bool { return attnGroup && !attnGroupAlways }},
		{"TANDEM_CUDA_ATTN_CLUSTER_SPLITS", "0", func() bool { return !attnClusterSplits }, func() bool { return attnClusterSplits }},
		{"TANDEM_CUDA_ATTN_CLUSTER_ROUNDS", "1", func() bool { return attnClusterRounds }, func() bool { return !attnClusterRounds }},
		{"TANDEM_CUDA_ATTN_SCORE_CHUNK", "1024", func() bool { return attnScoreChunk == 1024 }, func() bool { return attnScoreChunk == 256 }},
		{"TANDEM_CUDA_ATTN_ALL_KEYS", "1", func() bool { return attnAllKeys }, func() bool { return !attnAllKeys }},
		{"TANDEM_CUDA_ATTN_TILED_COLS", "4", func() bool { return attnTiledCols == 4 }, func() bool { return attnTiledCols == 2 }},
		{"TANDEM_CUDA_ATTN_ROWS", "0", func() bool { return !attnRows }, func() bool { return attnRows }},
		{"TANDEM_CUDA_GLU", "0", func() bool { return !gluFused }, func() bool { return gluFused }},
		{"TANDEM_CUDA_GLU_SPLIT", "1", func() bool { return gluSplit }, func() bool { return !gluSplit }},
		{"TANDEM_CUDA_CLUSTER", "0", func() bool { return !clusterFinish }, func() bool { return clusterFinish }},
		{"TANDEM_CUDA_ROWS_TILES", "1", func() bool { return rowsTiles == 1 }, func() bool { return rowsTiles == 4 }},
		{"TANDEM_CUDA_TILED1_WIDE", "0", func() bool { return !tiled1Wide }, func() bool { return tiled1Wide }},
		{"TANDEM_CUDA_PROMPT_BLAS", "0", func() bool { return !promptBLAS }, func() bool { return promptBLAS }},
		{"TANDEM_CUDA_PROMPT_FLASH", "0", func() bool { return !promptFlash }, func() bool { return promptFlash }},
		{"TANDEM_CUDA_FLASH_GROUPS", "1", func() bool { return flashMaxGroups == 1 }, func() bool { return flashMaxGroups == 2 }},
		{"TANDEM_CUDA_POOL_GC", "0", func() bool { return poolGCEvery == 0 && b.pool.bgEvery == 0 },
			func() bool { return poolGCEvery == 2048 && b.pool.bgEvery == 2048 }},
		{"TANDEM_CUDA_DROP_ZERO", "1", func() bool { return dropZero }, func() bool { return !dropZero }},
		{"TANDEM_CUDA_DROP", "rmsnorm2+ attn_cluster", func() bool { return len(dropped) == 2 && dropped["rmsnorm2"] && dropped["attn_cluster"] },
			func() bool { return dropped == nil }},
	}
	if len(cases) != len(liveSettings) {
		t.Fatalf("%d cases for %d live settings", len(cases), len(liveSettings))
	}
	for _, c := range cases {
		if !Live(c.env) {
			t.Errorf("%s is not live", c.env)
		}
		t.Setenv(c.env, c.value)
	}
	if Live("TANDEM_CUDA_PDL") || Live("TANDEM_CUDA_GRAPHS") {
		t.Error("a switch read once at start-up reported live")
	}
	b.ReadSettings()
	for _, c := range cases {
		if !c.on() {
			t.Errorf("%s=%s: not read again", c.env, c.value)
		}
	}
	for _, c := range cases {
		t.Setenv(c.env, "")
	}
	b.ReadSettings()
	for _, c := range cases {
		if !c.def() {
			t.Errorf("%s unset: not back at its default", c.env)
		}
	}
}

// TestCheckpointEvery protects TANDEM_CUDA_CHECKPOINT's values: unset
// takes every checkpoint, 0 none, N every Nth.
func TestCheckpointEvery(t *testing.T) {
	b := &Backend{pool: newPool(nil)}
	t.Cleanup(b.ReadSettings)
	for _, c := range []struct {
		value string
		on    bool
		every int
	}{{"", true, 1}, {"0", false, 0}, {"2", true, 2}, {"1", true, 1}} {
		t.Setenv("TANDEM_CUDA_CHECKPOINT", c.value)
		b.ReadSettings()
		if checkpoints != c.on || checkpointEvery != c.every {
			t.Errorf("TANDEM_CUDA_CHECKPOINT=%q: on %v, every %d; want %v, %d", c.value, checkpoints, checkpointEvery, c.on, c.every)
		}
	}
}

// TestDropSkipsKernels protects TANDEM_CUDA_DROP's launches: a dropped
// kernel is not launched (its output keeps what was there), and the others
// are.
func TestDropSkipsKernels(t *testing.T) {
	b := backendOrSkip(t)
	defer func(d map[string]bool) { dropped = d }(dropped)
	src := b.FromF32([]float32{1, 2, 3, 4}, 4)
	for _, c := range []struct {
		drop string
		want float32
	}{{"copy_words", 0}, {"rmsnorm2", 1}} {
		setDropped(c.drop)
		dst := b.Zeros(compute.F32, 4)
		b.launch("copy_words", [3]uint32{1, 1, 1}, 32, ptrOf(dst), ptrOf(src), 4)
		if got := b.ToF32(dst)[0]; got != c.want {
			t.Errorf("TANDEM_CUDA_DROP=%s: copy_words wrote %v, want %v", c.drop, got, c.want)
		}
	}
}
