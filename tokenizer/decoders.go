package tokenizer

import (
	"strings"
	"unicode/utf8"
)

// Decoders turn the token strings of a decode call into text. Each is a transformation of the
// token list, as in HF (decode_chain); the final text is the concatenation of the last list.
type decoderStep interface {
	decodeChain(toks []string) []string
}

type replaceDec struct {
	literal string
	re      *regex
	content string
}

func (d *replaceDec) decodeChain(toks []string) []string {
	out := make([]string, len(toks))
	for i, t := range toks {
		out[i] = replaceAll(t, d.literal, d.re, d.content)
	}
	return out
}

// byteFallbackDec turns runs of "<0xHH>" tokens into the text of their bytes. As in HF's Rust
// implementation, a run that is valid UTF-8 becomes one token; otherwise each of its bytes
// becomes U+FFFD. (tokenizers.js decodes an invalid run with one U+FFFD per maximal ill-formed
// subpart instead; the two agree on every valid run, which is all that encoding text produces.)
type byteFallbackDec struct{}

func byteRunString(b []byte) []string {
	if utf8.Valid(b) {
		return []string{string(b)}
	}
	out := make([]string, len(b))
	for i := range out {
		out[i] = replacementChar
	}
	return out
}

func (byteFallbackDec) decodeChain(toks []string) []string {
	out := make([]string, 0, len(toks))
	var run []byte
	for _, t := range toks {
		if b, ok := byteToken(t); ok {
			run = append(run, b)
			continue
		}
		if len(run) > 0 {
			out = append(out, byteRunString(run)...)
			run = run[:0]
		}
		out = append(out, t)
	}
	if len(run) > 0 {
		out = append(out, byteRunString(run)...)
	}
	return out
}

type fuseDec struct{}

func (fuseDec) decodeChain(toks []string) []string { return []string{strings.Join(toks, "")} }

// stripDec removes up to start leading and stop trailing occurrences of content from each token.
type stripDec struct {
	content     rune
	start, stop int
}

func (d *stripDec) strip(t string) string {
	for n := 0; n < d.start; n++ {
		r, w := utf8.DecodeRuneInString(t)
		if w == 0 || r != d.content {
			break
		}
		t = t[w:]
	}
	for n := 0; n < d.stop; n++ {
		r, w := utf8.DecodeLastRuneInString(t)
		if w == 0 || r != d.content {
			break
		}
		t = t[:len(t)-w]
	}
	return t
}

func (d *stripDec) decodeChain(toks []string) []string {
	out := make([]string, len(toks))
	for i, t := range toks {
		out[i] = d.strip(t)
	}
	return out
}

// byteLevelDec maps byte-level characters back to bytes and decodes the concatenation as UTF-8,
// one U+FFFD per maximal ill-formed subpart.
type byteLevelDec struct{}

func (byteLevelDec) decodeChain(toks []string) []string {
	var b []byte
	for _, t := range toks {
		b = byteLevelBytes(b, t)
	}
	return []string{lossyUTF8(b)}
}

// metaspaceDec turns the replacement character into spaces; in the first token it is dropped
// instead, unless the prepend scheme is "never".
type metaspaceDec struct {
	replacement rune
	prepend     prependScheme
}

func (d *metaspaceDec) token(i int, t string) string {
	if !strings.ContainsRune(t, d.replacement) {
		return t
	}
	var b strings.Builder
	for _, r := range t {
		if r == d.replacement {
			if i == 0 && d.prepend != prependNever {
				continue
			}
			r = ' '
		}
		b.WriteRune(r)
	}
	return b.String()
}

func (d *metaspaceDec) decodeChain(toks []string) []string {
	out := make([]string, len(toks))
	for i, t := range toks {
		out[i] = d.token(i, t)
	}
	return out
}

type seqDec []decoderStep

func (d seqDec) decodeChain(toks []string) []string {
	for _, x := range d {
		toks = x.decodeChain(toks)
	}
	return toks
}

// cleanUpTokenization is transformers' clean_up_tokenization, applied after decoding when
// tokenizer_config.json sets clean_up_tokenization_spaces.
var cleanUpPairs = [][2]string{
	{" .", "."}, {" ?", "?"}, {" !", "!"}, {" ,", ","}, {" ' ", "'"},
	{" n't", "n't"}, {" 'm", "'m"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"},
}

func cleanUpTokenization(s string) string {
	for _, p := range cleanUpPairs {
		s = strings.ReplaceAll(s, p[0], p[1])
	}
	return s
}
