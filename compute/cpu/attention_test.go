package cpu

import (
	"fmt"
	"math"
	"testing"

	"tandem/compute"
)

func attnInputs(c attnCase, seed uint64) (q, k, v []float32) {
	r := newRand(seed)
	return randVec(r, c.B*c.L*c.Hq*c.D, 1), randVec(r, c.B*c.S*c.Hkv*c.D, 1), randVec(r, c.B*c.S*c.Hkv*c.Dv, 1)
}

func runAttention(b *Backend, c attnCase, q, k, v []float32) []float32 {
	qt := b.FromF32(q, c.B, c.L, c.Hq, c.D)
	kt := b.FromF32(k, c.B, c.S, c.Hkv, c.D)
	vt := b.FromF32(v, c.B, c.S, c.Hkv, c.Dv)
	return b.ToF32(b.Attention(qt, kt, vt, c.opt))
}

func seqPos(B, L int, start ...int) []int32 {
	p := make([]int32, 0, B*L)
	for bi := range B {
		for l := range L {
			p = append(p, int32(start[bi]+l))
		}
	}
	return p
}

var (
	causal = compute.Causal
	bidi   = compute.Bidirectional
)

func attnCases() map[string]attnCase {
	opt := func(m compute.Mask, w int, qp []int32) compute.AttentionOptions {
		return compute.AttentionOptions{Mask: m, Window: w, QueryPos: qp}
	}
	cs := map[string]attnCase{
		"decode_causal_mha":   {1, 1, 9, 2, 2, 8, 8, opt(causal, 0, []int32{8})},
		"prefill_causal_gqa2": {1, 7, 7, 4, 2, 13, 13, opt(causal, 0, seqPos(1, 7, 0))},
		"prefill_causal_gqa4": {1, 6, 6, 8, 2, 5, 5, opt(causal, 0, seqPos(1, 6, 0))},
		"verify_causal_gqa4":  {1, 4, 20, 4, 1, 64, 64, opt(causal, 0, seqPos(1, 4, 16))},
		"sliding_w3":          {1, 6, 6, 2, 1, 7, 7, opt(causal, 3, seqPos(1, 6, 0))},
		"sliding_w1":          {1, 5, 5, 2, 2, 4, 4, opt(causal, 1, seqPos(1, 5, 0))},
		"bidirectional":       {1, 5, 5, 3, 1, 6, 6, opt(bidi, 0, nil)},
		"bidirectional_w2":    {1, 6, 6, 2, 2, 6, 6, opt(bidi, 2, seqPos(1, 6, 0))},
		"value_dim_differs":   {1, 3, 5, 2, 1, 8, 3, opt(causal, 0, seqPos(1, 3, 2))},
		"batch_rows_keylen":   {3, 2, 8, 4, 2, 9, 9, opt(causal, 0, seqPos(3, 2, 5, 1, 3))},
		"scaled_long":         {1, 2, 300, 2, 1, 33, 33, opt(causal, 0, seqPos(1, 2, 298))},
	}
	c := cs["batch_rows_keylen"]
	c.opt.KeyLen = []int{7, 3, 5}
	cs["batch_rows_keylen"] = c
	c = cs["scaled_long"]
	c.opt.Scale = 0.125
	cs["scaled_long"] = c
	// A ring buffer of 6 slots holding positions 4..8 of a window-5 layer,
	// one slot still empty, decoding position 8 and verifying 9.
	cs["ring_buffer_sliding"] = attnCase{1, 2, 6, 4, 2, 8, 8, compute.AttentionOptions{
		Mask: causal, Window: 5, QueryPos: []int32{8, 9},
		KeyPos: []int32{6, 7, 8, -1, 4, 5},
	}}
	// Two batch rows, each with its own ring and positions.
	cs["ring_buffer_batch"] = attnCase{2, 1, 4, 2, 1, 8, 8, compute.AttentionOptions{
		Mask: causal, Window: 3, QueryPos: []int32{5, 2},
		KeyPos: []int32{4, 5, 2, 3, 0, 1, 2, -1},
	}}
	return cs
}

func TestAttentionMatchesFloat64Reference(t *testing.T) {
	b := New(3)
	for name, c := range attnCases() {
		t.Run(name, func(t *testing.T) {
			q, k, v := attnInputs(c, 3)
			got := runAttention(b, c, q, k, v)
			want, tol := refAttention(c, q, k, v)
			requireClose(t, "Attention", got, want, tol)
		})
	}
}

// With q = 0 every visible key gets weight exactly 1/n; one-hot values then
// reveal the visible set exactly.
func TestAttentionMaskVisibility(t *testing.T) {
	b := New(1)
	for _, c := range []struct {
		name    string
		S       int
		opt     compute.AttentionOptions
		visible [][]int // per query
	}{
		{"causal", 6, compute.AttentionOptions{Mask: causal, QueryPos: []int32{0, 3, 5}},
			[][]int{{0}, {0, 1, 2, 3}, {0, 1, 2, 3, 4, 5}}},
		// Window W shows exactly W keys ending at the query itself.
		{"sliding_window_edges", 8, compute.AttentionOptions{Mask: causal, Window: 3, QueryPos: []int32{0, 1, 2, 3, 7}},
			[][]int{{0}, {0, 1}, {0, 1, 2}, {1, 2, 3}, {5, 6, 7}}},
		{"window_1_sees_itself", 4, compute.AttentionOptions{Mask: causal, Window: 1, QueryPos: []int32{0, 2}},
			[][]int{{0}, {2}}},
		{"bidirectional", 4, compute.AttentionOptions{Mask: bidi},
			[][]int{{0, 1, 2, 3}, {0, 1, 2, 3}}},
		{"bidirectional_window", 7, compute.AttentionOptions{Mask: bidi, Window: 2, QueryPos: []int32{0, 3, 6}},
			[][]int{{0, 1, 2, 3, 4, 5, 6}, {2, 3, 4, 5, 6}, {5, 6}}},
		{"ring_buffer_empty_slots", 5, compute.AttentionOptions{Mask: causal, Window: 4, QueryPos: []int32{9, 10},
			KeyPos: []int32{10, 6, 7, -1, 9}},
			[][]int{{1, 2, 4}, {2, 4, 0}}},
		{"key_len", 6, compute.AttentionOptions{Mask: causal, QueryPos: []int32{2, 9}, KeyLen: []int{4}},
			[][]int{{0, 1, 2}, {0, 1, 2, 3}}},
		{"no_visible_key_gives_zeros", 3, compute.AttentionOptions{Mask: causal, QueryPos: []int32{1},
			KeyPos: []int32{2, 5, -1}},
			[][]int{{}}},
		{"key_len_zero", 3, compute.AttentionOptions{Mask: bidi, KeyLen: []int{0}},
			[][]int{{}, {}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			L := len(c.visible)
			v := make([]float32, c.S*c.S)
			for s := range c.S {
				v[s*c.S+s] = 1
			}
			got := b.ToF32(b.Attention(b.Zeros(compute.F32, L, 1, 4), b.FromF32(make([]float32, c.S*4), c.S, 1, 4),
				b.FromF32(v, c.S, 1, c.S), c.opt))
			for l, vis := range c.visible {
				want := make([]float32, c.S)
				for _, s := range vis {
					want[s] = float32(1 / float64(len(vis)))
				}
				requireSameBits(t, fmt.Sprintf("query %d", l), got[l*c.S:(l+1)*c.S], want)
			}
		})
	}
}

// Each query of an L-token call (speculative verify, prefill) must equal the
// same query computed alone against the same keys, bit for bit.
func TestAttentionQueriesAreBatchInvariant(t *testing.T) {
	const S, D = 40, 24
	for _, m := range []struct {
		name   string
		mask   compute.Mask
		window int
	}{{"causal", causal, 0}, {"sliding", causal, 7}, {"bidirectional_window", bidi, 5}} {
		for _, ratio := range []int{1, 2, 4} {
			t.Run(fmt.Sprintf("%s/gqa%d", m.name, ratio), func(t *testing.T) {
				b := New(4)
				const Hkv = 2
				Hq := Hkv * ratio
				for L := 1; L <= 9; L++ {
					c := attnCase{1, L, S, Hq, Hkv, D, D, compute.AttentionOptions{
						Mask: m.mask, Window: m.window, QueryPos: seqPos(1, L, S-L), Scale: 0.3}}
					q, k, v := attnInputs(c, 5)
					got := runAttention(b, c, q, k, v)
					for l := range L {
						one := c
						one.L = 1
						one.opt.QueryPos = c.opt.QueryPos[l : l+1]
						alone := runAttention(b, one, q[l*Hq*D:(l+1)*Hq*D], k, v)
						requireSameBits(t, fmt.Sprintf("L=%d query %d", L, l), got[l*Hq*D:(l+1)*Hq*D], alone)
					}
				}
			})
		}
	}
}

// Batch rows at different positions, with their own key lengths and ring
// slots, must each equal the row computed alone.
func TestAttentionBatchRowsAreInvariant(t *testing.T) {
	b := New(4)
	const B, L, S, Hq, Hkv, D = 3, 3, 16, 4, 2, 16
	keyPos := make([]int32, B*S)
	for i := range keyPos {
		keyPos[i] = int32(i % S)
	}
	keyPos[S+4] = -1 // an empty slot in row 1
	for _, window := range []int{0, 4} {
		c := attnCase{B, L, S, Hq, Hkv, D, D, compute.AttentionOptions{
			Mask: causal, Window: window, QueryPos: seqPos(B, L, 10, 3, 12),
			KeyPos: keyPos, KeyLen: []int{13, 6, 15}}}
		q, k, v := attnInputs(c, 9)
		got := runAttention(b, c, q, k, v)
		qn, kn := L*Hq*D, S*Hkv*D
		for bi := range B {
			one := c
			one.B = 1
			one.opt.QueryPos = c.opt.QueryPos[bi*L : (bi+1)*L]
			one.opt.KeyPos = keyPos[bi*S : (bi+1)*S]
			one.opt.KeyLen = c.opt.KeyLen[bi : bi+1]
			alone := runAttention(b, one, q[bi*qn:(bi+1)*qn], k[bi*kn:(bi+1)*kn], v[bi*kn:(bi+1)*kn])
			requireSameBits(t, fmt.Sprintf("window %d row %d", window, bi), got[bi*qn:(bi+1)*qn], alone)
		}
	}
}

// emulateAttention is the documented per-query algorithm written plainly in
// float32, with the value sum visited in the given slot order.
func emulateAttention(q, k, v []float32, slots []int, D int, scale float32) []float32 {
	e := make([]float64, len(slots))
	mx := math.Inf(-1)
	for i, s := range slots {
		e[i] = float64(float32(emulateDot(q, k[s*D:(s+1)*D]) * scale))
		mx = max(mx, e[i])
	}
	var sum float64
	for i := range e {
		e[i] = math.Exp(e[i] - mx)
		sum += e[i]
	}
	out := make([]float32, D)
	for i, s := range slots {
		p := float32(e[i] / sum)
		for j := range out {
			out[j] = out[j] + float32(p*v[s*D+j])
		}
	}
	return out
}

// Pins Attention to its documented arithmetic, and shows that the invariance
// tests' data would expose a different key order (as split-S "flash
// decoding" would produce): reversing the value sum changes the bits.
func TestAttentionFollowsDocumentedOrderAndDataIsOrderSensitive(t *testing.T) {
	b := New(2)
	const S, D = 40, 24
	c := attnCase{1, 1, S, 1, 1, D, D, compute.AttentionOptions{Mask: causal, QueryPos: []int32{S - 1}, Scale: 0.3}}
	q, k, v := attnInputs(c, 5)
	got := runAttention(b, c, q, k, v)
	fwd, rev := make([]int, S), make([]int, S)
	for s := range S {
		fwd[s], rev[s] = s, S-1-s
	}
	requireSameBits(t, "documented order", got, emulateAttention(q, k, v, fwd, D, 0.3))
	if sameBits(got, emulateAttention(q, k, v, rev, D, 0.3)) < 0 {
		t.Fatal("reversing the key order changed no output bit; the invariance data is too tame")
	}
}

func TestAttentionThreeDimensionalMeansOneBatchRow(t *testing.T) {
	b := New(2)
	c := attnCase{1, 3, 5, 4, 2, 8, 8, compute.AttentionOptions{Mask: causal, QueryPos: []int32{2, 3, 4}}}
	q, k, v := attnInputs(c, 1)
	y := b.Attention(b.FromF32(q, 3, 4, 8), b.FromF32(k, 5, 2, 8), b.FromF32(v, 5, 2, 8), c.opt)
	if !compute.SameShape(y.Shape(), []int{3, 4, 8}) {
		t.Fatalf("shape %v, want [3 4 8]", y.Shape())
	}
	requireSameBits(t, "3-D vs 4-D", b.ToF32(y), runAttention(b, c, q, k, v))
}

func TestAttentionEmptyShapes(t *testing.T) {
	b := New(2)
	k := b.Zeros(compute.F32, 1, 3, 1, 4)
	if y := b.Attention(b.Zeros(compute.F32, 1, 0, 2, 4), k, k, compute.AttentionOptions{Mask: causal, QueryPos: []int32{}}); y.Len() != 0 {
		t.Fatalf("L=0 gave %v", y)
	}
	e := b.Zeros(compute.F32, 1, 0, 1, 4)
	y := b.Attention(b.FromF32([]float32{1, 2, 3, 4, 5, 6, 7, 8}, 1, 1, 2, 4), e, e, compute.AttentionOptions{Mask: causal, QueryPos: []int32{0}})
	requireSameBits(t, "S=0", b.ToF32(y), make([]float32, 8))
}

func TestAttentionRejectsMisuse(t *testing.T) {
	b := New(1)
	q, k := b.Zeros(compute.F32, 1, 1, 3, 4), b.Zeros(compute.F32, 1, 2, 2, 4)
	mustPanic(t, "Hq not a multiple of Hkv", "Attention", func() {
		b.Attention(q, k, k, compute.AttentionOptions{Mask: bidi})
	})
	q = b.Zeros(compute.F32, 1, 1, 4, 4)
	mustPanic(t, "missing query positions", "query positions", func() {
		b.Attention(q, k, k, compute.AttentionOptions{Mask: causal})
	})
	mustPanic(t, "short KeyPos", "key positions", func() {
		b.Attention(q, k, k, compute.AttentionOptions{Mask: bidi, KeyPos: []int32{0}})
	})
	mustPanic(t, "head dims differ", "Attention", func() {
		b.Attention(q, b.Zeros(compute.F32, 1, 2, 2, 5), k, compute.AttentionOptions{Mask: bidi})
	})
}

// TestAttentionRingsReduceInPositionOrder protects KeyStart: the same keys
// held by rings of different capacities (so at different slots) give the
// same bits when each ring starts at its oldest slot.
func TestAttentionRingsReduceInPositionOrder(t *testing.T) {
	b := New(2)
	const Hq, Hkv, D, W, last = 4, 2, 16, 11, 40
	r := newRand(7)
	keys, vals := randVec(r, (last+1)*Hkv*D, 1), randVec(r, (last+1)*Hkv*D, 1)
	q := randVec(r, 3*Hq*D, 1)
	qpos := []int32{last - 2, last - 1, last}
	run := func(capacity int) []float32 {
		k, v := make([]float32, capacity*Hkv*D), make([]float32, capacity*Hkv*D)
		pos := make([]int32, capacity)
		for i := range pos {
			pos[i] = -1
		}
		for p := 0; p <= last; p++ { // write positions in order; the ring keeps the newest
			s := p % capacity
			copy(k[s*Hkv*D:(s+1)*Hkv*D], keys[p*Hkv*D:(p+1)*Hkv*D])
			copy(v[s*Hkv*D:(s+1)*Hkv*D], vals[p*Hkv*D:(p+1)*Hkv*D])
			pos[s] = int32(p)
		}
		opt := compute.AttentionOptions{Scale: 1, Mask: causal, Window: W, QueryPos: qpos, KeyPos: pos, KeyStart: []int{(last + 1) % capacity}}
		return b.ToF32(b.Attention(b.FromF32(q, 3, Hq, D), b.FromF32(k, capacity, Hkv, D), b.FromF32(v, capacity, Hkv, D), opt))
	}
	want := run(64) // no wrap: slot order is position order
	// Three queries need W+2 slots: the oldest query still sees W keys.
	for _, capacity := range []int{W + 2, W + 3, 17, 23} {
		requireSameBits(t, fmt.Sprintf("ring of %d slots", capacity), run(capacity), want)
	}
}
