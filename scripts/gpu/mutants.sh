#!/usr/bin/env bash
# Checks that the GPU-only tests can fail: each mutant is the CUDA package's
# test binary built with one deliberate fault, and the test that pins that
# code must fail on it. A test that passes on its mutant proves nothing.
#
# Here:        scripts/gpu/mutants.sh build     (builds bin/gpu/mutants/*.test, restoring every source)
#              scripts/gpu/mutants.sh check     (each mutant's text is in its file once; CI runs it)
# GPU machine: scripts/gpu/mutants.sh run       (runs each mutant's test; logs to $OUT)
# MUTANTS="name ..." builds only those (the device tool carries 64 MiB, the
# test binaries and every mutant are more); run skips what was not built.
#
# A mutant is: name | file | exact text | replacement | test (a -test.run pattern).
set -uo pipefail
cd "$(dirname "$0")/../.."
mutants=(
  # pdl_start without its wait: a kernel launched with PDL reads before its predecessor has written.
  'pdl-wait|compute/cuda/kernels/ops.cu|extern "C" __global__ void copy_words(unsigned* dst, const unsigned* src, int n) {
    pdl_start();|extern "C" __global__ void copy_words(unsigned* dst, const unsigned* src, int n) {
    asm volatile("griddepcontrol.launch_dependents;" :::);|^TestProgrammaticLaunchWaits$'
  # topk_sort'"'"'s later passes ranking x'"'"'s first values instead of the last pass'"'"'s keys
  'topk-merge|compute/cuda/kernels/ops.cu|if (at < n) key = in ? in[(size_t)r * n + at] : rank_key(x[(size_t)r * D + at], at);|if (at < n) key = rank_key(x[(size_t)r * D + at], at);|^TestOpsMatchCPU/TopK/vocabulary$'
  # topk_sort ranking −0 below +0 where every comparison takes them as equal
  'topk-negzero|compute/cuda/kernels/ops.cu|unsigned u = __float_as_uint(v == 0.0f ? 0.0f : v);|unsigned u = __float_as_uint(v);|^TestOpsMatchCPU/TopK/vocabulary$'
  # a recording's late uploads never filled before its graph launches: the graph reads stale bytes
  'late-gate|compute/cuda/graph.go|			for _, gate := range rec.gates {|			for _, gate := range rec.gates[:0] {|^TestLateUploadsFillBeforeTheyAreRead$'
  # a token of a routed pass reads the next token's input
  'tokens-row|compute/cuda/kernels/matmul.cu|rows_act_token(xs, M, K, g, blockIdx.z / xdiv)|rows_act_token(xs, M, K, g, (blockIdx.z / xdiv + 1) % M)|^TestRouterMatchesHost$'
  # the split partials of a routed pass summed for the wrong row
  'tokens-finish|compute/cuda/kernels/matmul.cu|finish_group(y, part, counters, z * gridDim.x + blockIdx.x, gridDim.z, N, z, z + 1);|finish_group(y, part, counters, z * gridDim.x + blockIdx.x, gridDim.z, N, 0, 1);|^TestRouterMatchesHost$'
  # moe_route of several tokens all reading the first token
  'route-row|compute/cuda/kernels/ops.cu|const size_t row = (size_t)blockIdx.x * k;|const size_t row = 0;|^TestRouterMatchesHost$'
  # AddRowAt reading every token'"'"'s scale from the first token
  'scale-stride|compute/cuda/backend.go|at(ptrOf(scales), slot), k, N)|at(ptrOf(scales), slot), 0, N)|^TestRouterMatchesHost$'
  # block_tree0'"'"'s warp levels in the other order: the same sum, paired differently
  'tree-order|compute/cuda/kernels/ops.cu|r = sh[lane];
        for (int s = 16; s > 0; s >>= 1) r = op(r, __shfl_down_sync(0xffffffffu, r, s));|r = sh[lane];
        for (int s = 1; s < 32; s <<= 1) r = op(r, __shfl_down_sync(0xffffffffu, r, s));|^TestBlockTreesKeepTheirOrder$'
  # norm_sum_d pairing a 1,024-thread block's first levels the other way: the same sum, paired differently
  'norm-tree-pair|compute/cuda/kernels/ops.cu|else c[w] = (col[32 * w] + col[32 * (w + 16)]) + (col[32 * (w + 8)] + col[32 * (w + 24)]); // s = 16, 8|else c[w] = (col[32 * w] + col[32 * (w + 8)]) + (col[32 * (w + 16)] + col[32 * (w + 24)]); // s = 16, 8|^TestBlockTreesKeepTheirOrder$'
  # finish_group adding the split partials rotated by one (split 1 first, split 0 last): the same values, another order
  'finish-order|compute/cuda/kernels/matmul.cu|__ldcg(part + (size_t)(j0 + u) * MN + i)|__ldcg(part + (size_t)((j0 + u + 1) % S) * MN + i)|^TestSplitFinishMatchesSumSplits$'
  # a chunked norm's bf16 weight read with each pair's two elements swapped
  'ldw4-halves|compute/cuda/kernels/ops.cu|return f4(__uint_as_float(h.x << 16), __uint_as_float(h.x & 0xffff0000u),|return f4(__uint_as_float(h.x & 0xffff0000u), __uint_as_float(h.x << 16),|^TestRMSNormCacheMatch$'
  # rmsnorm2 loading its row and residual with its early weights, before griddepcontrol.wait
  'norm2-early-acts|compute/cuda/kernels/ops.cu|norm_start(early, (crow_weights(c.w, w1, w1t, D), crow_weights(w2c, w2, w2t, D), sc = s ? load(s, st, 0) : 1.0f));
        crow_acts(c, x + row, res + row, D);|crow_acts(c, x + row, res + row, D);
        norm_start(early, (crow_weights(c.w, w1, w1t, D), crow_weights(w2c, w2, w2t, D), sc = s ? load(s, st, 0) : 1.0f));|^TestEarlyNormsWaitForActivations$'
  # a chunked norm's split written with its second pair's hi and mid planes swapped (mid
  # and lo swapped would be no fault: the product adds their sums first,
  # in either order the same)
  'emit4-planes|compute/cuda/kernels/ops.cu|split3x2(v.z, v.w, p[0][1], p[1][1], p[2][1]);|split3x2(v.z, v.w, p[1][1], p[0][1], p[2][1]);|^TestRMSNormCacheMatch$'
  # the four-column value sums adding every column's share from the first column's value
  'cols4-lane|compute/cuda/kernels/ops.cu|for (int w = 0; w < W; w++) acc[w] = __fadd_rn(acc[w], __fmul_rn(e, vv[u][w]));|for (int w = 0; w < W; w++) acc[w] = __fadd_rn(acc[w], __fmul_rn(e, vv[u][0]));|^TestFusedAttentionMatches$'
  # the tiled value sums adding every column's share from the first column's value
  'tiled-cols-lane|compute/cuda/kernels/ops.cu|for (int w = 0; w < W; w++) acc[j][w] = __fadd_rn(acc[j][w], __fmul_rn(e, vv[w]));|for (int w = 0; w < W; w++) acc[j][w] = __fadd_rn(acc[j][w], __fmul_rn(e, vv[0]));|^TestBatchInvariance$'
  # the multi-tile rows kernels reading every tile'"'"'s activations from the first tile'"'"'s rows
  'tiles-act|compute/cuda/kernels/matmul.cu|for (int s = 0; s < T; s++) x[s] = rows_act_tile(xs, M, K, g, 5 * s);|for (int s = 0; s < T; s++) x[s] = rows_act_tile(xs, M, K, g, 0);|^TestMatMulVariantsMatch$'
  # the multi-tile rows kernels storing every tile at the first tile'"'"'s rows
  'tiles-store|compute/cuda/kernels/matmul.cu|rows_store(&tile[wid][0][0], c[s][i], g, t, lane, o, M, ldo, n0 + 8 * i - c0, b1, b2, 5 * s,|rows_store(&tile[wid][0][0], c[s][i], g, t, lane, o, M, ldo, n0 + 8 * i - c0, b1, b2, 0,|^TestMatMulVariantsMatch$'
  # matmul_rows_glu's up columns read from the gate rows
  'glu-up-row|compute/cuda/kernels/matmul.cu|wr[i] = w + (size_t)(ok ? i * I + n0 + g : 0) * K;|wr[i] = w + (size_t)(ok ? n0 + g : 0) * K;|^TestGeluMatMulsMatch$'
  # matmul_rows_glu'"'"'s finish summing the gate partials for the up values too
  'glu-finish-up|compute/cuda/kernels/matmul.cu|split_sum2(part, MN, i, true, i + I, !By, gridDim.y, g, u);|split_sum2(part, MN, i, true, i, !By, gridDim.y, g, u);|^TestGeluMatMulsMatch$'
  # split_sum2 summing its second output from the first output'"'"'s partials (a finish'"'"'s second output a thread)
  'finish-second|compute/cuda/kernels/matmul.cu|u[x] = okk && j0 + x < S ? __ldcg(part + (size_t)(j0 + x) * MN + k) : 0.0f;|u[x] = okk && j0 + x < S ? __ldcg(part + (size_t)(j0 + x) * MN + i) : 0.0f;|^TestSplitFinishMatchesSumSplits$'
  # matmul_rows_glu_by reading the first row'"'"'s up values for every row
  'glu-by-row|compute/cuda/kernels/matmul.cu|By ? up[(size_t)r * I + n0 + j] : s[G - 1]|By ? up[n0 + j] : s[G - 1]|^TestGeluMatMulsMatch$'
  # the rows of one attention pass all reading the first row'"'"'s cache
  'kvp-row|compute/cuda/kernels/ops.cu|return kvp ? (const float*)kvp[2 * b + which] : t + (size_t)b * rows;|return kvp ? (const float*)kvp[which] : t + (size_t)b * rows;|^TestAttentionRowsMatchApart$'
  # qkv_norms writing every token'"'"'s keys at its run'"'"'s first token'"'"'s slot
  'qkv-slot|compute/cuda/kernels/ops.cu|yr = (a.kvp ? (float*)a.kvp[2 * a.tslot[2 * t]] + (size_t)a.tslot[2 * t + 1] * Hk * d : a.ko + (size_t)t * Hk * d) +|yr = (a.kvp ? (float*)a.kvp[2 * a.tslot[2 * t]] + (size_t)a.tslot[1] * Hk * d : a.ko + (size_t)t * Hk * d) +|^TestFusedOpsMatch$'
  # warp_tree256'"'"'s shuffles in the other order (warp_sum256'"'"'s, and attn_cluster_group'"'"'s
  # maxima and sums): the same sum, paired differently (a norm's rows rarely show it:
  # their float scale rounds the double sum away)
  'qkv-warp-tree|compute/cuda/kernels/ops.cu|T r = v[0];
    for (int s = 16; s > 0; s >>= 1) r = op(r, __shfl_down_sync(0xffffffffu, r, s));|T r = v[0];
    for (int s = 1; s < 32; s <<= 1) r = op(r, __shfl_down_sync(0xffffffffu, r, s));|^TestBlockTreesKeepTheirOrder$'
  # qkv_norms_warp'"'"'s table read with cosine and sine swapped
  'qkv-warp-angle|compute/cuda/kernels/ops.cu|turn(yr, j, a.half, x0, x1, cs[2 * j], cs[2 * j + 1], a.freq[j] == 0.0f);|turn(yr, j, a.half, x0, x1, cs[2 * j + 1], cs[2 * j], a.freq[j] == 0.0f);|^TestFusedOpsMatch$'
  # a site'"'"'s executable graph updated in place whatever its launches'"'"' clusters: caught by the
  # instantiation count; a "recorded differs from direct" failure instead says the driver kept stale clusters
  'graph-shape|compute/cuda/graph.go|	if exec != 0 && dev.graphs.shapes[site] != shape {|	if exec != 0 && false {|^TestGraphsFollowClusterSizes$'
  # random_uniform starting each run one draw late
  'random-jump|compute/cuda/kernels/ops.cu|pcg_jump(hi, lo, e0 - j * (u64)blk);|pcg_jump(hi, lo, e0 - j * (u64)blk + 1);|^TestRandomWeightMatchesMathRand$'
  # pcg_jump composing a power of the step with the multiplier for the increment
  'random-compose|compute/cuda/kernels/ops.cu|            add128(th, tl, bch, bcl, ch, cl);|            add128(th, tl, bmh, bml, ch, cl);|^TestRandomWeightMatchesMathRand$'
  # attn_fused taking thread 1'"'"'s partial maximum for the block'"'"'s
  'fused-max|compute/cuda/kernels/ops.cu|        if (shm[0] == 12345.0f) out[0] = shm[0];
        return;
    }
    const float mx = fmax_nan(-__int_as_float(0x7f800000), shm[0]);|        if (shm[0] == 12345.0f) out[0] = shm[0];
        return;
    }
    const float mx = fmax_nan(-__int_as_float(0x7f800000), shm[1]);|^TestFusedAttentionMatches$'
  # the wide kernel'"'"'s early weights variant reading its first activations before the wait
  'early-wait|compute/cuda/kernels/matmul.cu|        pdl_start_for(xs, out);
        tiles_mma<T, G, U>(c, q, x, kb, k1, t, al);|        tiles_mma<T, G, U>(c, q, x, kb, k1, t, al);
        pdl_start_for(xs, out);|^TestEarlyWeightsWaitForActivations$'
  # matmul_rows_wide storing its first column group for both.
  'wide-group|compute/cuda/kernels/matmul.cu|rows_store(&tile[wid][0][0], c[s][i], g, t, lane, o, M, ldo, n0 + 8 * i - c0, b1, b2, 5 * s,|rows_store(&tile[wid][0][0], c[s][0], g, t, lane, o, M, ldo, n0 + 8 * i - c0, b1, b2, 5 * s,|^TestMatMulVariantsMatch$'
  # the cluster finish adding the split partials rotated by one (split 1 first, split 0 last)
  'cluster-order|compute/cuda/kernels/matmul.cu|v[u] = j0 + u < S ? cluster_ld(p, j0 + u) : 0.0f;|v[u] = j0 + u < S ? cluster_ld(p, (j0 + u + 1) % S) : 0.0f;|^TestSplitFinishMatchesSumSplits$'
  # the wide cluster kernel'"'"'s partial tile rows laid out at one column group'"'"'s width: the rows overlap
  'cluster-tile|compute/cuda/kernels/matmul.cu|const int ldo = Local ? 64 * G : N,|const int ldo = Local ? 64 : N,|^TestSplitFinishMatchesSumSplits$'
  # the GLU cluster finish summing the gate partials for the up values too
  'cluster-glu-up|compute/cuda/kernels/matmul.cu|cluster_sum(p + 64, S)|cluster_sum(p, S)|^TestGeluMatMulsMatch$'
  # a segment's rows laid out at the stack's width instead of their own.
  'seg-stride|compute/cuda/kernels/matmul.cu|return (size_t)lo * M + (size_t)r * (hi - lo) + (n - lo);|return (size_t)lo * M + (size_t)r * N + (n - lo);|^TestMatMulsStacked$'
  # the wide kernel's K-split partials written in the segments' layout, then summed as plain ones.
  'seg-partials|compute/cuda/kernels/matmul.cu|    if (gridDim.y > 1) b1 = b2 = SEG_NONE; // partials keep the plain layout
||^TestMatMulsStacked$'
  # the packed value sums fused into one rounding (fma): the same keys, other bits
  'packed-fma|compute/cuda/kernels/ops.cu|a0 = __fadd_rn(a0, __fmul_rn(p[u].e, v0[u]));|a0 = __fmaf_rn(p[u].e, v0[u], a0);|^TestFusedAttentionMatches$'
  # the packed value sums keeping a key whose weight rounded to zero (0 · Inf)
  'packed-skip|compute/cuda/kernels/ops.cu|se[o] = slot_weight{e != 0.0f ? s : -1, e};|se[o] = slot_weight{s, e};|^TestFusedAttentionMatches$'
  # a 512-wide head'"'"'s second column written with the first'"'"'s sum
  'packed-col2|compute/cuda/kernels/ops.cu|if (two) finish(j + RBLOCK, a1);|if (two) finish(j + RBLOCK, a0);|^TestFusedAttentionMatches$'
  # attn_cluster taking another block'"'"'s scores from its own shared memory
  'cluster-attn-owner|compute/cuda/kernels/ops.cu|scs[r] = cluster_ld(scs + r, owner);|scs[r] = cluster_ld(scs + r, c);|^TestFusedAttentionMatches$'
  # attn_cluster_normed writing the new keys into the cache unrotated
  'normed-key-cache|compute/cuda/kernels/ops.cu|if (kcache) turn(kcache, j, half, x0, x1, f.c, f.s, f.f0);|if (kcache) turn(kcache, j, half, x0, x1, f.c, f.s, true);|^TestNormedAttentionMatchesApart$'
  # attn_cluster_normed scoring the new key unrotated
  'normed-key-row|compute/cuda/kernels/ops.cu|turn(krow, j, half, x0, x1, f.c, f.s, f.f0);|turn(krow, j, half, x0, x1, f.c, f.s, true);|^TestNormedAttentionMatchesApart$'
  # attn_cluster_normed writing the cache of the first kv head only
  'normed-writer|compute/cuda/kernels/ops.cu|const bool writer = krow && h % (Hq / Hkv) == 0;|const bool writer = krow && h == 0;|^TestNormedAttentionMatchesApart$'
  # attn_cluster_normed'"'"'s blocks each taking the new value'"'"'s first columns
  'normed-value-cols|compute/cuda/kernels/ops.cu|if (e >= c0 && e < c0 + w) vcol[e - c0] = x;|if (e < w) vcol[e] = x;|^TestNormedAttentionMatchesApart$'
  # attn_cluster_normed'"'"'s angles, read before the wait, at the next position
  'normed-pre-angle|compute/cuda/kernels/ops.cu|if (!f.f0) angle((float)qp, fr, f.c, f.s);|if (!f.f0) angle((float)(qp + 1), fr, f.c, f.s);|^TestNormedAttentionMatchesApart$'
  # norm_sums_d'"'"'s trees all reading the first value'"'"'s column (the keys and values normalised by the query'"'"'s scale)
  'normed-sums-column|compute/cuda/kernels/ops.cu|const double* col = sh + i * blockDim.x + threadIdx.x;|const double* col = sh + threadIdx.x;|^TestNormedAttentionMatchesApart$'
  # attn_cluster_group'"'"'s rows each reading the next row'"'"'s scores from the other blocks
  'group-owner-row|compute/cuda/kernels/ops.cu|sv[u] = at[u] >= 0 ? cluster_ld(scs + at[u], r / kpb) : 0.0f;|sv[u] = at[u] >= 0 ? cluster_ld(scs + (at[u] + nkmax) % (R * nkmax), r / kpb) : 0.0f;|^TestFusedAttentionMatches$'
  # attn_cluster_group taking every row'"'"'s query position from its first query
  'group-qpos|compute/cuda/kernels/ops.cu|visible(mp + r, qps[i % L], causal, window)|visible(mp + r, qps[0], causal, window)|^TestFusedAttentionMatches$'
  # attn_cluster'"'"'s value sums fused into one rounding (fma): the same keys, other bits
  'cluster-attn-fma|compute/cuda/kernels/ops.cu|a = __fadd_rn(a, __fmul_rn(ef, vst[(size_t)r * W + j]));|a = __fmaf_rn(ef, vst[(size_t)r * W + j], a);|^TestFusedAttentionMatches$'
  # attn_cluster summing every key of the row in each split (a straddling row counted twice)
  'cluster-attn-split-range|compute/cuda/kernels/ops.cu|r1 = min(min(ATTN_CHUNK, min(mp + S, last + 1) - p0) + p0 - mp, nk);|r1 = nk;|^TestFusedAttentionMatches$'
  # attn_scores' blocks each leaving out the last key offset of their chunk
  'score-chunk-end|compute/cuda/kernels/ops.cu|const int r0 = z * chunk, r1 = min(min(r0 + chunk, S)|const int r0 = z * chunk, r1 = min(min(r0 + chunk - 1, S)|^TestFusedAttentionMatches$'
  # visibleKeys leaving out the first key in sight of the row's lowest query
  'visible-window|compute/cuda/attention.go|lo = qmin - int32(opt.Window) + 1|lo = qmin - int32(opt.Window) + 2|^TestAttentionSeesOnlyVisibleKeys$'
  # visibleKeys ending the span at the lowest query, not the highest: a verify's later queries lose keys
  'visible-causal|compute/cuda/attention.go|hi = qmax|hi = qmin|^TestAttentionSeesOnlyVisibleKeys$'
  # attn_cluster_rounds carrying a split's sum into the next split (a straddling row's first keys counted twice)
  'rounds-split-carry|compute/cuda/kernels/ops.cu|                        acc = __fadd_rn(acc, a);
                        a = 0.0f;|                        acc = __fadd_rn(acc, a);|^TestFusedAttentionMatches$'
  # the early GLU kernels reading their activations before the wait
  'glu-early-wait|compute/cuda/kernels/matmul.cu|            pdl_start();
            wide_mma<G, 2>(c, q, x, kb, k1, t, al);|            wide_mma<G, 2>(c, q, x, kb, k1, t, al);
            pdl_start();|^TestEarlyWeightsWaitForActivations$'
  # every choice's gate/up product from the wrong token'"'"'s input
  'experts-input|compute/cuda/backend.go|		xdiv = k
|		xdiv = k + 1
|^TestRouterMatchesHost$'
  # attn_flash leaving its sums unscaled when a row'"'"'s maximum grows
  'flash-rescale|compute/cuda/kernels/ops.cu|                o[c][0] *= al0;|                o[c][0] *= 1.0f;|^TestFlashAttention$'
  # attn_flash'"'"'s tiles anchored at its block'"'"'s first key (to 16) instead of absolute positions
  'flash-anchor|compute/cuda/kernels/ops.cu|const int first = hi < lo ? 0 : (lo / FK) * FK|const int first = hi < lo ? 0 : (lo / 16) * 16|^TestFlashAttention$'
  # attn_flash taking a slot that holds no key as a key of zeros
  'flash-valid|compute/cuda/kernels/ops.cu|const bool key = fl[kj] != 0;|const bool key = true;|^TestFlashAttention$'
  # attn_flash taking a tile that straddles a row'"'"'s own position as whole (no mask)
  'flash-whole|compute/cuda/kernels/ops.cu|p0 + FK - 1 <= wlo)|p0 <= wlo)|^TestFlashAttention$'
  # a wide head'"'"'s high warp taking its pair'"'"'s weights for the other eight rows
  'flash-pair|compute/cuda/kernels/ops.cu|pa[j][0] = __float_as_uint(xw[32 * 2 * j]), pa[j][1] = __float_as_uint(xw[32 * (2 * j + 1)]);|pa[j][1] = __float_as_uint(xw[32 * 2 * j]), pa[j][0] = __float_as_uint(xw[32 * (2 * j + 1)]);|^TestFlashAttention$'
  # one column group scoring a wide head in one run over d: not the pairs'"'"' lo + hi
  'flash-halves|compute/cuda/kernels/ops.cu|qk(sc, pair && hiw ? FW : 0, D > FW && !(pair && hiw) ? FW : D);
            if (D > FW && !pair) {|qk(sc, pair && hiw ? FW : 0, pair && !hiw ? FW : D);
            if (false) {|^TestFlashAttention$'
  # attn_flash'"'"'s staged outputs read from every other row
  'flash-out-row|compute/cuda/kernels/ops.cu|const float4 v = *(const float4*)(ws + (2 * k + rr) * FO + c4);|const float4 v = *(const float4*)(ws + (2 * k) * FO + c4);|^TestFlashAttention$'
  # a grouped expert product adding its K splits in reverse order
  'grouped-split|compute/cuda/kernels/matmul.cu|        const int k0 = s * kchunk, k1 = min(K, k0 + kchunk);
        float c[2][2][4];|        const int k0 = (splits - 1 - s) * kchunk, k1 = min(K, k0 + kchunk);
        float c[2][2][4];|^TestGroupedExpertsMatch$'
  # a grouped expert product writing each choice at its token's row instead of its own
  'grouped-dst|compute/cuda/kernels/matmul.cu|store_tile(y, acc, N, n0, m0, rows_listed{rows + base, cnt, 1});|store_tile(y, acc, N, n0, m0, rows_listed{rows + base, cnt, xdiv});|^TestGroupedExpertsMatch$'
  # a grouped tile taking the expert before its own where the tile is its expert's first
  'grouped-tile|compute/cuda/kernels/matmul.cu|        if (tstarts[mid] <= ty)|        if (tstarts[mid] < ty)|^TestGroupedExpertsMatch$'
  # moe_group giving an expert's last part-full tile no block
  'group-tiles|compute/cuda/kernels/ops.cu|ts += (count[e] + 63) / 64;|ts += count[e] / 64;|^TestGroupedExpertsMatch$'
  # sum_experts adding a token'"'"'s choices last first
  'sum-experts-order|compute/cuda/kernels/ops.cu|for (int s = 0; s < k; s++) acc = __fadd_rn(acc, __fmul_rn(scale[n * k + s], y[(n * k + s) * D + j]));|for (int s = k - 1; s >= 0; s--) acc = __fadd_rn(acc, __fmul_rn(scale[n * k + s], y[(n * k + s) * D + j]));|^TestGroupedExpertsMatch$'
)
case ${1:-} in
  build)
    rm -rf bin/gpu/mutants
    mkdir -p bin/gpu/mutants
    for m in "${mutants[@]}"; do
      IFS='|' read -r -d '' name file old new _ <<<"$m"
      [ -z "${MUTANTS:-}" ] || [[ " $MUTANTS " == *" $name "* ]] || continue
      cp "$file" "$file.orig"
      if ! OLD="$old" NEW="$new" perl -0pi -e 'my $n = s/\Q$ENV{OLD}\E/$ENV{NEW}/g; die "mutant: text not found once\n" if $n != 1' "$file"; then
        mv "$file.orig" "$file"
        echo "mutants.sh: $name: its text is not in $file; update the mutant" >&2
        exit 1
      fi
      git --no-pager diff --stat -- "$file" | head -1
      CGO_ENABLED=0 go test -c -trimpath -ldflags='-s -w' -o "bin/gpu/mutants/$name.test" ./compute/cuda
      rc=$?
      mv "$file.orig" "$file"
      [ $rc -eq 0 ] || exit 1
    done
    git diff --quiet -- compute || { echo "mutants.sh: a source was left changed" >&2; exit 1; }
    ls -la bin/gpu/mutants
    ;;
  run)
    out=${OUT:-gpu-logs}
    mkdir -p "$out"
    status=0
    for m in "${mutants[@]}"; do
      IFS='|' read -r -d '' name _ _ _ test <<<"$m"
      test=${test%$'\n'}
      [ -x "bin/gpu/mutants/$name.test" ] || { echo "== $name: not built, skipped"; continue; }
      (cd compute/cuda && timeout 120 "../../bin/gpu/mutants/$name.test" -test.run "$test" -test.count=1) >"$out/mutant-$name.log" 2>&1
      if [ $? -eq 0 ]; then
        echo "== $name: $test PASSED on its mutant: the test cannot catch this fault"
        status=1
      else
        echo "== $name: caught ($(grep -m1 -E 'want|differ|FAIL' "$out/mutant-$name.log" | cut -c1-160))"
      fi
    done
    exit $status
    ;;
  check) # every mutant's text is in its file once (CI: a mutant that no longer applies tests nothing)
    status=0
    for m in "${mutants[@]}"; do
      IFS='|' read -r -d '' name file old _ _ <<<"$m"
      n=$(OLD="$old" perl -0ne 'my $n = () = /\Q$ENV{OLD}\E/g; print $n' "$file")
      if [ "$n" != 1 ]; then
        echo "mutants.sh: $name: its text is in $file $n times, not once; update the mutant" >&2
        status=1
      fi
    done
    [ $status -ne 0 ] || echo "mutants.sh: all ${#mutants[@]} mutants apply"
    exit $status
    ;;
  *) echo "usage: scripts/gpu/mutants.sh build|run|check" >&2; exit 2 ;;
esac
