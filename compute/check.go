package compute

import "fmt"

// Argument checks shared by the backends. Misuse by model code is a
// programming error, so backends panic with these errors.

// AttentionShape is the geometry of one Attention call.
type AttentionShape struct {
	B, L, Hq, D int // queries [B, L, Hq, D]
	S, Hkv, Dv  int // keys [B, S, Hkv, D], values [B, S, Hkv, Dv]
}

// CheckAttention validates Attention's arguments and returns their shape.
func CheckAttention(q, k, v *Tensor, opt AttentionOptions) (AttentionShape, error) {
	var sh AttentionShape
	var Bk, Bv, Sv, Hv, Dk int
	var ok [3]bool
	sh.B, sh.L, sh.Hq, sh.D, ok[0] = attnDims(q)
	Bk, sh.S, sh.Hkv, Dk, ok[1] = attnDims(k)
	Bv, Sv, Hv, sh.Dv, ok[2] = attnDims(v)
	B, L, S := sh.B, sh.L, sh.S
	needPos := opt.Mask == Causal || opt.Window > 0
	switch {
	case !ok[0] || !ok[1] || !ok[2]:
		return sh, fmt.Errorf("Attention wants 3-D or 4-D q, k, v; got %v, %v, %v", q, k, v)
	case Bk != B || Bv != B || Sv != S || Hv != sh.Hkv || Dk != sh.D || sh.Hkv == 0 || sh.Hq%sh.Hkv != 0:
		return sh, fmt.Errorf("Attention q %v, k %v, v %v", q, k, v)
	case opt.Mask != Causal && opt.Mask != Bidirectional:
		return sh, fmt.Errorf("Attention with unknown mask %d", opt.Mask)
	case needPos && len(opt.QueryPos) != B*L:
		return sh, fmt.Errorf("Attention needs %d query positions, got %d", B*L, len(opt.QueryPos))
	case opt.KeyPos != nil && len(opt.KeyPos) != B*S:
		return sh, fmt.Errorf("Attention needs %d key positions, got %d", B*S, len(opt.KeyPos))
	case opt.KeyLen != nil && len(opt.KeyLen) != B:
		return sh, fmt.Errorf("Attention needs %d key lengths, got %d", B, len(opt.KeyLen))
	case opt.KeyStart != nil && len(opt.KeyStart) != B:
		return sh, fmt.Errorf("Attention needs %d key starts, got %d", B, len(opt.KeyStart))
	}
	return sh, nil
}

// attnDims reads [B, T, H, d], or [T, H, d] as B = 1.
func attnDims(t *Tensor) (B, T, H, d int, ok bool) {
	switch t.Rank() {
	case 3:
		return 1, t.Dim(0), t.Dim(1), t.Dim(2), true
	case 4:
		return t.Dim(0), t.Dim(1), t.Dim(2), t.Dim(3), true
	}
	return 0, 0, 0, 0, false
}

// BroadcastPeriod says how Add and Mul index b against a's elements: b[i %
// period], for b of a's shape, a row of a.Dim(-1) values, or a scalar.
func BroadcastPeriod(a, b *Tensor) (int, error) {
	switch {
	case SameShape(a.Shape(), b.Shape()):
		return a.Len(), nil
	case a.Rank() > 0 && b.Len() == a.Dim(-1):
		return a.Dim(-1), nil
	case b.Len() == 1:
		return 1, nil
	}
	return 0, fmt.Errorf("cannot broadcast %v against %v", b, a)
}

// CheckRoPE validates RoPE's arguments and returns x's T tokens, H heads
// and head dimension d.
func CheckRoPE(x *Tensor, pos []int32, r *RoPE) (T, H, d int, err error) {
	if x.Rank() < 2 || r == nil || r.Dim%2 != 0 || r.Dim > x.Dim(-1) || len(r.InvFreq) != r.Dim/2 {
		return 0, 0, 0, fmt.Errorf("RoPE of %v with a bad table (nil, odd, wider than the head, or len(InvFreq) != Dim/2)", x)
	}
	d, H = x.Dim(-1), x.Dim(-2)
	if d*H > 0 {
		T = x.Len() / (d * H)
	}
	if len(pos) != T {
		return 0, 0, 0, fmt.Errorf("RoPE of %v with %d positions", x, len(pos))
	}
	return T, H, d, nil
}
