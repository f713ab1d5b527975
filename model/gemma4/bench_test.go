package gemma4_test

import (
	"fmt"
	"os"
	"testing"

	"tandem/compute/cpu"
	"tandem/model/gemma4"
)

// BenchmarkDecode measures single-token decode on the CPU backend after a
// 128-token prompt and reports it against the memory-copy roofline measured
// in the same run: a decode step reads DecodeBytes of weights. It runs the
// tiny E2B preset unless TANDEM_BENCH_MODEL names a model directory, e.g. a
// full-size one from `tandem gen-model --preset gemma4-e2b`.
func BenchmarkDecode(b *testing.B) {
	dir := os.Getenv("TANDEM_BENCH_MODEL")
	if dir == "" {
		p, _ := gemma4.LookupPreset("gemma4-tiny-e2b")
		dir = b.TempDir()
		if err := p.Generate(dir, gemma4.GenerateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	m, err := gemma4.Load(dir, cpu.New(0))
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	const prompt = 128
	ids := randomTokens(prompt, m.Config.Text.VocabSize, 1)
	cache := m.NewCache(prompt)
	prefill := func() {
		cache.Reset()
		if _, err := m.Forward([]gemma4.Row{{Tokens: ids, Cache: cache}}, gemma4.ForwardOptions{Logits: gemma4.LogitsNone}); err != nil {
			b.Fatal(err)
		}
	}
	prefill()
	roof := cpu.CopyBandwidth()
	step := []gemma4.Row{{Tokens: []int32{ids[1]}, Cache: cache}}
	b.ResetTimer()
	for range b.N {
		if cache.Len() >= m.Config.Text.MaxPositionEmbeddings-1 {
			b.StopTimer()
			prefill()
			b.StartTimer()
		}
		if _, err := m.Forward(step, gemma4.ForwardOptions{Logits: gemma4.LogitsLast}); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	perToken := b.Elapsed().Seconds() / float64(b.N)
	bytes := float64(m.DecodeBytes())
	b.ReportMetric(1/perToken, "tok/s")
	b.ReportMetric(bytes, "bytes/token")
	b.ReportMetric(bytes/perToken/1e9, "GB/s")
	b.ReportMetric(bytes/perToken/roof, "x-of-memcpy")
	b.ReportMetric(roof/bytes, "roofline-tok/s")
}

// BenchmarkDraftStep measures one assistant drafter step on the tiny E2B
// pair at several committed lengths, with and without --max-shared-kv,
// which caps the drafter's full-attention keys.
func BenchmarkDraftStep(b *testing.B) {
	be := cpu.New(0)
	gen := func(name string) string {
		p, _ := gemma4.LookupPreset(name)
		dir := b.TempDir()
		if err := p.Generate(dir, gemma4.GenerateOptions{}); err != nil {
			b.Fatal(err)
		}
		return dir
	}
	m, err := gemma4.Load(gen("gemma4-tiny-e2b"), be)
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	a, err := gemma4.LoadAssistant(gen("gemma4-tiny-e2b-assistant"), be)
	if err != nil {
		b.Fatal(err)
	}
	defer a.Close()
	if err := a.Bind(m); err != nil {
		b.Fatal(err)
	}
	for _, n := range []int{128, 1024, 4000} {
		ids := randomTokens(n, m.Config.Text.VocabSize, 2)
		cache := m.NewCache(512)
		var out *gemma4.Output
		for s := 0; s < n; s += 512 {
			if out, err = m.Forward([]gemma4.Row{{Tokens: ids[s:min(s+512, n)], Cache: cache}}, gemma4.ForwardOptions{Logits: gemma4.LogitsNone}); err != nil {
				b.Fatal(err)
			}
		}
		h := be.Slice(out.Hidden, out.Hidden.Dim(0)-1, out.Hidden.Dim(0))
		snap := m.Snapshot(cache)
		for _, capKV := range []int{0, 16} {
			b.Run(fmt.Sprintf("context_%d/max_shared_kv_%d", n, capKV), func(b *testing.B) {
				row := []gemma4.DraftRow{{Token: 5, Hidden: h, Snap: snap}}
				for range b.N {
					if _, err := a.Step(row, gemma4.DraftOptions{MaxSharedKV: capKV}); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
