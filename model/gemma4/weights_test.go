package gemma4

import (
	"strings"
	"testing"

	"tandem/checkpoint/safetensors"
	"tandem/compute"
)

// infos fakes a checkpoint listing from expected weights.
func infos(ws []Weight) []safetensors.TensorInfo {
	var ts []safetensors.TensorInfo
	for _, w := range ws {
		dt := compute.BF16
		if w.Int {
			dt = compute.I64
		}
		ts = append(ts, safetensors.TensorInfo{Name: w.Name, DType: dt, Shape: w.Shape})
	}
	return ts
}

func TestCheckTargetResolvesPrefixes(t *testing.T) {
	p, _ := LookupPreset("gemma4-tiny-e4b")
	for _, prefix := range []string{"model.language_model.", "model.", "language_model.model."} {
		r := CheckTarget(p.Target, infos(TargetWeights(p.Target, prefix)))
		if r.Prefix != prefix || r.Err() != nil {
			t.Errorf("prefix %q: resolved %q, err %v", prefix, r.Prefix, r.Err())
		}
	}
}

func TestCheckTargetProblems(t *testing.T) {
	p, _ := LookupPreset("gemma4-tiny-e2b")
	c := p.Target
	const pre = "model.language_model."
	for _, tc := range []struct {
		name   string
		mutate func([]safetensors.TensorInfo) []safetensors.TensorInfo
		want   string // in the error; "" means no error
		note   string // in the notes
	}{
		{"clean", nil, "", ""},
		{"missing", func(ts []safetensors.TensorInfo) []safetensors.TensorInfo { return ts[1:] },
			`missing tensor "model.language_model.embed_tokens.weight" (want shape [512 64])`, ""},
		{"shape mismatch", func(ts []safetensors.TensorInfo) []safetensors.TensorInfo {
			ts[0].Shape = []int{512, 63}
			return ts
		}, `tensor "model.language_model.embed_tokens.weight" has shape [512 63], config.json implies [512 64]`, ""},
		{"integer weights", func(ts []safetensors.TensorInfo) []safetensors.TensorInfo {
			ts[1].DType = compute.I32
			return ts
		}, `has dtype I32, want F32, BF16 or F16`, ""},
		{"unexpected tensor", func(ts []safetensors.TensorInfo) []safetensors.TensorInfo {
			return append(ts, safetensors.TensorInfo{Name: pre + "layers.10.input_layernorm.weight", DType: compute.BF16, Shape: []int{64}})
		}, `unexpected tensor "model.language_model.layers.10.input_layernorm.weight"`, ""},
		{"stray kv on shared layer is dropped", func(ts []safetensors.TensorInfo) []safetensors.TensorInfo {
			return append(ts, safetensors.TensorInfo{Name: pre + "layers.7.self_attn.k_proj.weight", DType: compute.BF16, Shape: []int{32, 64}})
		}, "", `dropped "model.language_model.layers.7.self_attn.k_proj.weight"`},
		{"multimodal towers are ignored", func(ts []safetensors.TensorInfo) []safetensors.TensorInfo {
			return append(ts,
				safetensors.TensorInfo{Name: "model.vision_tower.encoder.layers.0.mlp.up_proj.linear.weight", DType: compute.BF16, Shape: []int{4, 4}},
				safetensors.TensorInfo{Name: "model.embed_audio.embedding_projection.weight", DType: compute.BF16, Shape: []int{4, 4}},
				safetensors.TensorInfo{Name: pre + "layers.0.self_attn.rotary_emb.inv_freq", DType: compute.F32, Shape: []int{16}})
		}, "", "ignored 3 multimodal-tower or buffer tensors"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts := infos(TargetWeights(c, pre))
			if tc.mutate != nil {
				ts = tc.mutate(ts)
			}
			r := CheckTarget(c, ts)
			err := r.Err()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("unexpected error %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("error %v, want it to contain %q", err, tc.want)
			}
			if tc.note != "" && !strings.Contains(strings.Join(r.Notes, "\n"), tc.note) {
				t.Fatalf("notes %v, want %q", r.Notes, tc.note)
			}
		})
	}
}

func TestCheckTargetKeepsKVOfNonSharedLayers(t *testing.T) {
	// k_proj of layer 3 (not shared) is required: removing it is a problem,
	// not something the sanitize rules may drop.
	p, _ := LookupPreset("gemma4-tiny-e2b")
	ts := infos(TargetWeights(p.Target, Prefixes[0]))
	var kept []safetensors.TensorInfo
	for _, ti := range ts {
		if ti.Name != "model.language_model.layers.3.self_attn.k_proj.weight" {
			kept = append(kept, ti)
		}
	}
	if err := CheckTarget(p.Target, kept).Err(); err == nil || !strings.Contains(err.Error(), "layers.3.self_attn.k_proj.weight") {
		t.Fatalf("error %v", err)
	}
}

func TestCheckAssistant(t *testing.T) {
	p, _ := LookupPreset("gemma4-tiny-e2b-assistant")
	a := p.Assistant
	ts := infos(AssistantWeights(a))
	if err := CheckAssistant(a, ts).Err(); err != nil {
		t.Fatal(err)
	}
	withHead := append(append([]safetensors.TensorInfo(nil), ts...), safetensors.TensorInfo{Name: "lm_head.weight", DType: compute.BF16, Shape: []int{512, 32}})
	if r := CheckAssistant(a, withHead); r.Err() != nil || len(r.Notes) != 1 {
		t.Fatalf("tied lm_head: err %v, notes %v", r.Err(), r.Notes)
	}
	withKV := append(append([]safetensors.TensorInfo(nil), ts...), safetensors.TensorInfo{Name: "model.layers.0.self_attn.v_proj.weight", DType: compute.BF16, Shape: []int{32, 32}})
	if err := CheckAssistant(a, withKV).Err(); err == nil || !strings.Contains(err.Error(), "must not have v_proj weights") {
		t.Fatalf("stray v_proj: %v", err)
	}
	var noOrdering []safetensors.TensorInfo
	for _, ti := range ts {
		if ti.Name != "masked_embedding.token_ordering" {
			noOrdering = append(noOrdering, ti)
		}
	}
	if err := CheckAssistant(a, noOrdering).Err(); err == nil || !strings.Contains(err.Error(), `missing tensor "masked_embedding.token_ordering"`) {
		t.Fatalf("missing ordering: %v", err)
	}
}
