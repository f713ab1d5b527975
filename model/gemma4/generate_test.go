package gemma4

import (
	"bytes"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"tandem/checkpoint"
	"tandem/checkpoint/safetensors"
	"tandem/compute"
)

func tinyPresets() []Preset {
	var ps []Preset
	for _, p := range Presets() {
		if strings.Contains(p.Name, "-tiny-") {
			ps = append(ps, p)
		}
	}
	return ps
}

func TestTinyPresetsKeepEveryStructuralFeature(t *testing.T) {
	has := map[string]bool{}
	for _, p := range tinyPresets() {
		if a := p.Assistant; a != nil {
			has["assistant"] = true
			if a.UseOrderedEmbeddings {
				has["centroid head"] = true
				if a.Text.VocabSize%a.NumCentroids != 0 {
					t.Errorf("%s: vocab %d not divisible by %d centroids", p.Name, a.Text.VocabSize, a.NumCentroids)
				}
			}
			continue
		}
		c := p.Target
		for _, l := range c.Layers() {
			has[l.Type] = true
			if l.Shared {
				has["kv sharing"] = true
			}
			if l.KEqV {
				has["k_eq_v"] = true
			}
			if l.Intermediate != c.IntermediateSize {
				has["double-wide mlp"] = true
			}
		}
		if c.HasPLE() {
			has["per-layer embeddings"] = true
		}
		if c.EnableMoEBlock {
			has["moe"] = true
		}
		if c.NumGlobalKeyValueHeads != nil && *c.NumGlobalKeyValueHeads != c.NumKeyValueHeads {
			has["global kv heads"] = true
		}
	}
	for _, f := range []string{Sliding, Full, "kv sharing", "k_eq_v", "double-wide mlp", "per-layer embeddings", "moe", "global kv heads", "assistant", "centroid head"} {
		if !has[f] {
			t.Errorf("no tiny preset has %s", f)
		}
	}
}

func TestPublishedPresetSizes(t *testing.T) {
	// Parameter counts of the text towers, from the published shapes.
	for _, tc := range []struct {
		preset   string
		min, max float64
	}{
		{"gemma4-e2b", 4.5e9, 4.8e9},
		{"gemma4-e4b", 7.3e9, 7.6e9},
		{"gemma4-26b-a4b", 25.0e9, 25.5e9},
		{"gemma4-31b", 30.5e9, 31.0e9},
	} {
		p, _ := LookupPreset(tc.preset)
		var n float64
		for _, w := range p.Weights() {
			n += float64(compute.NumElements(w.Shape))
		}
		if n < tc.min || n > tc.max {
			t.Errorf("%s: %.3g parameters, want within [%.3g, %.3g]", tc.preset, n, tc.min, tc.max)
		}
	}
}

// TestGenerateThenInspect protects the writer and the checker together:
// every tiny preset, written and read back, matches its own config exactly.
func TestGenerateThenInspect(t *testing.T) {
	for _, p := range tinyPresets() {
		t.Run(p.Name, func(t *testing.T) {
			dir := t.TempDir()
			if err := p.Generate(dir, GenerateOptions{Seed: 1}); err != nil {
				t.Fatal(err)
			}
			s, err := Inspect(dir)
			if err != nil {
				t.Fatal(err)
			}
			if len(s.Problems) > 0 {
				t.Fatalf("problems: %v", s.Problems)
			}
			var want int64
			for _, w := range p.Weights() {
				want += int64(compute.NumElements(w.Shape))
			}
			if s.Params != want {
				t.Fatalf("inspect counts %d parameters, preset has %d", s.Params, want)
			}
			g, err := checkpoint.ReadGenerationConfig(dir)
			if err != nil || g == nil || !slices.Equal(g.EOSTokenIDs, checkpoint.IDList{1, 106, 50}) {
				t.Fatalf("generation config %+v, %v", g, err)
			}
		})
	}
}

func readAll(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	set, err := safetensors.OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	out := map[string][]byte{}
	for _, ti := range set.Tensors() {
		b, err := set.Data(ti.Name)
		if err != nil {
			t.Fatal(err)
		}
		out[ti.Name] = bytes.Clone(b)
	}
	return out
}

func TestGenerateIsDeterministic(t *testing.T) {
	p, _ := LookupPreset("gemma4-tiny-26b-a4b")
	gen := func(opt GenerateOptions) map[string][]byte {
		dir := t.TempDir()
		if err := p.Generate(dir, opt); err != nil {
			t.Fatal(err)
		}
		return readAll(t, dir)
	}
	a := gen(GenerateOptions{Seed: 7})
	sharded := gen(GenerateOptions{Seed: 7, MaxShardBytes: 300 << 10})
	other := gen(GenerateOptions{Seed: 8})
	f32 := gen(GenerateOptions{Seed: 7, DType: compute.F32})
	for name, b := range a {
		if !bytes.Equal(b, sharded[name]) {
			t.Fatalf("%s differs between sharded and single-file output", name)
		}
		if len(b) > 8 && bytes.Equal(b, other[name]) {
			t.Fatalf("%s is the same for seeds 7 and 8", name)
		}
		// The BF16 checkpoint holds the F32 checkpoint's values, rounded.
		fb := f32[name]
		for i := 0; i < len(b)/2; i++ {
			v := math.Float32frombits(binary.LittleEndian.Uint32(fb[4*i:]))
			if got := binary.LittleEndian.Uint16(b[2*i:]); got != compute.F32ToBF16(v) {
				t.Fatalf("%s[%d]: bf16 %#04x, f32 %v rounds to %#04x", name, i, got, v, compute.F32ToBF16(v))
			}
		}
	}
}

func TestGenerateWritesShardsAndIndex(t *testing.T) {
	p, _ := LookupPreset("gemma4-tiny-e2b")
	dir := t.TempDir()
	if err := p.Generate(dir, GenerateOptions{MaxShardBytes: 512 << 10}); err != nil {
		t.Fatal(err)
	}
	shards, _ := filepath.Glob(filepath.Join(dir, "model-*-of-*.safetensors"))
	if len(shards) < 2 {
		t.Fatalf("want several shards, got %v", shards)
	}
	if _, err := os.Stat(filepath.Join(dir, "model.safetensors.index.json")); err != nil {
		t.Fatal(err)
	}
	if s, err := Inspect(dir); err != nil || len(s.Problems) > 0 {
		t.Fatalf("inspect: %v %v", err, s.Problems)
	}
}

func TestTokenOrderingIsAPermutation(t *testing.T) {
	p, _ := LookupPreset("gemma4-tiny-e4b-assistant")
	dir := t.TempDir()
	if err := p.Generate(dir, GenerateOptions{Seed: 3}); err != nil {
		t.Fatal(err)
	}
	b := readAll(t, dir)["masked_embedding.token_ordering"]
	seen := make([]bool, p.Assistant.Text.VocabSize)
	for i := 0; i < len(b)/8; i++ {
		v := binary.LittleEndian.Uint64(b[8*i:])
		if v >= uint64(len(seen)) || seen[v] {
			t.Fatalf("token_ordering[%d] = %d repeats or is out of range", i, v)
		}
		seen[v] = true
	}
}

// TestRandomLogitsArePeaked guards the init scales: the tied LM head applied
// to a normalised hidden state must give a distribution far from flat, or
// tests comparing argmaxes would compare noise.
func TestRandomLogitsArePeaked(t *testing.T) {
	for _, name := range []string{"gemma4-tiny-e2b", "gemma4-tiny-31b", "gemma4-tiny-e4b-assistant"} {
		t.Run(name, func(t *testing.T) {
			p, _ := LookupPreset(name)
			dir := t.TempDir()
			if err := p.Generate(dir, GenerateOptions{Seed: 5}); err != nil {
				t.Fatal(err)
			}
			ws := readAll(t, dir)
			prefix := Prefixes[0]
			if p.Assistant != nil {
				prefix = "model."
			}
			emb, norm := ws[prefix+"embed_tokens.weight"], ws[prefix+"norm.weight"]
			H := len(norm) / 2
			V := len(emb) / 2 / H
			bf := func(b []byte, i int) float64 { return float64(compute.BF16ToF32(binary.LittleEndian.Uint16(b[2*i:]))) }
			r := rand.New(rand.NewPCG(1, 2))
			var meanTop float64
			const trials = 20
			for range trials {
				h := make([]float64, H)
				var ss float64
				for i := range h {
					h[i] = r.NormFloat64()
					ss += h[i] * h[i]
				}
				inv := 1 / math.Sqrt(ss/float64(H))
				logits := make([]float64, V)
				maxL := math.Inf(-1)
				for v := range logits {
					for i := range h {
						logits[v] += h[i] * inv * bf(norm, i) * bf(emb, v*H+i)
					}
					logits[v] = 30 * math.Tanh(logits[v]/30)
					maxL = max(maxL, logits[v])
				}
				var z float64
				for _, l := range logits {
					z += math.Exp(l - maxL)
				}
				meanTop += 1 / z / trials
			}
			t.Logf("mean top-1 probability %.3f over %d tokens", meanTop, V)
			// Flat logits would give 1/V ≈ 0.002.
			if meanTop < 0.05 {
				t.Fatalf("mean top-1 probability %.4f: logits are nearly flat", meanTop)
			}
		})
	}
}
