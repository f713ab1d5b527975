package gemma4

import (
	"encoding/json"
	"fmt"
	"math"

	"tandem/checkpoint/safetensors"
	"tandem/compute"
)

// weightSource is where a model's weights come from: a checkpoint's
// safetensors set, or random values made on demand (randomSource).
type weightSource interface {
	Tensors() []safetensors.TensorInfo
	Lookup(name string) (safetensors.TensorInfo, bool)
	Data(name string) ([]byte, error)
	Close() error
}

// randomSource makes each tensor's bytes when it is loaded, with the values
// gen-model would write for the same seed, so a random model of a published
// shape needs no checkpoint on disk (the 31B shape is 62 GB in bf16).
type randomSource struct {
	weights map[string]Weight
	infos   []safetensors.TensorInfo
	index   map[string]int
	dt      compute.DType
	seed    uint64
}

func newRandomSource(p Preset, dt compute.DType, seed uint64) *randomSource {
	s := &randomSource{weights: map[string]Weight{}, index: map[string]int{}, dt: dt, seed: seed}
	for _, w := range p.Weights() {
		d := dt
		if w.Int {
			d = compute.I64
		}
		s.weights[w.Name] = w
		s.index[w.Name] = len(s.infos)
		s.infos = append(s.infos, safetensors.TensorInfo{Name: w.Name, DType: d, Shape: w.Shape,
			Size: int64(compute.NumElements(w.Shape) * d.Size())})
	}
	return s
}

func (s *randomSource) Tensors() []safetensors.TensorInfo { return s.infos }

func (s *randomSource) Lookup(name string) (safetensors.TensorInfo, bool) {
	i, ok := s.index[name]
	if !ok {
		return safetensors.TensorInfo{}, false
	}
	return s.infos[i], true
}

func (s *randomSource) Data(name string) ([]byte, error) {
	info, ok := s.Lookup(name)
	if !ok {
		return nil, fmt.Errorf("no tensor %q", name)
	}
	return randomBytes(s.weights[name], info.DType, s.seed)
}

func (s *randomSource) Close() error { return nil }

// fill is how compute.RandomWeighter makes the float weight name at element
// off of a tensor: the values Data gives it (false for integer tensors).
func (s *randomSource) fill(name string, off int) (compute.RandomFill, bool) {
	w, ok := s.weights[name]
	if !ok || w.Int {
		return compute.RandomFill{}, false
	}
	return compute.RandomFill{Off: off, N: compute.NumElements(w.Shape), Key: streamKey(s.seed, name), Block: fillBlock,
		Center: w.Mean, HalfWidth: w.Std * math.Sqrt(3)}, true
}

// Random builds the preset's target model with random weights directly on
// backend b (dtype dt, BF16 when Invalid): the weights gen-model would write
// with this seed, without writing them. For benchmarks of published shapes.
func (p Preset) Random(b compute.Backend, dt compute.DType, seed uint64, opt LoadOptions) (*Model, error) {
	if p.Target == nil {
		return nil, fmt.Errorf("preset %s is not a target model", p.Name)
	}
	if dt == compute.Invalid {
		dt = compute.BF16
	}
	// Through JSON, so defaults and checks are those of a loaded config.
	raw, err := json.Marshal(p.Target)
	if err != nil {
		return nil, err
	}
	cfg, err := ParseTarget(raw)
	if err != nil {
		return nil, fmt.Errorf("preset %s: %w", p.Name, err)
	}
	return newModel(cfg, newRandomSource(p, dt, seed), b, opt)
}

// RandomAssistant builds the preset's assistant drafter the same way.
func (p Preset) RandomAssistant(b compute.Backend, dt compute.DType, seed uint64, opt LoadOptions) (*Assistant, error) {
	if p.Assistant == nil {
		return nil, fmt.Errorf("preset %s is not an assistant", p.Name)
	}
	if dt == compute.Invalid {
		dt = compute.BF16
	}
	raw, err := json.Marshal(p.Assistant)
	if err != nil {
		return nil, err
	}
	cfg, err := ParseAssistant(raw)
	if err != nil {
		return nil, fmt.Errorf("preset %s: %w", p.Name, err)
	}
	return newAssistant(cfg, newRandomSource(p, dt, seed), b, opt)
}
