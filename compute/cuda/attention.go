package cuda

import (
	"fmt"
	"log/slog"
	"math"
	"os"
	"slices"

	"tandem/compute"
)

const (
	attnChunk = 1024 // ATTN_CHUNK in ops.cu
	attnTile  = 8    // QT in ops.cu
)

// Passes with more than one query per row run the query-tiled attention
// kernels, and one call's scratch is bounded to attnScratchBytes by running
// a long row's queries in groups; both are pinned bitwise to the per-query
// path by TestBatchInvariance. TANDEM_CUDA_ATTN=untiled runs every query
// alone with unbounded scratch, for comparisons.
var (
	tiledAttention   = os.Getenv("TANDEM_CUDA_ATTN") != "untiled"
	attnScratchBytes = math.MaxInt
)

// combineInValuesOn lets a single split's attn_values normalise its output
// itself, one kernel fewer a layer; TANDEM_CUDA_COMBINE=0 always runs
// attn_combine, for comparisons.
var combineInValuesOn bool // TANDEM_CUDA_COMBINE, read by liveSettings (settings.go)

// fusedAttention runs attn_fused, scores and values in one kernel, for
// passes whose keys lie in one position chunk a row and whose values are
// combined in their kernel (TANDEM_CUDA_ATTN_FUSED=0 turns it off; live,
// see settings.go): one launch fewer a layer, and the scores never leave
// shared memory. The bits are the two kernels'. A 31B decode step spent
// 2.3 ms in the two (58 layers, 32 blocks each at 128 keys); fused, the
// step took 0.3 ms less, an E2B step 0.1 ms.
var fusedAttention bool // TANDEM_CUDA_ATTN_FUSED, read by liveSettings

// attnPacked has the untiled values kernels read each key's slot and
// weight as one pair and sum a 512-wide head's two columns in one pass
// over the keys (TANDEM_CUDA_ATTN_PACKED=1; live). The same bits. Alone,
// it took a 512-wide head's attn_fused from 31.4 to 23.1 µs at 128 keys
// (TestAttentionSpeed), but whole 31B and E2B steps did not get faster
// (20.78-20.80 ms against 20.89), so it stays off until a longer run says
// otherwise.
var attnPacked bool // read by liveSettings

// attnFlagPacked is ATTN_PACKED in ops.cu.
const attnFlagPacked = 2

// attnCols4 has a thread of the untiled, unpacked value sums take four
// adjacent columns, each key's four values in one 16-byte load, where the
// value rows allow it (TANDEM_CUDA_ATTN_COLS4=0 turns it off; live). The
// same sums in the same order, so the same bits. Nsight Compute had the
// value sums bound by issuing instructions. On the H200 (twelfth session)
// a 512-wide head's attn_fused went from 30.4 to 23.2 µs (40.7 to 31.0
// with L2 flushed), the E2B step from 3.87 to 3.75 ms and the 31B step
// from 20.34 to 20.13.
var attnCols4 = true // read by liveSettings

// attnCols4Min is the narrowest value row that takes four columns a
// thread: rows up to a block's 256 threads keep one column a thread, which
// on the H200 (thirteenth session) ran a 256-wide sliding layer's
// attn_fused in 16.4 µs against 18.4 with four (the four-column threads
// leave three quarters of the block idle), where a 512-wide global layer
// took 23.3 against 25.8. TANDEM_CUDA_ATTN_COLS4=all takes four at every
// width.
var attnCols4Min = attnCols4Wide // read by liveSettings

// attnCols4Wide is attnCols4Min's default: wider than RBLOCK.
const attnCols4Wide = 257

// attnFlagCols4 is ATTN_COLS4 in ops.cu.
const attnFlagCols4 = 4

// attnTiledCols is how many adjacent value columns a thread of the
// query-tiled values kernel (prefill) sums, each key's values in one load
// (TANDEM_CUDA_ATTN_TILED_COLS=1, 2 or 4; live), where the value rows
// allow it. The same sums in the same order, so the same bits. Its value
// sums take about four instructions a column, key and query, three times
// the scores' (a query's key element). On the H200 (thirteenth session) a
// 64-query tile over 2,048 keys of a 512-wide head took 1.72 ms with one
// column, 1.18 with two and 1.31 with four (a 256-wide sliding tile: 539,
// 551 and 653 µs), and prefill at 16k went from 4,222 to 4,863 tok/s (E2B)
// and 490-520 to 580 (31B).
var attnTiledCols = 2 // read by liveSettings

// tiledCols is attn_values_tiled's columns a thread for value rows of Dv
// float32s at v: attnTiledCols where it is 2 or 4, divides Dv and the rows
// are aligned to it, else 1.
func tiledCols(v *compute.Tensor, Dv int) int {
	w := attnTiledCols
	if w != 2 && w != 4 || Dv%w != 0 || ptrOf(v).ptr%uintptr(4*w) != 0 {
		return 1
	}
	return w
}

// attnClusterBlocks is the most blocks of a thread block cluster that share
// each (head, row) of a pass attn_fused would take: attn_cluster, the same
// bits (TANDEM_CUDA_ATTN_CLUSTER=0 keeps attn_fused; live). attn_fused
// runs a head on one multiprocessor, a quarter of the H200's at the 31B
// shape's 32 heads and 6% at E2B's 8, and its loads of a head's keys and
// values are 16-32 round trips in a row; attn_cluster's blocks each copy a
// share of them in one. A pass takes as many blocks a cluster as leave one
// block a multiprocessor, up to this many.
//
// On the H200 (fourteenth session), at 128 keys: an E2B sliding layer's
// call 16.0 → 14.0 µs (22.7 → 14.6 with L2 flushed first, as in a step),
// a 512-wide global one 25.4 → 15.6 (39.1 → 16.5); the E2B step 3.50 →
// 3.25 ms (284 → 305 tok/s). The 31B shape's 32 heads take 4 blocks a
// cluster, and its step moved within the noise (19.9-20.0 ms either way).
var attnClusterBlocks = 8 // read by liveSettings

// attnClusterShare is the percentage of the multiprocessors a pass's
// clusters may take together (TANDEM_CUDA_ATTN_SHARE; live): the rest
// are left to the o product's first blocks, which load their weights
// early while attention runs. On the H200 (twenty-sixth session) 75 took
// the 31B shape's sliding layers from 4 blocks a cluster to 3 and its step
// from 19.20-19.23 to 18.72 ms; E2B (8 a cluster either way) and 26B-A4B
// (8 → 6) stayed within the noise.
var attnClusterShare = 75 // read by liveSettings

// attnGroup lets attn_cluster_group take the passes of several queries a
// row that attn_cluster's plan cannot (TANDEM_CUDA_ATTN_GROUP=0 turns it
// off; live): a cluster for QG query heads of a kv head at every query of
// a batch row, the keys and value columns copied once for them all, the
// same bits. A 31B verify's four queries of 32 heads are 128 (head, row)
// clusters, more than attnClusterShare leaves two blocks each, so they
// took attn_fused. attnGroupAlways (=all) has it take every pass it can,
// attn_cluster's included (tests).
var attnGroup, attnGroupAlways = true, false // read by liveSettings

// attnClusterSplits lets attn_cluster take rows whose keys straddle
// position chunks, up to a chunk's span (TANDEM_CUDA_ATTN_CLUSTER_SPLITS=0
// turns it off; live): a sliding window past a multiple of 1,024
// positions, which otherwise takes the three kernels of the split path
// (attn_scores, attn_values, attn_combine). At a 4k context an E2B
// sliding layer's window of 512 straddles for half the positions. On the
// H200 (fifteenth session) one query over such a window took 31.4 µs
// against the split path's 50.6, and the E2B step at 4k 4.54-4.87 → 4.31
// ms; a 31B window of 1,024 keys does not fit and keeps the split path.
var attnClusterSplits = true // read by liveSettings

// attnClusterSmemMax is the dynamic shared memory attn_cluster's blocks may
// ask for: most of an sm_90 multiprocessor's 227 KiB, beside the kernel's
// 3 KiB of static shared memory.
const attnClusterSmemMax = 200 << 10

// attnClusterRounds lets attn_cluster_rounds take the rows whose keys and
// value columns do not fit a block's shared memory at once, copying them
// in rounds (TANDEM_CUDA_ATTN_CLUSTER_ROUNDS=1; live, off): a 31B sliding
// window of 1,024 keys. It keeps the bits but loses on the H200
// (fifteenth session): one query over a 31B window of 1,024 keys took
// 156.5 µs against the split path's 85.7, and the E2B step at 4k went
// from 5.59 to 7.12 ms.
var attnClusterRounds bool // read by liveSettings

// attnRoundKeys, when positive, is attn_cluster_rounds' keys a round, for
// both keys and values, and has it take every pass attn_cluster would
// (tests: many rounds on small rows).
var attnRoundKeys int

// attnRoundBytes is the shared memory attn_cluster_rounds gives its two
// key buffers and its two value buffers, about 60% and 40%: with the
// scores' arrays a block stays near 110 KiB, two a multiprocessor, so
// that the 31B shape's 32 clusters of 4 fit the device (at 132 KiB a
// block, one a multiprocessor, 30 of 32 did).
const attnRoundBytes = 96 << 10

// clusterAttn is attn_cluster's launch shape: C blocks a cluster, shared
// memory laid out for nk key offsets (a multiple of 32), kpb keys a block,
// W value columns a block (a multiple of 4), smem bytes in all; for
// attn_cluster_rounds (KG > 0) KG keys a key round and VG a value round.
type clusterAttn struct{ C, nk, kpb, W, smem, KG, VG int }

// attnClusterPlan is attn_cluster's shape for a pass of clusters (head,
// row) pairs whose rows span at most keys positions, ok false where the
// pass keeps attn_fused (or the split path): fewer than two blocks a cluster would leave
// one a multiprocessor, the device has no clusters of C blocks, the rows
// are not in 16-byte chunks (or their caches do not start on 16 bytes:
// not aligned), a block's share would not fit its shared
// memory, or the clusters would not all fit the device at once. On the
// H200 a 31B verify's four queries (128 clusters of 8) took 37.8 µs a
// sliding layer against attn_fused's 16.6, and a 1,000-key row at 16
// blocks a cluster (142 KiB each) 93-230 µs against 78-80.
func (b *Backend) attnClusterPlan(aligned bool, D, Dv, keys, clusters int) (p clusterAttn, ok bool) {
	return b.clusterSearch(aligned, D, Dv, keys, clusters, func(p *clusterAttn) {
		p.smem = 4 * (D + 3*p.nk + p.kpb*(D+4) + p.nk*p.W)
		if attnRoundKeys > 0 || attnClusterRounds && (p.smem > b.attnClusterSmem || clusters > b.attnClustersHeld(p.C, p.smem)) {
			p.roundsOf(D)
		}
	}, b.attnClustersHeld)
}

// clusterSearch is the search both cluster plans make for a pass of
// clusters clusters whose rows span at most keys positions: from as many
// blocks a cluster as attnClusterShare leaves each (at least two, at most
// attnClusterBlocks and the device's), sizing a shape at each (size sets
// its smem) until one fits a block's shared memory and held says the
// device holds all the clusters at once. Where the blocks' shares do not
// fit, more blocks a cluster make them smaller: the 31B shape's 512-wide
// global heads took 132 KiB a block at 4 (30 of 32 clusters fit) and ran
// in 19.2 µs at 8, against attn_fused's 25.7.
func (b *Backend) clusterSearch(aligned bool, D, Dv, keys, clusters int, size func(p *clusterAttn),
	held func(C, smem int) int) (p clusterAttn, ok bool) {
	most := min(attnClusterBlocks, b.attnClusterMax)
	C := min(most, b.dev.SMs*attnClusterShare/100/max(1, clusters))
	if C < 2 || keys == 0 || D%4 != 0 || Dv%4 != 0 || !aligned {
		return p, false
	}
	for ; ; C = min(2*C, most) {
		p = clusterAttn{C: C, nk: (keys + 31) &^ 31}
		p.kpb, p.W = (p.nk+C-1)/C, ((Dv+C-1)/C+3)&^3
		size(&p)
		if p.smem <= b.attnClusterSmem && clusters <= held(C, p.smem) && p.W <= 256 {
			return p, true
		}
		if C == most {
			return p, false
		}
	}
}

// attnGroupPlan is attn_cluster_group's shape for a pass of B batch rows of
// L queries, Hq query heads over Hkv kv heads, whose rows span at most
// keys positions; QG query heads a cluster (the most that divide Hq/Hkv
// with QG·L ≤ attnGroupRows rows), ok false where it does not fit as attnClusterPlan
// says of attn_cluster (aligned: the queries' rows on 16 bytes too).
func (b *Backend) attnGroupPlan(aligned bool, D, Dv, keys, Hq, Hkv, B, L int) (p clusterAttn, QG int, ok bool) {
	perKV := Hq / max(1, Hkv) // query heads a kv head
	for g := 1; g <= perKV && g*L <= min(attnGroupRows, attnGroupMax); g++ {
		if perKV%g == 0 {
			QG = g
		}
	}
	if QG == 0 {
		return p, 0, false
	}
	R := QG * L
	p, ok = b.clusterSearch(aligned, D, Dv, keys, B*Hq/QG, func(p *clusterAttn) {
		p.smem = 4 * (R*D + 5*R*p.nk + p.nk + p.kpb*(D+4) + p.nk*p.W) // the exponentials are doubles
	}, b.attnGroupHeld)
	if !ok {
		return p, 0, false
	}
	return p, QG, true
}

// attnGroupMax is attn_cluster_group's most rows a cluster (ATTN_GROUP_MAX in
// ops.cu: a warp each for its trees), and attnGroupRows the most a plan
// takes (TANDEM_CUDA_ATTN_GROUP_ROWS; live).
const attnGroupMax = 8

// attnGroupThreads is attn_cluster_group's block size (GROUP_THREADS in
// ops.cu).
const attnGroupThreads = 1024

var attnGroupRows = attnGroupMax // read by liveSettings

// roundsOf makes p attn_cluster_rounds' shape for heads of D: keys a round
// from 60% of attnRoundBytes over two buffers of rows of D + 4, value keys
// a round from the rest over two of W, multiples of 8 (attnRoundKeys for
// both where set), and no more than the block's keys and the row's.
func (p *clusterAttn) roundsOf(D int) {
	p.KG = max(8, (attnRoundBytes*3/5)/(8*(D+4))&^7)
	p.VG = max(8, (attnRoundBytes*2/5)/(8*p.W)&^7)
	if attnRoundKeys > 0 {
		p.KG, p.VG = attnRoundKeys, attnRoundKeys
	}
	p.KG, p.VG = max(1, min(p.KG, p.kpb)), max(1, min(p.VG, p.nk))
	p.smem = 4 * (D + 3*p.nk + 2*p.KG*(D+4) + 2*p.VG*p.W)
}

// attnSmemUnit is the step of attn_cluster's occupancy table: a block's
// shared memory is rounded up to it, which can only underestimate how many
// clusters fit.
const attnSmemUnit = 8 << 10

// attnClustersHeld is how many clusters of C attn_cluster blocks with smem
// bytes of shared memory each the device holds at once (0 past the table),
// and attnGroupHeld the same for attn_cluster_group.
func (b *Backend) attnClustersHeld(C, smem int) int { return heldIn(&b.attnClusterFit, C, smem) }

func (b *Backend) attnGroupHeld(C, smem int) int { return heldIn(&b.attnGroupFit, C, smem) }

// heldIn reads an occupancy table (askAttnClusterFit's) at C blocks a
// cluster and smem bytes a block, rounded up to attnSmemUnit.
func heldIn(t *[17][attnClusterSmemMax/attnSmemUnit + 1]int, C, smem int) int {
	u := (smem + attnSmemUnit - 1) / attnSmemUnit
	if C < 0 || C >= len(t) || u >= len(t[C]) {
		return 0
	}
	return t[C][u]
}

// askAttnClusterFit fills attnClustersHeld's table, once at start-up: an
// occupancy query inside Attention would end a recording in progress (a
// query runs on the device thread through do), and the shared memory of a
// pass changes every 32 keys.
func (b *Backend) askAttnClusterFit() {
	k := b.k["attn_cluster"]
	kr := b.k["attn_cluster_group"]
	for C := 2; C <= b.attnClusterMax; C++ {
		for u := 1; u < len(b.attnClusterFit[C]); u++ {
			n, err := b.dev.MaxActiveClusters(k, [3]uint32{256, 1, 1}, [3]uint32{uint32(C), 1, 1}, uint32(u*attnSmemUnit))
			if err != nil {
				slog.Debug("cuda: attn_cluster occupancy", "blocks", C, "shared", u*attnSmemUnit, "err", err)
			}
			b.attnClusterFit[C][u] = n
			n, err = b.dev.MaxActiveClusters(kr, [3]uint32{attnGroupThreads, 1, 1}, [3]uint32{uint32(C), 1, 1}, uint32(u*attnSmemUnit))
			if err != nil {
				slog.Debug("cuda: attn_cluster_group occupancy", "blocks", C, "shared", u*attnSmemUnit, "err", err)
			}
			b.attnGroupFit[C][u] = n
		}
	}
}

// visibleKeys is the range of key positions some query of batch row bi
// can see: from the lowest query's window to the highest query (causal).
// A full ring keeps Window + MaxStep − 1 slots, so at long contexts a sliding
// layer's decode row holds about twice the keys its query sees; the
// kernels visit only the row's span, so leaving the rest out halves their
// work, and lets attn_cluster stage such a row. The bits are the same:
// chunks are anchored at absolute positions, a key out of sight adds
// nothing to any sum, and a chunk with none in sight adds exact zeros.
func visibleKeys(opt compute.AttentionOptions, bi, L int) (lo, hi int32) {
	lo, hi = math.MinInt32, math.MaxInt32
	// Without a causal mask or a window the positions may be absent, or
	// shorter than B·L (CheckAttention asks for them only with one).
	if attnAllKeys || opt.Mask != compute.Causal && opt.Window <= 0 || len(opt.QueryPos) < (bi+1)*L || L == 0 {
		return lo, hi
	}
	qs := opt.QueryPos[bi*L : (bi+1)*L]
	qmin, qmax := qs[0], qs[0]
	for _, q := range qs[1:] {
		qmin, qmax = min(qmin, q), max(qmax, q)
	}
	if opt.Window > 0 {
		lo = qmin - int32(opt.Window) + 1
	}
	if opt.Mask == compute.Causal {
		hi = qmax
	}
	return lo, hi
}

// attnScoreChunk is the key offsets each attn_scores block takes
// (TANDEM_CUDA_ATTN_SCORE_CHUNK, 32 to 1,024 = ATTN_CHUNK, default 256;
// live). Its threads take one key at a time, so a block of 256 threads
// over 1,024 keys ran four dot products in a row. The scores and their
// maximum are the same at any chunk. On the H200 (fifteenth session) the
// 31B step at 4k went from 26.61 to 24.9 ms at 256.
var attnScoreChunk = 256 // read by liveSettings

// attnAllKeys has the kernels visit every key a row holds, in sight or not
// (TANDEM_CUDA_ATTN_ALL_KEYS=1; live, off; tests: the bits must be the
// same).
var attnAllKeys bool // read by liveSettings

// attnTileMin is the fewest queries per row the tiled kernels take: a
// verify pass's few queries run faster as separate blocks (on the H200 the
// 31B shape's four verify queries took 95 µs per layer tiled, the single
// decode query 40 µs), a prefill chunk's many faster tiled.
var attnTileMin = 16

func init() {
	if tiledAttention {
		attnScratchBytes = 256 << 20
	}
}

// Attention implements compute.Backend. The host orders each batch row's
// keys by position (slotOf), so the kernels reduce in position order in
// chunks anchored at absolute positions: a query's result depends only on
// the keys it sees. KeyStart is therefore not needed; the slots holding
// keys some query of the row can see (visibleKeys) must hold distinct
// positions spanning at most S (true of every cache Tandem keeps).
//
//	score_s = float32(q·k_s)·scale              (fused, in order over d)
//	e_s     = exp(float64(score_s) − max)      over visible s
//	out     = Σ_chunks Σ_s float32(e_s)·v_s / Σ e_s
func (b *Backend) Attention(q, k, v *compute.Tensor, opt compute.AttentionOptions) *compute.Tensor {
	sh, err := compute.CheckAttention(q, k, v, opt)
	if err != nil || sh.D > 512 {
		panic(fmt.Sprintf("cuda: %v (head dimension at most 512)", err))
	}
	f32(q, "Attention")
	f32(k, "Attention")
	f32(v, "Attention")
	rows := make([]attnKeys, sh.B)
	for bi := range rows {
		r := &rows[bi]
		r.slots, r.n = sh.S, sh.S
		if opt.KeyLen != nil {
			r.n = min(max(opt.KeyLen[bi], 0), sh.S)
		}
		if opt.KeyPos != nil {
			r.pos = opt.KeyPos[bi*sh.S : (bi+1)*sh.S]
		}
	}
	return b.attend(q, k, v, nil, rows, sh, opt, nil)
}

// attnRows has AttentionRows attend rows of a length below attnTileMin
// (decode and verify rows of several requests) in one launch a kernel over
// a table of their caches (TANDEM_CUDA_ATTN_ROWS=0: one Attention a row;
// live).
var attnRows = true // read by liveSettings

// AttentionRows implements compute.RowsAttender: the rows' own caches are
// a table of addresses the kernels read (kvp in ops.cu) and the rows'
// positions one slot-order table. A row's bits are its own Attention's
// (TestAttentionRowsMatchApart), though the batch may take another kernel
// path than the row alone would (more clusters, a split count and span
// over all rows, one misaligned cache for all): the paths give the same
// bits (TestFusedAttentionMatches). Rows of a length the tiled kernels
// take, a lone row, rows of different head shapes, and passes whose
// scratch would pass attnScratchBytes (a long row makes every row's
// scores as long) go one Attention a row.
func (b *Backend) AttentionRows(q *compute.Tensor, kv []compute.AttentionRow, opt compute.AttentionOptions) *compute.Tensor {
	if !attnRows || len(kv) < 2 || q.Rank() != 4 || q.Dim(1) >= attnTileMin {
		return compute.AttendRowsApart(b, q, kv, opt) // a lone request's decode: checked there, once
	}
	if err := compute.CheckAttendRows(q, kv, opt); err != nil {
		panic("cuda: " + err.Error())
	}
	sh, rows, ok := rowsShape(q, kv)
	if !ok {
		return compute.AttendRowsApart(b, q, kv, opt)
	}
	return b.attend(q, kv[0].K, kv[0].V, kv, rows, sh, opt, nil)
}

// rowsShape is the shape of AttentionRows' pass over kv of queries q
// ([B, L, Hq, D]) and its rows' keys, or ok false where the rows go one
// Attention a row: caches of other shapes or types than the first's, or
// scratch past attnScratchBytes.
func rowsShape(q *compute.Tensor, kv []compute.AttentionRow) (sh compute.AttentionShape, rows []attnKeys, ok bool) {
	sh = compute.AttentionShape{B: q.Dim(0), L: q.Dim(1), Hq: q.Dim(2), D: q.Dim(3), Hkv: kv[0].K.Dim(1), Dv: kv[0].V.Dim(2)}
	rows = make([]attnKeys, sh.B)
	same := sh.D <= 512 && q.DType() == compute.F32
	for bi, r := range kv {
		S := r.K.Dim(0)
		same = same && r.K.DType() == compute.F32 && r.V.DType() == compute.F32 && r.K.Dim(1) == sh.Hkv && r.K.Dim(2) == sh.D &&
			r.V.Dim(0) == S && r.V.Dim(1) == sh.Hkv && r.V.Dim(2) == sh.Dv && (r.KeyPos == nil || len(r.KeyPos) == S)
		rows[bi] = attnKeys{slots: S, n: S, pos: r.KeyPos}
		sh.S = max(sh.S, S)
	}
	// The split path's scratch, at most: scores, block maxima and partial
	// sums for every query of every row over the longest row's slots.
	splits := sh.S/attnChunk + 2
	scratch := sh.B * sh.L * sh.Hq * (4*(sh.S+sh.S/32+1+splits*sh.Dv) + 8*splits)
	return sh, rows, same && sh.Hkv > 0 && sh.Hq%sh.Hkv == 0 && scratch <= attnScratchBytes
}

// normedAttnBlocks is the most blocks a cluster of attn_cluster into which
// decode rows' head norms are folded (attn_cluster_normed; 0: never,
// TANDEM_CUDA_NORMED_ATTN=N, live). The fold puts the norms' chain of
// loads, trees and rotations at the head of every block of the pass, where
// it hides behind the block's copies only where each block copies enough:
// on the H200 (twenty-eighth session) the 31B shape's clusters of three
// blocks (32 heads) gained with it, 18.54–18.59 → 18.48–18.56 ms a step,
// and the E2B shape's clusters of eight (8 heads) lost up to 4%, a stamped
// layer's norms and attention 16.1 → 17.2 µs.
var normedAttnBlocks = normedAttnDefault // read by liveSettings

const normedAttnDefault = 4

// headFold is a pass's head norms, which attend folds into attn_cluster's
// launch, or runs before the pass's kernels where it takes another path
// (unfold).
type headFold struct {
	n  compute.HeadNorms
	qo *compute.Tensor // the normalised queries, where unfolded
}

// NormedAttention implements compute.NormedAttender: for rows of one query
// each (decode) whose keys and values go into the slots their caches' views
// name for the queries' positions, attn_cluster_normed normalises the
// queries, keys and values inside attention, in qkv_norms' arithmetic, and
// writes the keys and values into the caches. The bits and the caches are
// NormedAttentionApart's (TestNormedAttentionMatchesApart). Other passes,
// and passes that attn_cluster does not take, run the norms first.
func (b *Backend) NormedAttention(n compute.HeadNorms, kv []compute.AttentionRow, opt compute.AttentionOptions) *compute.Tensor {
	if err := compute.CheckHeadNorms(n, len(kv)); err != nil {
		panic("cuda: " + err.Error())
	}
	sh, rows, ok := b.foldable(n, kv, opt)
	if !ok {
		return compute.NormedAttentionApart(b, n, kv, opt)
	}
	for _, x := range n.Dst {
		b.forgetWrites(x.K)
		b.forgetWrites(x.V)
	}
	f := &headFold{n: n}
	var out *compute.Tensor
	if sh.B == 1 { // as Attention: the view's own tensors
		out = b.attend(n.Q, kv[0].K, kv[0].V, nil, rows, sh, opt, f).Reshape(1, 1, sh.Hq, sh.Dv)
	} else {
		out = b.attend(n.Q.Reshape(sh.B, 1, sh.Hq, sh.D), kv[0].K, kv[0].V, kv, rows, sh, opt, f)
	}
	if f.qo != nil {
		b.Recycle(f.qo)
	}
	return out
}

// foldable reports whether NormedAttention may fold n into the pass, and
// the pass's shape and rows' keys: the kernels' own norms and attention
// are on, one query a row, heads that qkv_norms reduces with RBLOCK
// threads, with at most RBLOCK elements past the rotated pairs (a thread
// an element: fold_start), norm weights that are model weights (read
// before the wait, as earlyNorms allows), clusters that can be narrow
// enough (normedAttnBlocks), rows that one attention launch takes
// (AttentionRows', or a lone row's Attention), and each row's new key and
// value going to the slot its view holds the query's position in, of the
// view's tensors.
func (b *Backend) foldable(n compute.HeadNorms, kv []compute.AttentionRow, opt compute.AttentionOptions) (sh compute.AttentionShape, rows []attnKeys, ok bool) {
	B := len(kv)
	if normedAttnBlocks == 0 || !fusedOps || !fusedNorm2 || !fusedAttention || earlyNorm(n.QW, n.KW) == 0 || b.attnClusterMax == 0 ||
		n.Q.DType() != compute.F32 || n.Q.Dim(0) != B ||
		opt.KeyPos != nil || opt.KeyLen != nil || opt.KeyStart != nil || !slices.Equal(opt.QueryPos, n.Pos) {
		return sh, nil, false
	}
	T, Hq, D, err := compute.CheckRoPE(n.Q, n.Pos, n.RoPE)
	if err != nil || T != B || rowThreads(D) != 256 || D > 512 || D-n.RoPE.Dim/2*2 > 256 || b.flashes(D, D) {
		return sh, nil, false
	}
	// The plan's clusters are at least this wide (clusterSearch's first
	// try): where that passes the limit, the pass would only unfold.
	if min(attnClusterBlocks, b.attnClusterMax, b.dev.SMs*attnClusterShare/100/max(1, Hq*B)) > normedAttnBlocks {
		return sh, nil, false
	}
	if B > 1 {
		q := n.Q.Reshape(B, 1, Hq, D)
		if compute.CheckAttendRows(q, kv, opt) != nil || !attnRows {
			return sh, nil, false
		}
		if sh, rows, ok = rowsShape(q, kv); !ok {
			return sh, nil, false
		}
	} else {
		r, o := kv[0], opt
		o.KeyPos, o.KeyStart = r.KeyPos, []int{r.KeyStart}
		if sh, err = compute.CheckAttention(n.Q, r.K, r.V, o); err != nil || r.K.DType() != compute.F32 || r.V.DType() != compute.F32 {
			return sh, nil, false
		}
		rows = []attnKeys{{slots: sh.S, n: sh.S, pos: r.KeyPos}}
	}
	if n.K == nil {
		return sh, rows, true
	}
	if sh.Dv != D || n.K.DType() != compute.F32 || n.V.DType() != compute.F32 || !compute.SameShape(n.K.Shape(), []int{B, sh.Hkv, D}) ||
		!compute.SameShape(n.V.Shape(), n.K.Shape()) || compute.CheckQKVInto(n.K, n.Dst) != nil || len(n.Dst) != B {
		return sh, nil, false
	}
	for i, r := range kv {
		d := n.Dst[i]
		if d.N != 1 || ptrOf(r.K).ptr != ptrOf(d.K).ptr || ptrOf(r.V).ptr != ptrOf(d.V).ptr ||
			r.KeyPos != nil && (d.Slot >= len(r.KeyPos) || r.KeyPos[d.Slot] != n.Pos[i]) ||
			r.KeyPos == nil && (d.Slot != int(n.Pos[i]) || d.Slot >= r.K.Dim(0)) {
			return sh, nil, false
		}
	}
	return sh, rows, true
}

// foldArgs are attn_cluster_normed's arguments past attn_cluster's: the
// raw new keys and values of n (nil for queries alone), the weights, eps
// and the rotation's table.
func (b *Backend) foldArgs(n compute.HeadNorms) []any {
	qw, qwt := normWeight(n.Q, n.QW, n.Q.Dim(2), "NormedAttention")
	var kn, vn, kw any
	kwt := 0
	if n.K != nil {
		kn, vn = ptrOf(n.K), ptrOf(n.V)
		kw, kwt = normWeight(n.K, n.KW, n.K.Dim(2), "NormedAttention")
	}
	return []any{kn, vn, qw, qwt, kw, kwt, n.Eps, ptrOf(b.ropeTable(n.RoPE)), n.RoPE.Dim / 2}
}

// unfold runs f's norms on their own (compute.NormHeads: qkv_norms, or
// rmsnorm_rope for queries alone) for a pass that does not fold them, and
// returns the normalised queries in q's shape.
func (b *Backend) unfold(f *headFold, q *compute.Tensor) *compute.Tensor {
	f.qo = compute.NormHeads(b, f.n)
	return f.qo.Reshape(q.Shape()...)
}

// promptFlash has a bf16 prompt pass's attention (PrecisionBF16) run on
// tensor cores: attn_flash, bf16 scores and value sums over key tiles
// anchored at absolute positions, at every query count, so a prompt's
// chunking does not change its bits (TANDEM_CUDA_PROMPT_FLASH=0 keeps the
// exact kernels; live, but switch it only between prompts).
var promptFlash = true

// attn_flash's shape (FQ, FK and FW in ops.cu): queries a block (16 a
// warp), keys a tile, value columns a block.
const (
	flashQ = 64
	flashK = 32
	flashW = 256
)

// flashSmemMax is the most dynamic shared memory attn_flash asks for: a
// 512-wide head's 218 KiB (both column groups in one block, and their
// pairs' exchange), below sm_90's 227 KiB a block. A device that allows
// less gets flashSmemSmall, enough for 256-wide heads in one group
// (Backend.flashSmem: what it got).
const (
	flashSmemMax   = 224 << 10
	flashSmemSmall = 112 << 10
)

// flashSmem is attn_flash's dynamic shared memory for heads of D and cg
// column groups: the queries' rows of D + 8 bf16, and two stages of a key
// tile's rows, of the value tile's FW·cg columns of FK + 8 and of the
// tile's flags; then, where two groups split a wide head's scores, the
// four warp pairs' exchange of 16 words a lane.
func flashSmem(D, cg int) int {
	n := 2*((flashQ+2*flashK)*(D+8)+2*flashW*cg*(flashK+8)) + 2*flashK
	if cg == 2 && D > flashW {
		n += 4 * 16 * 32 * 4
	}
	return n
}

// flashMaxGroups is the most column groups flashGroups takes a block
// (TANDEM_CUDA_FLASH_GROUPS, 1 or 2; 1: a wide head's halves in blocks of
// their own; live). The same bits either way: a group's arithmetic is a
// block's.
var flashMaxGroups = 2

// flashGroups is attn_flash's column groups a block for value rows of Dv:
// two where the rows are wider than one group's FW and the shared memory
// allows (a 512-wide head's halves share their tiles, and its block has
// eight warps where two blocks of four would each hold a multiprocessor
// alone), else one.
func (b *Backend) flashGroups(D, Dv int) int {
	if flashMaxGroups >= 2 && Dv > flashW && flashSmem(D, 2) <= b.flashSmem {
		return 2
	}
	return 1
}

// flashes reports whether this pass's attention runs attn_flash: a bf16
// prompt pass (promptFlash) whose head shapes fit its tiles (D a multiple
// of 16 up to 512, Dv of 8). The choice depends on the layer's shapes
// alone (and the device's shared memory), never on the queries or on the
// caches beside a row's.
func (b *Backend) flashes(D, Dv int) bool {
	return promptFlash && b.bf16() && D%16 == 0 && D <= 512 && Dv%8 == 0 && Dv > 0 &&
		flashSmem(D, 1) <= b.flashSmem
}

// flash runs attn_flash into out: attn_kv_bf16 first lays each row's
// keys and values out in position order as bf16 (P positions a row and
// head, from its first position rounded down to flashK), then the tiles.
func (b *Backend) flash(q, k, v, out *compute.Tensor, kvp any, so, mp Buffer, qpos any, span []int32, sh compute.AttentionShape,
	opt compute.AttentionOptions, scale float32, causal int, aligned bool) {
	B, L, Hq, D, S, Hkv, Dv := sh.B, sh.L, sh.Hq, sh.D, sh.S, sh.Hkv, sh.Dv
	b.flashN++
	P := 0
	for bi := range B {
		if lo, hi := int(span[2*bi]), int(span[2*bi+1]); hi >= lo {
			P = max(P, (hi+flashK)/flashK*flashK-lo/flashK*flashK)
		}
	}
	P = max(P, flashK) // rows without keys still get their flags (zeros)
	vec := 0           // 16-byte key and value loads
	if aligned {
		vec = 1
	}
	kb := b.alloc(compute.BF16, B*Hkv*P*D)
	vt := b.alloc(compute.BF16, B*Hkv*P*Dv)
	ok := b.alloc(compute.I32, B*P/4) // a byte a position (P is a multiple of flashK)
	b.launch("attn_kv_bf16", [3]uint32{uint32(P / flashK), uint32(Hkv), uint32(B)}, 256, ptrOf(k), ptrOf(v), so, mp,
		S, Hkv, D, Dv, P, ptrOf(kb), ptrOf(vt), ptrOf(ok), kvp, vec)
	parts, pp := b.emitParts(out)
	if fk, run := b.kernel("attn_flash"); run {
		cg := b.flashGroups(D, Dv)
		grid := [3]uint32{uint32(Hq), uint32(B * ((L + flashQ - 1) / flashQ)), uint32((Dv + flashW*cg - 1) / (flashW * cg))}
		err := b.dev.LaunchAsync(fk, grid, [3]uint32{uint32(flashQ * 2 * cg), 1, 1}, uint32(flashSmem(D, cg)), ptrOf(q), ptrOf(kb),
			ptrOf(vt), ptrOf(ok), mp, qpos, L, Hq, Hkv, D, Dv, P, scale, causal, opt.Window, ptrOf(out), pp, out.Len())
		if err != nil {
			panic(err)
		}
	}
	if parts != nil {
		b.remember(out, parts)
	}
	b.recycle(kb, vt, ok)
}

// attnKeys is where a batch row's keys are: slots of them, the first n of
// which may hold one, at positions pos (nil: slot s is position s).
type attnKeys struct {
	slots, n int
	pos      []int32
}

// attend is Attention of q over k and v ([B, S, …]) or, with kv, over each
// row's own cache kv[bi] (k and v are then kv[0]'s, and S the most slots a
// row has). With fold, q holds raw queries whose norms (and the new keys')
// attn_cluster_normed folds in, or that run first (unfold).
func (b *Backend) attend(q, k, v *compute.Tensor, kv []compute.AttentionRow, keys []attnKeys, sh compute.AttentionShape, opt compute.AttentionOptions,
	fold *headFold) *compute.Tensor {
	B, L, Hq, D, S, Hkv, Dv := sh.B, sh.L, sh.Hq, sh.D, sh.S, sh.Hkv, sh.Dv
	var out *compute.Tensor
	if q.Rank() == 3 {
		out = b.alloc(compute.F32, L, Hq, Dv)
	} else {
		out = b.alloc(compute.F32, B, L, Hq, Dv)
	}
	if fold != nil && (B*L*Hq == 0 || Dv == 0 || S == 0) {
		b.unfold(fold, q) // no kernel to fold into (unreachable with keys to write): the norms still write the caches
	}
	if B*L*Hq == 0 || Dv == 0 {
		return out
	}
	if S == 0 {
		return b.Zeros(compute.F32, out.Shape()...)
	}
	kAligned, vAligned := ptrOf(k).ptr%16 == 0, ptrOf(v).ptr%16 == 0
	for _, r := range kv {
		kAligned, vAligned = kAligned && ptrOf(r.K).ptr%16 == 0, vAligned && ptrOf(r.V).ptr%16 == 0
	}

	// Order each row's keys by position. One table holds the slot order,
	// the rows' first and last positions (span: the kernels visit offsets up
	// to the last key only, not the cache's capacity) and the query
	// positions, uploaded once for the layers that share it (see table).
	tab := make([]int32, B*S+2*B+len(opt.QueryPos))
	slotOf, span := tab[:B*S], tab[B*S:B*S+2*B]
	copy(tab[B*S+2*B:], opt.QueryPos)
	nsplit, keysMax := 1, 0 // keysMax: the most positions a row's keys span
	for bi, r := range keys {
		vlo, vhi := visibleKeys(opt, bi, L)
		lo, hi := int32(-1), int32(-1)
		for s := range r.n {
			kp := int32(s)
			if r.pos != nil {
				kp = r.pos[s]
			}
			if kp < 0 || kp < vlo || kp > vhi {
				continue
			}
			if lo < 0 || kp < lo {
				lo = kp
			}
			hi = max(hi, kp)
		}
		row := slotOf[bi*S : (bi+1)*S]
		for i := range row {
			row[i] = -1
		}
		span[2*bi+1] = -1 // no keys: an empty span
		if lo < 0 {
			continue
		}
		if int(hi-lo) >= r.slots {
			panic(fmt.Sprintf("cuda: Attention key positions %d..%d span more than the %d slots", lo, hi, r.slots))
		}
		span[2*bi], span[2*bi+1] = lo, hi
		keysMax = max(keysMax, int(hi-lo)+1)
		for s := range r.n {
			kp := int32(s)
			if r.pos != nil {
				kp = r.pos[s]
			}
			if kp < 0 || kp < vlo || kp > vhi {
				continue
			}
			if row[kp-lo] >= 0 {
				panic(fmt.Sprintf("cuda: Attention key position %d appears twice", kp))
			}
			row[kp-lo] = int32(s)
		}
		nsplit = max(nsplit, int(hi/attnChunk-lo/attnChunk)+1)
	}
	var kvp any // the rows' caches, for the kernels' kvp
	if kv != nil {
		kvp = ptrOf(b.kvRows(kv))
		b.attnRowsN++
	}
	tabT := ptrOf(b.table(tab))
	so, mp := tabT, at(tabT, B*S)
	var qpos any
	if opt.QueryPos != nil {
		qpos = at(tabT, B*S+2*B)
	}
	scale := opt.Scale
	if scale == 0 {
		scale = 1
	}
	causal := 0
	if opt.Mask == compute.Causal {
		causal = 1
	}
	if b.flashes(D, Dv) {
		if fold != nil {
			q = b.unfold(fold, q)
		}
		b.flash(q, k, v, out, kvp, so, mp, qpos, span, sh, opt, scale, causal, kAligned && vAligned)
		return out
	}
	nscore := (S + attnChunk - 1) / attnChunk
	// attn_scores' blocks take attnScoreChunk key offsets each (the tiled
	// kernel's a chunk's), up to the longest span: blocks past it would
	// only write −∞. nmax is the most blocks a max array holds.
	nscoreU := (max(1, min(S, keysMax)) + attnScoreChunk - 1) / attnScoreChunk
	nmax := max(nscore, nscoreU)
	// The scratch (scores and per-split partials) grows with queries × keys;
	// a long prefill chunk over a long context would need gigabytes, so a
	// single row's queries go through in groups that fit attnScratchBytes.
	// Every query's arithmetic is the same either way.
	G := L
	if B == 1 {
		perQuery := Hq * (4*(S+nmax+nsplit*Dv) + 8*nsplit)
		// Also at most 65535 queries per launch: the grid's y limit.
		G = max(1, min(L, attnScratchBytes/perQuery, 65535))
	}
	// A single split's values kernel normalises as it writes (the combine's
	// arithmetic), so the combine is not launched: one kernel fewer a layer
	// at contexts under attnChunk positions, and no partial sums.
	combineInValues := nsplit == 1 && combineInValuesOn
	// With one split every key lies in the first chunk of offsets too, so
	// attn_fused can keep a row's scores in shared memory (never tiled: at
	// most attnTileMin-1 queries a row).
	fused := fusedAttention && combineInValues && L < attnTileMin
	// attn_cluster takes the passes attn_fused would and, with
	// attnClusterSplits, those whose rows straddle position chunks but span
	// at most one chunk's worth (sliding windows): the split path's bits.
	var cl, grp clusterAttn
	useCl, useGroup, QG := false, false, 0
	clusters := fusedAttention && L < attnTileMin && keysMax <= attnChunk && (fused || attnClusterSplits && nsplit > 1)
	if clusters {
		cl, useCl = b.attnClusterPlan(kAligned && vAligned, D, Dv, keysMax, Hq*B*min(G, L)) // a launch a group of queries
	}
	// Head norms fold into attn_cluster's launch (not its rounds, nor wide
	// clusters), before the group's plan reads the queries' address.
	if fold != nil && !(useCl && cl.KG == 0 && cl.C <= normedAttnBlocks && G >= L && !(attnGroup && attnGroupAlways)) {
		q, fold = b.unfold(fold, q), nil
	}
	if clusters {
		// attn_cluster_group where attn_cluster's clusters do not fit a
		// pass of several queries a row (a verify; decode rows keep the
		// paths they had, unmeasured against it), in one launch.
		if attnGroup && G >= L && (L > 1 && !useCl || attnGroupAlways) {
			grp, QG, useGroup = b.attnGroupPlan(kAligned && vAligned && ptrOf(q).ptr%16 == 0, D, Dv, keysMax, Hq, Hkv, B, L)
			useCl = useCl && !useGroup
		}
	}
	flags := 0 // the untiled values kernels' ATTN_ flags (ops.cu)
	if attnPacked {
		flags |= attnFlagPacked
	}
	if attnCols4 && Dv >= attnCols4Min && Dv%4 == 0 && vAligned {
		flags |= attnFlagCols4
		b.cols4N++
	}
	var sc, cmax *compute.Tensor
	if !fused && !useCl && !useGroup {
		sc = b.alloc(compute.F32, B*G*Hq*S)
		cmax = b.alloc(compute.F32, B*G*Hq*nmax)
	}
	var pv, pe *compute.Tensor
	var pvArg, peArg any
	if !useCl && !useGroup && (!combineInValues || (tiledAttention && G >= attnTileMin)) {
		pv = b.alloc(compute.F32, B*G*Hq*nsplit*Dv)
		pe = b.alloc(compute.I64, B*G*Hq*nsplit) // float64 partial sums
		pvArg, peArg = ptrOf(pv), ptrOf(pe)
	}
	parts, pp := b.emitParts(out) // the o projection's split, written as the output is
	if dropZero {
		// A dropped kernel leaves the output and its split as zeros
		// (TANDEM_CUDA_DROP_ZERO): the whole of both, once for every group.
		name := "attn_fused"
		switch {
		case useGroup:
			name = "attn_cluster_group"
		case useCl:
			name = "attn_cluster"
			if cl.KG > 0 {
				name = "attn_cluster_rounds"
			}
			if fold != nil {
				name = "attn_cluster_normed"
			}
		}
		if dropped[name] {
			b.zero(memOf(out).ptr, 4*out.Len())
			if parts != nil {
				b.zero(memOf(parts).ptr, 2*parts.Len())
			}
		}
	}
	qv, ov := q, out
	if G < L {
		qv, ov = q.Reshape(L, Hq, D), out.Reshape(L, Hq, Dv)
	}
	for l0 := 0; l0 < L; l0 += G {
		n := min(G, L-l0)
		qg, og, qp, pg := qv, ov, qpos, pp
		if G < L {
			qg, og = b.Slice(qv, l0, l0+n), b.Slice(ov, l0, l0+n)
			if buf, ok := qpos.(Buffer); ok {
				qp = at(buf, l0)
			}
			if buf, ok := pp.(Buffer); ok { // each part plane starts l0 rows in
				off := 2 * l0 * Hq * Dv
				pg = Buffer{ptr: buf.ptr + uintptr(off), Size: buf.Size - off}
			}
		}
		if useGroup { // one launch: G ≥ L
			if fused {
				b.fusedN++
			}
			b.clGroupN++
			kern, run := b.kernel("attn_cluster_group")
			if !run {
				continue
			}
			err := b.dev.LaunchClusterAsync(kern, [3]uint32{uint32(Hq / QG * grp.C), uint32(B), 1}, [3]uint32{attnGroupThreads, 1, 1},
				[3]uint32{uint32(grp.C), 1, 1}, uint32(grp.smem), ptrOf(qg), ptrOf(k), ptrOf(v), so, mp, qp, n, Hq, Hkv, S, D,
				Dv, scale, causal, opt.Window, ptrOf(og), pg, out.Len(), grp.C, grp.nk, grp.kpb, grp.W, nsplit, QG, kvp)
			if err != nil {
				panic(err)
			}
			continue
		}
		if useCl {
			if fused {
				b.fusedN++
			}
			b.attnClN++
			kernel, args := "attn_cluster", []any{ptrOf(qg), ptrOf(k), ptrOf(v), so, mp, qp, n, Hq, Hkv, S, D, Dv, scale, causal,
				opt.Window, ptrOf(og), pg, out.Len(), cl.C, cl.nk, cl.kpb, cl.W, nsplit}
			if cl.KG > 0 {
				b.roundsN++
				kernel, args = "attn_cluster_rounds", append(args, cl.KG, cl.VG)
			}
			args = append(args, kvp)
			if fold != nil {
				b.normedN++
				kernel, args = "attn_cluster_normed", append(args, b.foldArgs(fold.n)...)
			}
			k, run := b.kernel(kernel)
			if !run {
				continue
			}
			err := b.dev.LaunchClusterAsync(k, [3]uint32{uint32(Hq * cl.C), uint32(B * n), 1},
				[3]uint32{256, 1, 1}, [3]uint32{uint32(cl.C), 1, 1}, uint32(cl.smem), args...)
			if err != nil {
				panic(err)
			}
			continue
		}
		if fused {
			b.fusedN++
			b.launch("attn_fused", [3]uint32{uint32(Hq), uint32(B * n), 1}, 256, ptrOf(qg), ptrOf(k), ptrOf(v), so, mp, qp,
				n, Hq, Hkv, S, D, Dv, scale, causal, opt.Window, ptrOf(og), pg, out.Len(), flags, kvp)
			continue
		}
		scores, values, rows := "attn_scores", "attn_values", B*n
		tiled := tiledAttention && n >= attnTileMin
		nblk := nscoreU // score blocks a row, each writing one maximum
		if tiled {
			// QT (ops.cu) queries of a row per block: keys and values are
			// read once per tile instead of once per query.
			scores, values, rows = "attn_scores_tiled", "attn_values_tiled", B*((n+attnTile-1)/attnTile)
			nblk = nscore
			b.launch(scores, [3]uint32{uint32(Hq), uint32(rows), uint32(nblk)}, 256,
				ptrOf(qg), ptrOf(k), ptrOf(sc), ptrOf(cmax), so, mp, qp, n, Hq, Hkv, S, D, scale, causal, opt.Window)
		} else {
			b.launch(scores, [3]uint32{uint32(Hq), uint32(rows), uint32(nblk)}, 256,
				ptrOf(qg), ptrOf(k), ptrOf(sc), ptrOf(cmax), so, mp, qp, n, Hq, Hkv, S, D, scale, causal, opt.Window, attnScoreChunk, kvp)
		}
		args := []any{ptrOf(v), ptrOf(sc), ptrOf(cmax), pvArg, peArg, so, mp, qp, n, Hq, Hkv, S, Dv, nblk, nsplit, causal, opt.Window}
		if !tiled { // the untiled values kernels take the output, for combineInValues
			if combineInValues {
				b.launch(values, [3]uint32{uint32(Hq), uint32(rows), 1}, 256, append(args, ptrOf(og), pg, out.Len(), flags, kvp)...)
				continue
			}
			args = append(args, nil, nil, 0, flags, kvp)
		}
		if tiled {
			cols := tiledCols(v, Dv)
			b.tiledColsN[cols]++
			args = append(args, cols)
		}
		b.launch(values, [3]uint32{uint32(Hq), uint32(rows), uint32(nsplit)}, 256, args...)
		b.launch("attn_combine", [3]uint32{uint32(Hq), uint32(B * n), 1}, min(256, max(32, Dv)),
			ptrOf(og), pvArg, peArg, Hq, Dv, nsplit, pg, out.Len())
	}
	if parts != nil {
		b.remember(out, parts)
	}
	if sc != nil {
		b.recycle(sc, cmax)
	}
	if pv != nil {
		b.recycle(pv, pe)
	}
	return out
}
