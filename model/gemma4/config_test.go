package gemma4

import (
	"encoding/json"
	"strings"
	"testing"
)

// tinyTargetJSON is a minimal gemma4_text config; tests patch fields into it.
func tinyTargetJSON(t *testing.T, patch map[string]any) []byte {
	t.Helper()
	p, err := LookupPreset("gemma4-tiny-e2b")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(p.Target)
	var m map[string]any
	json.Unmarshal(b, &m)
	for k, v := range patch {
		if v == nil {
			delete(m, k)
		} else {
			m[k] = v
		}
	}
	out, _ := json.Marshal(m)
	return out
}

func TestParseTargetWrapperAndBare(t *testing.T) {
	text := tinyTargetJSON(t, nil)
	wrapped := []byte(`{"model_type":"gemma4","text_config":` + string(text) + `,"vision_config":null}`)
	for _, tc := range []struct {
		name    string
		data    []byte
		wrapped bool
	}{{"wrapper", wrapped, true}, {"bare gemma4_text", text, false}} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := ParseTarget(tc.data)
			if err != nil {
				t.Fatal(err)
			}
			if c.Wrapped != tc.wrapped || c.Text.HiddenSize != 64 || c.Text.NumKVSharedLayers != 5 {
				t.Fatalf("parsed %+v", c)
			}
		})
	}
}

func TestParseTargetDefaultsFollowHF(t *testing.T) {
	// Absent fields take HF's defaults: PLE on (256), global_head_dim 512,
	// HF's rope table, and the 5:1 layer pattern.
	c, err := ParseTarget([]byte(`{"model_type":"gemma4_text","num_hidden_layers":12,"vocab_size":512}`))
	if err != nil {
		t.Fatal(err)
	}
	tc := c.Text
	if tc.HiddenSizePerLayer != 256 || tc.GlobalHeadDim != 512 || tc.HeadDim != 256 || tc.SlidingWindow != 512 {
		t.Errorf("defaults: ple %d, global_head_dim %d, head_dim %d, window %d", tc.HiddenSizePerLayer, tc.GlobalHeadDim, tc.HeadDim, tc.SlidingWindow)
	}
	if got := tc.layerLetters(); got != "SSSSSFSSSSSF" {
		t.Errorf("default layer types %s", got)
	}
	if rp := tc.RopeParameters[Full]; rp.RopeType != "proportional" || *rp.PartialRotaryFactor != 0.25 || rp.RopeTheta != 1e6 {
		t.Errorf("default full rope %+v", rp)
	}
	if len(c.Warnings) == 0 {
		t.Error("no warning for missing layer_types")
	}
}

func TestParseTargetForcesLastLayerFull(t *testing.T) {
	types := []string{Sliding, Sliding, Sliding, Sliding, Full, Sliding, Sliding, Sliding, Sliding, Sliding}
	c, err := ParseTarget(tinyTargetJSON(t, map[string]any{"layer_types": types}))
	if err != nil {
		t.Fatal(err)
	}
	if c.Text.LayerTypes[9] != Full || len(c.Warnings) != 1 || !strings.Contains(c.Warnings[0], "forces it to full_attention") {
		t.Fatalf("last layer %s, warnings %v", c.Text.LayerTypes[9], c.Warnings)
	}
	if types[9] != Sliding {
		t.Fatal("parser modified its input")
	}
}

func TestParseTargetErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		data []byte
		want string
	}{
		{"invalid json", []byte(`{"model_type":`), "config.json"},
		{"unknown model type", []byte(`{"model_type":"llama"}`), `model_type "llama" is not a Gemma 4 target`},
		{"assistant given as target", []byte(`{"model_type":"gemma4_assistant"}`), "gemma4_assistant drafter, not a target"},
		{"wrapper without text_config", []byte(`{"model_type":"gemma4"}`), "without text_config"},
		{"layer_types length", tinyTargetJSON(t, map[string]any{"num_hidden_layers": 11}), "layer_types has 10 entries, num_hidden_layers is 11"},
		{"unknown layer type", tinyTargetJSON(t, map[string]any{"layer_types": []string{"chunked_attention", Sliding, Sliding, Sliding, Full, Sliding, Sliding, Sliding, Sliding, Full}}), `layer_types[0] = "chunked_attention"`},
		{"gqa divisibility", tinyTargetJSON(t, map[string]any{"num_key_value_heads": 3}), "num_attention_heads (4) is not a multiple of num_key_value_heads (3)"},
		{"negative hidden", tinyTargetJSON(t, map[string]any{"hidden_size": -1}), "hidden_size must be positive, got -1"},
		{"string where int expected", tinyTargetJSON(t, map[string]any{"hidden_size": "64"}), "hidden_size"},
		{"moe without experts", tinyTargetJSON(t, map[string]any{"enable_moe_block": true}), "enable_moe_block needs num_experts"},
		{"shared without source", tinyTargetJSON(t, map[string]any{"num_kv_shared_layers": 9}), "shares KV but no earlier non-shared full_attention layer"},
		{"bad rope type", tinyTargetJSON(t, map[string]any{"rope_parameters": map[string]any{Sliding: map[string]any{"rope_type": "yarn", "rope_theta": 1.0}, Full: map[string]any{"rope_type": "default", "rope_theta": 1.0}}}), `rope_type "yarn" is not supported`},
		{"activation", tinyTargetJSON(t, map[string]any{"hidden_activation": "silu"}), `hidden_activation "silu"`},
		{"untied", tinyTargetJSON(t, map[string]any{"tie_word_embeddings": false}), "tie_word_embeddings false"},
		{"bidirectional all", tinyTargetJSON(t, map[string]any{"use_bidirectional_attention": "all"}), `use_bidirectional_attention "all"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseTarget(tc.data)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

func assistantJSON(t *testing.T, top, text map[string]any) []byte {
	t.Helper()
	p, _ := LookupPreset("gemma4-tiny-e2b-assistant")
	b, _ := json.Marshal(p.Assistant)
	var m map[string]any
	json.Unmarshal(b, &m)
	tc := m["text_config"].(map[string]any)
	for k, v := range text {
		if v == nil {
			delete(tc, k)
		} else {
			tc[k] = v
		}
	}
	for k, v := range top {
		m[k] = v
	}
	out, _ := json.Marshal(m)
	return out
}

func TestParseAssistant(t *testing.T) {
	// HF's post-init: num_kv_shared_layers 0 (or absent) means all layers.
	a, err := ParseAssistant(assistantJSON(t, nil, map[string]any{"num_kv_shared_layers": nil}))
	if err != nil {
		t.Fatal(err)
	}
	if a.Text.NumKVSharedLayers != 4 || !a.UseOrderedEmbeddings || a.NumCentroids != 32 || a.BackboneHiddenSize != 64 {
		t.Fatalf("parsed %+v", a)
	}
	for _, tc := range []struct {
		name      string
		top, text map[string]any
		want      string
	}{
		{"ple", nil, map[string]any{"hidden_size_per_layer_input": 16}, "hidden_size_per_layer_input must be 0, got 16"},
		{"ple default is on", nil, map[string]any{"hidden_size_per_layer_input": nil}, "hidden_size_per_layer_input must be 0, got 256"},
		{"moe", nil, map[string]any{"enable_moe_block": true}, "enable_moe_block must be false"},
		{"double wide", nil, map[string]any{"use_double_wide_mlp": true}, "use_double_wide_mlp must be false"},
		{"partly shared", nil, map[string]any{"num_kv_shared_layers": 2}, "all 4 layers must be KV-shared"},
		{"centroids divide vocab", map[string]any{"num_centroids": 33}, nil, "vocab_size 512 is not divisible by num_centroids 33"},
		{"centroid top-k", map[string]any{"centroid_intermediate_top_k": 64}, nil, "centroid_intermediate_top_k (64) <= num_centroids (32)"},
		{"wrong type", map[string]any{"model_type": "gemma4"}, nil, `model_type "gemma4" is not a Gemma 4 assistant`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseAssistant(assistantJSON(t, tc.top, tc.text))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

func TestLayersResolveSharingAndWidths(t *testing.T) {
	for _, tc := range []struct {
		preset         string
		firstShared    int
		slidingSrc     int
		fullSrc        int
		fullKV, fullHD int
		kEqV           bool
		sharedMLP      int
	}{
		// Spec §1.7: E2B shares from layer 15 (sliding→13, full→14), E4B from 24 (22, 23).
		{"gemma4-e2b", 15, 13, 14, 1, 512, false, 12288},
		{"gemma4-e4b", 24, 22, 23, 2, 512, false, 10240},
		{"gemma4-26b-a4b", 30, -1, -1, 2, 512, true, 0},
		{"gemma4-31b", 60, -1, -1, 4, 512, true, 0},
		{"gemma4-tiny-e2b", 5, 3, 4, 1, 64, false, 256},
		{"gemma4-tiny-e4b", 6, 4, 5, 2, 64, false, 192},
		{"gemma4-tiny-26b-a4b", 6, -1, -1, 1, 64, true, 0},
		{"gemma4-tiny-31b", 6, -1, -1, 1, 64, true, 0},
	} {
		t.Run(tc.preset, func(t *testing.T) {
			p, _ := LookupPreset(tc.preset)
			c := p.Target
			if err := c.validate(false); err != nil {
				t.Fatal(err)
			}
			if got := c.FirstShared(); got != tc.firstShared {
				t.Fatalf("first shared %d, want %d", got, tc.firstShared)
			}
			for _, l := range c.Layers() {
				if l.Type == Full && (l.KVHeads != tc.fullKV || l.HeadDim != tc.fullHD || l.KEqV != tc.kEqV) {
					t.Fatalf("full layer %d: %+v", l.Index, l)
				}
				if !l.Shared {
					continue
				}
				want := map[string]int{Sliding: tc.slidingSrc, Full: tc.fullSrc}[l.Type]
				if l.KVSource != want || l.Intermediate != tc.sharedMLP {
					t.Fatalf("shared layer %d: source %d (want %d), mlp %d (want %d)", l.Index, l.KVSource, want, l.Intermediate, tc.sharedMLP)
				}
			}
		})
	}
}
