package compute

import (
	"math"
	"math/rand/v2"
	"sort"
	"testing"
)

func f32(bits uint32) float32 { return math.Float32frombits(bits) }

// nearestEven picks, from the two representable neighbours lo < hi of an
// exact value v (all as float64), the nearest one, ties to the one whose
// bit pattern is even. It is the reference rounding rule.
func nearestEven(v, lo, hi float64, loBits, hiBits uint16) uint16 {
	dl, dh := v-lo, hi-v
	switch {
	case dl < dh:
		return loBits
	case dh < dl:
		return hiBits
	case loBits%2 == 0:
		return loBits
	}
	return hiBits
}

// refBF16 rounds a finite float32 to bfloat16 by searching the two
// neighbouring bfloat16 values; 0x7f80 (inf) acts as the value 2^128, which
// makes overflow follow the same rule.
func refBF16(f float32) uint16 {
	sign := uint16(0)
	if math.Signbit(float64(f)) {
		sign = 0x8000
	}
	a := math.Abs(float64(f))
	val := func(h uint16) float64 {
		if h == 0x7f80 {
			return math.Ldexp(1, 128)
		}
		return float64(BF16ToF32(h))
	}
	lo := uint16(math.Float32bits(float32(a)) >> 16) // truncation
	if val(lo) == a {
		return sign | lo
	}
	return sign | nearestEven(a, val(lo), val(lo+1), lo, lo+1)
}

// f16Values lists the value of every non-negative half pattern 0..0x7c00,
// with 0x7c00 (inf) standing for 2^16 so that overflow rounds by the same
// rule. The list is increasing.
var f16Values = func() []float64 {
	v := make([]float64, 0x7c01)
	for h := range v {
		e, m := h>>10, h&0x3ff
		if e == 0 {
			v[h] = math.Ldexp(float64(m), -24)
		} else {
			v[h] = math.Ldexp(float64(m|0x400), e-25)
		}
	}
	return v
}()

func refF16(f float32) uint16 {
	sign := uint16(0)
	if math.Signbit(float64(f)) {
		sign = 0x8000
	}
	a := math.Abs(float64(f))
	i := sort.SearchFloat64s(f16Values, a) // first value >= a
	if i == len(f16Values) {
		return sign | 0x7c00
	}
	if f16Values[i] == a {
		return sign | uint16(i)
	}
	return sign | nearestEven(a, f16Values[i-1], f16Values[i], uint16(i-1), uint16(i))
}

func TestBF16RoundsToNearestEven(t *testing.T) {
	for _, c := range []struct {
		name string
		in   float32
		want uint16
	}{
		{"one", 1, 0x3f80},
		{"halfway_down_to_even", f32(0x3f808000), 0x3f80},
		{"halfway_up_to_even", f32(0x3f818000), 0x3f82},
		{"above_halfway", f32(0x3f808001), 0x3f81},
		{"below_halfway", f32(0x3f807fff), 0x3f80},
		{"negative_halfway", f32(0xbf818000), 0xbf82},
		{"max_float32_overflows", math.MaxFloat32, 0x7f80},
		{"largest_bf16_stays", f32(0x7f7f0000), 0x7f7f},
		{"inf", float32(math.Inf(1)), 0x7f80},
		{"neg_inf", float32(math.Inf(-1)), 0xff80},
		{"neg_zero", f32(0x80000000), 0x8000},
		{"smallest_subnormal_to_zero", f32(0x00000001), 0x0000},
		{"subnormal_halfway_to_even", f32(0x00018000), 0x0002},
		{"subnormal_exact", f32(0x00010000), 0x0001},
		{"subnormal_rounds_to_normal", f32(0x007fffff), 0x0080},
	} {
		if got := F32ToBF16(c.in); got != c.want {
			t.Errorf("%s: F32ToBF16(%#08x) = %#04x, want %#04x", c.name, math.Float32bits(c.in), got, c.want)
		}
	}
}

func TestBF16NaNStaysNaN(t *testing.T) {
	for _, bits := range []uint32{0x7fc00000, 0xffc00000, 0x7f800001, 0xff800001, 0x7fffffff, 0x7f80ffff} {
		h := F32ToBF16(f32(bits))
		if h&0x7fff <= 0x7f80 || h>>15 != uint16(bits>>31) {
			t.Errorf("F32ToBF16(NaN %#08x) = %#04x: not a NaN of the same sign", bits, h)
		}
		if v := RoundBF16(f32(bits)); v == v {
			t.Errorf("RoundBF16(NaN %#08x) = %v", bits, v)
		}
	}
}

func TestBF16MatchesReferenceRounding(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 1 << 20 {
		var bits uint32
		if i < 1<<16 {
			bits = uint32(i)<<16 | 0x8000 // every exact halfway case
		} else {
			bits = r.Uint32()
		}
		f := f32(bits)
		if f != f {
			continue
		}
		if got, want := F32ToBF16(f), refBF16(f); got != want {
			t.Fatalf("F32ToBF16(%#08x) = %#04x, want %#04x", bits, got, want)
		}
	}
}

func TestBF16WideningRoundTripsEveryPattern(t *testing.T) {
	for h := range 1 << 16 {
		f := BF16ToF32(uint16(h))
		if math.Float32bits(f) != uint32(h)<<16 {
			t.Fatalf("BF16ToF32(%#04x) = %#08x", h, math.Float32bits(f))
		}
		back := F32ToBF16(f)
		if f != f {
			if back&0x7fff <= 0x7f80 || back>>15 != uint16(h)>>15 {
				t.Fatalf("NaN %#04x came back as %#04x", h, back)
			}
			continue
		}
		if back != uint16(h) {
			t.Fatalf("%#04x → %v → %#04x", h, f, back)
		}
	}
}

func TestF16WideningIsExactForEveryPattern(t *testing.T) {
	for h := range 1 << 16 {
		f := F16ToF32(uint16(h))
		sign, mag := h>>15, h&0x7fff
		switch {
		case mag > 0x7c00:
			if f == f {
				t.Fatalf("F16ToF32(%#04x) = %v, want NaN", h, f)
			}
		case mag == 0x7c00:
			if !math.IsInf(float64(f), 1-2*sign) {
				t.Fatalf("F16ToF32(%#04x) = %v, want inf", h, f)
			}
		default:
			want := f16Values[mag]
			if sign == 1 {
				want = -want
			}
			if float64(f) != want || math.Signbit(float64(f)) != (sign == 1) {
				t.Fatalf("F16ToF32(%#04x) = %v, want %v", h, f, want)
			}
		}
	}
}

// Every half value, widened and narrowed again, comes back bit for bit
// (NaNs come back as NaNs of the same sign).
func TestF16RoundTripsEveryPattern(t *testing.T) {
	for h := range 1 << 16 {
		f := F16ToF32(uint16(h))
		back := F32ToF16(f)
		if f != f {
			if back&0x7fff <= 0x7c00 || back>>15 != uint16(h)>>15 {
				t.Fatalf("NaN %#04x came back as %#04x", h, back)
			}
			continue
		}
		if back != uint16(h) {
			t.Fatalf("%#04x → %v → %#04x", h, f, back)
		}
	}
}

func TestF16RoundsToNearestEven(t *testing.T) {
	for _, c := range []struct {
		name string
		in   float64
		want uint16
	}{
		{"one", 1, 0x3c00},
		{"halfway_down_to_even", 1 + 0x1p-11, 0x3c00},
		{"halfway_up_to_even", 1 + 3*0x1p-11, 0x3c02},
		{"max", 65504, 0x7bff},
		{"below_overflow_midpoint", 65519, 0x7bff},
		{"overflow_midpoint_to_inf", 65520, 0x7c00},
		{"large_to_inf", 1e6, 0x7c00},
		{"smallest_subnormal", 0x1p-24, 0x0001},
		{"half_smallest_subnormal_to_zero", 0x1p-25, 0x0000},
		{"above_half_smallest_subnormal", 0x1p-25 + 0x1p-40, 0x0001},
		{"subnormal_halfway_to_even", 3 * 0x1p-25, 0x0002},
		{"largest_subnormal_rounds_up_to_normal", 0x1p-14 - 0x1p-26, 0x0400},
		{"smallest_normal", 0x1p-14, 0x0400},
		{"tiny_to_zero", 1e-30, 0x0000},
		{"negative", -2, 0xc000},
		{"neg_zero", math.Copysign(0, -1), 0x8000},
	} {
		if got := F32ToF16(float32(c.in)); got != c.want {
			t.Errorf("%s: F32ToF16(%v) = %#04x, want %#04x", c.name, c.in, got, c.want)
		}
	}
	if got := F32ToF16(float32(math.Inf(-1))); got != 0xfc00 {
		t.Errorf("F32ToF16(-inf) = %#04x", got)
	}
	if got := F32ToF16(float32(math.NaN())); got&0x7fff <= 0x7c00 {
		t.Errorf("F32ToF16(NaN) = %#04x, not a NaN", got)
	}
}

func TestF16MatchesReferenceRounding(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for i := range 1 << 20 {
		var f float32
		switch i % 3 {
		case 0: // anywhere
			f = f32(r.Uint32())
		case 1: // the half range, including subnormals and overflow
			f = float32(math.Ldexp(r.Float64()*2-1, r.IntN(44)-26))
		default: // exact midpoints between neighbouring halves
			h := r.IntN(0x7c00)
			f = float32((f16Values[h] + f16Values[h+1]) / 2)
		}
		if f != f {
			continue
		}
		if got, want := F32ToF16(f), refF16(f); got != want {
			t.Fatalf("F32ToF16(%v = %#08x) = %#04x, want %#04x", f, math.Float32bits(f), got, want)
		}
	}
}

func TestParseDTypeAndSizes(t *testing.T) {
	for _, c := range []struct {
		s    string
		want DType
		size int
	}{{"BF16", BF16, 2}, {"bfloat16", BF16, 2}, {"f32", F32, 4}, {"float16", F16, 2}, {"I64", I64, 8}, {"int32", I32, 4}} {
		got, err := ParseDType(c.s)
		if err != nil || got != c.want || got.Size() != c.size {
			t.Errorf("ParseDType(%q) = %v (size %d), %v", c.s, got, got.Size(), err)
		}
	}
	if _, err := ParseDType("fp8"); err == nil {
		t.Error("ParseDType(fp8) succeeded")
	}
	if Invalid.Size() != 0 || Invalid.IsFloat() || !BF16.IsFloat() || I32.IsFloat() {
		t.Error("Size/IsFloat of Invalid, BF16 or I32")
	}
}
