package tokenizer

import (
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func firstDiff(a, b []int32) int {
	n := min(len(a), len(b))
	for i := 0; i < n; i++ {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}

// describeMismatch shows the first differing position with a few ids and pieces around it.
func describeMismatch(t *Tokenizer, got, want []int32) string {
	i := firstDiff(got, want)
	lo := max(0, i-3)
	show := func(ids []int32) string {
		hi := min(len(ids), i+4)
		s := ""
		for k := lo; k < hi; k++ {
			p, _ := t.Token(ids[k])
			s += fmt.Sprintf(" %d:%s", ids[k], strconv.Quote(p))
		}
		return s
	}
	return fmt.Sprintf("first difference at index %d (got %d ids, want %d)\n  got: …%s\n want: …%s", i, len(got), len(want), show(got), show(want))
}

// The tokenizers the references cover: the two real ones (fetched with npm) and the committed
// synthetic ones.
var refTokenizers = []string{"gemma3", "qwen3", "synthetic-gemma512", "synthetic-qwen512"}

func refTokenizer(tb testing.TB, name string) *Tokenizer {
	tb.Helper()
	if _, ok := realPackages[name]; ok {
		return realTokenizer(tb, name)
	}
	t, err := LoadDir(filepath.Join(testdataDir, name))
	if err != nil {
		tb.Fatal(err)
	}
	return t
}

// TestReferenceEncode checks encode(add_special_tokens=false) and (true) against HF's Rust
// tokenizers and HF tokenizers.js on every corpus string. (Their ids agree everywhere.)
func TestReferenceEncode(t *testing.T) {
	for _, name := range refTokenizers {
		t.Run(name, func(t *testing.T) {
			tok := refTokenizer(t, name)
			js, rust, _ := references(t, name)
			entries := corpus(t)
			if len(js) != len(entries) {
				t.Fatalf("reference has %d entries, corpus %d: regenerate with scripts/tokenizer/reference.mjs", len(js), len(entries))
			}
			bad := 0
			for i, e := range entries {
				if js[i].Name != e.Name {
					t.Fatalf("reference entry %d is %q, corpus has %q", i, js[i].Name, e.Name)
				}
				for _, c := range []struct {
					special bool
					impl    string
					want    []int32
				}{
					{false, "Rust", rust[i].IDs}, {true, "Rust", rust[i].IDsSpecial},
					{false, "tokenizers.js", js[i].IDs}, {true, "tokenizers.js", js[i].IDsSpecial},
				} {
					if got := tok.Encode(e.Text, c.special); !slices.Equal(got, c.want) {
						bad++
						if bad <= 5 {
							t.Errorf("%s %s: encode(%s, add_special_tokens=%v) differs from HF %s: %s", name, e.Name, quoteShort(e.Text), c.special, c.impl, describeMismatch(tok, got, c.want))
						}
					}
				}
			}
			if bad > 0 {
				t.Errorf("%s: %d encodings of %d corpus strings differ", name, bad, len(entries))
			}
		})
	}
}

// TestReferenceDecode checks decode(ids, skip_special_tokens) against HF's Rust tokenizers on
// every corpus string, and against tokenizers.js except where tokenizers.js differs from Rust
// (listed in reference-rust.json: its ByteFallback decoder drops a U+FEFF that starts a run of
// byte tokens, because TextDecoder strips a byte-order mark).
func TestReferenceDecode(t *testing.T) {
	for _, name := range refTokenizers {
		t.Run(name, func(t *testing.T) {
			tok := refTokenizer(t, name)
			js, rust, differ := references(t, name)
			bad := 0
			check := func(impl, entry string, got, want string, skip bool) {
				if got != want {
					bad++
					if bad <= 5 {
						t.Errorf("%s %s: decode(skip_special_tokens=%v) = %s, HF %s %s", name, entry, skip, quoteShort(got), impl, quoteShort(want))
					}
				}
			}
			for i := range rust {
				r, j := rust[i], js[i]
				for _, skip := range []bool{false, true} {
					got := tok.Decode(r.IDsSpecial, skip)
					want, wantJS := r.Decode, j.Decode
					if skip {
						want, wantJS = r.DecodeSkip, j.DecodeSkip
					}
					check("Rust", r.Name, got, want, skip)
					if differ[r.Name] {
						continue
					}
					check("tokenizers.js", r.Name, got, wantJS, skip)
				}
			}
			if len(differ) > 0 {
				t.Logf("%s: %d entries where tokenizers.js differs from Rust are checked against Rust only", name, len(differ))
			}
			if bad > 0 {
				t.Errorf("%s: %d decodes differ", name, bad)
			}
		})
	}
}

// TestRoundTrip checks decode(encode(s)) == s exactly where HF's own round trip holds (HF's
// encode and decode give s back); it does not where a normalizer changes the text (Qwen's NFC)
// or the text holds a literal '▁' (Gemma decodes it as a space).
func TestRoundTrip(t *testing.T) {
	for _, name := range refTokenizers {
		t.Run(name, func(t *testing.T) {
			tok := refTokenizer(t, name)
			_, rust, _ := references(t, name)
			lossy := 0
			for i, e := range corpus(t) {
				// HF's round trip: its decode of its own ids, without BOS when it adds one.
				hf := rust[i].Decode
				if len(rust[i].IDsSpecial) > len(rust[i].IDs) {
					if bosPiece, ok := tok.Token(rust[i].IDsSpecial[0]); ok {
						hf = strings.TrimPrefix(hf, bosPiece)
					}
				}
				got := tok.Decode(tok.Encode(e.Text, false), false)
				if (got == e.Text) != (hf == e.Text) {
					t.Errorf("%s %s: round trip of %s gives %s; HF gives %s", name, e.Name, quoteShort(e.Text), quoteShort(got), quoteShort(hf))
				}
				if got != e.Text {
					lossy++
				}
			}
			t.Logf("%s: %d corpus strings do not round-trip, in HF either", name, lossy)
		})
	}
}

func quoteShort(s string) string {
	r := []rune(s)
	if len(r) > 80 {
		return strconv.Quote(string(r[:80])) + fmt.Sprintf("…(%d runes)", len(r))
	}
	return strconv.Quote(s)
}

// TestSpecialTokensInText spells out how special and other added tokens written in the text are
// split out (the corpus checks the same against HF; this names the ids).
func TestSpecialTokensInText(t *testing.T) {
	t.Run("gemma3", func(t *testing.T) {
		tok := realTokenizer(t, "gemma3")
		ids := tok.Encode("<start_of_turn>user\nhi<end_of_turn>\n", false)
		if ids[0] != 105 || !slices.Contains(ids, 106) || ids[len(ids)-1] != 107 {
			t.Errorf("turn markers not split out: %v", ids)
		}
		if got := tok.Encode("<bos>x", true); !slices.Equal(got[:2], []int32{2, 2}) {
			t.Errorf("BOS then <bos> in the text: %v", got)
		}
		if got := tok.Encode("<|im_start|>", false); len(got) < 2 {
			t.Errorf("Qwen's special token is plain text for Gemma: %v", got)
		}
		if got := tok.Encode("a\n\n\nb", false); !slices.Contains(got, 109) {
			t.Errorf("\"\\n\\n\\n\" (added token 109) not split out: %v", got)
		}
		if got := tok.Decode(tok.Encode("<start_of_turn>hi<end_of_turn>", true), true); got != "hi" {
			t.Errorf("skip_special_tokens: %q", got)
		}
		if bos, _ := tok.BOS(); bos != 2 {
			t.Errorf("BOS %d", bos)
		}
		if eos, _ := tok.EOS(); eos != 106 {
			t.Errorf("EOS %d (Gemma 3's config says <end_of_turn>)", eos)
		}
		if !tok.AddBOSToken() || !tok.IsSpecial(105) || tok.IsSpecial(107) {
			t.Errorf("AddBOSToken %v, IsSpecial(105) %v, IsSpecial(107) %v", tok.AddBOSToken(), tok.IsSpecial(105), tok.IsSpecial(107))
		}
		if tok.VocabSize() != 262145 {
			t.Errorf("VocabSize %d, want 262145 (262144 vocabulary entries and <image_soft_token>)", tok.VocabSize())
		}
	})
	t.Run("qwen3", func(t *testing.T) {
		tok := realTokenizer(t, "qwen3")
		ids := tok.Encode("<|im_start|>user\nhi<|im_end|>", true)
		if ids[0] != 151644 || ids[len(ids)-1] != 151645 {
			t.Errorf("ChatML markers not split out (or a BOS added): %v", ids)
		}
		if got := tok.Encode("<|im_", false); slices.Contains(got, 151644) {
			t.Errorf("partial marker matched: %v", got)
		}
		if got := tok.Encode("<think>x</think>", false); got[0] != 151667 || got[len(got)-1] != 151668 {
			t.Errorf("<think> (an added, non-special token) not split out: %v", got)
		}
		if got := tok.Decode(tok.Encode("<|im_start|><think>x</think><|im_end|>", false), true); got != "<think>x</think>" {
			t.Errorf("skip_special_tokens keeps non-special added tokens: %q", got)
		}
		if _, ok := tok.BOS(); ok {
			t.Errorf("Qwen has no BOS")
		}
		if eos, _ := tok.EOS(); eos != 151645 {
			t.Errorf("EOS %d", eos)
		}
	})
}

// TestConcurrentEncode encodes from several goroutines at once (the word caches and scratch
// pools are shared); run with -race.
func TestConcurrentEncode(t *testing.T) {
	for _, name := range []string{"synthetic-gemma512", "synthetic-qwen512"} {
		tok := refTokenizer(t, name)
		entries := corpus(t)
		want := make([][]int32, len(entries))
		for i, e := range entries {
			want[i] = tok.Encode(e.Text, true)
		}
		tok = refTokenizer(t, name) // fresh caches
		done := make(chan error)
		for g := 0; g < 4; g++ {
			go func(g int) {
				for k := range entries {
					i := (k*7 + g*31) % len(entries)
					if got := tok.Encode(entries[i].Text, true); !slices.Equal(got, want[i]) {
						done <- fmt.Errorf("%s %s: concurrent encode differs", name, entries[i].Name)
						return
					}
				}
				done <- nil
			}(g)
		}
		for g := 0; g < 4; g++ {
			if err := <-done; err != nil {
				t.Error(err)
			}
		}
	}
}
