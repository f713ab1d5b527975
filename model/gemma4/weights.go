package gemma4

import (
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"tandem/checkpoint/safetensors"
	"tandem/compute"
)

// Weight is one tensor a checkpoint must hold.
type Weight struct {
	Name  string
	Shape []int
	// Int is true for integer tensors (token_ordering, which gen-model fills
	// with a random permutation); float weights may be stored as F32, BF16
	// or F16.
	Int bool
	// gen-model fills float weights uniformly with this mean and standard
	// deviation.
	Mean, Std float64
}

// Bytes is the stored size of w when float weights use dtype dt.
func (w Weight) Bytes(dt compute.DType) int64 {
	if w.Int {
		dt = compute.I64
	}
	return int64(compute.NumElements(w.Shape)) * int64(dt.Size())
}

// postNormMean is the mean of the random post-sub-layer norm weights: at
// 10, greedy continuations of every tiny preset are varied (measured: at 1
// they repeat the last prompt token forever).
var postNormMean = 10.0

// Prefixes under which checkpoints store the text model, most specific first.
var Prefixes = []string{"model.language_model.", "language_model.model.", "model.", ""}

// TargetWeights lists every tensor of a Gemma 4 text model, named under prefix.
func TargetWeights(c *TextConfig, prefix string) []Weight {
	H, V := c.HiddenSize, c.VocabSize
	var ws []Weight
	add := func(name string, mean, std float64, shape ...int) {
		ws = append(ws, Weight{Name: prefix + name, Shape: shape, Mean: mean, Std: std})
	}
	linear := func(name string, out, in int) { add(name, 0, 1/math.Sqrt(float64(in)), out, in) }
	norm := func(name string, n int) { add(name, 1, 0.15, n) }
	// Norms that scale what a sub-layer adds to the residual stream: larger
	// than 1 so the layers, not the input embedding, dominate the final
	// hidden state. Otherwise the tied head of a random model mostly
	// predicts the current token again, and greedy tests see only repeats.
	outNorm := func(name string, n int) { add(name, postNormMean, 0.15*postNormMean, n) }

	// Tied embeddings double as the LM head: this std keeps logits of a
	// random model peaked (std ≈ 4) instead of flat.
	add("embed_tokens.weight", 0, 4/math.Sqrt(float64(H)), V, H)
	norm("norm.weight", H)
	if c.HasPLE() {
		N, P := c.NumHiddenLayers, c.HiddenSizePerLayer
		add("embed_tokens_per_layer.weight", 0, 1/math.Sqrt(float64(P)), c.VocabSizePerLayerInput, N*P)
		linear("per_layer_model_projection.weight", N*P, H)
		norm("per_layer_projection_norm.weight", P)
	}
	for _, l := range c.Layers() {
		p := fmt.Sprintf("layers.%d.", l.Index)
		norm(p+"input_layernorm.weight", H)
		norm(p+"pre_feedforward_layernorm.weight", H)
		outNorm(p+"post_attention_layernorm.weight", H)
		outNorm(p+"post_feedforward_layernorm.weight", H)
		add(p+"layer_scalar", 1, 0.1, 1)
		d := l.HeadDim
		linear(p+"self_attn.q_proj.weight", c.NumAttentionHeads*d, H)
		linear(p+"self_attn.o_proj.weight", H, c.NumAttentionHeads*d)
		norm(p+"self_attn.q_norm.weight", d)
		if !l.Shared {
			linear(p+"self_attn.k_proj.weight", l.KVHeads*d, H)
			norm(p+"self_attn.k_norm.weight", d)
			if !l.KEqV {
				linear(p+"self_attn.v_proj.weight", l.KVHeads*d, H)
			}
		}
		linear(p+"mlp.gate_proj.weight", l.Intermediate, H)
		linear(p+"mlp.up_proj.weight", l.Intermediate, H)
		linear(p+"mlp.down_proj.weight", H, l.Intermediate)
		if c.HasPLE() {
			P := c.HiddenSizePerLayer
			linear(p+"per_layer_input_gate.weight", P, H)
			linear(p+"per_layer_projection.weight", H, P)
			outNorm(p+"post_per_layer_input_norm.weight", H)
		}
		if c.EnableMoEBlock {
			E, I := deref(c.NumExperts), deref(c.MoEIntermediateSize)
			linear(p+"router.proj.weight", E, H)
			norm(p+"router.scale", H)
			add(p+"router.per_expert_scale", 1, 0.2, E)
			add(p+"experts.gate_up_proj", 0, 1/math.Sqrt(float64(H)), E, 2*I, H)
			add(p+"experts.down_proj", 0, 1/math.Sqrt(float64(I)), E, H, I)
			for _, n := range []string{"post_feedforward_layernorm_1", "post_feedforward_layernorm_2", "pre_feedforward_layernorm_2"} {
				norm(p+n+".weight", H)
			}
		}
	}
	return ws
}

// AssistantWeights lists every tensor of a Gemma 4 assistant drafter.
func AssistantWeights(a *AssistantConfig) []Weight {
	c := &a.Text
	h, Ht := c.HiddenSize, a.BackboneHiddenSize
	ws := []Weight{
		{Name: "pre_projection.weight", Shape: []int{h, 2 * Ht}, Std: 1 / math.Sqrt(float64(2*Ht))},
		{Name: "post_projection.weight", Shape: []int{Ht, h}, Std: 1 / math.Sqrt(float64(h))},
	}
	// No PLE, MoE or K/V projections: every layer is shared.
	ws = append(ws, TargetWeights(c, "model.")...)
	if a.UseOrderedEmbeddings {
		ws = append(ws,
			Weight{Name: "masked_embedding.centroids.weight", Shape: []int{a.NumCentroids, h}, Std: 4 / math.Sqrt(float64(h))},
			Weight{Name: "masked_embedding.token_ordering", Shape: []int{c.VocabSize}, Int: true})
	}
	if !a.TieWordEmbeddings {
		ws = append(ws, Weight{Name: "lm_head.weight", Shape: []int{c.VocabSize, h}, Std: 4 / math.Sqrt(float64(h))})
	}
	return ws
}

// Ignored tensors: multimodal towers, rotary buffers and clipping buffers
// that a text-only engine never reads.
var (
	ignoredTower  = regexp.MustCompile(`(^|\.)(vision_tower|audio_tower|embed_vision|embed_audio|multi_modal_projector)\.`)
	ignoredBuffer = regexp.MustCompile(`(\.rotary_emb\.|\.(input|output)_(min|max)$)`)
	sharedKV      = regexp.MustCompile(`^layers\.(\d+)\.self_attn\.(k_proj|v_proj|k_norm|v_norm)\.weight$`)
)

// Report is the outcome of checking a checkpoint's tensors against a config.
type Report struct {
	Prefix   string   // resolved text-model prefix
	Problems []string // fatal: missing, mis-shaped or unexpected tensors
	Notes    []string // tensors dropped by the sanitize rules
}

// Err returns the problems as one error, or nil.
func (r *Report) Err() error {
	if len(r.Problems) == 0 {
		return nil
	}
	const most = 20
	p := r.Problems
	more := ""
	if len(p) > most {
		more = fmt.Sprintf("; and %d more", len(p)-most)
		p = p[:most]
	}
	return fmt.Errorf("checkpoint does not match config.json: %s%s", strings.Join(p, "; "), more)
}

// CheckTarget resolves the weight prefix of a target checkpoint and compares
// its tensors with what the config requires, applying the sanitize rules of
// spec §1.2: stray K/V weights on shared layers, multimodal towers, rotary
// and clipping buffers are dropped (and noted).
func CheckTarget(c *TextConfig, tensors []safetensors.TensorInfo) *Report {
	r := &Report{Prefix: resolvePrefix(tensors)}
	first := c.FirstShared()
	drop := func(rel string) bool {
		if m := sharedKV.FindStringSubmatch(rel); m != nil {
			var i int
			fmt.Sscan(m[1], &i)
			return i >= first && i < c.NumHiddenLayers
		}
		return false
	}
	check(r, TargetWeights(c, r.Prefix), tensors, r.Prefix, drop)
	if len(r.Problems) > 0 {
		r.Problems = append(structureMismatch(c, r.Prefix, tensors), r.Problems...)
	}
	return r
}

var layerIndex = regexp.MustCompile(`^layers\.(\d+)\.`)

// structureMismatch names the cause of a wholesale disagreement, a layer
// count or embedding size that differs between config.json and the
// checkpoint, so that it leads the list instead of hiding among dozens of
// per-tensor problems (of which an error shows only the first 20).
func structureMismatch(c *TextConfig, prefix string, tensors []safetensors.TensorInfo) []string {
	var out []string
	last := -1
	for _, t := range tensors {
		rel, ok := strings.CutPrefix(t.Name, prefix)
		if m := layerIndex.FindStringSubmatch(rel); ok && m != nil {
			if i, err := strconv.Atoi(m[1]); err == nil {
				last = max(last, i)
			}
		}
	}
	if last >= 0 && last+1 != c.NumHiddenLayers {
		out = append(out, fmt.Sprintf("checkpoint has tensors for layers 0 to %d (%d layers), config.json has num_hidden_layers %d", last, last+1, c.NumHiddenLayers))
	}
	for _, t := range tensors {
		if t.Name != prefix+"embed_tokens.weight" || len(t.Shape) != 2 {
			continue
		}
		if t.Shape[0] != c.VocabSize {
			out = append(out, fmt.Sprintf("checkpoint's embed_tokens.weight %v has %d rows, config.json has vocab_size %d", t.Shape, t.Shape[0], c.VocabSize))
		}
		if t.Shape[1] != c.HiddenSize {
			out = append(out, fmt.Sprintf("checkpoint's embed_tokens.weight %v has width %d, config.json has hidden_size %d", t.Shape, t.Shape[1], c.HiddenSize))
		}
	}
	return out
}

// CheckAssistant compares a drafter checkpoint's tensors with its config.
// A redundant lm_head next to tied embeddings is dropped; K/V projection or
// norm weights are rejected, since a drafter has none.
func CheckAssistant(a *AssistantConfig, tensors []safetensors.TensorInfo) *Report {
	r := &Report{}
	drop := func(rel string) bool { return a.TieWordEmbeddings && rel == "lm_head.weight" }
	check(r, AssistantWeights(a), tensors, "", drop)
	for _, t := range tensors {
		if m := sharedKV.FindStringSubmatch(strings.TrimPrefix(t.Name, "model.")); m != nil {
			r.Problems = append(r.Problems, fmt.Sprintf("tensor %q: a Gemma 4 assistant attends to the target's K/V and must not have %s weights", t.Name, m[2]))
		}
	}
	return r
}

func resolvePrefix(tensors []safetensors.TensorInfo) string {
	for _, p := range Prefixes {
		for _, t := range tensors {
			if t.Name == p+"embed_tokens.weight" {
				return p
			}
		}
	}
	return Prefixes[0]
}

func check(r *Report, want []Weight, have []safetensors.TensorInfo, prefix string, drop func(rel string) bool) {
	byName := make(map[string]safetensors.TensorInfo, len(have))
	for _, t := range have {
		byName[t.Name] = t
	}
	expected := make(map[string]bool, len(want))
	for _, w := range want {
		expected[w.Name] = true
		t, ok := byName[w.Name]
		if !ok {
			r.Problems = append(r.Problems, fmt.Sprintf("missing tensor %q (want shape %v)", w.Name, w.Shape))
			continue
		}
		if !slices.Equal(t.Shape, w.Shape) {
			r.Problems = append(r.Problems, fmt.Sprintf("tensor %q has shape %v, config.json implies %v", w.Name, t.Shape, w.Shape))
		}
		switch {
		case w.Int && t.DType != compute.I32 && t.DType != compute.I64:
			r.Problems = append(r.Problems, fmt.Sprintf("tensor %q has dtype %s, want I32 or I64", w.Name, t.DType))
		case !w.Int && !t.DType.IsFloat():
			r.Problems = append(r.Problems, fmt.Sprintf("tensor %q has dtype %s, want F32, BF16 or F16", w.Name, t.DType))
		}
	}
	var dropped, ignored int
	for _, t := range have {
		if expected[t.Name] {
			continue
		}
		rel, inText := strings.CutPrefix(t.Name, prefix)
		switch {
		case ignoredTower.MatchString(t.Name) || ignoredBuffer.MatchString(t.Name):
			ignored++
		case inText && drop(rel):
			dropped++
			r.Notes = append(r.Notes, fmt.Sprintf("dropped %q (unused by this model)", t.Name))
		default:
			r.Problems = append(r.Problems, fmt.Sprintf("unexpected tensor %q", t.Name))
		}
	}
	if ignored > 0 {
		r.Notes = append(r.Notes, fmt.Sprintf("ignored %d multimodal-tower or buffer tensors", ignored))
	}
}
