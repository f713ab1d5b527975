package gemma4_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"path/filepath"
	"testing"

	"tandem/checkpoint/safetensors"
	"tandem/compute/computetest"
	"tandem/generation"
	"tandem/model/gemma4"
)

// Fixtures written by scripts/oracle/gemma4_target.py with HF transformers
// (see testdata/oracle/README.md).
const oracleDir = "../../testdata/oracle/gemma4"

// Tolerances for f32 compute over bf16 weights against HF's f32 eager run.
// Both sides do the same f32 math in different summation orders. Measured
// (2026-11-29, all presets and sources): max |Δlogit| 3e-5 at 10 tokens,
// 2.0e-3 at 1100 tokens (|logit| ≤ 30 after the softcap; the error grows
// with the number of keys summed), max relative |Δhidden| 6.3e-5. Both runs
// are deterministic, so these bounds cannot flake; a real bug (a wrong
// scale, a missing norm, a misrouted expert, a RoPE off by one position)
// moves logits by 0.04 or more — an early fixture whose RoPE frequencies
// had been rounded to bf16 differed by 0.04 at 10 tokens and by 4 at 700.
const (
	logitTol  = 5e-3
	hiddenTol = 5e-3 // relative to the row's largest |value|
)

type fixture struct {
	t    *testing.T
	file *safetensors.File
}

func (f fixture) i32(name string) []int32 {
	f.t.Helper()
	b, err := f.file.Data(name)
	if err != nil {
		f.t.Fatal(err)
	}
	out := make([]int32, len(b)/4)
	for i := range out {
		out[i] = int32(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out
}

func (f fixture) f32(name string) []float32 {
	f.t.Helper()
	b, err := f.file.Data(name)
	if err != nil {
		f.t.Fatal(err)
	}
	out := make([]float32, len(b)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out
}

// modelDir returns the checkpoint a fixture was made from: our generated
// one (regenerated here and checked against the fixture's hash) or HF's.
func modelDir(t *testing.T, fx fixture, preset, source string) string {
	if source == "hf" {
		return filepath.Join(oracleDir, "hf-"+preset)
	}
	return generated(t, preset, fx.file.Metadata()["gen_model_sha256"])
}

// forwardAll runs ids through a fresh cache in chunks and returns logits
// [n, V] and hidden states [n, H].
func forwardAll(t *testing.T, m *gemma4.Model, ids []int32, chunk int) ([]float32, []float32) {
	return forwardWith(t, m, ids, chunk, gemma4.ForwardOptions{Logits: gemma4.LogitsAll})
}

// forwardWith is forwardAll with opt's passes (opt.Logits: LogitsAll).
func forwardWith(t *testing.T, m *gemma4.Model, ids []int32, chunk int, opt gemma4.ForwardOptions) ([]float32, []float32) {
	t.Helper()
	b := m.Backend()
	cache := m.NewCache(chunk)
	var logits, hidden []float32
	for s := 0; s < len(ids); s += chunk {
		e := min(s+chunk, len(ids))
		out, err := m.Forward([]gemma4.Row{{Tokens: ids[s:e], Cache: cache}}, opt)
		if err != nil {
			t.Fatal(err)
		}
		logits = append(logits, b.ToF32(out.Logits)...)
		hidden = append(hidden, b.ToF32(out.Hidden)...)
	}
	return logits, hidden
}

func TestMatchesHFTransformers(t *testing.T) {
	presets := []string{"gemma4-tiny-e2b", "gemma4-tiny-e4b", "gemma4-tiny-26b-a4b", "gemma4-tiny-31b"}
	for _, preset := range presets {
		for _, source := range []string{"tandem", "hf"} {
			t.Run(preset+"/"+source, func(t *testing.T) {
				f, err := safetensors.Open(filepath.Join(oracleDir, preset+"."+source+".safetensors"))
				if err != nil {
					t.Fatal(err)
				}
				defer f.Close()
				fx := fixture{t, f}
				m, err := gemma4.Load(modelDir(t, fx, preset, source), computetest.Backend(t))
				if err != nil {
					t.Fatal(err)
				}
				defer m.Close()
				V, H := m.Config.Text.VocabSize, m.Config.Text.HiddenSize
				for _, n := range []int{10, 700, 1100} {
					p := fmt.Sprintf("p%d.", n)
					ids := fx.i32(p + "ids")
					logits, hidden := forwardAll(t, m, ids, generation.DefaultPrefillSize)
					topIDs, topLogits := fx.i32(p+"topk_ids"), fx.f32(p+"topk_logits")
					K := len(topIDs) / n
					var maxDiff float64
					var agreed, clear int
					for pos := range n {
						row := logits[pos*V : (pos+1)*V]
						for j := range K {
							d := math.Abs(float64(row[topIDs[pos*K+j]] - topLogits[pos*K+j]))
							maxDiff = max(maxDiff, d)
						}
						if topLogits[pos*K]-topLogits[pos*K+1] > 2*logitTol {
							clear++
							if argmax(row) == topIDs[pos*K] {
								agreed++
							}
						}
					}
					last := fx.f32(p + "last_logits")
					for v := range V {
						maxDiff = max(maxDiff, math.Abs(float64(logits[(n-1)*V+v]-last[v])))
					}
					var maxHidden float64
					refH := fx.f32(p + "hidden")
					for i, pos := range fx.i32(p + "hidden_pos") {
						ref, got := refH[i*H:(i+1)*H], hidden[int(pos)*H:(int(pos)+1)*H]
						var scale float64
						for _, v := range ref {
							scale = max(scale, math.Abs(float64(v)))
						}
						for j := range ref {
							maxHidden = max(maxHidden, math.Abs(float64(got[j]-ref[j]))/scale)
						}
					}
					t.Logf("%d tokens: max |Δlogit| %.2e, max relative |Δhidden| %.2e, top-1 agrees at %d/%d clear positions", n, maxDiff, maxHidden, agreed, clear)
					if maxDiff > logitTol || maxHidden > hiddenTol || agreed != clear {
						t.Errorf("%d tokens: logits differ by up to %.3g (tolerance %g), hidden by %.3g (tolerance %g), top-1 agrees at %d of %d clear positions",
							n, maxDiff, logitTol, maxHidden, hiddenTol, agreed, clear)
					}
					if clear < n/2 {
						t.Errorf("%d tokens: only %d positions have a clear top-1 margin: the fixture cannot discriminate", n, clear)
					}
				}
				for _, n := range []int{10, 700} {
					p := fmt.Sprintf("p%d.", n)
					want, margins := fx.i32(p+"greedy"), fx.f32(p+"greedy_margin")
					res, err := generation.Generate(context.Background(), m, fx.i32(p+"ids"), generation.Options{MaxTokens: len(want)}, nil)
					if err != nil {
						t.Fatal(err)
					}
					for i := range want {
						if margins[i] < 2*logitTol {
							t.Logf("%d-token prompt: greedy step %d has margin %.2g; compared the %d steps before it", n, i, margins[i], i)
							break
						}
						if res.Tokens[i] != want[i] {
							t.Fatalf("%d-token prompt: greedy step %d is %d, HF chose %d (margin %.3g); ours %v, HF %v", n, i, res.Tokens[i], want[i], margins[i], res.Tokens, want)
						}
					}
				}
			})
		}
	}
}

func argmax(x []float32) int32 {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return int32(best)
}
