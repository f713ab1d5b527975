package tokenizer

import (
	"unicode"
	"unicode/utf8"
)

// Hand-written matchers for the GPT-2 family of pre-tokenizer patterns (GPT-2's ByteLevel
// regex, Llama 3's and Qwen 2/3's Split regex). They return exactly the matches the backtracking
// engine (and Oniguruma) returns for those patterns, look-ahead included, at a fraction of the
// cost; regex_test.go checks them against the engine on random text.

// gpt2Variant describes one pattern of the family:
//
//	contractions | letters | numbers | punctuation | \s*[\r\n]+ | \s+(?!\S) | \s+
type gpt2Variant struct {
	// (?i:'s|'t|'re|'ve|'m|'ll|'d) instead of the case-sensitive 's|'t|….
	foldContractions bool
	// [^\r\n\p{L}\p{N}]?\p{L}+ instead of  ?\p{L}+.
	anyLetterPrefix bool
	// \p{N}{1,numMax}; 0:  ?\p{N}+.
	numMax int
	// ?[^\s\p{L}\p{N}]+[\r\n]* instead of  ?[^\s\p{L}\p{N}]+.
	punctNewlines bool
	// The \s*[\r\n]+ alternative is present.
	newlineRun bool
	// Letters are [\p{L}\p{M}] and punctuation excludes \p{M} (Qwen 3.5's pattern).
	marks bool
}

const (
	patGPT2   = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
	patLlama3 = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	patQwen2  = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// Qwen 3.5 (llama.cpp's "qwen35"): letters include combining marks.
	patQwen35 = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
)

var knownPatterns = map[string]*gpt2Variant{
	patGPT2:   {},
	patLlama3: {foldContractions: true, anyLetterPrefix: true, numMax: 3, punctNewlines: true, newlineRun: true},
	patQwen2:  {foldContractions: true, anyLetterPrefix: true, numMax: 1, punctNewlines: true, newlineRun: true},
	// A mark can also be the optional prefix, but then it starts the same run of letters and
	// marks, so treating marks as letters gives the same matches.
	patQwen35: {foldContractions: true, anyLetterPrefix: true, numMax: 1, punctNewlines: true, newlineRun: true, marks: true},
}

// Character classes for runes below 0x80.
const (
	clsLetter = 1 << iota
	clsNumber
	clsSpace
)

var asciiClass [128]uint8

func init() {
	for r := 0; r < 128; r++ {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z':
			asciiClass[r] = clsLetter
		case r >= '0' && r <= '9':
			asciiClass[r] = clsNumber
		case r == ' ', r >= '\t' && r <= '\r':
			asciiClass[r] = clsSpace
		}
	}
}

func runeClass(r rune, marks bool) uint8 {
	if r < 0x80 {
		return asciiClass[r]
	}
	switch {
	case unicode.IsLetter(r):
		return clsLetter
	case unicode.IsNumber(r):
		return clsNumber
	case unicode.Is(unicode.White_Space, r):
		return clsSpace
	case marks && unicode.IsMark(r):
		return clsLetter
	}
	return 0
}

func decodeAt(s string, i int) (rune, int) {
	if c := s[i]; c < utf8.RuneSelf {
		return rune(c), 1
	}
	return utf8.DecodeRuneInString(s[i:])
}

// runWhile returns the end of the run of runes of class cls starting at i, at most max runes
// (max < 0: no limit).
func (v *gpt2Variant) runWhile(s string, i int, cls uint8, max int) int {
	for n := 0; i < len(s) && n != max; n++ {
		r, w := decodeAt(s, i)
		if runeClass(r, v.marks) != cls {
			break
		}
		i += w
	}
	return i
}

// foldEq reports whether rune r equals the ASCII letter c, case-insensitively if fold (Unicode
// simple case folding: 'ſ' U+017F matches 's' as in Oniguruma).
func foldEq(r rune, c byte, fold bool) bool {
	if r == rune(c) {
		return true
	}
	if !fold {
		return false
	}
	return runeEqualFold(r, rune(c))
}

// contraction matches 's|'t|'re|'ve|'m|'ll|'d after the apostrophe at i-1; 0 if none.
func (v *gpt2Variant) contraction(s string, i int) int {
	if i >= len(s) {
		return 0
	}
	r1, w1 := decodeAt(s, i)
	for _, alt := range [...]string{"s", "t", "re", "ve", "m", "ll", "d"} {
		if !foldEq(r1, alt[0], v.foldContractions) {
			continue
		}
		if len(alt) == 1 {
			return i + w1
		}
		if j := i + w1; j < len(s) {
			if r2, w2 := decodeAt(s, j); foldEq(r2, alt[1], v.foldContractions) {
				return j + w2
			}
		}
	}
	return 0
}

// matchAt returns the end of the match that starts at i (there always is one, and it is never
// empty).
func (v *gpt2Variant) matchAt(s string, i int) int {
	r, w := decodeAt(s, i)
	cls := runeClass(r, v.marks)
	next := func() (rune, uint8, bool) {
		if i+w >= len(s) {
			return 0, 0, false
		}
		r2, _ := decodeAt(s, i+w)
		return r2, runeClass(r2, v.marks), true
	}
	// Contractions.
	if r == '\'' {
		if e := v.contraction(s, i+w); e > 0 {
			return e
		}
	}
	// Letters.
	if cls == clsLetter {
		return v.runWhile(s, i, clsLetter, -1)
	}
	prefixOK := r == ' '
	if v.anyLetterPrefix {
		prefixOK = cls != clsNumber && r != '\r' && r != '\n'
	}
	if prefixOK {
		if _, c2, ok := next(); ok && c2 == clsLetter {
			return v.runWhile(s, i+w, clsLetter, -1)
		}
	}
	// Numbers.
	if v.numMax == 0 {
		if cls == clsNumber {
			return v.runWhile(s, i, clsNumber, -1)
		}
		if r == ' ' {
			if _, c2, ok := next(); ok && c2 == clsNumber {
				return v.runWhile(s, i+w, clsNumber, -1)
			}
		}
	} else if cls == clsNumber {
		return v.runWhile(s, i, clsNumber, v.numMax)
	}
	// Punctuation and everything else that is not a letter, number or space.
	start := -1
	if cls == 0 {
		start = i
	} else if r == ' ' {
		if _, c2, ok := next(); ok && c2 == 0 {
			start = i + w
		}
	}
	if start >= 0 {
		j := v.runWhile(s, start, 0, -1)
		if v.punctNewlines {
			for j < len(s) && (s[j] == '\r' || s[j] == '\n') {
				j++
			}
		}
		return j
	}
	// Whitespace (cls == clsSpace here).
	end := v.runWhile(s, i, clsSpace, -1)
	if v.newlineRun {
		// \s*[\r\n]+ : \s* backs off to the last '\r' or '\n' of the run.
		for k := end - 1; k >= i; k-- {
			if s[k] == '\r' || s[k] == '\n' {
				return k + 1
			}
		}
	}
	// \s+(?!\S): the whole run at the end of the text, else all but its last rune.
	if end == len(s) {
		return end
	}
	_, lw := utf8.DecodeLastRuneInString(s[i:end])
	if end-lw > i {
		return end - lw
	}
	// \s+
	return end
}

// findAll returns the byte offsets of all matches in s (valid UTF-8); they tile s.
func (v *gpt2Variant) findAll(s string, out [][2]int) [][2]int {
	for i := 0; i < len(s); {
		e := v.matchAt(s, i)
		out = append(out, [2]int{i, e})
		i = e
	}
	return out
}
