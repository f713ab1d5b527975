package cuda

import (
	"slices"
	"testing"
)

// TestTableMemo protects the reuse of uploaded index tables: the same
// contents give the same device table, changed contents (even in the
// caller's own slice) a new one with the new values, and the least
// recently used table is the one evicted.
func TestTableMemo(t *testing.T) {
	g := backendOrSkip(t)
	xs := []int32{4, 5, 6}
	first := g.table(xs)
	if again := g.table([]int32{4, 5, 6}); ptrOf(again) != ptrOf(first) {
		t.Fatal("the same contents were uploaded twice")
	}
	xs[1] = 50 // the caller reuses its slice
	changed := g.table(xs)
	if ptrOf(changed) == ptrOf(first) {
		t.Fatal("changed contents reused the old table")
	}
	if got := g.ToI32(changed); !slices.Equal(got, []int32{4, 50, 6}) {
		t.Fatalf("table holds %v, want [4 50 6]", got)
	}
	if got := g.ToI32(g.table([]int32{4, 5})); !slices.Equal(got, []int32{4, 5}) {
		t.Fatalf("a shorter table with the same prefix holds %v", got)
	}
	g.table([]int32{4, 5, 6}) // most recent now
	for i := range tableMemoSize - 1 {
		g.table([]int32{int32(1000 + i)})
	}
	if ptrOf(g.table([]int32{4, 5, 6})) != ptrOf(first) {
		t.Fatal("a recently used table was evicted")
	}
	held, n := false, 0
	for _, es := range g.tables.entries {
		for _, e := range es {
			n++
			held = held || slices.Equal(e.host, []int32{4, 50, 6})
		}
	}
	if held || n != tableMemoSize || g.tables.n != n {
		t.Fatalf("the memo holds %d tables (counted %d; the least recently used kept: %v), want %d", n, g.tables.n, held, tableMemoSize)
	}
}

// TestSplitK protects the K split, which is part of every matmul's
// arithmetic: it covers K exactly, in 32-aligned chunks, from the weight's
// shape alone.
func TestSplitK(t *testing.T) {
	defer restoreMatMul()()
	splitWarps, splitFixed, splitMode = 16384, 0, "warps" // the warp rule, whatever the environment
	for _, tc := range []struct {
		N, K          int
		splits, chunk int
	}{
		{262144, 5376, 1, 5376}, // the 31B LM head: enough columns, no split
		{43008, 5376, 4, 1344},  // the 31B MLP's stacked gate/up
		{5376, 21504, 25, 864},  // the 31B MLP down
		{262144, 1536, 1, 1536}, // the E2B LM head
		{2048, 1536, 3, 512},    // an E2B projection: never split below 512
		{64, 300, 1, 320},       // short K
	} {
		splits, chunk := splitK(tc.N, tc.K)
		if splits != tc.splits || chunk != tc.chunk {
			t.Errorf("splitK(%d, %d) = %d × %d, want %d × %d", tc.N, tc.K, splits, chunk, tc.splits, tc.chunk)
		}
		if chunk%32 != 0 || splits*chunk < tc.K || (splits-1)*chunk >= tc.K {
			t.Errorf("splitK(%d, %d) = %d × %d does not cover K in 32-aligned chunks", tc.N, tc.K, splits, chunk)
		}
	}
}

// TestSplitsFor protects TANDEM_CUDA_SPLITS_FOR: a named shape takes its
// count (capped at one split a 32 elements) and every other shape keeps
// its own, and a malformed value is refused whole.
func TestSplitsFor(t *testing.T) {
	defer func(m map[[2]int]int, w int) { splitsFor, waveWarps = m, w }(splitsFor, waveWarps)
	defer restoreMatMul()()
	splitFixed, splitMode, waveWarps = 0, "fill", 4224
	plain, _ := splitK(5376, 21504)
	m, err := parseSplitsFor("5376x8192=9+64x64=5")
	if err != nil {
		t.Fatal(err)
	}
	splitsFor = m
	for _, tc := range []struct {
		N, K, splits int
	}{{5376, 8192, 9}, {64, 64, 2}, {5376, 21504, plain}} {
		if s, chunk := splitK(tc.N, tc.K); s != tc.splits || s*chunk < tc.K || chunk%32 != 0 {
			t.Errorf("splitK(%d, %d) = %d × %d, want %d splits covering K", tc.N, tc.K, s, chunk, tc.splits)
		}
	}
	for _, bad := range []string{"5376x8192", "5376x8192=0", "5376x8192=65", "5376*8192=9", "5376x8192=9x"} {
		if m, err := parseSplitsFor(bad); err == nil || m != nil {
			t.Errorf("parseSplitsFor(%q) = %v, %v; want an error", bad, m, err)
		}
	}
}

// TestFillSplit protects the default K split (fillSplit) on the H200's 4,224-warp
// waves: products that fill a fraction of a wave split until they fill one
// (at most 16 splits of at least 128), those that fill several take the
// count that wastes least of their last wave, the LM heads stay whole, and
// the narrow kernel's halved column blocks count twice the warps.
func TestFillSplit(t *testing.T) {
	defer func(w int) { waveWarps = w }(waveWarps)
	defer restoreMatMul()()
	splitFixed, splitMode, waveWarps = 0, "fill", 4224
	for _, tc := range []struct {
		name   string
		kernel string
		N, K   int
		splits int
	}{
		{"31B MLP up: 3 splits fill 0.95 of a wave, 4 spill into a second", "matmul_rows_wide", 21504, 5376, 3},
		{"31B MLP down: 12 fill 0.95", "matmul_rows_wide", 5376, 21504, 12},
		{"31B attention output", "matmul_rows_wide", 5376, 8192, 12},
		{"31B LM head: whole", "matmul_rows_wide", 262144, 5376, 1},
		{"E2B LM head: whole", "matmul_rows_wide", 262144, 1536, 1},
		{"E2B q projection: 12 of 128 elements, a third of a wave", "matmul_rows_wide", 2048, 1536, 12},
		{"E2B MLP up: 10 fill 0.91, 12 would spill", "matmul_rows_wide", 6144, 1536, 10},
		{"E2B MLP down: the cap of 16", "matmul_rows_wide", 1536, 6144, 16},
		{"E2B MLP up, narrow kernel: twice the warps a split", "matmul_rows", 6144, 1536, 5},
		{"a short K: splits of at least 128", "matmul_rows_wide", 1536, 256, 2},
		{"a tie (5 and 11 splits cost the same): the fewer", "matmul_rows_wide", 12288, 8192, 5},
		{"the auto kernel: narrow for an E2B product", "auto", 6144, 1536, 5},
		{"the auto kernel: wide for the 31B MLP", "auto", 21504, 5376, 3},
	} {
		rowsKernel = tc.kernel
		splits, chunk := splitK(tc.N, tc.K)
		if splits != tc.splits {
			t.Errorf("%s: splitK(%d, %d) = %d splits, want %d", tc.name, tc.N, tc.K, splits, tc.splits)
		}
		if chunk%32 != 0 || splits*chunk < tc.K || (splits-1)*chunk >= tc.K {
			t.Errorf("%s: %d × %d does not cover K = %d in 32-aligned chunks", tc.name, splits, chunk, tc.K)
		}
	}
	rowsKernel, waveWarps = "auto", 0
	if splits, _ := splitK(21504, 5376); splits != 7 {
		t.Errorf("with no device's waves the 31B MLP gets %d splits, want the warp rule's 7", splits)
	}
}

// TestGLUSplitCountsTheGLUKernel protects gluSplitK (TANDEM_CUDA_GLU_SPLIT)
// on the H200's waves: the E2B MLP's stacked gate|up (12288 × 1536) takes
// the split that fills a wave of matmul_rows_glu's warps (128 stacked
// columns a block: 5 splits of 320) where splitK, counting matmul_rows',
// takes 2; the 31B MLP's, whose kernel already covers 128 columns a block,
// keeps splitK's; a forced split holds for both.
func TestGLUSplitCountsTheGLUKernel(t *testing.T) {
	defer func(w int, sf map[[2]int]int) { waveWarps, splitsFor = w, sf }(waveWarps, splitsFor)
	defer restoreMatMul()()
	splitFixed, splitMode, waveWarps, rowsKernel, splitsFor = 0, "fill", 4224, "auto", nil
	if got, want := gluSplitK(12288, 1536), (kSplit{5, 320}); got != want {
		t.Errorf("E2B MLP: gluSplitK = %+v, want %+v", got, want)
	}
	if splits, _ := splitK(12288, 1536); splits != 2 {
		t.Errorf("E2B MLP: splitK = %d splits, want 2", splits)
	}
	if got := gluSplitK(43008, 5376); got != (kSplit{3, 1792}) {
		t.Errorf("31B MLP: gluSplitK = %+v, want splitK's 3 splits of 1792", got)
	}
	splitsFor = map[[2]int]int{{12288, 1536}: 4}
	if got := gluSplitK(12288, 1536); got != (kSplit{4, 384}) {
		t.Errorf("E2B MLP forced to 4: gluSplitK = %+v", got)
	}
}

// TestSplitSetting protects TANDEM_CUDA_SPLIT's parse: unset is fill, and
// a value it does not know leaves the default rather than a mode half set.
func TestSplitSetting(t *testing.T) {
	defer restoreMatMul()()
	for _, tc := range []struct{ value, want string }{
		{"", "fill"}, {"warps", "warps"}, {"fill", "fill"}, {"Fill", "fill"}, {"waves", "fill"}, {"warps ", "fill"},
	} {
		splitMode = "warps"
		if tc.want == "warps" {
			splitMode = "fill"
		}
		setSplitMode(tc.value)
		if splitMode != tc.want {
			t.Errorf("TANDEM_CUDA_SPLIT=%q: mode %q, want %q", tc.value, splitMode, tc.want)
		}
	}
}

// TestRowsFor protects the rows kernel's choice by weight size: the 31B
// shapes take the wide kernel, the E2B shape's small products the narrow
// one, and a TANDEM_CUDA_ROWS setting takes one kernel for every weight.
func TestRowsFor(t *testing.T) {
	defer func(k string) { rowsKernel = k }(rowsKernel)
	for _, tc := range []struct {
		setting string
		N, K    int
		want    string
	}{
		{"auto", 43008, 5376, "matmul_rows_wide"}, // 31B gate/up
		{"auto", 5376, 21504, "matmul_rows_wide"}, // 31B down
		{"auto", 262144, 1536, "matmul_rows_wide"},
		{"auto", 6144, 1536, "matmul_rows"}, // E2B
		{"auto", 2048, 1536, "matmul_rows"},
		{"matmul_rows", 43008, 5376, "matmul_rows"},
		{"matmul_rows_wide", 2048, 1536, "matmul_rows_wide"},
	} {
		rowsKernel = tc.setting
		if got := rowsFor(tc.N, tc.K); got != tc.want {
			t.Errorf("rowsFor(%d, %d) with %q = %s, want %s", tc.N, tc.K, tc.setting, got, tc.want)
		}
	}
}

// TestRowThreads protects the norms' block size: a power of two from 256
// to 1024 that gives every thread at most six elements of a row up to the
// register cache's 6144 (rmsnorm2 has no loop to fall back on: a row with
// more than six elements a thread would lose its tail), and the presets'
// widths get the sizes their speed was measured with.
func TestRowThreads(t *testing.T) {
	for D := 1; D <= rcacheElems; D++ {
		n := rowThreads(D)
		if n < 256 || n > 1024 || n&(n-1) != 0 || 6*n < D {
			t.Fatalf("rowThreads(%d) = %d", D, n)
		}
	}
	for _, tc := range []struct{ D, want int }{
		{256, 256}, {1536, 256}, {1537, 512}, {2560, 512}, {2816, 512}, {3072, 512}, {3073, 1024}, {5376, 1024}, {7000, 1024},
	} {
		if got := rowThreads(tc.D); got != tc.want {
			t.Errorf("rowThreads(%d) = %d, want %d", tc.D, got, tc.want)
		}
	}
}

// TestEnvInt protects the reading of numeric switches: unset gives the
// default, a number in range is taken, and anything else falls back to
// the default (with a warning) rather than to a surprising value.
func TestEnvInt(t *testing.T) {
	for _, tc := range []struct {
		value string
		want  int
	}{{"", 3}, {"0", 0}, {"8", 8}, {"64", 64}, {"65", 3}, {"-1", 3}, {"four", 3}, {" 4", 3}} {
		t.Setenv("TANDEM_TEST_ENVINT", tc.value)
		if got := envInt("TANDEM_TEST_ENVINT", 3, 0, 64); got != tc.want {
			t.Errorf("envInt with %q = %d, want %d", tc.value, got, tc.want)
		}
	}
}

// TestTilesFor protects which rows the multi-tile rows kernels take: 6 to
// 5·rowsTiles, five rows a tile, none where the rows kernels are off or
// set to a kernel without their arithmetic; and which of the two-tile
// kernels a weight gets.
func TestTilesFor(t *testing.T) {
	defer func(k string, m, n int) { rowsKernel, rowsMaxM, rowsTiles = k, m, n }(rowsKernel, rowsMaxM, rowsTiles)
	const big, small = 43008, 2048 // 31B gate/up, E2B q (× 5376 and 1536)
	for _, tc := range []struct {
		kernel      string
		maxM, tiles int
		M, N, K     int
		want        string
	}{
		{"auto", 5, 4, 5, small, 1536, ""}, // the one-tile kernels' rows
		{"auto", 5, 4, 6, small, 1536, "matmul_rows_wide2"},
		{"auto", 5, 4, 10, small, 1536, "matmul_rows_wide2"},
		{"auto", 5, 4, 6, big, 5376, "matmul_rows_wide2n"},
		{"auto", 5, 4, 10, big, 5376, "matmul_rows_wide2n"},
		{"auto", 5, 4, 11, big, 5376, "matmul_rows_wide3"},
		{"auto", 5, 4, 16, small, 1536, "matmul_rows_wide4"},
		{"auto", 5, 4, 20, big, 5376, "matmul_rows_wide4"},
		{"auto", 5, 4, 21, small, 1536, ""},
		{"auto", 5, 2, 11, small, 1536, ""}, // TANDEM_CUDA_ROWS_TILES=2
		{"auto", 5, 1, 6, small, 1536, ""},  // =1: off
		{"auto", 0, 4, 8, small, 1536, ""},  // rows kernels off (tests of matmul_mma1)
		{"", 5, 4, 8, small, 1536, ""},      // a kernel without the rows arithmetic
		{"matmul_rows", 5, 4, 8, small, 1536, "matmul_rows_wide2n"},
		{"matmul_rows_wide", 5, 4, 8, big, 5376, "matmul_rows_wide2"},
		{"matmul_rows_wide_early", 5, 4, 8, big, 5376, "matmul_rows_wide2"},
		{"matmul_rows", 5, 4, 13, small, 1536, "matmul_rows_wide3"},
	} {
		rowsKernel, rowsMaxM, rowsTiles = tc.kernel, tc.maxM, tc.tiles
		if got := tilesFor(tc.M, tc.N, tc.K); got != tc.want {
			t.Errorf("tilesFor(%d, %d, %d) with kernel %q, rowsMaxM %d, rowsTiles %d = %q, want %q", tc.M, tc.N, tc.K, tc.kernel, tc.maxM, tc.tiles, got, tc.want)
		}
	}
}
