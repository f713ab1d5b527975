// Package gemma4 holds Google's Gemma 4 text models and their "assistant"
// MTP drafters: configuration, the expected checkpoint layout, presets of the
// published shapes and random-weight checkpoint generation.
package gemma4

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"tandem/checkpoint"
)

// Model types as they appear in config.json.
const (
	TypeWrapper   = "gemma4"           // multimodal wrapper; the text model is text_config
	TypeText      = "gemma4_text"      // a bare text model
	TypeAssistant = "gemma4_assistant" // MTP drafter
)

// Layer types as they appear in layer_types.
const (
	Sliding = "sliding_attention"
	Full    = "full_attention"
)

// TextConfig is HF's Gemma4TextConfig as stored in JSON. Absent fields take
// HF's defaults (see DefaultTextConfig); pointer fields may be null.
type TextConfig struct {
	ModelType              string                `json:"model_type"`
	VocabSize              int                   `json:"vocab_size"`
	HiddenSize             int                   `json:"hidden_size"`
	IntermediateSize       int                   `json:"intermediate_size"`
	NumHiddenLayers        int                   `json:"num_hidden_layers"`
	NumAttentionHeads      int                   `json:"num_attention_heads"`
	NumKeyValueHeads       int                   `json:"num_key_value_heads"`
	HeadDim                int                   `json:"head_dim"`
	GlobalHeadDim          int                   `json:"global_head_dim"`
	NumGlobalKeyValueHeads *int                  `json:"num_global_key_value_heads"`
	HiddenActivation       string                `json:"hidden_activation"`
	MaxPositionEmbeddings  int                   `json:"max_position_embeddings"`
	RMSNormEps             Float                 `json:"rms_norm_eps"`
	PadTokenID             *int                  `json:"pad_token_id"`
	EOSTokenID             checkpoint.IDList     `json:"eos_token_id"`
	BOSTokenID             *int                  `json:"bos_token_id"`
	TieWordEmbeddings      bool                  `json:"tie_word_embeddings"`
	RopeParameters         map[string]RopeParams `json:"rope_parameters"`
	AttentionBias          bool                  `json:"attention_bias"`
	SlidingWindow          int                   `json:"sliding_window"`
	LayerTypes             []string              `json:"layer_types"`
	FinalLogitSoftcapping  *Float                `json:"final_logit_softcapping"`
	UseBidirectionalAttn   *string               `json:"use_bidirectional_attention"`
	VocabSizePerLayerInput int                   `json:"vocab_size_per_layer_input"`
	HiddenSizePerLayer     int                   `json:"hidden_size_per_layer_input"`
	AttentionKEqV          bool                  `json:"attention_k_eq_v"`
	NumKVSharedLayers      int                   `json:"num_kv_shared_layers"`
	EnableMoEBlock         bool                  `json:"enable_moe_block"`
	UseDoubleWideMLP       bool                  `json:"use_double_wide_mlp"`
	NumExperts             *int                  `json:"num_experts"`
	TopKExperts            *int                  `json:"top_k_experts"`
	MoEIntermediateSize    *int                  `json:"moe_intermediate_size"`
	// PerLayerConfig is how HF ≥ 5.x stores global_head_dim and
	// num_global_key_value_heads when it saves a config: per-layer
	// overrides keyed by layer index. When present it wins over those two.
	PerLayerConfig map[string]LayerOverride `json:"per_layer_config,omitempty"`
}

// LayerOverride is one per_layer_config entry.
type LayerOverride struct {
	HeadDim          *int `json:"head_dim,omitempty"`
	NumKeyValueHeads *int `json:"num_key_value_heads,omitempty"`
}

// RopeParams is one entry of rope_parameters, keyed by layer type.
type RopeParams struct {
	RopeType            string `json:"rope_type"`
	RopeTheta           Float  `json:"rope_theta"`
	PartialRotaryFactor *Float `json:"partial_rotary_factor,omitempty"`
	Factor              *Float `json:"factor,omitempty"`
}

// Float is a float64 that JSON always spells as a float (30.0, not 30):
// HF's strict config classes reject an integer where they declare a float.
type Float float64

// MarshalJSON writes f with a decimal point or an exponent.
func (f Float) MarshalJSON() ([]byte, error) {
	v := float64(f)
	if math.IsInf(v, 0) || math.IsNaN(v) {
		return nil, fmt.Errorf("cannot write %v to JSON", v)
	}
	s := strconv.FormatFloat(v, 'g', -1, 64)
	if !strings.ContainsAny(s, ".e") {
		s += ".0"
	}
	return []byte(s), nil
}

// DefaultTextConfig returns HF's defaults for fields a config.json omits.
// Note that PLE is on by default (hidden_size_per_layer_input 256).
func DefaultTextConfig() TextConfig {
	return TextConfig{
		ModelType:              TypeText,
		VocabSize:              262144,
		HiddenSize:             2304,
		IntermediateSize:       9216,
		NumHiddenLayers:        30,
		NumAttentionHeads:      8,
		NumKeyValueHeads:       4,
		HeadDim:                256,
		GlobalHeadDim:          512,
		HiddenActivation:       "gelu_pytorch_tanh",
		MaxPositionEmbeddings:  131072,
		RMSNormEps:             1e-6,
		PadTokenID:             ptr(0),
		EOSTokenID:             checkpoint.IDList{1},
		BOSTokenID:             ptr(2),
		TieWordEmbeddings:      true,
		SlidingWindow:          512,
		VocabSizePerLayerInput: 262144,
		HiddenSizePerLayer:     256,
	}
}

// defaultRope is HF's rope_parameters when the config has none.
func defaultRope() map[string]RopeParams {
	return map[string]RopeParams{
		Sliding: {RopeType: "default", RopeTheta: 10000},
		Full:    {RopeType: "proportional", RopeTheta: 1e6, PartialRotaryFactor: ptr(Float(0.25))},
	}
}

// Config is a Gemma 4 target: the text model and whether it came wrapped in
// the multimodal gemma4 config (which decides the weight prefix HF writes).
type Config struct {
	Text    TextConfig
	Wrapped bool
	// Warnings are things HF silently fixes up (and so do we).
	Warnings []string
}

// AssistantConfig is HF's Gemma4AssistantConfig.
type AssistantConfig struct {
	ModelType            string     `json:"model_type"`
	Text                 TextConfig `json:"text_config"`
	BackboneHiddenSize   int        `json:"backbone_hidden_size"`
	UseOrderedEmbeddings bool       `json:"use_ordered_embeddings"`
	NumCentroids         int        `json:"num_centroids"`
	CentroidTopK         int        `json:"centroid_intermediate_top_k"`
	TieWordEmbeddings    bool       `json:"tie_word_embeddings"`
	Warnings             []string   `json:"-"`
}

// Layer is the resolved structure of one decoder layer.
type Layer struct {
	Index   int
	Type    string // Sliding or Full
	HeadDim int
	KVHeads int
	// KEqV: values are the raw key projection (no v_proj), on full layers of
	// attention_k_eq_v models.
	KEqV bool
	// Shared layers compute only queries and attend to the K/V of layer
	// KVSource (the last non-shared layer of the same type).
	Shared   bool
	KVSource int
	// Intermediate is the dense MLP width (doubled on shared layers of
	// use_double_wide_mlp models).
	Intermediate int
}

// ParseTarget parses a target config.json: a gemma4 wrapper or a bare
// gemma4_text config.
func ParseTarget(data []byte) (*Config, error) {
	var head struct {
		ModelType  string          `json:"model_type"`
		TextConfig json.RawMessage `json:"text_config"`
	}
	if err := json.Unmarshal(data, &head); err != nil {
		return nil, fmt.Errorf("config.json: %w", err)
	}
	cfg := &Config{}
	raw := data
	switch head.ModelType {
	case TypeWrapper:
		if len(head.TextConfig) == 0 || string(head.TextConfig) == "null" {
			return nil, errors.New("config.json: model_type gemma4 without text_config")
		}
		raw, cfg.Wrapped = head.TextConfig, true
	case TypeText:
	case TypeAssistant:
		return nil, errors.New("config.json: this is a gemma4_assistant drafter, not a target model")
	default:
		return nil, fmt.Errorf("config.json: model_type %q is not a Gemma 4 target (want %s or %s)", head.ModelType, TypeWrapper, TypeText)
	}
	tc, warn, err := parseText(raw)
	if err != nil {
		return nil, err
	}
	cfg.Text, cfg.Warnings = tc, warn
	if err := cfg.Text.validate(false); err != nil {
		return nil, err
	}
	return cfg, nil
}

// ParseAssistant parses a gemma4_assistant config.json and applies HF's
// post-init rule: every layer is KV-shared.
func ParseAssistant(data []byte) (*AssistantConfig, error) {
	var head struct {
		ModelType  string          `json:"model_type"`
		TextConfig json.RawMessage `json:"text_config"`
	}
	if err := json.Unmarshal(data, &head); err != nil {
		return nil, fmt.Errorf("config.json: %w", err)
	}
	if head.ModelType != TypeAssistant {
		return nil, fmt.Errorf("config.json: model_type %q is not a Gemma 4 assistant (want %s)", head.ModelType, TypeAssistant)
	}
	if len(head.TextConfig) == 0 || string(head.TextConfig) == "null" {
		return nil, errors.New("config.json: gemma4_assistant without text_config")
	}
	ac := &AssistantConfig{BackboneHiddenSize: 1536, NumCentroids: 2048, CentroidTopK: 32, TieWordEmbeddings: true}
	var top struct {
		BackboneHiddenSize   *int  `json:"backbone_hidden_size"`
		UseOrderedEmbeddings *bool `json:"use_ordered_embeddings"`
		NumCentroids         *int  `json:"num_centroids"`
		CentroidTopK         *int  `json:"centroid_intermediate_top_k"`
		TieWordEmbeddings    *bool `json:"tie_word_embeddings"`
	}
	if err := json.Unmarshal(data, &top); err != nil {
		return nil, fmt.Errorf("config.json: %w", err)
	}
	ac.ModelType = TypeAssistant
	set(&ac.BackboneHiddenSize, top.BackboneHiddenSize)
	set(&ac.UseOrderedEmbeddings, top.UseOrderedEmbeddings)
	set(&ac.NumCentroids, top.NumCentroids)
	set(&ac.CentroidTopK, top.CentroidTopK)
	set(&ac.TieWordEmbeddings, top.TieWordEmbeddings)
	tc, warn, err := parseText(head.TextConfig)
	if err != nil {
		return nil, err
	}
	ac.Text, ac.Warnings = tc, warn
	if ac.Text.NumKVSharedLayers == 0 {
		ac.Text.NumKVSharedLayers = ac.Text.NumHiddenLayers
	}
	if err := ac.validate(); err != nil {
		return nil, err
	}
	return ac, nil
}

func parseText(raw []byte) (TextConfig, []string, error) {
	tc := DefaultTextConfig()
	if err := json.Unmarshal(raw, &tc); err != nil {
		return tc, nil, fmt.Errorf("config.json: text config: %w", err)
	}
	var warn []string
	if tc.RopeParameters == nil {
		tc.RopeParameters = defaultRope()
	}
	if tc.LayerTypes == nil && tc.NumHiddenLayers > 0 {
		// HF's default pattern: five sliding layers, then one full.
		for i := range tc.NumHiddenLayers {
			t := Sliding
			if (i+1)%6 == 0 {
				t = Full
			}
			tc.LayerTypes = append(tc.LayerTypes, t)
		}
		warn = append(warn, "layer_types missing: used HF's default 5:1 sliding/full pattern")
	}
	if n := len(tc.LayerTypes); n > 0 && tc.LayerTypes[n-1] != Full {
		warn = append(warn, fmt.Sprintf("last layer is %s; HF forces it to full_attention, and so do we", tc.LayerTypes[n-1]))
		tc.LayerTypes = slices.Clone(tc.LayerTypes)
		tc.LayerTypes[n-1] = Full
	}
	return tc, warn, nil
}

// validate checks the text config for values the model code cannot run.
// Errors name the offending field.
func (c *TextConfig) validate(assistant bool) error {
	var errs []string
	bad := func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) }
	positive := []struct {
		name string
		v    int
	}{
		{"vocab_size", c.VocabSize}, {"hidden_size", c.HiddenSize}, {"intermediate_size", c.IntermediateSize},
		{"num_hidden_layers", c.NumHiddenLayers}, {"num_attention_heads", c.NumAttentionHeads},
		{"num_key_value_heads", c.NumKeyValueHeads}, {"head_dim", c.HeadDim}, {"global_head_dim", c.GlobalHeadDim},
		{"sliding_window", c.SlidingWindow}, {"max_position_embeddings", c.MaxPositionEmbeddings},
	}
	for _, p := range positive {
		if p.v <= 0 {
			bad("%s must be positive, got %d", p.name, p.v)
		}
	}
	if c.HeadDim%2 != 0 || c.GlobalHeadDim%2 != 0 {
		bad("head_dim (%d) and global_head_dim (%d) must be even for RoPE", c.HeadDim, c.GlobalHeadDim)
	}
	if !(c.RMSNormEps > 0) || math.IsInf(float64(c.RMSNormEps), 0) {
		bad("rms_norm_eps must be positive, got %v", c.RMSNormEps)
	}
	if c.HiddenActivation != "gelu_pytorch_tanh" {
		bad("hidden_activation %q is not supported (Gemma 4 uses gelu_pytorch_tanh)", c.HiddenActivation)
	}
	if c.AttentionBias {
		bad("attention_bias true is not supported (Gemma 4 has no biases)")
	}
	if c.UseBidirectionalAttn != nil && *c.UseBidirectionalAttn == "all" {
		bad(`use_bidirectional_attention "all" (a non-causal model) is not supported`)
	}
	if len(c.LayerTypes) != c.NumHiddenLayers {
		bad("layer_types has %d entries, num_hidden_layers is %d", len(c.LayerTypes), c.NumHiddenLayers)
	}
	for i, t := range c.LayerTypes {
		if t != Sliding && t != Full {
			bad("layer_types[%d] = %q (want %s or %s)", i, t, Sliding, Full)
		}
	}
	for _, t := range []string{Sliding, Full} {
		rp, ok := c.RopeParameters[t]
		switch {
		case !ok:
			bad("rope_parameters has no %s entry", t)
		case rp.RopeType != "default" && rp.RopeType != "proportional":
			bad("rope_parameters.%s.rope_type %q is not supported (want default or proportional)", t, rp.RopeType)
		case !(rp.RopeTheta > 0):
			bad("rope_parameters.%s.rope_theta must be positive", t)
		case rp.PartialRotaryFactor != nil && (*rp.PartialRotaryFactor <= 0 || *rp.PartialRotaryFactor > 1):
			bad("rope_parameters.%s.partial_rotary_factor must be in (0, 1]", t)
		case rp.Factor != nil && !(*rp.Factor > 0):
			bad("rope_parameters.%s.factor must be positive", t)
		}
	}
	seen := map[int]string{}
	for key, o := range c.PerLayerConfig {
		i, err := strconv.Atoi(key)
		prev, dup := seen[i]
		seen[i] = key
		switch {
		case err != nil || i < 0 || i >= c.NumHiddenLayers:
			bad("per_layer_config key %q is not a layer index in [0, %d)", key, c.NumHiddenLayers)
		case dup:
			bad("per_layer_config keys %q and %q name the same layer", prev, key)
		case o.HeadDim != nil && (*o.HeadDim <= 0 || *o.HeadDim%2 != 0):
			bad("per_layer_config[%s].head_dim must be positive and even, got %d", key, *o.HeadDim)
		case o.NumKeyValueHeads != nil && (*o.NumKeyValueHeads <= 0 || c.NumAttentionHeads%*o.NumKeyValueHeads != 0):
			bad("per_layer_config[%s].num_key_value_heads %d does not divide num_attention_heads %d", key, *o.NumKeyValueHeads, c.NumAttentionHeads)
		}
	}
	if c.NumKeyValueHeads > 0 && c.NumAttentionHeads%c.NumKeyValueHeads != 0 {
		bad("num_attention_heads (%d) is not a multiple of num_key_value_heads (%d)", c.NumAttentionHeads, c.NumKeyValueHeads)
	}
	if c.AttentionKEqV && c.NumGlobalKeyValueHeads != nil {
		g := *c.NumGlobalKeyValueHeads
		if g <= 0 || c.NumAttentionHeads%g != 0 {
			bad("num_attention_heads (%d) is not a multiple of num_global_key_value_heads (%d)", c.NumAttentionHeads, g)
		}
	}
	if c.NumKVSharedLayers < 0 || c.NumKVSharedLayers > c.NumHiddenLayers {
		bad("num_kv_shared_layers %d is outside [0, %d]", c.NumKVSharedLayers, c.NumHiddenLayers)
	} else if !assistant && c.NumKVSharedLayers > 0 && len(c.LayerTypes) == c.NumHiddenLayers {
		first := c.NumHiddenLayers - c.NumKVSharedLayers
		for i := first; i < c.NumHiddenLayers; i++ {
			if !slices.Contains(c.LayerTypes[:first], c.LayerTypes[i]) {
				bad("layer %d (%s) shares KV but no earlier non-shared %s layer exists", i, c.LayerTypes[i], c.LayerTypes[i])
				break
			}
		}
	}
	if c.HiddenSizePerLayer < 0 {
		bad("hidden_size_per_layer_input must not be negative")
	}
	if c.HiddenSizePerLayer > 0 && c.VocabSizePerLayerInput <= 0 {
		bad("vocab_size_per_layer_input must be positive when hidden_size_per_layer_input is %d", c.HiddenSizePerLayer)
	}
	if c.EnableMoEBlock {
		e, k, m := deref(c.NumExperts), deref(c.TopKExperts), deref(c.MoEIntermediateSize)
		if e <= 0 || k <= 0 || m <= 0 || k > e {
			bad("enable_moe_block needs num_experts > 0, 0 < top_k_experts <= num_experts and moe_intermediate_size > 0 (got %d, %d, %d)", e, k, m)
		}
	}
	if c.FinalLogitSoftcapping != nil && !(*c.FinalLogitSoftcapping > 0) {
		bad("final_logit_softcapping must be positive or null")
	}
	if !c.TieWordEmbeddings && !assistant {
		bad("tie_word_embeddings false is not supported for Gemma 4 targets")
	}
	if len(errs) > 0 {
		return fmt.Errorf("config.json: invalid Gemma 4 text config: %s", strings.Join(errs, "; "))
	}
	return nil
}

func (a *AssistantConfig) validate() error {
	c := &a.Text
	var errs []string
	if c.HiddenSizePerLayer != 0 {
		errs = append(errs, fmt.Sprintf("hidden_size_per_layer_input must be 0, got %d", c.HiddenSizePerLayer))
	}
	if c.VocabSizePerLayerInput != 0 {
		errs = append(errs, fmt.Sprintf("vocab_size_per_layer_input must be 0, got %d", c.VocabSizePerLayerInput))
	}
	if c.EnableMoEBlock {
		errs = append(errs, "enable_moe_block must be false")
	}
	if c.UseDoubleWideMLP {
		errs = append(errs, "use_double_wide_mlp must be false")
	}
	if c.NumKVSharedLayers != c.NumHiddenLayers {
		errs = append(errs, fmt.Sprintf("all %d layers must be KV-shared, num_kv_shared_layers is %d", c.NumHiddenLayers, c.NumKVSharedLayers))
	}
	if a.BackboneHiddenSize <= 0 {
		errs = append(errs, "backbone_hidden_size must be positive")
	}
	if a.UseOrderedEmbeddings {
		switch {
		case a.NumCentroids <= 0 || a.CentroidTopK <= 0 || a.CentroidTopK > a.NumCentroids:
			errs = append(errs, fmt.Sprintf("centroid head needs 0 < centroid_intermediate_top_k (%d) <= num_centroids (%d)", a.CentroidTopK, a.NumCentroids))
		case c.VocabSize%a.NumCentroids != 0:
			errs = append(errs, fmt.Sprintf("vocab_size %d is not divisible by num_centroids %d", c.VocabSize, a.NumCentroids))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("config.json: invalid Gemma 4 assistant config: %s", strings.Join(errs, "; "))
	}
	return c.validate(true)
}

// FirstShared is the index of the first KV-shared layer (NumHiddenLayers
// when no layer shares).
func (c *TextConfig) FirstShared() int { return c.NumHiddenLayers - c.NumKVSharedLayers }

// Layers resolves the per-layer structure: head dims, KV heads, k_eq_v, KV
// sharing and MLP widths.
func (c *TextConfig) Layers() []Layer {
	first := c.FirstShared()
	layers := make([]Layer, c.NumHiddenLayers)
	for i := range layers {
		t := c.LayerTypes[i]
		l := Layer{Index: i, Type: t, HeadDim: c.HeadDim, KVHeads: c.NumKeyValueHeads, KVSource: i, Intermediate: c.IntermediateSize}
		l.KEqV = t == Full && c.AttentionKEqV
		if c.PerLayerConfig != nil {
			o := c.perLayer(i)
			set(&l.HeadDim, o.HeadDim)
			set(&l.KVHeads, o.NumKeyValueHeads)
		} else if t == Full {
			l.HeadDim = c.GlobalHeadDim
			if l.KEqV && c.NumGlobalKeyValueHeads != nil {
				l.KVHeads = *c.NumGlobalKeyValueHeads
			}
		}
		if i >= first {
			l.Shared = true
			l.KVSource = -1
			for j := first - 1; j >= 0; j-- {
				if c.LayerTypes[j] == t {
					l.KVSource = j
					break
				}
			}
			if c.UseDoubleWideMLP && first > 0 {
				l.Intermediate = 2 * c.IntermediateSize
			}
		}
		layers[i] = l
	}
	return layers
}

// perLayer returns layer i's per_layer_config entry. HF writes the keys
// zero-padded ("05"), so they are compared as numbers.
func (c *TextConfig) perLayer(i int) LayerOverride {
	for key, o := range c.PerLayerConfig {
		if n, err := strconv.Atoi(key); err == nil && n == i {
			return o
		}
	}
	return LayerOverride{}
}

// HasPLE reports whether the model has per-layer input embeddings.
func (c *TextConfig) HasPLE() bool { return c.HiddenSizePerLayer > 0 }

// StopTokens is the default stop set when generation_config.json is absent.
var StopTokens = []int{1, 106, 50}

func ptr[T any](v T) *T { return &v }

func deref(p *int) int {
	if p == nil {
		return 0
	}
	return *p
}

func set[T any](dst *T, src *T) {
	if src != nil {
		*dst = *src
	}
}
