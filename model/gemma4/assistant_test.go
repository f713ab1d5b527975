package gemma4_test

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"tandem/checkpoint/safetensors"
	"tandem/compute"
	"tandem/compute/cpu"
	"tandem/model/gemma4"
)

// generated writes preset with seed 0 and checks it is the checkpoint the
// fixture was made from.
func generated(t *testing.T, preset, wantSHA string) string {
	t.Helper()
	p, err := gemma4.LookupPreset(preset)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := p.Generate(dir, gemma4.GenerateOptions{Seed: 0}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	if sum := sha256.Sum256(b); hex.EncodeToString(sum[:]) != wantSHA {
		t.Fatalf("gen-model output for %s changed since the fixtures were made: regenerate them (scripts/oracle/gemma4_drafter.py)", preset)
	}
	return dir
}

// Drafter logits are compared with a tolerance of the same origin as the
// target's (f32 over bf16 weights, different summation orders). Measured
// 2026-11-29 over all presets, both conventions, T = 10 and 40: max
// |Δlogit| 9.9e-4, max |Δhidden| 2.3e-4.
const drafterTol = 5e-3

func TestAssistantMatchesHFTransformers(t *testing.T) {
	for _, preset := range tinyTargets {
		t.Run(preset, func(t *testing.T) {
			f, err := safetensors.Open(filepath.Join(oracleDir, preset+"-assistant.hf.safetensors"))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			fx := fixture{t, f}
			meta := f.Metadata()
			b := cpu.New(0)
			m, err := gemma4.Load(generated(t, preset, meta["target_sha256"]), b)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			a, err := gemma4.LoadAssistant(generated(t, preset+"-assistant", meta["assistant_sha256"]), b)
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			if err := a.Bind(m); err != nil {
				t.Fatal(err)
			}
			V := m.Config.Text.VocabSize
			for _, T := range []int{10, 40} {
				p := fmt.Sprintf("p%d.", T)
				ids := fx.i32(p + "ids")
				cache := m.NewCache(T)
				out, err := m.Forward([]gemma4.Row{{Tokens: ids, Cache: cache}}, gemma4.ForwardOptions{Logits: gemma4.LogitsLast})
				if err != nil {
					t.Fatal(err)
				}
				bonus := argmax(b.ToF32(out.Logits))
				if want := fx.i32(p + "bonus")[0]; bonus != want {
					t.Fatalf("T=%d: target's next token %d, HF %d", T, bonus, want)
				}
				hidden := b.Slice(out.Hidden, T-1, T)
				snap := m.Snapshot(cache)
				for _, conv := range []struct {
					name string
					last bool
				}{{"T", false}, {"Tm1", true}} {
					wantTok := fx.i32(p + conv.name + ".tokens")
					wantLogits, wantHidden := fx.f32(p+conv.name+".logits"), fx.f32(p+conv.name+".hidden")
					Ht := len(wantHidden) / len(wantTok)
					tok, h := bonus, hidden
					var maxL, maxH float64
					for step := range wantTok {
						so, err := a.Step([]gemma4.DraftRow{{Token: tok, Hidden: h, Snap: snap}}, gemma4.DraftOptions{QueryAtLast: conv.last})
						if err != nil {
							t.Fatal(err)
						}
						logits := b.ToF32(a.Logits(so.Normed))
						for v := range V {
							maxL = max(maxL, math.Abs(float64(logits[v]-wantLogits[step*V+v])))
						}
						next := b.ToF32(so.Next)
						for j := range Ht {
							maxH = max(maxH, math.Abs(float64(next[j]-wantHidden[step*Ht+j])))
						}
						checkTopAt(t, a, so.Normed, logits)
						fast := a.Argmax(so.Normed)[0]
						if full := argmax(logits); fast != full {
							t.Fatalf("T=%d %s step %d: fast-path argmax %d, full-vocabulary argmax %d", T, conv.name, step, fast, full)
						}
						if fast != wantTok[step] {
							t.Fatalf("T=%d %s step %d: drafted %d, HF %d", T, conv.name, step, fast, wantTok[step])
						}
						tok, h = fast, so.Next
					}
					t.Logf("T=%d, query at %s: max |Δlogit| %.2e, max |Δhidden| %.2e", T, conv.name, maxL, maxH)
					if maxL > drafterTol || maxH > drafterTol {
						t.Errorf("T=%d %s: logits differ by %.3g, hidden by %.3g (tolerance %g)", T, conv.name, maxL, maxH, drafterTol)
					}
				}
			}
		})
	}
}

func TestAssistantBinding(t *testing.T) {
	b := cpu.New(0)
	load := func(preset string) string {
		p, _ := gemma4.LookupPreset(preset)
		dir := t.TempDir()
		if err := p.Generate(dir, gemma4.GenerateOptions{Seed: 5}); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	e2b, err := gemma4.Load(load("gemma4-tiny-e2b"), b)
	if err != nil {
		t.Fatal(err)
	}
	defer e2b.Close()
	a, err := gemma4.LoadAssistant(load("gemma4-tiny-e2b-assistant"), b)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if _, err := a.Step([]gemma4.DraftRow{{Token: 2}}, gemma4.DraftOptions{}); !errors.Is(err, gemma4.ErrNotBound) {
		t.Fatalf("step before binding: %v", err)
	}
	if err := a.Bind(e2b); err != nil {
		t.Fatal(err)
	}
	if err := a.Bind(e2b); !errors.Is(err, gemma4.ErrAlreadyBound) {
		t.Fatalf("rebinding: %v", err)
	}

	// A 31B-shaped drafter on the E2B target: every mismatch is named.
	wrong, err := gemma4.LoadAssistant(load("gemma4-tiny-31b-assistant"), b)
	if err != nil {
		t.Fatal(err)
	}
	defer wrong.Close()
	err = wrong.Bind(e2b)
	var inc *gemma4.IncompatibleError
	if !errors.As(err, &inc) {
		t.Fatalf("binding a mismatched drafter: %v", err)
	}
	for _, want := range []string{"backbone_hidden_size 128, target hidden_size 64"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if wrong.Target() != nil {
		t.Fatal("a failed Bind left the drafter bound")
	}
}

// checkTopAt checks TopAt against the full logits of its one row: the m
// largest values in order, each with the id of a token holding it, no id
// twice; and a refusal exactly where the centroid head selects fewer than m.
func checkTopAt(t *testing.T, a *gemma4.Assistant, normed *compute.Tensor, logits []float32) {
	t.Helper()
	b := a.Backend()
	want := slices.Clone(logits)
	slices.SortFunc(want, func(x, y float32) int { return cmp.Compare(y, x) })
	selected := len(logits)
	if a.Config.UseOrderedEmbeddings {
		selected = a.Config.CentroidTopK * (len(logits) / a.Config.NumCentroids)
	}
	for _, m := range []int{1, 2, 65, selected, selected + 1} {
		vals, ids, ok := a.TopAt(normed, m)
		if ok != (m <= selected && m <= len(logits)) {
			t.Fatalf("TopAt(%d) reported %v with %d tokens selected", m, ok, selected)
		}
		if !ok {
			continue
		}
		vs, is := b.ToF32(vals), b.ToI32(ids)
		if !slices.Equal(vs, want[:m]) {
			t.Fatalf("TopAt(%d): values %v, want %v", m, vs[:min(m, 8)], want[:min(m, 8)])
		}
		seen := map[int32]bool{}
		for j, id := range is {
			if seen[id] || logits[id] != vs[j] {
				t.Fatalf("TopAt(%d): entry %d names token %d (logit %v) for %v", m, j, id, logits[id], vs[j])
			}
			seen[id] = true
		}
	}
}
