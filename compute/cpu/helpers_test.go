package cpu

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"tandem/compute"
)

// eps32 is float32's unit roundoff (half an ulp of 1).
const eps32 = 1.0 / (1 << 24)

func newRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)) }

// randVec returns n values uniform in [-1, 1) scaled by s.
func randVec(r *rand.Rand, n int, s float32) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = (2*r.Float32() - 1) * s
	}
	return v
}

// roundTo rounds values to what dt can hold, so the float64 reference sees
// exactly the weights the backend sees.
func roundTo(dt compute.DType, v []float32) []float32 {
	out := make([]float32, len(v))
	for i, x := range v {
		switch dt {
		case compute.BF16:
			out[i] = compute.RoundBF16(x)
		case compute.F16:
			out[i] = compute.F16ToF32(compute.F32ToF16(x))
		default:
			out[i] = x
		}
	}
	return out
}

// weightBytes encodes values (already representable in dt) as little-endian
// stored bytes.
func weightBytes(dt compute.DType, v []float32) []byte {
	raw := make([]byte, len(v)*dt.Size())
	for i, x := range v {
		switch dt {
		case compute.F32:
			binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(x))
		case compute.BF16:
			binary.LittleEndian.PutUint16(raw[2*i:], compute.F32ToBF16(x))
		case compute.F16:
			binary.LittleEndian.PutUint16(raw[2*i:], compute.F32ToF16(x))
		}
	}
	return raw
}

// weight makes a dt tensor through Backend.Weight from values representable
// in dt.
func weight(t testing.TB, b *Backend, dt compute.DType, v []float32, shape ...int) *compute.Tensor {
	t.Helper()
	w, err := b.Weight(dt, shape, weightBytes(dt, v))
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// sameBits reports the first index where a and b differ bitwise, or -1.
func sameBits(a, b []float32) int {
	if len(a) != len(b) {
		return 0
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return i
		}
	}
	return -1
}

func requireSameBits(t *testing.T, what string, got, want []float32) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	if i := sameBits(got, want); i >= 0 {
		t.Fatalf("%s: element %d is %v (%#08x), want %v (%#08x): not bit-identical",
			what, i, got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
	}
}

// requireClose checks |got-want| <= tol[i] elementwise (tol of length 1
// applies to all).
func requireClose(t *testing.T, what string, got []float32, want, tol []float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	for i := range got {
		tl := tol[0]
		if len(tol) > 1 {
			tl = tol[i]
		}
		d := math.Abs(float64(got[i]) - want[i])
		if !(d <= tl) { // also catches NaN
			t.Fatalf("%s: element %d is %v, want %v (diff %.3g > tol %.3g)", what, i, got[i], want[i], d, tl)
		}
	}
}

func mustPanic(t *testing.T, what, substr string, f func()) {
	t.Helper()
	defer func() {
		t.Helper()
		r := recover()
		if r == nil {
			t.Fatalf("%s: no panic", what)
		}
		if s, ok := r.(string); substr != "" && (!ok || !strings.Contains(s, substr)) {
			t.Fatalf("%s: panic %v, want one mentioning %q", what, r, substr)
		}
	}()
	f()
}

func f64s(v []float32) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x)
	}
	return out
}

// ---- float64 references ----

// refMatMul returns x·wᵀ and a rigorous float32 error bound for each output
// under the documented reduction order: the longest chain is K/8 lane adds
// plus the tail and the final tree, each product rounded once.
func refMatMul(x, w []float32, M, N, K int) (want, tol []float64) {
	want, tol = make([]float64, M*N), make([]float64, M*N)
	chain := float64(K/8 + 8 + 4)
	for m := range M {
		for n := range N {
			var s, a float64
			for k := range K {
				p := float64(x[m*K+k]) * float64(w[n*K+k])
				s += p
				a += math.Abs(p)
			}
			want[m*N+n] = s
			tol[m*N+n] = 1.01*(chain+1)*eps32*a + 1e-38
		}
	}
	return want, tol
}

type attnCase struct {
	B, L, S, Hq, Hkv, D, Dv int
	opt                     compute.AttentionOptions
}

// refAttention is attention in float64 with the documented visibility rule,
// written independently of the backend's slot enumeration. tol bounds the
// float32 error: score errors (dot products) move each weight by a relative
// factor of at most about 4δ, and the weighted sum adds its own rounding.
func refAttention(c attnCase, q, k, v []float32) (want, tol []float64) {
	want = make([]float64, c.B*c.L*c.Hq*c.Dv)
	tol = make([]float64, len(want))
	scale := float64(c.opt.Scale)
	if scale == 0 {
		scale = 1
	}
	g := c.Hq / c.Hkv
	for b := range c.B {
		for l := range c.L {
			qp := 0
			if c.opt.QueryPos != nil {
				qp = int(c.opt.QueryPos[b*c.L+l])
			}
			var slots []int
			for s := range c.S {
				if c.opt.KeyLen != nil && s >= c.opt.KeyLen[b] {
					continue
				}
				kp := s
				if c.opt.KeyPos != nil {
					kp = int(c.opt.KeyPos[b*c.S+s])
					if kp < 0 {
						continue
					}
				}
				ok := c.opt.Mask == compute.Bidirectional || kp <= qp
				if c.opt.Window > 0 && qp-kp >= c.opt.Window {
					ok = false
				}
				if ok {
					slots = append(slots, s)
				}
			}
			for h := range c.Hq {
				kv := h / g
				qr := q[((b*c.L+l)*c.Hq+h)*c.D:][:c.D]
				o := ((b*c.L+l)*c.Hq + h) * c.Dv
				if len(slots) == 0 {
					continue
				}
				sc := make([]float64, len(slots))
				var delta float64
				mx := math.Inf(-1)
				for i, s := range slots {
					kr := k[((b*c.S+s)*c.Hkv+kv)*c.D:][:c.D]
					var d, a float64
					for j := range c.D {
						d += float64(qr[j]) * float64(kr[j])
						a += math.Abs(float64(qr[j]) * float64(kr[j]))
					}
					sc[i] = d * scale
					delta = max(delta, (float64(c.D/8+13)*eps32*a+2*eps32*math.Abs(d))*math.Abs(scale))
					mx = max(mx, sc[i])
				}
				var sum float64
				for i := range sc {
					sc[i] = math.Exp(sc[i] - mx)
					sum += sc[i]
				}
				rel := 4.4*delta + float64(len(slots)+4)*eps32
				for i, s := range slots {
					p := sc[i] / sum
					vr := v[((b*c.S+s)*c.Hkv+kv)*c.Dv:][:c.Dv]
					for j := range c.Dv {
						want[o+j] += p * float64(vr[j])
						tol[o+j] += 1.1 * rel * p * math.Abs(float64(vr[j]))
					}
				}
				for j := range c.Dv {
					tol[o+j] += 1e-30
				}
			}
		}
	}
	return want, tol
}
