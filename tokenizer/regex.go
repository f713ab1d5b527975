package tokenizer

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
)

// A small backtracking regular-expression engine for the patterns tokenizer.json files carry.
// HF compiles them with Oniguruma (Ruby syntax), whose semantics this follows: leftmost-first
// alternation, greedy/lazy/possessive quantifiers, look-ahead and bounded look-behind, atomic
// groups, Unicode classes (\s is White_Space, \d is Nd, \w is L|M|Nd|Pc, \p{…} categories and
// scripts), case-insensitive groups with Unicode simple case folding, and line anchors that see
// only '\n'. Go's regexp has no look-around, which the GPT-2 family of patterns needs
// (\s+(?!\S)). The common patterns have hand-written matchers (split_gpt2.go); this engine is
// the general fallback and the oracle the hand-written matchers are tested against.

type reKind uint8

const (
	reEmpty reKind = iota
	reLit
	reClass
	reAny // '.': any rune but '\n'
	reConcat
	reAlt
	reRepeat
	reLook
	reAtomic
	reAssert
)

type reNode struct {
	kind       reKind
	r          rune
	fold       bool
	cls        *reClassSet
	subs       []*reNode
	min, max   int // repeat; max < 0 is unbounded
	lazy       bool
	possessive bool
	ahead, neg bool // look
	maxLen     int  // look-behind: the longest match of subs[0], in runes
	assert     byte // '^' '$' 'A' 'z' 'Z' 'b' 'B'
}

// reClassSet is a bracket expression or shorthand: the union of items, optionally negated.
type reClassSet struct {
	neg   bool
	fold  bool
	items []reClassItem
}

type reClassItem struct {
	lo, hi rune
	fn     func(rune) bool // a property; nil for a range
	sub    *reClassSet     // a nested class
}

func (c *reClassSet) has(r rune) bool {
	in := c.hasRaw(r)
	if !in && c.fold {
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			if c.hasRaw(f) {
				in = true
				break
			}
		}
	}
	return in != c.neg
}

func (c *reClassSet) hasRaw(r rune) bool {
	for i := range c.items {
		it := &c.items[i]
		switch {
		case it.sub != nil:
			if it.sub.has(r) {
				return true
			}
		case it.fn != nil:
			if it.fn(r) {
				return true
			}
		default:
			if r >= it.lo && r <= it.hi {
				return true
			}
		}
	}
	return false
}

// regex is a compiled pattern.
type regex struct {
	src  string
	root *reNode
}

// compileRegex parses an Oniguruma-style pattern; unsupported syntax is an error naming it.
func compileRegex(src string) (*regex, error) {
	p := &reParser{src: []rune(src)}
	n, err := p.parseAlt(false)
	if err != nil {
		return nil, fmt.Errorf("regex %q: %w", src, err)
	}
	if p.pos < len(p.src) {
		return nil, fmt.Errorf("regex %q: unbalanced ')' at offset %d", src, p.pos)
	}
	return &regex{src: src, root: n}, nil
}

type reParser struct {
	src  []rune
	pos  int
	fold bool
}

func (p *reParser) more() bool { return p.pos < len(p.src) }
func (p *reParser) peek() rune { return p.src[p.pos] }

func (p *reParser) parseAlt(inGroup bool) (*reNode, error) {
	var alts []*reNode
	saved := p.fold
	for {
		seq, err := p.parseConcat()
		if err != nil {
			return nil, err
		}
		alts = append(alts, seq)
		if p.more() && p.peek() == '|' {
			p.pos++
			continue
		}
		break
	}
	if inGroup {
		if !p.more() || p.peek() != ')' {
			return nil, fmt.Errorf("missing ')'")
		}
	}
	p.fold = saved
	if len(alts) == 1 {
		return alts[0], nil
	}
	return &reNode{kind: reAlt, subs: alts}, nil
}

func (p *reParser) parseConcat() (*reNode, error) {
	var items []*reNode
	for p.more() {
		c := p.peek()
		if c == '|' || c == ')' {
			break
		}
		atom, err := p.parseAtom()
		if err != nil {
			return nil, err
		}
		if atom == nil { // an inline flag group such as (?i)
			continue
		}
		for p.more() {
			q, ok, err := p.parseQuant(atom)
			if err != nil {
				return nil, err
			}
			if !ok {
				break
			}
			atom = q
		}
		items = append(items, atom)
	}
	switch len(items) {
	case 0:
		return &reNode{kind: reEmpty}, nil
	case 1:
		return items[0], nil
	}
	return &reNode{kind: reConcat, subs: items}, nil
}

func (p *reParser) parseQuant(atom *reNode) (*reNode, bool, error) {
	c := p.peek()
	min, max := 0, -1
	switch c {
	case '?':
		max = 1
		p.pos++
	case '*':
		p.pos++
	case '+':
		min = 1
		p.pos++
	case '{':
		lo, hi, n, ok := parseBraces(p.src[p.pos:])
		if !ok { // a literal '{', as Oniguruma reads it
			return nil, false, nil
		}
		min, max = lo, hi
		p.pos += n
	default:
		return nil, false, nil
	}
	if atom.kind == reAssert || atom.kind == reLook {
		return nil, false, fmt.Errorf("quantifier after an assertion at offset %d", p.pos)
	}
	q := &reNode{kind: reRepeat, subs: []*reNode{atom}, min: min, max: max}
	if p.more() {
		switch p.peek() {
		case '?':
			q.lazy = true
			p.pos++
		case '+':
			if c != '{' { // X{n}+ is a repeat of a repeat in Oniguruma, not possessive
				q.possessive = true
				p.pos++
			}
		}
	}
	return q, true, nil
}

// parseBraces reads {n}, {n,}, {n,m} or {,m}; n is the number of runes consumed.
func parseBraces(s []rune) (lo, hi, n int, ok bool) {
	end := -1
	for i := 1; i < len(s); i++ {
		if s[i] == '}' {
			end = i
			break
		}
	}
	if end < 0 {
		return 0, 0, 0, false
	}
	body := string(s[1:end])
	parts := strings.Split(body, ",")
	num := func(t string, def int) (int, bool) {
		if t == "" {
			return def, true
		}
		v, err := strconv.Atoi(t)
		return v, err == nil && v >= 0 && v <= 100000
	}
	switch len(parts) {
	case 1:
		v, ok := num(parts[0], -1)
		if !ok || v < 0 {
			return 0, 0, 0, false
		}
		return v, v, end + 1, true
	case 2:
		if parts[0] == "" && parts[1] == "" {
			return 0, 0, 0, false
		}
		a, ok1 := num(parts[0], 0)
		b, ok2 := num(parts[1], -1)
		if !ok1 || !ok2 || (b >= 0 && b < a) {
			return 0, 0, 0, false
		}
		return a, b, end + 1, true
	}
	return 0, 0, 0, false
}

func (p *reParser) parseAtom() (*reNode, error) {
	c := p.peek()
	switch c {
	case '(':
		return p.parseGroup()
	case '[':
		p.pos++
		cls, err := p.parseClass()
		if err != nil {
			return nil, err
		}
		return &reNode{kind: reClass, cls: cls}, nil
	case '.':
		p.pos++
		return &reNode{kind: reAny}, nil
	case '^':
		p.pos++
		return &reNode{kind: reAssert, assert: '^'}, nil
	case '$':
		p.pos++
		return &reNode{kind: reAssert, assert: '$'}, nil
	case '\\':
		return p.parseEscape()
	case '*', '+', '?':
		return nil, fmt.Errorf("nothing to repeat at offset %d", p.pos)
	}
	p.pos++
	return &reNode{kind: reLit, r: c, fold: p.fold}, nil
}

func (p *reParser) parseGroup() (*reNode, error) {
	p.pos++ // '('
	kind := "group"
	if p.more() && p.peek() == '?' {
		p.pos++
		if !p.more() {
			return nil, fmt.Errorf("unterminated group")
		}
		switch c := p.peek(); {
		case c == ':':
			p.pos++
		case c == '=' || c == '!':
			p.pos++
			kind = string(c)
		case c == '>':
			p.pos++
			kind = ">"
		case c == '<' && p.pos+1 < len(p.src) && (p.src[p.pos+1] == '=' || p.src[p.pos+1] == '!'):
			kind = "<" + string(p.src[p.pos+1])
			p.pos += 2
		case c == '<' || c == '\'' || c == 'P':
			// Named group: matched like a plain group (captures don't matter for splitting).
			close := map[rune]rune{'<': '>', '\'': '\'', 'P': '>'}[c]
			if c == 'P' {
				p.pos++
				if !p.more() || p.peek() != '<' {
					return nil, fmt.Errorf("unsupported group syntax (?P at offset %d", p.pos)
				}
			}
			p.pos++
			for p.more() && p.peek() != close {
				p.pos++
			}
			if !p.more() {
				return nil, fmt.Errorf("unterminated group name")
			}
			p.pos++
		case c == 'i' || c == '-' || c == 'm' || c == 'x':
			on := true
			fold := p.fold
			for p.more() && p.peek() != ':' && p.peek() != ')' {
				switch p.peek() {
				case '-':
					on = false
				case 'i':
					fold = on
				default:
					return nil, fmt.Errorf("unsupported inline option %q at offset %d", p.peek(), p.pos)
				}
				p.pos++
			}
			if !p.more() {
				return nil, fmt.Errorf("unterminated group")
			}
			if p.peek() == ')' { // (?i): applies to the rest of the enclosing group
				p.pos++
				p.fold = fold
				return nil, nil
			}
			p.pos++ // ':'
			saved := p.fold
			p.fold = fold
			n, err := p.parseAlt(true)
			if err != nil {
				return nil, err
			}
			p.pos++
			p.fold = saved
			return n, nil
		default:
			return nil, fmt.Errorf("unsupported group syntax (?%c at offset %d", c, p.pos)
		}
	}
	n, err := p.parseAlt(true)
	if err != nil {
		return nil, err
	}
	p.pos++ // ')'
	switch kind {
	case "=", "!":
		return &reNode{kind: reLook, ahead: true, neg: kind == "!", subs: []*reNode{n}}, nil
	case "<=", "<!":
		ml, ok := maxWidth(n)
		if !ok {
			return nil, fmt.Errorf("look-behind of unbounded length")
		}
		return &reNode{kind: reLook, neg: kind == "<!", subs: []*reNode{n}, maxLen: ml}, nil
	case ">":
		return &reNode{kind: reAtomic, subs: []*reNode{n}}, nil
	}
	return n, nil
}

// maxWidth is the longest match of n in runes, if bounded.
func maxWidth(n *reNode) (int, bool) {
	switch n.kind {
	case reEmpty, reAssert, reLook:
		return 0, true
	case reLit, reClass, reAny:
		return 1, true
	case reConcat:
		t := 0
		for _, s := range n.subs {
			w, ok := maxWidth(s)
			if !ok {
				return 0, false
			}
			t += w
		}
		return t, true
	case reAlt:
		m := 0
		for _, s := range n.subs {
			w, ok := maxWidth(s)
			if !ok {
				return 0, false
			}
			m = max(m, w)
		}
		return m, true
	case reRepeat:
		if n.max < 0 {
			return 0, false
		}
		w, ok := maxWidth(n.subs[0])
		return w * n.max, ok
	case reAtomic:
		return maxWidth(n.subs[0])
	}
	return 0, false
}

func (p *reParser) parseEscape() (*reNode, error) {
	p.pos++ // '\\'
	if !p.more() {
		return nil, fmt.Errorf("trailing backslash")
	}
	c := p.peek()
	switch c {
	case 'A', 'z', 'Z', 'b', 'B':
		p.pos++
		return &reNode{kind: reAssert, assert: byte(c)}, nil
	case 'G', 'K', 'k', 'g', 'X', 'R', 'y', 'Y', 'O', 'N':
		return nil, fmt.Errorf("unsupported escape \\%c", c)
	}
	if c >= '1' && c <= '9' {
		return nil, fmt.Errorf("unsupported back-reference \\%c", c)
	}
	cls, r, err := p.parseEscapeBody(false)
	if err != nil {
		return nil, err
	}
	if cls != nil {
		return &reNode{kind: reClass, cls: cls}, nil
	}
	return &reNode{kind: reLit, r: r, fold: p.fold}, nil
}

// parseEscapeBody reads the escape after a backslash: a class (shorthand or property) or a rune.
func (p *reParser) parseEscapeBody(inClass bool) (*reClassSet, rune, error) {
	c := p.peek()
	p.pos++
	single := func(fn func(rune) bool, neg bool) *reClassSet {
		return &reClassSet{neg: neg, fold: p.fold, items: []reClassItem{{fn: fn}}}
	}
	switch c {
	case 's', 'S':
		return single(isSpaceRune, c == 'S'), 0, nil
	case 'd', 'D':
		return single(func(r rune) bool { return unicode.Is(unicode.Nd, r) }, c == 'D'), 0, nil
	case 'w', 'W':
		return single(isWordRune, c == 'W'), 0, nil
	case 'h', 'H':
		return single(func(r rune) bool { _, ok := hexVal(byte(r)); return r < 128 && ok }, c == 'H'), 0, nil
	case 'p', 'P':
		neg := c == 'P'
		var name string
		if p.more() && p.peek() == '{' {
			end := p.pos + 1
			for end < len(p.src) && p.src[end] != '}' {
				end++
			}
			if end >= len(p.src) {
				return nil, 0, fmt.Errorf("unterminated \\p{")
			}
			name = string(p.src[p.pos+1 : end])
			p.pos = end + 1
		} else if p.more() {
			name = string(p.peek())
			p.pos++
		}
		if strings.HasPrefix(name, "^") {
			neg = !neg
			name = name[1:]
		}
		fn, err := unicodeProperty(name)
		if err != nil {
			return nil, 0, err
		}
		return single(fn, neg), 0, nil
	case 't':
		return nil, '\t', nil
	case 'n':
		return nil, '\n', nil
	case 'r':
		return nil, '\r', nil
	case 'f':
		return nil, '\f', nil
	case 'v':
		return nil, '\v', nil
	case 'a':
		return nil, '\a', nil
	case 'e':
		return nil, 0x1B, nil
	case '0':
		return nil, 0, nil
	case 'x':
		if p.more() && p.peek() == '{' {
			end := p.pos + 1
			for end < len(p.src) && p.src[end] != '}' {
				end++
			}
			if end >= len(p.src) {
				return nil, 0, fmt.Errorf("unterminated \\x{")
			}
			v, err := strconv.ParseUint(strings.TrimSpace(string(p.src[p.pos+1:end])), 16, 32)
			if err != nil || v > unicode.MaxRune {
				return nil, 0, fmt.Errorf("bad \\x{...} escape")
			}
			p.pos = end + 1
			return nil, rune(v), nil
		}
		return p.hexEscape(2)
	case 'u':
		return p.hexEscape(4)
	}
	if c < 128 && (unicode.IsLetter(c) || unicode.IsDigit(c)) {
		return nil, 0, fmt.Errorf("unsupported escape \\%c", c)
	}
	return nil, c, nil // an escaped punctuation or other character stands for itself
}

func (p *reParser) hexEscape(n int) (*reClassSet, rune, error) {
	if p.pos+n > len(p.src) {
		return nil, 0, fmt.Errorf("short hex escape")
	}
	v, err := strconv.ParseUint(string(p.src[p.pos:p.pos+n]), 16, 32)
	if err != nil {
		return nil, 0, fmt.Errorf("bad hex escape")
	}
	p.pos += n
	return nil, rune(v), nil
}

func (p *reParser) parseClass() (*reClassSet, error) {
	cls := &reClassSet{fold: p.fold}
	if p.more() && p.peek() == '^' {
		cls.neg = true
		p.pos++
	}
	first := true
	for {
		if !p.more() {
			return nil, fmt.Errorf("unterminated character class")
		}
		c := p.peek()
		if c == ']' && !first {
			p.pos++
			return cls, nil
		}
		first = false
		if c == '&' && p.pos+1 < len(p.src) && p.src[p.pos+1] == '&' {
			return nil, fmt.Errorf("unsupported class intersection &&")
		}
		if c == '[' {
			if p.pos+1 < len(p.src) && p.src[p.pos+1] == ':' {
				end := strings.Index(string(p.src[p.pos:]), ":]")
				if end < 0 {
					return nil, fmt.Errorf("unterminated POSIX class")
				}
				name := string(p.src[p.pos+2 : p.pos+end])
				p.pos += end + 2
				neg := strings.HasPrefix(name, "^")
				fn, err := posixClass(strings.TrimPrefix(name, "^"))
				if err != nil {
					return nil, err
				}
				cls.items = append(cls.items, reClassItem{sub: &reClassSet{neg: neg, fold: p.fold, items: []reClassItem{{fn: fn}}}})
				continue
			}
			p.pos++
			sub, err := p.parseClass()
			if err != nil {
				return nil, err
			}
			cls.items = append(cls.items, reClassItem{sub: sub})
			continue
		}
		var lo rune
		if c == '\\' {
			p.pos++
			if !p.more() {
				return nil, fmt.Errorf("trailing backslash")
			}
			sub, r, err := p.parseEscapeBody(true)
			if err != nil {
				return nil, err
			}
			if sub != nil {
				cls.items = append(cls.items, reClassItem{sub: sub})
				continue
			}
			lo = r
		} else {
			lo = c
			p.pos++
		}
		hi := lo
		if p.pos+1 < len(p.src) && p.peek() == '-' && p.src[p.pos+1] != ']' {
			p.pos++
			c2 := p.peek()
			if c2 == '\\' {
				p.pos++
				if !p.more() {
					return nil, fmt.Errorf("trailing backslash")
				}
				sub, r, err := p.parseEscapeBody(true)
				if err != nil {
					return nil, err
				}
				if sub != nil {
					return nil, fmt.Errorf("class range ending in a class")
				}
				hi = r
			} else {
				hi = c2
				p.pos++
			}
			if hi < lo {
				return nil, fmt.Errorf("bad class range %q-%q", lo, hi)
			}
		}
		cls.items = append(cls.items, reClassItem{lo: lo, hi: hi})
	}
}

func isSpaceRune(r rune) bool {
	if r < 0x80 {
		return r == ' ' || (r >= '\t' && r <= '\r')
	}
	return unicode.Is(unicode.White_Space, r)
}

func isWordRune(r rune) bool {
	if r < 0x80 {
		return r == '_' || (r >= '0' && r <= '9') || (r|0x20 >= 'a' && r|0x20 <= 'z')
	}
	return unicode.IsLetter(r) || unicode.IsMark(r) || unicode.Is(unicode.Nd, r) || unicode.Is(unicode.Pc, r)
}

func posixClass(name string) (func(rune) bool, error) {
	switch name {
	case "alpha":
		return func(r rune) bool { return unicode.IsLetter(r) || unicode.IsMark(r) }, nil
	case "digit":
		return func(r rune) bool { return unicode.Is(unicode.Nd, r) }, nil
	case "alnum":
		return func(r rune) bool { return unicode.IsLetter(r) || unicode.IsMark(r) || unicode.Is(unicode.Nd, r) }, nil
	case "space":
		return isSpaceRune, nil
	case "upper":
		return unicode.IsUpper, nil
	case "lower":
		return unicode.IsLower, nil
	case "punct":
		return unicode.IsPunct, nil
	case "word":
		return isWordRune, nil
	case "cntrl":
		return unicode.IsControl, nil
	case "blank":
		return func(r rune) bool { return r == '\t' || unicode.Is(unicode.Zs, r) }, nil
	case "xdigit":
		return func(r rune) bool { _, ok := hexVal(byte(r)); return r < 128 && ok }, nil
	}
	return nil, fmt.Errorf("unsupported POSIX class [:%s:]", name)
}

var categoryAliases = map[string]string{
	"letter": "L", "uppercaseletter": "Lu", "lowercaseletter": "Ll", "titlecaseletter": "Lt", "modifierletter": "Lm", "otherletter": "Lo",
	"mark": "M", "combiningmark": "M", "nonspacingmark": "Mn", "spacingmark": "Mc", "enclosingmark": "Me",
	"number": "N", "decimalnumber": "Nd", "letternumber": "Nl", "othernumber": "No",
	"punctuation": "P", "connectorpunctuation": "Pc", "dashpunctuation": "Pd", "openpunctuation": "Ps", "closepunctuation": "Pe",
	"initialpunctuation": "Pi", "finalpunctuation": "Pf", "otherpunctuation": "Po",
	"symbol": "S", "mathsymbol": "Sm", "currencysymbol": "Sc", "modifiersymbol": "Sk", "othersymbol": "So",
	"separator": "Z", "spaceseparator": "Zs", "lineseparator": "Zl", "paragraphseparator": "Zp",
	"other": "C", "control": "Cc", "format": "Cf", "privateuse": "Co", "surrogate": "Cs",
}

// unicodeProperty resolves \p{name}: a general category, a script or a binary property of Go's
// unicode tables, with Oniguruma's loose matching (case, spaces, '_' and '-' ignored).
func unicodeProperty(name string) (func(rune) bool, error) {
	loose := func(s string) string {
		s = strings.ToLower(s)
		return strings.NewReplacer(" ", "", "_", "", "-", "").Replace(s)
	}
	key := loose(name)
	switch key {
	case "any":
		return func(rune) bool { return true }, nil
	case "l&", "lc", "casedletter":
		return func(r rune) bool { return unicode.In(r, unicode.Lu, unicode.Ll, unicode.Lt) }, nil
	case "whitespace", "space":
		return isSpaceRune, nil
	case "alpha", "alphabetic":
		return func(r rune) bool {
			return unicode.IsLetter(r) || unicode.Is(unicode.Nl, r) || unicode.Is(unicode.Other_Alphabetic, r)
		}, nil
	case "word":
		return isWordRune, nil
	}
	if a, ok := categoryAliases[key]; ok {
		key = loose(a)
	}
	for n, t := range unicode.Categories {
		if loose(n) == key {
			return func(r rune) bool { return unicode.Is(t, r) }, nil
		}
	}
	for n, t := range unicode.Scripts {
		if loose(n) == key {
			return func(r rune) bool { return unicode.Is(t, r) }, nil
		}
	}
	for n, t := range unicode.Properties {
		if loose(n) == key {
			return func(r rune) bool { return unicode.Is(t, r) }, nil
		}
	}
	return nil, fmt.Errorf("unsupported Unicode property \\p{%s}", name)
}

// --- matching ---

type reMatcher struct {
	in    []rune
	steps int // match calls for the current start position
}

// reStepLimit bounds the work of one match attempt, as Oniguruma's retry limit does:
// pathological backtracking fails the attempt instead of running for ever.
const reStepLimit = 1_000_000

func runeEqualFold(a, b rune) bool {
	if a == b {
		return true
	}
	for f := unicode.SimpleFold(a); f != a; f = unicode.SimpleFold(f) {
		if f == b {
			return true
		}
	}
	return false
}

// single reports whether n matches exactly one rune, and whether it matches r.
func (m *reMatcher) one(n *reNode, r rune) bool {
	switch n.kind {
	case reLit:
		if n.fold {
			return runeEqualFold(n.r, r)
		}
		return n.r == r
	case reClass:
		return n.cls.has(r)
	case reAny:
		return r != '\n'
	}
	return false
}

func isSingle(n *reNode) bool { return n.kind == reLit || n.kind == reClass || n.kind == reAny }

func (m *reMatcher) match(n *reNode, i int, k func(int) bool) bool {
	if m.steps++; m.steps > reStepLimit {
		return false
	}
	in := m.in
	switch n.kind {
	case reEmpty:
		return k(i)
	case reLit, reClass, reAny:
		if i < len(in) && m.one(n, in[i]) {
			return k(i + 1)
		}
		return false
	case reConcat:
		return m.seq(n.subs, i, k)
	case reAlt:
		for _, s := range n.subs {
			if m.match(s, i, k) {
				return true
			}
		}
		return false
	case reRepeat:
		return m.repeat(n, i, k)
	case reLook:
		sub := n.subs[0]
		if n.ahead {
			ok := m.match(sub, i, func(int) bool { return true })
			if ok != n.neg {
				return k(i)
			}
			return false
		}
		found := false
		for s := i; s >= 0 && s >= i-n.maxLen; s-- {
			if m.match(sub, s, func(e int) bool { return e == i }) {
				found = true
				break
			}
		}
		if found != n.neg {
			return k(i)
		}
		return false
	case reAtomic:
		end := -1
		if !m.match(n.subs[0], i, func(e int) bool { end = e; return true }) {
			return false
		}
		return k(end)
	case reAssert:
		if m.assert(n.assert, i) {
			return k(i)
		}
		return false
	}
	return false
}

func (m *reMatcher) assert(a byte, i int) bool {
	in := m.in
	switch a {
	case '^':
		return i == 0 || in[i-1] == '\n'
	case '$':
		return i == len(in) || in[i] == '\n'
	case 'A':
		return i == 0
	case 'z':
		return i == len(in)
	case 'Z':
		return i == len(in) || (i == len(in)-1 && in[i] == '\n')
	case 'b', 'B':
		before := i > 0 && isWordRune(in[i-1])
		after := i < len(in) && isWordRune(in[i])
		return (before != after) == (a == 'b')
	}
	return false
}

func (m *reMatcher) seq(subs []*reNode, i int, k func(int) bool) bool {
	if len(subs) == 0 {
		return k(i)
	}
	if len(subs) == 1 {
		return m.match(subs[0], i, k)
	}
	return m.match(subs[0], i, func(j int) bool { return m.seq(subs[1:], j, k) })
}

func (m *reMatcher) repeat(n *reNode, i int, k func(int) bool) bool {
	sub := n.subs[0]
	limit := n.max
	if isSingle(sub) {
		// Count the run once, then back off (greedy) or extend (lazy) without recursion.
		c := 0
		for i+c < len(m.in) && (limit < 0 || c < limit) && m.one(sub, m.in[i+c]) {
			c++
		}
		if c < n.min {
			return false
		}
		switch {
		case n.possessive:
			return k(i + c)
		case n.lazy:
			for j := n.min; j <= c; j++ {
				if k(i + j) {
					return true
				}
			}
		default:
			for j := c; j >= n.min; j-- {
				if k(i + j) {
					return true
				}
			}
		}
		return false
	}
	if n.possessive {
		j, count := i, 0
		for limit < 0 || count < limit {
			end := -1
			if !m.match(sub, j, func(e int) bool { end = e; return true }) || end == j {
				break
			}
			j = end
			count++
		}
		if count < n.min {
			return false
		}
		return k(j)
	}
	var rec func(count, j int) bool
	rec = func(count, j int) bool {
		try := func() bool {
			if limit >= 0 && count >= limit {
				return false
			}
			return m.match(sub, j, func(e int) bool {
				if e == j && count >= n.min { // an empty iteration would loop forever
					return false
				}
				return rec(count+1, e)
			})
		}
		if n.lazy {
			if count >= n.min && k(j) {
				return true
			}
			return try()
		}
		if try() {
			return true
		}
		return count >= n.min && k(j)
	}
	return rec(0, i)
}

// find returns the leftmost match at or after rune index start, as rune indices.
func (re *regex) find(m *reMatcher, start int) (int, int, bool) {
	for s := start; s <= len(m.in); s++ {
		m.steps = 0
		end := -1
		if m.match(re.root, s, func(e int) bool { end = e; return true }) {
			return s, end, true
		}
	}
	return 0, 0, false
}

// findAll returns the byte offsets of all non-overlapping matches in s, left to right. After an
// empty match the search resumes one rune later.
func (re *regex) findAll(s string) [][2]int {
	runes := []rune(s)
	off := make([]int, len(runes)+1)
	b := 0
	for i, r := range runes {
		off[i] = b
		b += runeLen(r)
	}
	off[len(runes)] = b
	m := &reMatcher{in: runes}
	var out [][2]int
	for pos := 0; pos <= len(runes); {
		st, en, ok := re.find(m, pos)
		if !ok {
			break
		}
		out = append(out, [2]int{off[st], off[en]})
		if en == st {
			pos = en + 1
		} else {
			pos = en
		}
	}
	return out
}

func runeLen(r rune) int {
	switch {
	case r < 0x80:
		return 1
	case r < 0x800:
		return 2
	case r < 0x10000:
		return 3
	}
	return 4
}
