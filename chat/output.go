package chat

// Streaming output parsing: what the server runs over a model's decoded text.
//
// The API, in full:
//
//	p := chat.NewOutputParser(markers, chat.ParseOptions{
//		StartInReasoning: markers.PromptOpensThinking(prompt), // the prompt opened a thinking block
//		Tools:            toolSchemas,                         // the request's tools (optional)
//	})
//	for each decoded text delta:  deltas := p.Feed(text)
//	at the end:                   deltas := p.Finish()
//
// Each Delta is content, reasoning (the text between Markers.ThinkStart and ThinkEnd) or one
// complete tool call (Name and Arguments, a JSON object, parsed when Markers.ToolCallEnd
// arrives). Deltas come in output order; adjacent text of one kind is merged within a call.
// Text that may be the start of a marker is held back until it is decided, so a marker split
// over many deltas is never shown as content. Finish flushes what is held; an unterminated or
// malformed tool call comes back as content, exactly as the model wrote it, never lost.
// Whatever the split of the input into deltas, the concatenated result is the same.
//
// Feed text decoded with special tokens kept: the markers are special tokens.
//
//	m := chat.NewStopMatcher(stops)   // the request's stop strings
//	out, stopped := m.Feed(text)       // text safe to emit; stopped: a stop string matched,
//	                                   // out ends just before it and later Feeds return "", true
//	out = m.Flush()                    // at the end: the held-back tail
//
// The matcher holds back the longest tail that is a prefix of a stop string, so a stop string
// split over deltas is found and never partly emitted.

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"
)

// DeltaKind says what a Delta carries.
type DeltaKind int

const (
	ContentDelta   DeltaKind = iota // Text is answer content
	ReasoningDelta                  // Text is reasoning (thinking)
	ToolCallDelta                   // ToolCall is one complete call
)

func (k DeltaKind) String() string {
	switch k {
	case ContentDelta:
		return "content"
	case ReasoningDelta:
		return "reasoning"
	case ToolCallDelta:
		return "tool_call"
	}
	return "DeltaKind(" + strconv.Itoa(int(k)) + ")"
}

// Delta is one piece of parsed output.
type Delta struct {
	Kind DeltaKind
	Text string
	// ToolCall has the function name and its arguments as a compact JSON object in the
	// model's key order (OpenAI's "arguments" string is string(ToolCall.Arguments)).
	ToolCall FunctionCall
}

// ParseOptions are the inputs of an OutputParser beyond the markers.
type ParseOptions struct {
	// StartInReasoning: the rendered prompt opened a thinking block (see
	// Markers.PromptOpensThinking), so the output starts as reasoning without ThinkStart.
	// Without it, reasoning starts only at ThinkStart.
	StartInReasoning bool
	// Tools are the request's tool schemas (OpenAI {"type":"function","function":{…}}). Only
	// the XML format uses them: its values are bare text, and a parameter whose schema type is
	// "string" stays a string where it would otherwise be read as JSON ("42" → 42).
	Tools []json.RawMessage
}

type parseState int

const (
	inContent parseState = iota
	inReasoning
	inToolCall
)

// OutputParser splits streamed model output into content, reasoning and tool calls. It is not
// safe for concurrent use; use one per request.
type OutputParser struct {
	m         Markers
	strTypes  map[string]map[string]bool // function → parameters whose schema type is string
	state     parseState
	pending   string // undecided text (content or reasoning state)
	body      string // tool call text after ToolCallStart
	scan      int    // body[:scan] has been scanned for ToolCallEnd
	inString  bool   // Gemma 4: scan is inside a <|"|> string
	out       []Delta
	finished  bool
	toolCalls bool // the markers support tool calls
}

// NewOutputParser returns a parser for output in the markers' format.
func NewOutputParser(m Markers, opt ParseOptions) *OutputParser {
	p := &OutputParser{m: m}
	p.toolCalls = m.ToolCallStart != "" && m.ToolCallEnd != ""
	if opt.StartInReasoning && m.ThinkEnd != "" {
		p.state = inReasoning
	}
	if m.ToolCallFormat == ToolCallXML && len(opt.Tools) > 0 {
		p.strTypes = stringParams(opt.Tools)
	}
	return p
}

// Feed parses the next text delta and returns the deltas it completes.
func (p *OutputParser) Feed(text string) []Delta {
	if p.finished {
		return nil
	}
	p.out = nil
	if p.state == inToolCall {
		p.body += text
	} else {
		p.pending += text
	}
	p.run()
	return p.out
}

// Finish ends the output: held-back text is flushed as what it was (content or reasoning),
// and an unterminated tool call is returned as content, markers included.
func (p *OutputParser) Finish() []Delta {
	if p.finished {
		return nil
	}
	p.out = nil
	p.run()
	switch p.state {
	case inContent:
		p.emit(ContentDelta, p.pending)
	case inReasoning:
		p.emit(ReasoningDelta, p.pending)
	case inToolCall:
		p.emit(ContentDelta, p.m.ToolCallStart+p.body)
	}
	p.pending, p.body = "", ""
	p.finished = true
	return p.out
}

// run consumes as much input as can be decided.
func (p *OutputParser) run() {
	for {
		switch p.state {
		case inContent:
			i, marker := earliest(p.pending, p.m.ThinkStart, p.toolStart())
			if i < 0 {
				p.emitDecided(ContentDelta, p.m.ThinkStart, p.toolStart())
				return
			}
			p.emit(ContentDelta, p.pending[:i])
			rest := p.pending[i+len(marker):]
			p.pending = ""
			if marker == p.m.ThinkStart && p.m.ThinkEnd != "" {
				p.state, p.pending = inReasoning, rest
			} else if marker == p.m.ThinkStart {
				// A family with a start but no end marker cannot close reasoning; keep it content.
				p.emit(ContentDelta, marker)
				p.pending = rest
			} else {
				p.state, p.body, p.scan, p.inString = inToolCall, rest, 0, false
			}
		case inReasoning:
			i := strings.Index(p.pending, p.m.ThinkEnd)
			if i < 0 {
				p.emitDecided(ReasoningDelta, p.m.ThinkEnd)
				return
			}
			p.emit(ReasoningDelta, p.pending[:i])
			p.state, p.pending = inContent, p.pending[i+len(p.m.ThinkEnd):]
		case inToolCall:
			end, ok := p.findCallEnd()
			if !ok {
				return
			}
			raw := p.body[:end]
			rest := p.body[end+len(p.m.ToolCallEnd):]
			calls, err := parseToolCalls(p.m, raw, p.strTypes)
			if err != nil {
				// Malformed: keep what the model wrote, as content.
				p.emit(ContentDelta, p.m.ToolCallStart+raw+p.m.ToolCallEnd)
			}
			for _, c := range calls {
				p.out = append(p.out, Delta{Kind: ToolCallDelta, ToolCall: c})
			}
			p.state, p.pending, p.body = inContent, rest, ""
		}
	}
}

func (p *OutputParser) toolStart() string {
	if p.toolCalls {
		return p.m.ToolCallStart
	}
	return ""
}

// emitDecided emits pending text except its longest tail that could begin one of the markers.
func (p *OutputParser) emitDecided(kind DeltaKind, markers ...string) {
	keep := 0
	for _, m := range markers {
		keep = max(keep, partialSuffix(p.pending, m))
	}
	p.emit(kind, p.pending[:len(p.pending)-keep])
	p.pending = p.pending[len(p.pending)-keep:]
}

// emit appends text, merged into the previous delta when it is of the same kind.
func (p *OutputParser) emit(kind DeltaKind, text string) {
	if text == "" {
		return
	}
	if n := len(p.out); n > 0 && p.out[n-1].Kind == kind {
		p.out[n-1].Text += text
		return
	}
	p.out = append(p.out, Delta{Kind: kind, Text: text})
}

// findCallEnd finds ToolCallEnd in the body. In Gemma 4's format an end marker inside a
// <|"|> string is string content, so strings are tracked; scanning resumes where it stopped.
func (p *OutputParser) findCallEnd() (int, bool) {
	end, delim := p.m.ToolCallEnd, ""
	if p.m.ToolCallFormat == ToolCallGemma4 {
		delim = p.m.StringDelim
	}
	for p.scan < len(p.body) {
		s := p.body[p.scan:]
		if delim != "" && strings.HasPrefix(s, delim) {
			p.inString = !p.inString
			p.scan += len(delim)
			continue
		}
		if !p.inString && strings.HasPrefix(s, end) {
			return p.scan, true
		}
		// A marker may be cut at the end of the input: wait for more.
		if (delim != "" && len(s) < len(delim) && strings.HasPrefix(delim, s)) ||
			(!p.inString && len(s) < len(end) && strings.HasPrefix(end, s)) {
			return 0, false
		}
		p.scan++
	}
	return 0, false
}

// earliest finds the first occurrence of any non-empty marker; at one position the longest wins.
func earliest(s string, markers ...string) (int, string) {
	best, which := -1, ""
	for _, m := range markers {
		if m == "" {
			continue
		}
		if i := strings.Index(s, m); i >= 0 && (best < 0 || i < best || (i == best && len(m) > len(which))) {
			best, which = i, m
		}
	}
	return best, which
}

// partialSuffix is the length of the longest proper prefix of marker that s ends with.
func partialSuffix(s, marker string) int {
	for n := min(len(s), len(marker)-1); n > 0; n-- {
		if strings.HasSuffix(s, marker[:n]) {
			return n
		}
	}
	return 0
}

// ---- tool-call bodies ----

var errMalformed = errors.New("malformed tool call")

// parseToolCalls parses the text between ToolCallStart and ToolCallEnd into one or more calls.
func parseToolCalls(m Markers, raw string, strTypes map[string]map[string]bool) ([]FunctionCall, error) {
	switch m.ToolCallFormat {
	case ToolCallGemma4:
		return parseGemma4Calls(raw, m.StringDelim)
	case ToolCallJSON:
		c, err := parseJSONCall(raw)
		if err != nil {
			return nil, err
		}
		return []FunctionCall{c}, nil
	case ToolCallXML:
		return parseXMLCalls(raw, strTypes)
	}
	return nil, errMalformed
}

// parseJSONCall reads {"name": NAME, "arguments": {…}} (arguments may also be a JSON string
// holding the object, or be called "parameters").
func parseJSONCall(raw string) (FunctionCall, error) {
	var c struct {
		Name       *string         `json:"name"`
		Arguments  json.RawMessage `json:"arguments"`
		Parameters json.RawMessage `json:"parameters"`
	}
	dec := json.NewDecoder(strings.NewReader(raw))
	if err := dec.Decode(&c); err != nil || dec.More() || c.Name == nil || *c.Name == "" {
		return FunctionCall{}, errMalformed
	}
	args := c.Arguments
	if len(args) == 0 {
		args = c.Parameters
	}
	obj, err := argumentsObject(args)
	if err != nil {
		return FunctionCall{}, err
	}
	return FunctionCall{Name: *c.Name, Arguments: obj}, nil
}

// argumentsObject compacts a JSON object, or the object a JSON string holds; absent or null
// arguments are {}.
func argumentsObject(raw json.RawMessage) (json.RawMessage, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return json.RawMessage("{}"), nil
	}
	if raw[0] == '"' {
		var s string
		if json.Unmarshal(raw, &s) != nil {
			return nil, errMalformed
		}
		raw = bytes.TrimSpace([]byte(s))
	}
	if len(raw) == 0 || raw[0] != '{' {
		return nil, errMalformed
	}
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return nil, errMalformed
	}
	return b.Bytes(), nil
}

// parseGemma4Calls reads call:NAME{key:value,…}, possibly several in a row. Values are
// strings between delim (taken verbatim: the delimiter is a special token, so nothing inside
// is escaped), {…} objects, […] lists, numbers, true, false, null, and bare words (strings).
func parseGemma4Calls(raw, delim string) ([]FunctionCall, error) {
	g := gemmaReader{s: raw, delim: delim}
	var calls []FunctionCall
	for {
		g.skipSpace()
		if g.i == len(g.s) {
			break
		}
		if !strings.HasPrefix(g.s[g.i:], "call:") {
			return nil, errMalformed
		}
		g.i += len("call:")
		j := strings.IndexByte(g.s[g.i:], '{')
		if j < 0 {
			return nil, errMalformed
		}
		name := strings.TrimSpace(g.s[g.i : g.i+j])
		if name == "" || strings.ContainsAny(name, " \t\r\n,:}[]\"") || (delim != "" && strings.Contains(name, delim)) {
			return nil, errMalformed
		}
		g.i += j
		var b bytes.Buffer
		if err := g.object(&b, 0); err != nil {
			return nil, err
		}
		calls = append(calls, FunctionCall{Name: name, Arguments: b.Bytes()})
	}
	if len(calls) == 0 {
		return nil, errMalformed
	}
	return calls, nil
}

// maxDepth bounds nesting so hostile output cannot exhaust the stack.
const maxDepth = 64

type gemmaReader struct {
	s     string
	i     int
	delim string
}

func (g *gemmaReader) skipSpace() {
	for g.i < len(g.s) && isSpace(g.s[g.i]) {
		g.i++
	}
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func (g *gemmaReader) peek(c byte) bool { return g.i < len(g.s) && g.s[g.i] == c }

// str reads a delimited string; ok is false when none starts here.
func (g *gemmaReader) str() (string, bool, error) {
	if g.delim == "" || !strings.HasPrefix(g.s[g.i:], g.delim) {
		return "", false, nil
	}
	start := g.i + len(g.delim)
	n := strings.Index(g.s[start:], g.delim)
	if n < 0 {
		return "", true, errMalformed
	}
	g.i = start + n + len(g.delim)
	return g.s[start : start+n], true, nil
}

func (g *gemmaReader) object(b *bytes.Buffer, depth int) error {
	if depth > maxDepth || !g.peek('{') {
		return errMalformed
	}
	g.i++
	b.WriteByte('{')
	g.skipSpace()
	if g.peek('}') {
		g.i++
		b.WriteByte('}')
		return nil
	}
	for n := 0; ; n++ {
		g.skipSpace()
		key, quoted, err := g.str()
		if err != nil {
			return err
		}
		if !quoted {
			j := strings.IndexByte(g.s[g.i:], ':')
			if j < 0 {
				return errMalformed
			}
			key = strings.TrimSpace(g.s[g.i : g.i+j])
			if key == "" || strings.ContainsAny(key, "{}[],") {
				return errMalformed
			}
			// A key quoted with " (JSON habit) is read as the text inside.
			if uq, err := strconv.Unquote(key); err == nil && key[0] == '"' {
				key = uq
			}
			g.i += j
		}
		g.skipSpace()
		if !g.peek(':') {
			return errMalformed
		}
		g.i++
		if n > 0 {
			b.WriteByte(',')
		}
		writeJSONString(b, key)
		b.WriteByte(':')
		if err := g.value(b, depth+1); err != nil {
			return err
		}
		if done, err := g.next(b, '}'); done || err != nil {
			return err
		}
	}
}

func (g *gemmaReader) list(b *bytes.Buffer, depth int) error {
	if depth > maxDepth {
		return errMalformed
	}
	g.i++ // [
	b.WriteByte('[')
	g.skipSpace()
	if g.peek(']') {
		g.i++
		b.WriteByte(']')
		return nil
	}
	for n := 0; ; n++ {
		if n > 0 {
			b.WriteByte(',')
		}
		if err := g.value(b, depth+1); err != nil {
			return err
		}
		if done, err := g.next(b, ']'); done || err != nil {
			return err
		}
	}
}

// next reads what follows an element: a comma (more follow) or the closing
// byte, which it writes to b; anything else is malformed.
func (g *gemmaReader) next(b *bytes.Buffer, closing byte) (done bool, err error) {
	g.skipSpace()
	switch {
	case g.peek(','):
		g.i++
		return false, nil
	case g.peek(closing):
		g.i++
		b.WriteByte(closing)
		return true, nil
	}
	return false, errMalformed
}

func (g *gemmaReader) value(b *bytes.Buffer, depth int) error {
	g.skipSpace()
	if s, ok, err := g.str(); err != nil {
		return err
	} else if ok {
		writeJSONString(b, s)
		return nil
	}
	switch {
	case g.peek('{'):
		return g.object(b, depth)
	case g.peek('['):
		return g.list(b, depth)
	}
	// A bare word runs to the next separator (or the start of a delimited string).
	j := g.i
	for j < len(g.s) && !strings.ContainsRune(",}]", rune(g.s[j])) &&
		(g.delim == "" || !strings.HasPrefix(g.s[j:], g.delim)) {
		j++
	}
	word := strings.TrimSpace(g.s[g.i:j])
	if word == "" {
		return errMalformed
	}
	g.i = j
	writeScalar(b, word)
	return nil
}

// writeScalar writes a bare word as a JSON number, true, false or null when it is one, and as
// a string otherwise.
func writeScalar(b *bytes.Buffer, word string) {
	switch word {
	case "true", "false", "null":
		b.WriteString(word)
		return
	}
	if isJSONNumber(word) {
		b.WriteString(word)
		return
	}
	// Numbers JSON does not allow (+1, .5, 1., 1E+3) are written in JSON's form.
	if strings.Trim(word, "0123456789.+-eE") == "" {
		if f, err := strconv.ParseFloat(word, 64); err == nil && !math.IsInf(f, 0) {
			b.WriteString(strconv.FormatFloat(f, 'g', -1, 64))
			return
		}
	}
	writeJSONString(b, word)
}

// isJSONNumber reports whether s is a number in JSON's grammar.
func isJSONNumber(s string) bool {
	i := 0
	if i < len(s) && s[i] == '-' {
		i++
	}
	digits := func() int {
		n := 0
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
			n++
		}
		return n
	}
	switch {
	case i < len(s) && s[i] == '0':
		i++
	case digits() == 0:
		return false
	}
	if i < len(s) && s[i] == '.' {
		i++
		if digits() == 0 {
			return false
		}
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		if digits() == 0 {
			return false
		}
	}
	return i == len(s)
}

// writeJSONString writes s as a JSON string without HTML escaping (tool arguments are data,
// not markup); invalid UTF-8 becomes U+FFFD, as encoding/json does.
func writeJSONString(b *bytes.Buffer, s string) {
	const hex = "0123456789abcdef"
	b.WriteByte('"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				b.WriteByte('\\')
				b.WriteByte(c)
			case c == '\n':
				b.WriteString(`\n`)
			case c == '\r':
				b.WriteString(`\r`)
			case c == '\t':
				b.WriteString(`\t`)
			case c < 0x20:
				b.WriteString(`\u00`)
				b.WriteByte(hex[c>>4])
				b.WriteByte(hex[c&0xf])
			default:
				b.WriteByte(c)
			}
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			b.WriteString(`\ufffd`)
		case r == '\u2028' || r == '\u2029':
			// Valid JSON either way; escaped so the arguments are also valid JavaScript.
			b.WriteString(`\u202`)
			b.WriteByte(hex[r&0xf])
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	b.WriteByte('"')
}

// parseXMLCalls reads <function=NAME><parameter=KEY>value</parameter>…</function>, possibly
// several functions. A value is trimmed of the newline on either side; it is read as JSON
// unless its schema type is string or it is not valid JSON.
func parseXMLCalls(raw string, strTypes map[string]map[string]bool) ([]FunctionCall, error) {
	s := strings.TrimSpace(raw)
	var calls []FunctionCall
	for s != "" {
		rest, ok := strings.CutPrefix(s, "<function=")
		if !ok {
			return nil, errMalformed
		}
		gt := strings.IndexByte(rest, '>')
		if gt < 0 {
			return nil, errMalformed
		}
		name := strings.TrimSpace(rest[:gt])
		end := strings.Index(rest, "</function>")
		if name == "" || end < gt {
			return nil, errMalformed
		}
		params := strings.TrimSpace(rest[gt+1 : end])
		s = strings.TrimSpace(rest[end+len("</function>"):])

		var b bytes.Buffer
		b.WriteByte('{')
		for n := 0; params != ""; n++ {
			p, ok := strings.CutPrefix(params, "<parameter=")
			if !ok {
				return nil, errMalformed
			}
			gt := strings.IndexByte(p, '>')
			if gt < 0 {
				return nil, errMalformed
			}
			key := strings.TrimSpace(p[:gt])
			close := strings.Index(p, "</parameter>")
			if key == "" || close < gt {
				return nil, errMalformed
			}
			val := p[gt+1 : close]
			val = strings.TrimPrefix(val, "\n")
			val = strings.TrimSuffix(val, "\n")
			params = strings.TrimSpace(p[close+len("</parameter>"):])
			if n > 0 {
				b.WriteByte(',')
			}
			writeJSONString(&b, key)
			b.WriteByte(':')
			trimmed := strings.TrimSpace(val)
			if !strTypes[name][key] && trimmed != "" && json.Valid([]byte(trimmed)) {
				json.Compact(&b, []byte(trimmed))
			} else {
				writeJSONString(&b, val)
			}
		}
		b.WriteByte('}')
		calls = append(calls, FunctionCall{Name: name, Arguments: b.Bytes()})
	}
	if len(calls) == 0 {
		return nil, errMalformed
	}
	return calls, nil
}

// stringParams maps each tool's name to its parameters whose schema type is "string".
func stringParams(tools []json.RawMessage) map[string]map[string]bool {
	out := map[string]map[string]bool{}
	for _, raw := range tools {
		var t struct {
			Name       string `json:"name"`
			Parameters struct {
				Properties map[string]struct {
					Type json.RawMessage `json:"type"`
				} `json:"properties"`
			} `json:"parameters"`
			Function *struct {
				Name       string `json:"name"`
				Parameters struct {
					Properties map[string]struct {
						Type json.RawMessage `json:"type"`
					} `json:"properties"`
				} `json:"parameters"`
			} `json:"function"`
		}
		if json.Unmarshal(raw, &t) != nil {
			continue
		}
		name, props := t.Name, t.Parameters.Properties
		if t.Function != nil {
			name, props = t.Function.Name, t.Function.Parameters.Properties
		}
		for k, p := range props {
			var typ string
			if json.Unmarshal(p.Type, &typ) == nil && typ == "string" {
				if out[name] == nil {
					out[name] = map[string]bool{}
				}
				out[name][k] = true
			}
		}
	}
	return out
}

// ---- stop strings ----

// StopMatcher finds the request's stop strings in streamed text. It is not safe for
// concurrent use.
type StopMatcher struct {
	stops   []string
	held    string
	stopped bool
}

// NewStopMatcher returns a matcher for stops; empty strings are ignored.
func NewStopMatcher(stops []string) *StopMatcher {
	m := &StopMatcher{}
	for _, s := range stops {
		if s != "" {
			m.stops = append(m.stops, s)
		}
	}
	return m
}

// Feed returns the text that is safe to emit and whether a stop string matched; on a match the
// text ends just before the earliest stop string, and the matcher stays stopped.
func (m *StopMatcher) Feed(text string) (string, bool) {
	if m.stopped {
		return "", true
	}
	buf := m.held + text
	if i, _ := earliest(buf, m.stops...); i >= 0 {
		m.stopped, m.held = true, ""
		return buf[:i], true
	}
	keep := 0
	for _, s := range m.stops {
		keep = max(keep, partialSuffix(buf, s))
	}
	m.held = buf[len(buf)-keep:]
	return buf[:len(buf)-keep], false
}

// Flush returns the held-back text at the end of the output ("" after a match).
func (m *StopMatcher) Flush() string {
	out := m.held
	m.held = ""
	return out
}
