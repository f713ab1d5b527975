package tokenizer

import (
	"strings"
	"testing"
)

// BenchmarkEncode encodes every corpus string (testdata/tokenizer/corpus.json: mixed scripts,
// code, emoji, whitespace runs, long words) once per iteration with the real Gemma 3 and Qwen 3
// tokenizers; MB/s is corpus bytes per second on one goroutine. scripts/tokenizer/bench.mjs
// measures HF tokenizers.js the same way; docs/benchmarks.md has the numbers.
func BenchmarkEncode(b *testing.B) {
	for _, name := range []string{"gemma3", "qwen3"} {
		b.Run(name, func(b *testing.B) {
			tok := realTokenizer(b, name)
			benchEncode(b, tok, corpus(b))
		})
	}
}

// BenchmarkEncodeText is BenchmarkEncode without the corpus's long/ strings (runs of thousands
// of characters, 85% of its bytes, which the BPE merge loop handles in O(n log n) but which
// dominate the total): closer to ordinary prose and code.
func BenchmarkEncodeText(b *testing.B) {
	for _, name := range []string{"gemma3", "qwen3"} {
		b.Run(name, func(b *testing.B) {
			tok := realTokenizer(b, name)
			var entries []corpusEntry
			for _, e := range corpus(b) {
				if !strings.HasPrefix(e.Name, "long/") {
					entries = append(entries, e)
				}
			}
			benchEncode(b, tok, entries)
		})
	}
}

func benchEncode(b *testing.B, tok *Tokenizer, entries []corpusEntry) {
	total := 0
	for _, e := range entries {
		total += len(e.Text)
	}
	b.SetBytes(int64(total))
	b.ReportAllocs()
	for b.Loop() {
		for _, e := range entries {
			tok.Encode(e.Text, false)
		}
	}
}

// BenchmarkDecode decodes the ids of every corpus string (MB/s of decoded text).
func BenchmarkDecode(b *testing.B) {
	for _, name := range []string{"gemma3", "qwen3"} {
		b.Run(name, func(b *testing.B) {
			tok := realTokenizer(b, name)
			entries := corpus(b)
			ids := make([][]int32, len(entries))
			total := 0
			for i, e := range entries {
				ids[i] = tok.Encode(e.Text, false)
				total += len(e.Text)
			}
			b.SetBytes(int64(total))
			b.ResetTimer()
			for b.Loop() {
				for _, x := range ids {
					tok.Decode(x, false)
				}
			}
		})
	}
}

// BenchmarkSplit compares the hand-written Qwen pre-tokenizer with the general regex engine
// running the same pattern (the fallback for patterns without a hand-written matcher), on the
// corpus without its long/ strings.
func BenchmarkSplit(b *testing.B) {
	var texts []string
	total := 0
	for _, e := range corpus(b) {
		if !strings.HasPrefix(e.Name, "long/") {
			texts = append(texts, e.Text)
			total += len(e.Text)
		}
	}
	re, err := compileRegex(patQwen2)
	if err != nil {
		b.Fatal(err)
	}
	v := knownPatterns[patQwen2]
	b.Run("hand-written", func(b *testing.B) {
		b.SetBytes(int64(total))
		var buf [][2]int
		for b.Loop() {
			for _, s := range texts {
				buf = v.findAll(s, buf[:0])
			}
		}
	})
	b.Run("engine", func(b *testing.B) {
		b.SetBytes(int64(total))
		for b.Loop() {
			for _, s := range texts {
				re.findAll(s)
			}
		}
	})
}
