package gemma4

import (
	"fmt"
	"os"
	"slices"
	"strings"

	"tandem/checkpoint"
	"tandem/checkpoint/safetensors"
)

// Summary describes a Gemma 4 checkpoint directory for `tandem inspect`.
type Summary struct {
	Dir       string   `json:"dir"`
	ModelType string   `json:"model_type"`
	Kind      string   `json:"kind"` // "target" or "assistant"
	Structure []string `json:"structure"`
	// LayerTypes is one letter per layer: S sliding, F full; lower case
	// for KV-shared layers.
	LayerTypes string           `json:"layer_types"`
	Params     int64            `json:"parameters"`
	Bytes      int64            `json:"tensor_bytes"`
	DTypes     map[string]int64 `json:"dtypes"` // parameters per stored dtype
	Files      []string         `json:"files"`
	FileBytes  int64            `json:"file_bytes"`
	Prefix     string           `json:"weight_prefix,omitempty"`
	Problems   []string         `json:"problems"`
	Notes      []string         `json:"notes,omitempty"`
}

// Inspect reads a Gemma 4 target or assistant directory and reports its
// structure, size and every problem found. It returns an error only when
// the directory has no readable config; checkpoint problems are listed in
// Summary.Problems.
func Inspect(dir string) (*Summary, error) {
	rc, err := checkpoint.ReadConfig(dir)
	if err != nil {
		return nil, err
	}
	s := &Summary{Dir: dir, ModelType: rc.ModelType, DTypes: map[string]int64{}, Problems: []string{}}
	var text *TextConfig
	var want []Weight
	var check func([]safetensors.TensorInfo) *Report
	switch rc.ModelType {
	case TypeAssistant:
		a, err := ParseAssistant(rc.Raw)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", dir, err)
		}
		s.Kind, text, want = "assistant", &a.Text, AssistantWeights(a)
		s.Notes = append(s.Notes, a.Warnings...)
		s.Structure = append(s.Structure, fmt.Sprintf("drafter for a target with hidden size %d", a.BackboneHiddenSize))
		head := "tied LM head"
		if a.UseOrderedEmbeddings {
			head = fmt.Sprintf("centroid LM head: %d centroids, top %d → %d candidate tokens", a.NumCentroids, a.CentroidTopK, a.CentroidTopK*text.VocabSize/a.NumCentroids)
		}
		s.Structure = append(s.Structure, head)
		check = func(ts []safetensors.TensorInfo) *Report { return CheckAssistant(a, ts) }
	default:
		c, err := ParseTarget(rc.Raw)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", dir, err)
		}
		s.Kind, text = "target", &c.Text
		s.Notes = append(s.Notes, c.Warnings...)
		check = func(ts []safetensors.TensorInfo) *Report {
			r := CheckTarget(text, ts)
			want = TargetWeights(text, r.Prefix)
			return r
		}
	}
	s.Structure = append(text.describe(s.Kind == "assistant"), s.Structure...)
	s.LayerTypes = text.layerLetters()

	set, err := safetensors.OpenDir(dir)
	if err != nil {
		s.Problems = append(s.Problems, err.Error())
		return s, nil
	}
	defer set.Close()
	s.Files = set.Files()
	for _, f := range s.Files {
		if st, err := os.Stat(f); err == nil {
			s.FileBytes += st.Size()
		}
	}
	ts := set.Tensors()
	r := check(ts)
	s.Prefix, s.Problems, s.Notes = r.Prefix, append(s.Problems, r.Problems...), append(s.Notes, r.Notes...)
	for _, w := range want {
		if t, ok := set.Lookup(w.Name); ok {
			n := int64(1)
			for _, d := range t.Shape {
				n *= int64(d)
			}
			s.Params += n
			s.Bytes += t.Size
			s.DTypes[t.DType.String()] += n
		}
	}
	return s, nil
}

func (c *TextConfig) layerLetters() string {
	var b strings.Builder
	for _, l := range c.Layers() {
		ch := 'S'
		if l.Type == Full {
			ch = 'F'
		}
		if l.Shared {
			ch += 'a' - 'A'
		}
		b.WriteRune(ch)
	}
	return b.String()
}

// describe summarises the architecture in a few lines.
func (c *TextConfig) describe(assistant bool) []string {
	layers := c.Layers()
	var nS, nF int
	for _, l := range layers {
		if l.Type == Full {
			nF++
		} else {
			nS++
		}
	}
	out := []string{
		fmt.Sprintf("hidden %d, vocab %d, %d layers: %d sliding (window %d), %d full", c.HiddenSize, c.VocabSize, c.NumHiddenLayers, nS, c.SlidingWindow, nF),
	}
	attn := fmt.Sprintf("attention: %d query heads; sliding: %d KV heads × %d", c.NumAttentionHeads, c.NumKeyValueHeads, c.HeadDim)
	if i := slices.IndexFunc(layers, func(l Layer) bool { return l.Type == Full }); i >= 0 {
		l := layers[i]
		attn += fmt.Sprintf("; full: %d KV heads × %d", l.KVHeads, l.HeadDim)
		if l.KEqV {
			attn += " (k_eq_v: values reuse the key projection)"
		}
	}
	out = append(out, attn)
	if rp, ok := c.RopeParameters[Full]; ok {
		f := 1.0
		if rp.PartialRotaryFactor != nil {
			f = float64(*rp.PartialRotaryFactor)
		}
		out = append(out, fmt.Sprintf("rope: sliding %s θ=%g; full %s θ=%g, rotary fraction %g", c.RopeParameters[Sliding].RopeType, c.RopeParameters[Sliding].RopeTheta, rp.RopeType, rp.RopeTheta, f))
	}
	if assistant {
		out = append(out, "all layers are q-only and attend to the target's K/V")
	} else if c.NumKVSharedLayers > 0 {
		first := c.FirstShared()
		var src []string
		for _, t := range []string{Sliding, Full} {
			if i := slices.IndexFunc(layers[first:], func(l Layer) bool { return l.Type == t }); i >= 0 {
				src = append(src, fmt.Sprintf("%s from layer %d", strings.TrimSuffix(t, "_attention"), layers[first+i].KVSource))
			}
		}
		out = append(out, fmt.Sprintf("KV sharing: layers %d–%d reuse K/V (%s)", first, c.NumHiddenLayers-1, strings.Join(src, ", ")))
	}
	mlp := fmt.Sprintf("MLP: %d", c.IntermediateSize)
	if c.UseDoubleWideMLP && c.NumKVSharedLayers > 0 {
		mlp += fmt.Sprintf(" (%d on KV-shared layers)", 2*c.IntermediateSize)
	}
	if c.EnableMoEBlock {
		mlp += fmt.Sprintf(" dense branch + MoE: %d experts, top %d, width %d", deref(c.NumExperts), deref(c.TopKExperts), deref(c.MoEIntermediateSize))
	}
	out = append(out, mlp)
	if c.HasPLE() {
		out = append(out, fmt.Sprintf("per-layer embeddings: %d per layer, vocab %d", c.HiddenSizePerLayer, c.VocabSizePerLayerInput))
	}
	if c.FinalLogitSoftcapping != nil {
		out = append(out, fmt.Sprintf("final logit softcap %g", *c.FinalLogitSoftcapping))
	}
	return out
}
