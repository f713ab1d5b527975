package cpu

import (
	"math"

	"tandem/compute"
)

// Attention implements compute.Backend for F32 q, k and v.
//
// Each (batch row, query, head) is computed on its own, in the same way
// whatever L, B or the thread count:
//
//	score_s = float32(dot(q, k_s) · scale)         (dot as in dot.go)
//	e_s     = exp(float64(score_s) − float64(max))  over visible s
//	p_s     = float32(e_s / Σ e)                    (Σ in float64, slot order)
//	out     = Σ p_s · v_s                           (float32, slot order)
//
// Slots are visited in order 0..S-1 (rotated to begin at KeyStart), skipping
// hidden ones. The query heads
// that share a KV head are processed together so each key and value row is
// read once for all of them; that changes only the interleaving, not any
// head's arithmetic. A query with no visible key gets zeros.
func (b *Backend) Attention(q, k, v *compute.Tensor, opt compute.AttentionOptions) *compute.Tensor {
	sh, err := compute.CheckAttention(q, k, v, opt)
	if err != nil {
		panic("cpu: " + err.Error())
	}
	B, L, Hq, D, S, Hkv, Dv := sh.B, sh.L, sh.Hq, sh.D, sh.S, sh.Hkv, sh.Dv
	qs, ks, vs := f32s(q), f32s(k), f32s(v)
	var out *compute.Tensor
	var os []float32
	if q.Rank() == 3 {
		out, os = newF32(L, Hq, Dv)
	} else {
		out, os = newF32(B, L, Hq, Dv)
	}
	if B*L == 0 {
		return out
	}
	scale := opt.Scale
	if scale == 0 {
		scale = 1
	}
	group := Hq / Hkv
	// A work item is some of the query heads of one KV head for one query.
	// Whole groups are best (each K/V row is read once for all of them), but
	// a decode step may have fewer groups than threads, so groups are split
	// into parts until every thread has one.
	parts := min(group, max(1, (b.threads+B*L*Hkv-1)/(B*L*Hkv)))
	per := (group + parts - 1) / parts
	parts = (group + per - 1) / per

	b.parallelFor(B*L*Hkv*parts, per*S*(D+Dv), func(lo, hi int) {
		vis := make([]int32, 0, S)
		ep, pp := getF64(per*S), getF32(per*S)
		defer putF64(ep)
		defer putF32(pp)
		cur := -1
		for it := lo; it < hi; it++ {
			part, kv, bl := it%parts, it/parts%Hkv, it/parts/Hkv
			bi := bl / L
			if bl != cur {
				vis = visibleSlots(vis[:0], bi, bl, S, &opt)
				cur = bl
			}
			if len(vis) == 0 {
				continue
			}
			h0 := kv*group + part*per
			h1 := min(h0+per, (kv+1)*group)
			o := bl * Hq
			n := (h1 - h0) * len(vis)
			attendGroup((*ep)[:n], (*pp)[:n], vis, os[(o+h0)*Dv:(o+h1)*Dv],
				qs[(o+h0)*D:(o+h1)*D], ks, vs, bi, kv, S, Hkv, D, Dv, scale)
		}
	})
	return out
}

// attendGroup computes nh consecutive query heads q [nh, D] that share KV
// head kv, writing out [nh, Dv] (zero on entry). e and p are nh·len(vis)
// scratch.
func attendGroup(e []float64, p []float32, vis []int32, out, q, ks, vs []float32, bi, kv, S, Hkv, D, Dv int, scale float32) {
	nv := len(vis)
	nh := len(q) / D
	for i, s := range vis {
		kr := ks[((bi*S+int(s))*Hkv+kv)*D:][:D]
		for h := range nh {
			e[h*nv+i] = float64(float32(dotF32(q[h*D:(h+1)*D], kr) * scale))
		}
	}
	for h := range nh {
		eh := e[h*nv : (h+1)*nv]
		mx := math.Inf(-1)
		for _, x := range eh {
			mx = max(mx, x)
		}
		var sum float64
		for i, x := range eh {
			eh[i] = math.Exp(x - mx)
			sum += eh[i]
		}
		for i, x := range eh {
			p[h*nv+i] = float32(x / sum)
		}
	}
	pvBlocked(out, p, vis, vs, bi*S*Hkv+kv, Dv, Hkv, nh)
}

// pvBlocked computes out[h][j] += p[h][i]·v[vis[i]][j] over i in order,
// where slot s's value row starts at vs[(base+s·Hkv)·Dv]. Blocks of 32 slots
// (in L1) and 8 columns keep the running sums in registers instead of
// loading and storing out for every term; each element still receives its
// terms in slot order, as one float32 add of a rounded product each.
func pvBlocked(out, p []float32, vis []int32, vs []float32, base, Dv, Hkv, nh int) {
	nv := len(vis)
	const slotBlock = 32
	for i0 := 0; i0 < nv; i0 += slotBlock {
		i1 := min(i0+slotBlock, nv)
		for h := range nh {
			ph := p[h*nv : (h+1)*nv]
			o := out[h*Dv : (h+1)*Dv]
			j := 0
			for ; j+8 <= Dv; j += 8 {
				oo := (*[8]float32)(o[j : j+8])
				a0, a1, a2, a3, a4, a5, a6, a7 := oo[0], oo[1], oo[2], oo[3], oo[4], oo[5], oo[6], oo[7]
				for i := i0; i < i1; i++ {
					off := (base+int(vis[i])*Hkv)*Dv + j
					vr := (*[8]float32)(vs[off : off+8])
					pi := ph[i]
					a0 += float32(pi * vr[0])
					a1 += float32(pi * vr[1])
					a2 += float32(pi * vr[2])
					a3 += float32(pi * vr[3])
					a4 += float32(pi * vr[4])
					a5 += float32(pi * vr[5])
					a6 += float32(pi * vr[6])
					a7 += float32(pi * vr[7])
				}
				oo[0], oo[1], oo[2], oo[3], oo[4], oo[5], oo[6], oo[7] = a0, a1, a2, a3, a4, a5, a6, a7
			}
			for ; j < Dv; j++ {
				a := o[j]
				for i := i0; i < i1; i++ {
					a += float32(ph[i] * vs[(base+int(vis[i])*Hkv)*Dv+j])
				}
				o[j] = a
			}
		}
	}
}

// visibleSlots appends to vis the key slots that batch row bi's query bl
// (flattened b·L+l) may see, in visiting order (slot order from KeyStart).
func visibleSlots(vis []int32, bi, bl, S int, opt *compute.AttentionOptions) []int32 {
	n := S
	if opt.KeyLen != nil {
		n = min(max(opt.KeyLen[bi], 0), S)
	}
	var qp int
	if opt.QueryPos != nil {
		qp = int(opt.QueryPos[bl])
	}
	start := 0
	if opt.KeyStart != nil && S > 0 {
		start = ((opt.KeyStart[bi] % S) + S) % S
	}
	for i := range S {
		s := (start + i) % S
		if s >= n {
			continue
		}
		kp := s
		if opt.KeyPos != nil {
			kp = int(opt.KeyPos[bi*S+s])
			if kp < 0 {
				continue // empty ring-buffer slot
			}
		}
		if opt.Mask == compute.Causal && kp > qp {
			continue
		}
		if opt.Window > 0 && kp <= qp-opt.Window {
			continue
		}
		vis = append(vis, int32(s))
	}
	return vis
}
