package cuda

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"tandem/compute"
)

// TestNormedAttentionMatchesApart protects attn_cluster_normed: decode
// rows' head norms folded into attention give NormedAttentionApart's
// output bit for bit and leave the caches holding the same keys and values
// (the new slots written, every other slot as it was), for lone rows and
// batches, full caches and rings (one across a position chunk), queries
// alone (a layer reading another's cache), values that are the raw keys,
// heads of 64, 256 and 512 (zero frequencies, and rotations narrower than
// the head), no, bf16 and f32 norm weights; that the fold runs where
// attn_cluster takes the pass and the head allows it, and that a pass
// asked to fold that takes another kernel (attn_cluster_group here) runs
// the norms first, with the same bits.
func TestNormedAttentionMatchesApart(t *testing.T) {
	g := backendOrSkip(t)
	if g.attnClusterMax == 0 {
		t.Skip("no thread block clusters on this device")
	}
	defer func(n int, grp, always bool) { normedAttnBlocks, attnGroup, attnGroupAlways = n, grp, always }(normedAttnBlocks, attnGroup, attnGroupAlways)
	attnGroup = true
	r := rand.New(rand.NewPCG(71, 72))
	// A row: a cache of slots (a ring where ring is set, else a full
	// cache viewed up to its new position) whose new position is p.
	type row struct {
		slots, p int
		ring     bool
	}
	cases := []struct {
		name       string
		Hq, Hkv    int
		window     int
		rows       []row
		keys, keqv bool // the layer's own keys; values the raw keys
	}{
		{"a lone full cache", 8, 2, 0, []row{{128, 100, false}}, true, false},
		{"a lone ring", 8, 2, 64, []row{{80, 300, true}}, true, false},
		{"a batch of full caches and rings", 8, 2, 64, []row{{128, 100, false}, {80, 300, true}, {64, 5, false}}, true, false},
		{"a ring across a position chunk", 4, 1, 512, []row{{575, 1030, true}}, true, false},
		{"values that are the raw keys", 8, 2, 0, []row{{64, 40, false}, {256, 200, false}}, true, true},
		{"queries alone", 8, 2, 0, []row{{128, 100, false}, {64, 63, false}}, false, false},
		{"queries alone, a lone ring", 8, 4, 64, []row{{80, 300, true}}, false, false},
	}
	// Heads: their rotation, the norms' weights (none, bf16, f32) and
	// whether they fold: at most 256 elements past the rotated pairs.
	heads := []struct {
		D      int
		rope   *compute.RoPE
		qw, kw compute.DType // 0: no weight
		fold   bool
	}{
		{64, compute.DefaultRoPE(64, 10000), 0, compute.F32, true},
		{256, compute.DefaultRoPE(256, 10000), compute.BF16, compute.BF16, true},
		{256, compute.DefaultRoPE(128, 10000), compute.F32, compute.BF16, true}, // 128 elements past the pairs
		{512, compute.ProportionalRoPE(512, 1e6, 0.25), compute.F32, compute.BF16, true},
		{512, compute.DefaultRoPE(128, 10000), compute.BF16, compute.F32, false}, // 384 past the pairs
	}
	norm := func(dt compute.DType, D int) *compute.Tensor {
		if dt == 0 {
			return nil
		}
		return weight(g, dt, randF32(r, D), D)
	}
	folds, clustered := 0, false
	for _, hd := range heads {
		D, rope := hd.D, hd.rope
		qw, kw := norm(hd.qw, D), norm(hd.kw, D)
		for _, tc := range cases {
			name := fmt.Sprintf("head %d rotating %d, %s", D, rope.Dim, tc.name)
			B := len(tc.rows)
			pos := make([]int32, B)
			for i, rw := range tc.rows {
				pos[i] = int32(rw.p)
			}
			q := g.FromF32(randF32(r, B*tc.Hq*D), B, tc.Hq, D)
			k := g.FromF32(randF32(r, B*tc.Hkv*D), B, tc.Hkv, D)
			v := g.FromF32(randF32(r, B*tc.Hkv*D), B, tc.Hkv, D)
			if tc.keqv {
				v = k
			}
			// A copy of every cache for each path: apart, folded, and
			// asked to fold where the pass takes attn_cluster_group
			// (attnGroupAlways), which runs the norms first.
			type cache struct{ k, v *compute.Tensor }
			caches := make([][3]cache, B)
			for i, rw := range tc.rows {
				kc, vc := randF32(r, rw.slots*tc.Hkv*D), randF32(r, rw.slots*tc.Hkv*D)
				for j := range caches[i] {
					caches[i][j] = cache{g.FromF32(kc, rw.slots, tc.Hkv, D), g.FromF32(vc, rw.slots, tc.Hkv, D)}
				}
			}
			run := func(j int) (out []float32, ks, vs [][]float32) {
				fold := j > 0
				normedAttnBlocks = map[bool]int{true: 16, false: 0}[fold]
				attnGroupAlways = j == 2
				n := compute.HeadNorms{Q: q, QW: qw, Eps: 1e-6, Pos: pos, RoPE: rope}
				kv := make([]compute.AttentionRow, B)
				for i, rw := range tc.rows {
					c := caches[i][j]
					slot := rw.p
					if !rw.ring {
						kv[i] = compute.AttentionRow{K: g.Slice(c.k, 0, rw.p+1), V: g.Slice(c.v, 0, rw.p+1)}
					} else {
						slot = rw.p % rw.slots
						kp := make([]int32, rw.slots)
						for s := range kp {
							kp[s] = -1
						}
						for p := max(0, rw.p-rw.slots+1); p <= rw.p; p++ {
							kp[p%rw.slots] = int32(p)
						}
						kv[i] = compute.AttentionRow{K: c.k, V: c.v, KeyPos: kp, KeyStart: (rw.p + 1) % rw.slots}
					}
					if tc.keys {
						n.Dst = append(n.Dst, compute.KVRun{K: c.k, V: c.v, Slot: slot, N: 1})
					}
				}
				if tc.keys {
					n.K, n.V, n.KW = k, v, kw
				}
				opt := compute.AttentionOptions{Scale: 1, Mask: compute.Causal, Window: tc.window, QueryPos: pos}
				before, cl, rounds := g.normedN, g.attnClN, g.roundsN
				out = g.ToF32(g.NormedAttention(n, kv, opt))
				if fold && g.normedN > before {
					folds++
				} else if (!fold || j == 2 || !hd.fold) && g.normedN != before {
					t.Fatalf("%s, path %d: attn_cluster_normed ran where it may not", name, j)
				}
				clustered = g.attnClN > cl && g.roundsN == rounds
				for i := range tc.rows {
					ks, vs = append(ks, g.ToF32(caches[i][j].k)), append(vs, g.ToF32(caches[i][j].v))
				}
				return out, ks, vs
			}
			want, wantK, wantV := run(0)
			apartClustered, before := clustered, folds
			for j := 1; j <= 2; j++ {
				got, gotK, gotV := run(j)
				if j == 1 && hd.fold && apartClustered && folds == before {
					t.Errorf("%s: attn_cluster took the pass apart, and the norms were not folded into it", name)
				}
				if err := sameBits(got, want); err != nil {
					t.Fatalf("%s, path %d: output: %v", name, j, err)
				}
				for i := range tc.rows {
					if err := sameBits(gotK[i], wantK[i]); err != nil {
						t.Fatalf("%s, path %d: row %d's keys: %v", name, j, i, err)
					}
					if err := sameBits(gotV[i], wantV[i]); err != nil {
						t.Fatalf("%s, path %d: row %d's values: %v", name, j, i, err)
					}
				}
			}
		}
	}
	if folds == 0 {
		t.Error("no pass folded its norms into attention")
	}
}
