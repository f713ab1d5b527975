package gemma4

import (
	"fmt"
	"math"
	"testing"

	"tandem/compute"
	"tandem/compute/computetest"
)

// randomWeighter is the test backend, wrapped by computetest's host
// RandomWeighting where it makes no random weights itself (the CPU, where
// it stacks too, so the loader stacks); on the GPU it is random_uniform.
func randomWeighter(t *testing.T) (compute.Backend, compute.RandomWeighter, *computetest.RandomWeighting) {
	b := computetest.Backend(t)
	if rw, ok := b.(compute.RandomWeighter); ok {
		return b, rw, nil
	}
	w := stackingWeighter{&computetest.RandomWeighting{Backend: b}}
	return w, w, w.RandomWeighting
}

// stackingWeighter adds compute.Stacker (separate MatMuls, the same bits)
// to RandomWeighting.
type stackingWeighter struct{ *computetest.RandomWeighting }

func (s stackingWeighter) MatMuls(x *compute.Tensor, ws ...*compute.Tensor) []*compute.Tensor {
	out := make([]*compute.Tensor, len(ws))
	for i, w := range ws {
		out[i] = s.MatMul(x, w)
	}
	return out
}

// TestRandomWeightMatchesHost protects random weights made by the backend
// (LoadOptions.RandomOnDevice): every element must be the one the host
// draws for gen-model, in each float dtype, across blocks of the host's
// streams (a tensor past 1 << 20 elements), the kernel's runs of 4,096 and
// a ragged end, and for parts stacked in one tensor.
func TestRandomWeightMatchesHost(t *testing.T) {
	b, rw, _ := randomWeighter(t)
	const seed = 7
	ws := []Weight{
		{Name: "big", Shape: []int{1100, 1001}, Mean: 0, Std: 0.02},
		{Name: "norm", Shape: []int{300}, Mean: 1, Std: 0.1},
		{Name: "odd", Shape: []int{37, 129}, Mean: -0.5, Std: 2},
	}
	s := &randomSource{weights: map[string]Weight{}, seed: seed}
	for _, w := range ws {
		s.weights[w.Name] = w
	}
	for _, dt := range []compute.DType{compute.BF16, compute.F32, compute.F16} {
		var stackFills []compute.RandomFill
		var stackWant []float32
		off := 0
		for _, w := range ws {
			f, ok := s.fill(w.Name, 0)
			if !ok {
				t.Fatalf("%s: no fill", w.Name)
			}
			raw, err := randomBytes(w, dt, seed)
			if err != nil {
				t.Fatal(err)
			}
			want := hostValues(raw, dt)
			got, err := rw.RandomWeight(dt, w.Shape, []compute.RandomFill{f})
			if err != nil {
				t.Fatal(err)
			}
			if err := sameValues(b.ToF32(got), want); err != nil {
				t.Fatalf("%v %s%v: %v", dt, w.Name, w.Shape, err)
			}
			f.Off = off
			off += f.N
			stackFills = append(stackFills, f)
			stackWant = append(stackWant, want...)
		}
		got, err := rw.RandomWeight(dt, []int{off}, stackFills)
		if err != nil {
			t.Fatal(err)
		}
		if err := sameValues(b.ToF32(got), stackWant); err != nil {
			t.Fatalf("%v, the three stacked: %v", dt, err)
		}
	}
}

// TestRandomOnDeviceModel protects the loader's path for weights the
// backend makes: a preset's random target (stacked projections, PLE and
// experts included) must compute what the host-made one does, bit for bit.
func TestRandomOnDeviceModel(t *testing.T) {
	b, _, host := randomWeighter(t)
	for _, name := range []string{"gemma4-tiny-e2b", "gemma4-tiny-26b-a4b"} {
		p, err := LookupPreset(name)
		if err != nil {
			t.Fatal(err)
		}
		logits := func(opt LoadOptions) []float32 {
			m, err := p.Random(b, compute.BF16, 3, opt)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			ids := []int32{2, 17, 99, 3, 250, 41}
			out, err := m.Forward([]Row{{Tokens: ids, Cache: m.NewCache(len(ids))}}, ForwardOptions{Logits: LogitsAll})
			if err != nil {
				t.Fatal(err)
			}
			return b.ToF32(out.Logits)
		}
		want := logits(LoadOptions{})
		calls := 0
		if host != nil {
			calls = host.Calls
		}
		got := logits(LoadOptions{RandomOnDevice: true})
		if host != nil && host.Calls == calls {
			t.Fatalf("%s: the backend made no weights", name)
		}
		if err := sameValues(got, want); err != nil {
			t.Fatalf("%s: logits: %v", name, err)
		}
	}
}

// hostValues reads raw weights of dtype dt as float32 (exact for all three).
func hostValues(raw []byte, dt compute.DType) []float32 {
	out := make([]float32, len(raw)/dt.Size())
	for i := range out {
		switch dt {
		case compute.BF16:
			out[i] = math.Float32frombits(uint32(raw[2*i])<<16 | uint32(raw[2*i+1])<<24)
		case compute.F16:
			out[i] = compute.F16ToF32(uint16(raw[2*i]) | uint16(raw[2*i+1])<<8)
		default:
			out[i] = math.Float32frombits(uint32(raw[4*i]) | uint32(raw[4*i+1])<<8 | uint32(raw[4*i+2])<<16 | uint32(raw[4*i+3])<<24)
		}
	}
	return out
}

func sameValues(got, want []float32) error {
	if len(got) != len(want) {
		return fmt.Errorf("%d values, want %d", len(got), len(want))
	}
	for i := range got {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			return fmt.Errorf("element %d is %v, want %v", i, got[i], want[i])
		}
	}
	return nil
}
