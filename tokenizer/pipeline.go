package tokenizer

import (
	"strings"
	"unicode"
)

// --- normalizers ---

type normalizer interface {
	normalize(s string) string
}

type replaceNorm struct {
	literal string // pattern {"String": …}
	re      *regex // pattern {"Regex": …}
	content string
}

func (n *replaceNorm) normalize(s string) string { return replaceAll(s, n.literal, n.re, n.content) }

func replaceAll(s, literal string, re *regex, content string) string {
	if re == nil {
		if literal == "" {
			return s
		}
		return strings.ReplaceAll(s, literal, content)
	}
	ms := re.findAll(s)
	if len(ms) == 0 {
		return s
	}
	var b strings.Builder
	prev := 0
	for _, m := range ms {
		b.WriteString(s[prev:m[0]])
		b.WriteString(content)
		prev = m[1]
	}
	b.WriteString(s[prev:])
	return b.String()
}

type unicodeNorm struct{ form normForm }

func (n unicodeNorm) normalize(s string) string { return normalize(s, n.form) }

type prependNorm struct{ prefix string }

func (n prependNorm) normalize(s string) string {
	if s == "" {
		return s
	}
	return n.prefix + s
}

type stripNorm struct{ left, right bool }

func (n stripNorm) normalize(s string) string {
	if n.left {
		s = strings.TrimLeftFunc(s, unicode.IsSpace)
	}
	if n.right {
		s = strings.TrimRightFunc(s, unicode.IsSpace)
	}
	return s
}

type seqNorm []normalizer

func (n seqNorm) normalize(s string) string {
	for _, x := range n {
		s = x.normalize(s)
	}
	return s
}

// --- pre-tokenizers ---

// A pre-tokenizer splits (and may rewrite) pieces of normalized text; the model encodes each
// piece separately. first is true for a piece that starts at offset 0 of the input (Metaspace's
// prepend_scheme "first" needs it).
type preTokenizer interface {
	pretokenize(pieces []string, first bool) []string
}

type splitBehavior int

const (
	behaviorRemoved splitBehavior = iota
	behaviorIsolated
	behaviorMergedWithPrevious
	behaviorMergedWithNext
	behaviorContiguous
)

// matcher finds pattern matches (byte offsets) in a piece.
type matcher interface {
	findAll(s string) [][2]int
}

type literalMatcher string

func (l literalMatcher) findAll(s string) [][2]int {
	var out [][2]int
	for i := 0; ; {
		j := strings.Index(s[i:], string(l))
		if j < 0 {
			return out
		}
		out = append(out, [2]int{i + j, i + j + len(l)})
		i += j + len(l)
	}
}

type gpt2Matcher struct{ v *gpt2Variant }

func (g gpt2Matcher) findAll(s string) [][2]int { return g.v.findAll(s, nil) }

type splitPre struct {
	m        matcher
	behavior splitBehavior
	invert   bool
}

type span struct {
	start, end int
	match      bool
}

// splitSpans cuts s at the matches of m, the way HF's NormalizedString::split does.
func splitSpans(s string, m matcher, behavior splitBehavior, invert bool) []span {
	var spans []span
	prev := 0
	for _, mt := range m.findAll(s) {
		if mt[0] > prev {
			spans = append(spans, span{prev, mt[0], invert})
		}
		spans = append(spans, span{mt[0], mt[1], !invert})
		prev = mt[1]
	}
	if prev < len(s) {
		spans = append(spans, span{prev, len(s), invert})
	}
	var out []span
	switch behavior {
	case behaviorRemoved:
		for _, sp := range spans {
			if !sp.match {
				out = append(out, sp)
			}
		}
	case behaviorIsolated:
		out = spans
	case behaviorMergedWithPrevious:
		prevMatch := false
		for _, sp := range spans {
			if sp.match && !prevMatch && len(out) > 0 {
				out[len(out)-1].end = sp.end
			} else {
				out = append(out, sp)
			}
			prevMatch = sp.match
		}
	case behaviorMergedWithNext:
		prevMatch := false
		for i := len(spans) - 1; i >= 0; i-- {
			sp := spans[i]
			if sp.match && !prevMatch && len(out) > 0 {
				out[len(out)-1].start = sp.start
			} else {
				out = append(out, sp)
			}
			prevMatch = sp.match
		}
		for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
			out[i], out[j] = out[j], out[i]
		}
	case behaviorContiguous:
		prevMatch := false
		for _, sp := range spans {
			if sp.match == prevMatch && len(out) > 0 {
				out[len(out)-1].end = sp.end
			} else {
				out = append(out, sp)
			}
			prevMatch = sp.match
		}
	}
	return out
}

func (p *splitPre) pretokenize(pieces []string, first bool) []string {
	out := pieces[:0:0]
	for _, s := range pieces {
		for _, sp := range splitSpans(s, p.m, p.behavior, p.invert) {
			if sp.end > sp.start {
				out = append(out, s[sp.start:sp.end])
			}
		}
	}
	return out
}

type byteLevelPre struct {
	addPrefixSpace bool
	useRegex       bool
}

var gpt2Split = gpt2Matcher{knownPatterns[patGPT2]}

func (p *byteLevelPre) pretokenize(pieces []string, first bool) []string {
	out := pieces[:0:0]
	for _, s := range pieces {
		if p.addPrefixSpace && !strings.HasPrefix(s, " ") {
			s = " " + s
		}
		if !p.useRegex {
			out = append(out, byteLevelEncode(s))
			continue
		}
		for _, m := range gpt2Split.findAll(s) {
			out = append(out, byteLevelEncode(s[m[0]:m[1]]))
		}
	}
	return out
}

type prependScheme int

const (
	prependAlways prependScheme = iota
	prependNever
	prependFirst
)

type metaspacePre struct {
	replacement string
	prepend     prependScheme
	split       bool
}

func (p *metaspacePre) pretokenize(pieces []string, first bool) []string {
	out := pieces[:0:0]
	for i, s := range pieces {
		s = strings.ReplaceAll(s, " ", p.replacement)
		if (p.prepend == prependAlways || (p.prepend == prependFirst && first && i == 0)) && !strings.HasPrefix(s, p.replacement) {
			s = p.replacement + s
		}
		if !p.split {
			if s != "" {
				out = append(out, s)
			}
			continue
		}
		for _, sp := range splitSpans(s, literalMatcher(p.replacement), behaviorMergedWithNext, false) {
			if sp.end > sp.start {
				out = append(out, s[sp.start:sp.end])
			}
		}
	}
	return out
}

type seqPre []preTokenizer

func (p seqPre) pretokenize(pieces []string, first bool) []string {
	for _, x := range p {
		pieces = x.pretokenize(pieces, first)
	}
	return pieces
}

// --- post-processors ---

type templatePiece struct {
	special string // a special token's name, or "" for the sequence
}

// template is TemplateProcessing's single-sequence template (Roberta/Bert processing too).
type template struct {
	single  []templatePiece
	special map[string][]int32
}

// postProcessor applies its templates in order (a Sequence); ByteLevel adds none.
type postProcessor struct {
	templates []*template
}

func (p *postProcessor) apply(ids []int32) []int32 {
	if p == nil {
		return ids
	}
	for _, tp := range p.templates {
		out := make([]int32, 0, len(ids)+4)
		for _, pc := range tp.single {
			if pc.special == "" {
				out = append(out, ids...)
			} else {
				out = append(out, tp.special[pc.special]...)
			}
		}
		ids = out
	}
	return ids
}
