package chat

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// prepareSource turns a template's text into the text the engine compiles, doing what
// transformers' Jinja environment (Python Jinja2 with trim_blocks and lstrip_blocks) does and
// the engine does not, or does differently:
//
//   - Newlines: \r\n and \r become \n, and one trailing newline is dropped
//     (keep_trailing_newline=False).
//   - Whitespace control: Jinja2's lexer rules — "-" and "+" markers on either side of a tag,
//     lstrip_blocks, trim_blocks, {% raw %} — are applied here, and every piece of literal
//     text is handed to the engine as a string-literal expression ({{ "…" }}). The engine is
//     then left with no text to trim: its own trimming reaches across neighbouring tags (the
//     trim_blocks of `{% for %}` in `{% for x in y %}{{ x }}\n{% endfor %}` eats the "\n" after
//     `{{ x }}`, and a "{{-" strips text before an adjacent tag).
//   - Tags end where Jinja2 ends them: a "}}" or "%}" inside brackets (a dict literal) does not
//     close the tag; such pairs are split by a space for the engine's scanner.
//   - String literals in tags are decoded with Python's escapes (\r, \xhh, \uXXXX, \UXXXXXXXX,
//     octal, \a \b \f \v, backslash-newline), which the engine keeps as written.
//   - Every tojson is renamed to tojsonName, so that HF's tojson runs instead of the engine's,
//     and every {{ expression }} is printed through strName, Python's str().
//
// Comments are dropped; padding comments keep each tag on its original line, so the engine's
// "line N" in parse errors still points into the original template.
func prepareSource(src string) (string, error) {
	src = strings.ReplaceAll(src, "\r\n", "\n")
	src = strings.ReplaceAll(src, "\r", "\n")
	src = strings.TrimSuffix(src, "\n")
	l := &lexer{src: src, lineStarting: true, srcLine: 1, outLine: 1}
	if err := l.run(); err != nil {
		return "", err
	}
	return l.out.String(), nil
}

type lexer struct {
	src          string
	pos          int
	lineStarting bool // the text at pos starts a line (template start, or a tag end consumed "\n")
	pending      strings.Builder
	out          strings.Builder
	srcLine      int // line of srcLinePos in src
	srcLinePos   int
	outLine      int // line the engine is at in out
}

func (l *lexer) run() error {
	for {
		open := nextOpener(l.src, l.pos)
		if open < 0 {
			l.pending.WriteString(l.src[l.pos:])
			l.flush()
			return nil
		}
		text := l.src[l.pos:open]
		kind := l.src[open+1] // '{', '%' or '#'
		p := open + 2
		sign := byte(0)
		if p < len(l.src) && (l.src[p] == '-' || l.src[p] == '+') {
			sign = l.src[p]
			p++
		}
		line := l.lineOf(open)

		if kind == '%' {
			if end, ok := rawBegin(l.src, p); ok {
				l.pending.WriteString(l.leftStrip(text, sign, true))
				if err := l.raw(end, line); err != nil {
					return err
				}
				continue
			}
		}
		l.pending.WriteString(l.leftStrip(text, sign, kind != '{'))

		if kind == '#' {
			end, ok := commentEnd(l.src, p)
			if !ok {
				return fmt.Errorf("line %d: unclosed comment", line)
			}
			l.pos = end
			l.lineStarting = strings.HasSuffix(l.src[open:end], "\n")
			continue
		}
		contentEnd, end, err := tagEnd(l.src, p, kind)
		if err != nil {
			what := "expression"
			if kind == '%' {
				what = "statement"
			}
			return fmt.Errorf("line %d: %s %s tag", line, err, what)
		}
		l.flush()
		l.padTo(line)
		content := rewriteTag(l.src[p:contentEnd], kind == '%')
		if kind == '%' {
			l.write("{% " + content + " %}")
		} else {
			l.write("{{ (" + content + ") | " + strName + " }}")
		}
		l.pos = end
		l.lineStarting = end > 0 && l.src[end-1] == '\n' && end > contentEnd
	}
}

// raw handles {% raw %}…{% endraw %}: the text between them is literal. begin is the position
// after the raw tag.
func (l *lexer) raw(begin, line int) error {
	l.lineStarting = l.src[begin-1] == '\n'
	for k := begin; k < len(l.src); k++ {
		if !strings.HasPrefix(l.src[k:], "{%") {
			continue
		}
		p := k + 2
		sign := byte(0)
		if p < len(l.src) && (l.src[p] == '-' || l.src[p] == '+') {
			sign = l.src[p]
			p++
		}
		q := skipSpace(l.src, p)
		if !strings.HasPrefix(l.src[q:], "endraw") {
			continue
		}
		q = skipSpace(l.src, q+len("endraw"))
		end, ok := blockCloser(l.src, q)
		if !ok {
			continue
		}
		l.pending.WriteString(l.leftStrip(l.src[begin:k], sign, true))
		l.pos = end
		l.lineStarting = l.src[end-1] == '\n'
		return nil
	}
	return fmt.Errorf("line %d: {%% raw %%} without {%% endraw %%}", line)
}

// leftStrip applies the rules for the text before a tag: "-" strips all whitespace;
// otherwise, for a statement or comment tag without "+", lstrip_blocks strips the spaces and
// tabs between the start of the line and the tag.
func (l *lexer) leftStrip(text string, sign byte, block bool) string {
	if sign == '-' {
		return strings.TrimRightFunc(text, pyIsSpace)
	}
	if sign != '+' && block {
		lpos := strings.LastIndexByte(text, '\n') + 1
		if lpos > 0 || l.lineStarting {
			if rest := text[lpos:]; rest != "" && strings.TrimLeftFunc(rest, pyIsSpace) == "" {
				return text[:lpos]
			}
		}
	}
	return text
}

// flush writes the pending literal text as a string expression.
func (l *lexer) flush() {
	text := l.pending.String()
	l.pending.Reset()
	if text == "" {
		return
	}
	var b strings.Builder
	b.WriteString(`{{ "`)
	for i := 0; i < len(text); i++ {
		switch c := text[i]; c {
		case '\\', '"':
			b.WriteByte('\\')
			b.WriteByte(c)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteString(`" }}`)
	l.write(b.String())
}

func (l *lexer) write(s string) {
	l.out.WriteString(s)
	l.outLine += strings.Count(s, "\n")
}

// padTo writes a comment of newlines so that the next tag starts on line.
func (l *lexer) padTo(line int) {
	if l.outLine < line {
		l.write("{#" + strings.Repeat("\n", line-l.outLine) + "#}")
	}
}

// lineOf returns the 1-based line of position pos (called with increasing positions).
func (l *lexer) lineOf(pos int) int {
	l.srcLine += strings.Count(l.src[l.srcLinePos:pos], "\n")
	l.srcLinePos = pos
	return l.srcLine
}

func nextOpener(src string, from int) int {
	for i := from; i+1 < len(src); i++ {
		if src[i] == '{' && (src[i+1] == '{' || src[i+1] == '%' || src[i+1] == '#') {
			return i
		}
	}
	return -1
}

// rawBegin matches the rest of a raw tag, `\s*raw\s*(-%}\s*|%})`, at p (after "{%" and its
// sign) and returns the position after it.
func rawBegin(src string, p int) (int, bool) {
	q := skipSpace(src, p)
	if !strings.HasPrefix(src[q:], "raw") {
		return 0, false
	}
	q = skipSpace(src, q+len("raw"))
	switch {
	case strings.HasPrefix(src[q:], "-%}"):
		return skipSpace(src, q+3), true
	case strings.HasPrefix(src[q:], "%}"):
		return q + 2, true
	}
	return 0, false
}

// blockCloser matches a statement tag's end at q: "+%}", "-%}" and following whitespace, or
// "%}" and one newline (trim_blocks). It returns the position after it.
func blockCloser(src string, q int) (int, bool) {
	switch {
	case strings.HasPrefix(src[q:], "+%}"):
		return q + 3, true
	case strings.HasPrefix(src[q:], "-%}"):
		return skipSpace(src, q+3), true
	case strings.HasPrefix(src[q:], "%}"):
		if q+2 < len(src) && src[q+2] == '\n' {
			return q + 3, true
		}
		return q + 2, true
	}
	return 0, false
}

// commentEnd finds the end of a comment begun before p: the first "+#}", "-#}" (plus
// whitespace) or "#}" (plus one newline).
func commentEnd(src string, p int) (end int, ok bool) {
	for k := p; k < len(src); k++ {
		switch {
		case strings.HasPrefix(src[k:], "+#}"):
			return k + 3, true
		case strings.HasPrefix(src[k:], "-#}"):
			return skipSpace(src, k+3), true
		case strings.HasPrefix(src[k:], "#}"):
			if k+2 < len(src) && src[k+2] == '\n' {
				return k + 3, true
			}
			return k + 2, true
		}
	}
	return 0, false
}

// tagEnd finds the end of an expression ('{') or statement ('%') tag whose content starts at
// p, skipping string literals and ending only outside brackets, as Jinja2's lexer does. It
// returns where the content ends and where the tag (with the whitespace its end consumes)
// ends.
func tagEnd(src string, p int, kind byte) (contentEnd, end int, err error) {
	depth := 0
	for k := p; k < len(src); {
		c := src[k]
		switch {
		case c == '\'' || c == '"':
			k = skipString(src, k)
			if k < 0 {
				return 0, 0, fmt.Errorf("unterminated string in")
			}
			continue
		case c == '(' || c == '[' || c == '{':
			depth++
		case depth > 0 && (c == ')' || c == ']' || c == '}'):
			depth--
		case depth == 0 && kind == '%':
			if e, ok := blockCloser(src, k); ok {
				return k, e, nil
			}
		case depth == 0 && kind == '{':
			switch {
			case strings.HasPrefix(src[k:], "-}}"):
				return k, skipSpace(src, k+3), nil
			case strings.HasPrefix(src[k:], "}}"):
				return k, k + 2, nil
			}
		}
		k++
	}
	return 0, 0, fmt.Errorf("unclosed")
}

// skipString returns the position after the string literal starting at k, or -1.
func skipString(src string, k int) int {
	q := src[k]
	for i := k + 1; i < len(src); i++ {
		switch src[i] {
		case '\\':
			i++
		case q:
			return i + 1
		}
	}
	return -1
}

// skipSpace skips Python whitespace (\s) from p.
func skipSpace(src string, p int) int {
	for p < len(src) {
		r, size := utf8.DecodeRuneInString(src[p:])
		if !pyIsSpace(r) {
			break
		}
		p += size
	}
	return p
}

// pyIsSpace is Python's str.isspace for one character (what \s and str.strip use).
func pyIsSpace(r rune) bool {
	return unicode.IsSpace(r) || r >= 0x1c && r <= 0x1f
}

// rewriteTag rewrites a tag's content for the engine: string literals decoded with Python's
// escapes; tojson, and the string filter, renamed to ours (not in a {% filter %} statement,
// whose filter the engine looks up among its builtins only, and not after a '.'); "}}" and
// "%}" outside strings split by a space.
func rewriteTag(content string, statement bool) string {
	rename := !(statement && firstWord(content) == "filter")
	var b strings.Builder
	prev := byte(0) // the last non-space byte written outside strings
	for i := 0; i < len(content); {
		c := content[i]
		switch {
		case c == '\'' || c == '"':
			k := skipString(content, i)
			if k < 0 { // tagEnd guarantees strings are closed
				k = len(content)
			}
			b.WriteByte(c)
			b.WriteString(pythonUnescape(content[i+1:k-1], c))
			b.WriteByte(c)
			i = k
			prev = c
		case c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z':
			k := i
			for k < len(content) && isIdentByte(content[k]) {
				k++
			}
			word := content[i:k]
			switch {
			case rename && word == "tojson" && prev != '.':
				word = tojsonName
			case rename && word == "string" && prev == '|':
				word = strName // the string filter is str(), not the engine's printing
			}
			b.WriteString(word)
			i = k
			prev = 'a'
		case c >= '0' && c <= '9':
			k := i
			for k < len(content) && (isIdentByte(content[k]) || content[k] == '.') {
				k++
			}
			b.WriteString(content[i:k])
			i = k
			prev = '0'
		default:
			if (c == '}' || c == '%') && i+1 < len(content) && content[i+1] == '}' {
				b.WriteByte(c)
				b.WriteByte(' ')
			} else {
				b.WriteByte(c)
			}
			if !pyIsSpace(rune(c)) {
				prev = c
			}
			i++
		}
	}
	return b.String()
}

func firstWord(s string) string {
	s = strings.TrimLeftFunc(s, pyIsSpace)
	end := 0
	for end < len(s) && isIdentByte(s[end]) {
		end++
	}
	return s[:end]
}

func isIdentByte(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// pythonUnescape rewrites the body of a string literal so that the engine, which knows only
// \n \t \\ \' \", reads the string Python's Jinja reads: every other escape Python decodes
// (unicode-escape) is replaced by the character itself; escapes Python does not know stay.
func pythonUnescape(body string, quote byte) string {
	if !strings.Contains(body, "\\") {
		return body
	}
	var b strings.Builder
	emit := func(r rune) {
		switch {
		case r == rune(quote) || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\t':
			b.WriteString(`\t`)
		case r >= 0xd800 && r < 0xe000 || r > utf8.MaxRune:
			b.WriteRune(utf8.RuneError)
		default:
			b.WriteRune(r)
		}
	}
	hexVal := func(s string) (rune, bool) {
		v, err := strconv.ParseUint(s, 16, 32)
		return rune(v), err == nil
	}
	for i := 0; i < len(body); i++ {
		c := body[i]
		if c != '\\' || i+1 == len(body) {
			b.WriteByte(c)
			continue
		}
		e := body[i+1]
		switch e {
		case 'n', 't', '\\', '\'', '"':
			b.WriteByte('\\')
			b.WriteByte(e)
			i++
		case 'r':
			b.WriteByte('\r')
			i++
		case 'a':
			b.WriteByte(7)
			i++
		case 'b':
			b.WriteByte(8)
			i++
		case 'f':
			b.WriteByte(12)
			i++
		case 'v':
			b.WriteByte(11)
			i++
		case '\n':
			i++ // line continuation
		case 'x', 'u', 'U':
			n := map[byte]int{'x': 2, 'u': 4, 'U': 8}[e]
			r, ok := rune(0), i+2+n <= len(body)
			if ok {
				r, ok = hexVal(body[i+2 : i+2+n])
			}
			if !ok {
				b.WriteByte(c) // Python would refuse the template; keep the text
				continue
			}
			i += 1 + n
			// A UTF-16 surrogate pair written as two \u escapes is one character.
			if e == 'u' && r >= 0xd800 && r < 0xdc00 && i+7 <= len(body) && body[i+1:i+3] == "\\u" {
				if lo, ok := hexVal(body[i+3 : i+7]); ok && lo >= 0xdc00 && lo < 0xe000 {
					r = 0x10000 + (r-0xd800)<<10 + (lo - 0xdc00)
					i += 6
				}
			}
			emit(r)
		default:
			if e >= '0' && e <= '7' {
				k := i + 1
				for k < len(body) && k < i+4 && body[k] >= '0' && body[k] <= '7' {
					k++
				}
				v, _ := strconv.ParseUint(body[i+1:k], 8, 32)
				emit(rune(v))
				i = k - 1
				continue
			}
			b.WriteByte(c) // unknown escape: Python keeps the backslash too
		}
	}
	return b.String()
}
