package gemma4

import (
	"fmt"
	"slices"
	"sort"

	"tandem/checkpoint"
)

// Preset is a named model shape gen-model can write: a target or a drafter.
type Preset struct {
	Name        string
	Description string
	Target      *TextConfig      // set for target presets
	Assistant   *AssistantConfig // set for drafter presets
}

// Presets returns every preset, published shapes (spec §1.1, §2.1) and their
// tiny variants, which keep every structural feature at CI-sized dims.
func Presets() []Preset {
	var ps []Preset
	for _, s := range shapes() {
		for _, tiny := range []bool{false, true} {
			name, desc, tail := "gemma4-"+s.name, "Gemma 4 "+s.label, ""
			if tiny {
				name, desc, tail = "gemma4-tiny-"+s.name, "tiny "+desc, " (published structure, CI-sized dims)"
			}
			t := s.target(tiny)
			ps = append(ps,
				Preset{Name: name, Description: desc + tail, Target: t},
				Preset{Name: name + "-assistant", Description: desc + " assistant drafter" + tail, Assistant: s.assistant(tiny, t)})
		}
	}
	return ps
}

// PresetNames lists the preset names in a stable order.
func PresetNames() []string {
	var names []string
	for _, p := range Presets() {
		names = append(names, p.Name)
	}
	sort.Strings(names)
	return names
}

// LookupPreset finds a preset by name.
func LookupPreset(name string) (Preset, error) {
	ps := Presets()
	if i := slices.IndexFunc(ps, func(p Preset) bool { return p.Name == name }); i >= 0 {
		return ps[i], nil
	}
	return Preset{}, fmt.Errorf("unknown preset %q (available: %v)", name, PresetNames())
}

type shape struct {
	name, label string
	target      func(tiny bool) *TextConfig
	assistant   func(tiny bool, t *TextConfig) *AssistantConfig
}

// layerTypes repeats (period−1) sliding layers and one full layer.
func layerTypes(n, period int) []string {
	ts := make([]string, n)
	for i := range ts {
		ts[i] = Sliding
		if (i+1)%period == 0 {
			ts[i] = Full
		}
	}
	return ts
}

func baseText() TextConfig {
	c := DefaultTextConfig()
	c.RopeParameters = defaultRope()
	c.FinalLogitSoftcapping = ptr(Float(30))
	c.EOSTokenID = checkpoint.IDList{1, 106}
	c.HiddenSizePerLayer = 0
	return c
}

// tinyDims shrinks a config while keeping its structure.
func tinyDims(c *TextConfig, hidden, layers, shared, period int) {
	c.VocabSize = 512
	if c.HiddenSizePerLayer > 0 {
		c.VocabSizePerLayerInput, c.HiddenSizePerLayer = 512, 16
	}
	c.HiddenSize, c.IntermediateSize = hidden, 2*hidden
	c.NumHiddenLayers, c.NumKVSharedLayers = layers, shared
	c.LayerTypes = layerTypes(layers, period)
	c.NumAttentionHeads, c.HeadDim, c.GlobalHeadDim = 4, 32, 64
	c.SlidingWindow = 16
	c.MaxPositionEmbeddings = 4096
}

func shapes() []shape {
	return []shape{
		{name: "e2b", label: "E2B",
			target: func(tiny bool) *TextConfig {
				c := baseText()
				c.HiddenSize, c.IntermediateSize, c.NumHiddenLayers = 1536, 6144, 35
				c.NumAttentionHeads, c.NumKeyValueHeads = 8, 1
				c.LayerTypes, c.NumKVSharedLayers = layerTypes(35, 5), 20
				c.HiddenSizePerLayer, c.UseDoubleWideMLP = 256, true
				if tiny {
					tinyDims(&c, 64, 10, 5, 5)
					c.NumKeyValueHeads = 1
				}
				return &c
			},
			assistant: func(tiny bool, t *TextConfig) *AssistantConfig {
				return assistantFor(t, 256, 2048, 4, true, tiny)
			}},
		{name: "e4b", label: "E4B",
			target: func(tiny bool) *TextConfig {
				c := baseText()
				c.HiddenSize, c.IntermediateSize, c.NumHiddenLayers = 2560, 10240, 42
				c.NumAttentionHeads, c.NumKeyValueHeads = 8, 2
				c.LayerTypes, c.NumKVSharedLayers = layerTypes(42, 6), 18
				c.HiddenSizePerLayer = 256
				if tiny {
					tinyDims(&c, 96, 12, 6, 6)
				}
				return &c
			},
			assistant: func(tiny bool, t *TextConfig) *AssistantConfig {
				return assistantFor(t, 256, 2048, 4, true, tiny)
			}},
		{name: "26b-a4b", label: "26B-A4B (MoE)",
			target: func(tiny bool) *TextConfig {
				c := baseText()
				c.HiddenSize, c.IntermediateSize, c.NumHiddenLayers = 2816, 2112, 30
				c.NumAttentionHeads, c.NumKeyValueHeads = 16, 8
				c.AttentionKEqV, c.NumGlobalKeyValueHeads = true, ptr(2)
				c.LayerTypes, c.SlidingWindow = layerTypes(30, 6), 1024
				c.MaxPositionEmbeddings = 262144
				c.EnableMoEBlock, c.NumExperts, c.TopKExperts, c.MoEIntermediateSize = true, ptr(128), ptr(8), ptr(704)
				if tiny {
					tinyDims(&c, 80, 6, 0, 6)
					c.NumKeyValueHeads, c.NumGlobalKeyValueHeads = 2, ptr(1)
					c.NumExperts, c.TopKExperts, c.MoEIntermediateSize = ptr(8), ptr(2), ptr(32)
				}
				return &c
			},
			assistant: func(tiny bool, t *TextConfig) *AssistantConfig {
				return assistantFor(t, 1024, 8192, 16, false, tiny)
			}},
		{name: "31b", label: "31B",
			target: func(tiny bool) *TextConfig {
				c := baseText()
				c.HiddenSize, c.IntermediateSize, c.NumHiddenLayers = 5376, 21504, 60
				c.NumAttentionHeads, c.NumKeyValueHeads = 32, 16
				c.AttentionKEqV, c.NumGlobalKeyValueHeads = true, ptr(4)
				c.LayerTypes, c.SlidingWindow = layerTypes(60, 6), 1024
				c.MaxPositionEmbeddings = 262144
				if tiny {
					tinyDims(&c, 128, 6, 0, 6)
					c.NumKeyValueHeads, c.NumGlobalKeyValueHeads = 2, ptr(1)
				}
				return &c
			},
			assistant: func(tiny bool, t *TextConfig) *AssistantConfig {
				return assistantFor(t, 1024, 8192, 32, false, tiny)
			}},
	}
}

// assistantFor builds a drafter for target t. Its attention geometry (head
// dims, KV heads, k_eq_v, window, RoPE) mirrors the target's, since its
// queries attend to the target's K/V.
func assistantFor(t *TextConfig, hidden, inter, heads int, ordered, tiny bool) *AssistantConfig {
	c := *t
	c.RopeParameters = defaultRope()
	c.LayerTypes = []string{Sliding, Sliding, Sliding, Full}
	c.NumHiddenLayers, c.NumKVSharedLayers = 4, 4
	c.HiddenSize, c.IntermediateSize, c.NumAttentionHeads = hidden, inter, heads
	c.HiddenSizePerLayer, c.VocabSizePerLayerInput = 0, 0
	c.UseDoubleWideMLP, c.EnableMoEBlock = false, false
	c.NumExperts, c.TopKExperts, c.MoEIntermediateSize = nil, nil, nil
	c.FinalLogitSoftcapping = nil
	a := &AssistantConfig{
		ModelType: TypeAssistant, BackboneHiddenSize: t.HiddenSize,
		UseOrderedEmbeddings: ordered, NumCentroids: 2048, CentroidTopK: 32, TieWordEmbeddings: true,
	}
	if tiny {
		c.HiddenSize, c.IntermediateSize, c.NumAttentionHeads = 48, 96, 4
		if ordered {
			c.HiddenSize, c.IntermediateSize = 32, 64
		}
		a.NumCentroids, a.CentroidTopK = 32, 4
	}
	a.Text = c
	return a
}
