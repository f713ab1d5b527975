// Package compute defines the op set that model code is written against,
// the tensor type those ops take, and the element types Tandem stores.
//
// Backends (compute/cpu, later compute/cuda) implement Backend. Every op is
// batch-invariant: a row's result never depends on how many other rows or
// query tokens share the call. Speculative decoding relies on this to make a
// verify pass over k+1 tokens bit-identical to k+1 single-token steps.
package compute

import (
	"encoding/binary"
	"fmt"
	"math"
)

// DType is an element type of stored tensors.
type DType uint8

const (
	Invalid DType = iota
	F32
	BF16
	F16
	I32
	I64
)

var dtypeNames = [...]string{Invalid: "invalid", F32: "F32", BF16: "BF16", F16: "F16", I32: "I32", I64: "I64"}

// String returns the safetensors spelling of the type ("BF16", "F32", ...).
func (d DType) String() string {
	if int(d) < len(dtypeNames) {
		return dtypeNames[d]
	}
	return fmt.Sprintf("DType(%d)", uint8(d))
}

// Size is the number of bytes of one element.
func (d DType) Size() int {
	switch d {
	case F32, I32:
		return 4
	case BF16, F16:
		return 2
	case I64:
		return 8
	}
	return 0
}

// IsFloat reports whether d holds floating-point values.
func (d DType) IsFloat() bool { return d == F32 || d == BF16 || d == F16 }

// ParseDType accepts the safetensors spellings ("BF16") and the lower-case
// spellings used on the command line ("bf16", "f32", "float32", "bfloat16").
func ParseDType(s string) (DType, error) {
	switch s {
	case "F32", "f32", "float32":
		return F32, nil
	case "BF16", "bf16", "bfloat16":
		return BF16, nil
	case "F16", "f16", "float16":
		return F16, nil
	case "I32", "i32", "int32":
		return I32, nil
	case "I64", "i64", "int64":
		return I64, nil
	}
	return Invalid, fmt.Errorf("unknown dtype %q (want one of F32, BF16, F16, I32, I64)", s)
}

// BF16ToF32 widens a bfloat16 bit pattern exactly.
func BF16ToF32(b uint16) float32 { return math.Float32frombits(uint32(b) << 16) }

// F32ToBF16 rounds to nearest even, as PyTorch does; NaN stays NaN.
func F32ToBF16(f float32) uint16 {
	u := math.Float32bits(f)
	if u&0x7fffffff > 0x7f800000 {
		return uint16(u>>16) | 0x40 // quiet NaN, sign kept
	}
	return uint16((u + 0x7fff + (u>>16)&1) >> 16)
}

// RoundBF16 returns f rounded to the nearest bfloat16 value, as a float32.
func RoundBF16(f float32) float32 { return BF16ToF32(F32ToBF16(f)) }

// PutFloat stores v as element i of buf, little-endian in float dtype dt
// (rounded to nearest even for BF16 and F16).
func PutFloat(buf []byte, i int, v float32, dt DType) {
	switch dt {
	case BF16:
		binary.LittleEndian.PutUint16(buf[2*i:], F32ToBF16(v))
	case F16:
		binary.LittleEndian.PutUint16(buf[2*i:], F32ToF16(v))
	default:
		binary.LittleEndian.PutUint32(buf[4*i:], math.Float32bits(v))
	}
}

// F16ToF32 widens an IEEE half-precision bit pattern exactly.
func F16ToF32(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	man := uint32(h) & 0x3ff
	switch {
	case exp == 0x1f: // inf or NaN
		return math.Float32frombits(sign | 0x7f800000 | man<<13)
	case exp == 0 && man == 0:
		return math.Float32frombits(sign)
	case exp == 0: // subnormal: renormalise
		e := uint32(127 - 15 + 1)
		for man&0x400 == 0 {
			man <<= 1
			e--
		}
		man &= 0x3ff
		return math.Float32frombits(sign | e<<23 | man<<13)
	}
	return math.Float32frombits(sign | (exp+127-15)<<23 | man<<13)
}

// F32ToF16 rounds to nearest even IEEE half precision, with overflow to
// infinity and gradual underflow.
func F32ToF16(f float32) uint16 {
	u := math.Float32bits(f)
	sign := uint16(u>>16) & 0x8000
	exp := int32(u>>23) & 0xff
	man := u & 0x7fffff
	if exp == 0xff {
		if man != 0 {
			return sign | 0x7e00
		}
		return sign | 0x7c00
	}
	e := exp - 127 + 15
	if e >= 0x1f {
		return sign | 0x7c00
	}
	if e <= 0 {
		if e < -10 {
			return sign
		}
		man |= 0x800000
		shift := uint32(14 - e)
		half := uint32(1) << (shift - 1)
		rem := man & (1<<shift - 1)
		r := man >> shift
		if rem > half || (rem == half && r&1 == 1) {
			r++
		}
		return sign | uint16(r)
	}
	r := uint32(e)<<10 | man>>13
	rem := man & 0x1fff
	if rem > 0x1000 || (rem == 0x1000 && r&1 == 1) {
		r++ // may carry into the exponent, which is the right result
	}
	return sign | uint16(r)
}
