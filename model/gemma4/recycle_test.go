package gemma4_test

import (
	"testing"

	"tandem/compute"
	"tandem/compute/computetest"
	"tandem/compute/cuda"
	"tandem/model/gemma4"
	"tandem/model/gemma4/gemma4test"
)

// TestRecycledIntermediatesAreDead protects Forward's compute.Recycle
// calls: a backend that poisons what is handed back (NaN at once) gives
// the bits of one that ignores it, so nothing is recycled while an op
// still reads it, and nothing is handed back twice. Every tiny preset
// (dense, KV-shared with per-layer inputs, MoE, values equal to keys),
// products stacked as one allocation, prompt chunks and single tokens (a
// token's per-layer input is a view, a chunk's a gather), past the sliding
// window (a ring's wrapping write), and two rows in one pass.
func TestRecycledIntermediatesAreDead(t *testing.T) {
	for _, preset := range tinyTargets {
		t.Run(preset, func(t *testing.T) {
			run := func(poison bool) ([][]float32, *computetest.Poisoning) {
				b := &computetest.Poisoning{Backend: computetest.Backend(t), Poison: poison}
				m := gemma4test.Random(t, preset, b)
				ids := randomTokens(40, m.Config.Text.VocabSize, 9)
				rows := feed(t, m, m.NewCache(13), ids, 13, 1, 1, 7, 1)
				// Two rows of different lengths in one pass.
				c1, c2 := m.NewCache(8), m.NewCache(8)
				out, err := m.Forward([]gemma4.Row{{Tokens: ids[:5], Cache: c1}, {Tokens: ids[5:8], Cache: c2}}, gemma4.ForwardOptions{Logits: gemma4.LogitsAll})
				if err != nil {
					t.Fatal(err)
				}
				return append(rows, m.Backend().ToF32(out.Logits)), b
			}
			want, _ := run(false)
			got, b := run(true)
			if b.Recycled == 0 {
				t.Fatal("Forward recycled nothing")
			}
			if b.Poisoned == 0 {
				t.Skip("poisoning needs the CPU backend's storage")
			}
			if b.Doubles != 0 {
				t.Errorf("%d allocations handed back twice", b.Doubles)
			}
			sameBits(t, "logits with recycled tensors poisoned", want, got)
		})
	}
}

// TestRecycleKeepsTheBitsOnTheGPU: with TANDEM_CUDA_RECYCLE=1 the CUDA
// pool hands Forward's intermediates to later ops at once, and every
// output keeps its bits: decode steps, prompt chunks past the window, two
// rows in one pass, a bf16 prompt pass, MoE routed on the device. (On the
// CPU, TestRecycledIntermediatesAreDead holds Forward to its recycling.)
func TestRecycleKeepsTheBitsOnTheGPU(t *testing.T) {
	g, ok := computetest.Backend(t).(*cuda.Backend)
	if !ok {
		t.Skip("TANDEM_CUDA_RECYCLE is the CUDA backend's")
	}
	t.Cleanup(g.ReadSettings) // after the environment is restored (cleanups run last first)
	for _, preset := range tinyTargets {
		run := func(recycle string) [][]float32 {
			t.Setenv("TANDEM_CUDA_RECYCLE", recycle)
			g.ReadSettings()
			m := gemma4test.Random(t, preset, g)
			ids := randomTokens(40, m.Config.Text.VocabSize, 9)
			rows := feed(t, m, m.NewCache(13), ids, 13, 1, 1, 7, 1)
			out, err := m.Forward([]gemma4.Row{{Tokens: ids[:5], Cache: m.NewCache(8)}, {Tokens: ids[5:8], Cache: m.NewCache(8)}}, gemma4.ForwardOptions{Logits: gemma4.LogitsAll})
			if err != nil {
				t.Fatal(err)
			}
			rows = append(rows, g.ToF32(out.Logits))
			if err := m.SetPromptPrecision(compute.PrecisionBF16); err != nil {
				t.Fatal(err)
			}
			return append(rows, feedWith(t, m, m.NewCache(20), ids[:20], gemma4.ForwardOptions{Prompt: true}, 20)...)
		}
		sameBits(t, preset+" with TANDEM_CUDA_RECYCLE=1", run("0"), run("1"))
	}
}
