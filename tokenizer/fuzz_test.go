package tokenizer

import (
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"
)

// Run a fuzzer briefly with, for example,
//
//	go test ./tokenizer -run '^$' -fuzz '^FuzzParse$' -fuzztime 30s -fuzzminimizetime 2s
//
// (the default minimization budget of 60 s per new input makes short runs look stalled).

// FuzzParse feeds arbitrary tokenizer.json / tokenizer_config.json bytes to Parse: it must
// return a tokenizer or an error, never panic, and a tokenizer it returns must encode and decode
// without panicking. The seed corpus is testdata/fuzz/FuzzParse (small real-shaped files and
// broken variants).
func FuzzParse(f *testing.F) {
	f.Add(gemmaLike().bytes(), []byte(`{"add_bos_token": true, "bos_token": "<bos>"}`))
	f.Fuzz(func(t *testing.T, tj, cj []byte) {
		tok, err := Parse(tj, cj)
		if err != nil {
			if tok != nil {
				t.Fatal("Parse returned a tokenizer and an error")
			}
			return
		}
		for _, s := range []string{"", "a b", "Hello world ☃ 你好!\n\n<bos>", "\xff\xfe", strings.Repeat("ab ", 20)} {
			for _, special := range []bool{false, true} {
				ids := tok.Encode(s, special)
				for _, skip := range []bool{false, true} {
					want := tok.Decode(ids, skip)
					d := tok.NewDecoder(skip)
					var b strings.Builder
					for _, id := range ids {
						b.WriteString(d.Add(id))
					}
					b.WriteString(d.Flush())
					if b.String() != want {
						t.Fatalf("streamed %q, Decode %q", b.String(), want)
					}
				}
			}
		}
		tok.Decode([]int32{-1, 0, 1, 2, 1 << 30}, false)
		tok.Token(-5)
		tok.ID("")
	})
}

var synthGemma = sync.OnceValues(func() (*Tokenizer, error) {
	tj, cj, err := Synthetic("gemma", 512)
	if err != nil {
		return nil, err
	}
	return Parse(tj, cj)
})

// FuzzEncodeRoundTrip checks decode(encode(s)) == s on the synthetic Gemma tokenizer, whose byte
// fallback covers every character (a literal '▁' in the text decodes as a space, as in HF), and
// that streaming decoding matches. Seeds: the corpus strings.
func FuzzEncodeRoundTrip(f *testing.F) {
	entries, err := loadCorpus()
	if err != nil {
		f.Fatal(err)
	}
	for _, e := range entries {
		if len(e.Text) <= 512 {
			f.Add(e.Text)
		}
	}
	f.Fuzz(func(t *testing.T, s string) {
		tok, err := synthGemma()
		if err != nil {
			t.Fatal(err)
		}
		if !utf8.ValidString(s) {
			s = validString(s)
		}
		ids := tok.Encode(s, true)
		if len(ids) == 0 || ids[0] != 2 {
			t.Fatalf("encode(%q) does not start with BOS: %v", s, ids)
		}
		want := strings.ReplaceAll(s, "\u2581", " ")
		if got := tok.Decode(ids, true); got != want && !hasSpecialText(tok, s) {
			t.Fatalf("decode(encode(%q)) = %q", s, got)
		}
		if got := tok.Decode(ids[1:], false); got != want {
			t.Fatalf("decode(encode(%q)) with specials = %q", s, got)
		}
		d := tok.NewDecoder(false)
		var b strings.Builder
		for _, id := range ids[1:] {
			c := d.Add(id)
			if !utf8.ValidString(c) {
				t.Fatalf("invalid UTF-8 chunk %q", c)
			}
			b.WriteString(c)
		}
		b.WriteString(d.Flush())
		if b.String() != want {
			t.Fatalf("streamed %q, want %q", b.String(), want)
		}
	})
}

// hasSpecialText reports whether s contains a special token's text (skip_special_tokens then
// drops it from the decoded text).
func hasSpecialText(tok *Tokenizer, s string) bool {
	for _, a := range tok.added {
		if a.special && strings.Contains(s, a.content) {
			return true
		}
	}
	return false
}

// The seed corpus of FuzzParse lives in testdata/fuzz/FuzzParse; this keeps it from going stale.
func TestFuzzParseSeeds(t *testing.T) {
	m, err := filepath.Glob(filepath.Join("testdata", "fuzz", "FuzzParse", "*"))
	if err != nil || len(m) < 5 {
		t.Fatalf("FuzzParse seed corpus missing: %v %v", m, err)
	}
}

// FuzzGPT2Split checks the hand-written GPT-2/Llama 3/Qwen matchers against the regex engine on
// arbitrary text.
func FuzzGPT2Split(f *testing.F) {
	for _, s := range []string{"Hello world's  \n\n x", "a\u0085\u0085b 12345 'LL'ſ", "  \t\r\n  ?!  \u3000x"} {
		f.Add(s)
	}
	engines := map[string]*regex{}
	for _, p := range []string{patGPT2, patLlama3, patQwen2, patQwen35} {
		re, err := compileRegex(p)
		if err != nil {
			f.Fatal(err)
		}
		engines[p] = re
	}
	f.Fuzz(func(t *testing.T, s string) {
		s = validString(s)
		for p, re := range engines {
			want := re.findAll(s)
			got := knownPatterns[p].findAll(s, nil)
			if !slices.Equal(got, want) {
				t.Fatalf("pattern %q on %q: hand-written %v, engine %v", p, s, got, want)
			}
		}
	})
}

// FuzzRegex compiles arbitrary patterns: errors are fine, panics are not, and matching a
// compiled pattern terminates and returns ordered, in-range matches.
func FuzzRegex(f *testing.F) {
	for _, p := range []string{patQwen2, `(?i:a|b)+(?=c)`, `[^\s\p{L}]+`, `(?<=x)y{2,3}?`, `(?>a+)b|\bc\B`, `[[:alpha:]\d-]`} {
		f.Add(p, "xyy abc Hello 123 \n\n ſ")
	}
	f.Fuzz(func(t *testing.T, pattern, s string) {
		if len(pattern) > 200 || len(s) > 200 {
			return
		}
		re, err := compileRegex(pattern)
		if err != nil {
			return
		}
		s = validString(s)
		prev := 0
		for _, m := range re.findAll(s) {
			if m[0] < prev || m[1] < m[0] || m[1] > len(s) {
				t.Fatalf("%q on %q: bad match %v after %d", pattern, s, m, prev)
			}
			prev = m[1]
		}
	})
}
