package tokenizer

import (
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// trickyPieces are the building blocks of random strings for the pre-tokenizer tests: every
// character class the GPT-2 family of patterns distinguishes, and the sequences its
// alternatives look for.
var trickyPieces = []string{
	"a", "Z", "é", "ß", "ſ", "S", "s", "T", "t", "L", "l", "D", "d", "M", "R", "E", "V", "的", "한", "ก", "Ж", "ا", "\u0301", "\u0915\u094d",
	"1", "9", "²", "½", "Ⅻ", "١", "३",
	" ", "  ", "\t", "\n", "\r", "\r\n", "\n\n", "\u000b", "\u000c", "\u0085", "\u00a0", "\u1680", "\u2000", "\u2028", "\u2029", "\u202f", "\u3000",
	"'", "'s", "'S", "'ll", "'LL", "'re", "'Ve", "'m", "'D", "'ſ", "’",
	".", ",", "!", "?", "<", ">", "|", "_", "-", "\"", "\\", "😀", "👨\u200d👩", "\ufeff", "\u180e", "\u200b", "\u0000", "\ufffd",
}

func randomTricky(rng *rand.Rand, maxPieces int) string {
	var b strings.Builder
	for n := rng.IntN(maxPieces + 1); n > 0; n-- {
		b.WriteString(trickyPieces[rng.IntN(len(trickyPieces))])
	}
	return b.String()
}

// TestGPT2MatchersAgainstEngine checks the hand-written matchers against the backtracking
// engine running the same pattern text (look-ahead included) on the corpus and random strings.
func TestGPT2MatchersAgainstEngine(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	var inputs []string
	for _, e := range corpus(t) {
		if len(e.Text) <= 2000 {
			inputs = append(inputs, e.Text)
		}
	}
	for i := 0; i < 3000; i++ {
		inputs = append(inputs, randomTricky(rng, 12))
	}
	for _, pat := range []string{patGPT2, patLlama3, patQwen2, patQwen35} {
		re, err := compileRegex(pat)
		if err != nil {
			t.Fatal(err)
		}
		v := knownPatterns[pat]
		for _, s := range inputs {
			want := re.findAll(s)
			got := v.findAll(s, nil)
			if !slices.Equal(got, want) {
				t.Fatalf("pattern %q on %q:\n hand-written %v\n engine       %v", pat, s, got, want)
			}
		}
	}
}

// TestFastByteLevelPath checks Encode's fused byte-level path against the general pipeline.
func TestFastByteLevelPath(t *testing.T) {
	for _, name := range []string{"synthetic-qwen512", "qwen3"} {
		t.Run(name, func(t *testing.T) { testFastByteLevelPath(t, name) })
	}
}

func testFastByteLevelPath(t *testing.T, name string) {
	fast := refTokenizer(t, name)
	if fast.fastByteLevel == nil {
		t.Fatalf("%s does not use the fast byte-level path", name)
	}
	slow := refTokenizer(t, name)
	if slow == fast { // cached real tokenizer: load a private copy
		var err error
		if slow, err = LoadDir(filepath.Join(cacheDir, name)); err != nil {
			t.Fatal(err)
		}
	}
	slow.fastByteLevel = nil
	rng := rand.New(rand.NewPCG(3, 5))
	inputs := []string{}
	for _, e := range corpus(t) {
		inputs = append(inputs, e.Text)
	}
	for i := 0; i < 500; i++ {
		inputs = append(inputs, randomTricky(rng, 20))
	}
	for _, s := range inputs {
		if a, b := fast.Encode(s, false), slow.Encode(s, false); !slices.Equal(a, b) {
			t.Fatalf("%s %q: fast path %v, general path %v", name, s, a, b)
		}
	}
}

// TestRegexEngineAgainstGo compares the engine with Go's regexp (same leftmost-first semantics;
// (?m) gives Go Oniguruma's line anchors) on patterns without look-around, on ASCII text without
// '\v' (where \s, \d, \w agree).
func TestRegexEngineAgainstGo(t *testing.T) {
	patterns := []string{
		`\w+|[^\w\s]+`, `a|ab|abc`, `(?:ab)*c`, `[a-c]+?d`, `x{2,3}`, `x{2,}y`, `(a|b)*?c`, `\d+(?:\.\d+)?`, `^\s*$`, `\s+`,
		`[^a-z]+`, `(?i:hello)`, `(?i)ab|c`, `a.c`, `\bfoo\b`, `\Bo`, `[[:alpha:]]+`, `[\d\s]+`, `(?:a|)+b`, `(a*)*b`, `[.*+?]+`,
		`\.`, `a\|b`, `[]a]+`, `[a\-z]+`, `(?:x|xy)z`, `(?:)`, `a*?`, `$`, `^`,
	}
	rng := rand.New(rand.NewPCG(1, 9))
	alphabet := "abcdxyzABChelloHELLO foo.0123456789\t\n\r*+?|-]_"
	var inputs []string
	for i := 0; i < 300; i++ {
		n := rng.IntN(16)
		b := make([]byte, n)
		for j := range b {
			b[j] = alphabet[rng.IntN(len(alphabet))]
		}
		inputs = append(inputs, string(b))
	}
	for _, p := range patterns {
		ours, err := compileRegex(p)
		if err != nil {
			t.Fatalf("%q: %v", p, err)
		}
		goRE := regexp.MustCompile(`(?m)` + p)
		for _, s := range inputs {
			var want [][2]int
			for _, m := range goRE.FindAllStringIndex(s, -1) {
				want = append(want, [2]int{m[0], m[1]})
			}
			got := ours.findAll(s)
			// Go skips an empty match right after a non-empty one; HF's Oniguruma loop keeps it.
			// Compare the non-empty matches only.
			nonEmpty := func(ms [][2]int) [][2]int {
				var o [][2]int
				for _, m := range ms {
					if m[1] > m[0] {
						o = append(o, m)
					}
				}
				return o
			}
			if !slices.Equal(nonEmpty(got), nonEmpty(want)) {
				t.Fatalf("%q on %q: engine %v, Go %v", p, s, got, want)
			}
		}
	}
}

func TestRegexEngineCases(t *testing.T) {
	for _, c := range []struct {
		pat, in string
		want    [][2]int
	}{
		{`\s+(?!\S)`, "a   b", [][2]int{{1, 3}}},
		{`\s+(?!\S)|\s+`, "a   b  ", [][2]int{{1, 3}, {3, 4}, {5, 7}}},
		{`a(?=b)`, "ab ac", [][2]int{{0, 1}}},
		{`(?<=a)b`, "ab cb", [][2]int{{1, 2}}},
		{`(?<!a)b`, "ab cb", [][2]int{{4, 5}}},
		{`(?>a+)b`, "aaab", [][2]int{{0, 4}}},
		{`(?>a|ab)c`, "abc", nil},
		{`a++a`, "aaaa", nil},
		{`a*+b`, "aab", [][2]int{{0, 3}}},
		{`(?i:'s)`, "'ſ 'S 's", [][2]int{{0, 3}, {4, 6}, {7, 9}}},
		{`\p{L}+`, "héllo wörld", [][2]int{{0, 6}, {7, 13}}},
		{`\p{^L}+`, "ab12cd", [][2]int{{2, 4}}},
		{`\P{N}`, "1a", [][2]int{{1, 2}}},
		{`\s`, "a\u0085b\ufeffc", [][2]int{{1, 3}}},
		{`[\x{4e00}-\x{9fff}]+`, "a中文b", [][2]int{{1, 7}}},
		{`\p{Han}`, "a中", [][2]int{{1, 4}}},
		{`x{,2}`, "xxx", [][2]int{{0, 2}, {2, 3}, {3, 3}}},
		{`a{`, "a{", [][2]int{{0, 2}}},
		{`^a|b$`, "a\nab\nb", [][2]int{{0, 1}, {2, 3}, {3, 4}, {5, 6}}},
		{`\Aa|a\z`, "aaa", [][2]int{{0, 1}, {2, 3}}},
	} {
		re, err := compileRegex(c.pat)
		if err != nil {
			t.Fatalf("%q: %v", c.pat, err)
		}
		if got := re.findAll(c.in); !slices.Equal(got, c.want) {
			t.Errorf("%q on %q: %v, want %v", c.pat, c.in, got, c.want)
		}
	}
	for _, bad := range []string{`(`, `)`, `*a`, `a\1`, `(?<=a+)b`, `[a-`, `[z-a]`, `\p{NoSuchProperty}`, `(?Q)`, `\G`, `[a&&b]`, `\`} {
		if _, err := compileRegex(bad); err == nil {
			t.Errorf("compileRegex(%q) succeeded; want an error", bad)
		}
	}
}

// TestRustProbes replays what HF's Rust tokenizers 0.23.2 answered to probes where tokenizers.js
// behaves differently (testdata/tokenizer/rust-probes.json, written by reference_rust.py).
func TestRustProbes(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(testdataDir, "rust-probes.json"))
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Probes map[string]map[string]json.RawMessage `json:"probes"`
	}
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	for name, probes := range f.Probes {
		t.Run(name, func(t *testing.T) { testRustProbes(t, name, probes) })
	}
}

func testRustProbes(t *testing.T, name string, probes map[string]json.RawMessage) {
	tok := refTokenizer(t, name)
	for key, raw := range probes {
		switch {
		case strings.HasPrefix(key, "pre:"):
			var want []string
			json.Unmarshal(raw, &want)
			got := tok.pre.pretokenize([]string{strings.TrimPrefix(key, "pre:")}, true)
			if !slices.Equal(got, want) {
				t.Errorf("%s pre-tokenize %q: %q, Rust %q", name, key[4:], got, want)
			}
		case key == "bytefallback_invalid":
			var want string
			json.Unmarshal(raw, &want)
			var ids []int32
			for _, p := range []string{"<0xE2>", "<0x82>", "a", "<0xE2>", "<0x82>", "<0xAC>", "<0xE2>"} {
				id, _ := tok.ID(p)
				ids = append(ids, id)
			}
			if got := tok.Decode(ids, false); got != want {
				t.Errorf("%s decode of an invalid byte run: %q, Rust %q", name, got, want)
			}
		case key == "decode_unknown_id":
			var want string
			json.Unmarshal(raw, &want)
			if got := tok.Decode([]int32{5, 99999999, 6}, false); got != want {
				t.Errorf("%s decode with an unknown id: %q, Rust %q", name, got, want)
			}
		}
	}
}
