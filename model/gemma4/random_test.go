package gemma4_test

import (
	"testing"

	"tandem/compute"
	"tandem/compute/cpu"
	"tandem/model/gemma4"
)

// A random model built in memory must be the model gen-model writes for the
// same seed: benchmarks of published shapes rely on it being the real thing.
func TestRandomEqualsGeneratedCheckpoint(t *testing.T) {
	for _, name := range []string{"gemma4-tiny-e2b", "gemma4-tiny-26b-a4b"} {
		t.Run(name, func(t *testing.T) {
			p, err := gemma4.LookupPreset(name)
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			if err := p.Generate(dir, gemma4.GenerateOptions{Seed: 5}); err != nil {
				t.Fatal(err)
			}
			b := cpu.New(0)
			loaded, err := gemma4.Load(dir, b)
			if err != nil {
				t.Fatal(err)
			}
			defer loaded.Close()
			random, err := p.Random(b, compute.BF16, 5, gemma4.LoadOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if random.DecodeBytes() != loaded.DecodeBytes() {
				t.Fatalf("DecodeBytes: random model %d, checkpoint %d", random.DecodeBytes(), loaded.DecodeBytes())
			}
			ids := []int32{2, 17, 99, 3, 250, 41}
			want := forwardLogits(t, loaded, ids)
			got := forwardLogits(t, random, ids)
			for i := range want {
				if want[i] != got[i] {
					t.Fatalf("logit %d: random model %v, checkpoint %v", i, got[i], want[i])
				}
			}
		})
	}
	a, err := gemma4.LookupPreset("gemma4-tiny-e2b-assistant")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.RandomAssistant(cpu.New(0), compute.BF16, 5, gemma4.LoadOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Random(cpu.New(0), compute.BF16, 5, gemma4.LoadOptions{}); err == nil {
		t.Fatal("Random of an assistant preset should fail")
	}
}

func forwardLogits(t *testing.T, m *gemma4.Model, ids []int32) []float32 {
	t.Helper()
	out, err := m.Forward([]gemma4.Row{{Tokens: ids, Cache: m.NewCache(len(ids))}}, gemma4.ForwardOptions{Logits: gemma4.LogitsAll})
	if err != nil {
		t.Fatal(err)
	}
	return m.Backend().ToF32(out.Logits)
}

// LoadWith reports progress as weights reach the backend: increasing,
// ending at the checkpoint's total.
func TestLoadProgress(t *testing.T) {
	p, err := gemma4.LookupPreset("gemma4-tiny-e2b")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := p.Generate(dir, gemma4.GenerateOptions{Seed: 1}); err != nil {
		t.Fatal(err)
	}
	var calls int
	var last, total int64
	m, err := gemma4.LoadWith(dir, cpu.New(0), gemma4.LoadOptions{Progress: func(done, tot int64) {
		if done < last || (total != 0 && tot != total) {
			t.Fatalf("progress went from %d to %d (total %d, then %d)", last, done, total, tot)
		}
		calls++
		last, total = done, tot
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	var want int64
	for _, w := range p.Weights() {
		want += w.Bytes(compute.BF16)
	}
	if calls < 10 || last != total || total != want {
		t.Fatalf("%d calls, last %d of %d; want many calls ending at %d", calls, last, total, want)
	}
}
