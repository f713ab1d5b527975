package tokenizer

import (
	"strings"
)

// Decoder is an incremental detokenizer for streaming output. Each Add returns the text that
// the new token completes; Flush returns what is left. The concatenation of every Add and the
// final Flush equals Decode of all the ids, and no returned chunk splits a UTF-8 sequence: text
// is held back while it could still change (a run of byte-fallback tokens, an unfinished UTF-8
// sequence of byte-level tokens, a possible match of a multi-character Replace, characters a
// Strip decoder might remove at the end).
//
// A Decoder is not safe for concurrent use; the Tokenizer it came from is.
type Decoder struct {
	t     *Tokenizer
	skip  bool
	entry func(tok string) // the first stage
	final []func()         // flushes, in pipeline order
	out   strings.Builder
}

// NewDecoder returns a streaming decoder. skipSpecial drops special tokens, as in Decode.
func (t *Tokenizer) NewDecoder(skipSpecial bool) *Decoder {
	d := &Decoder{t: t, skip: skipSpecial}
	d.build()
	return d
}

// Add feeds one token id and returns the newly completed text (often "").
func (d *Decoder) Add(id int32) string {
	tok, ok := d.t.decodeToken(id, d.skip)
	if !ok {
		return ""
	}
	d.out.Reset()
	d.entry(tok)
	return d.out.String()
}

// Flush ends the stream and returns the text still held back. The Decoder is reset and can be
// used for a new stream afterwards.
func (d *Decoder) Flush() string {
	d.out.Reset()
	for _, f := range d.final {
		f()
	}
	s := d.out.String()
	d.build()
	return s
}

// Reset drops any held-back text and starts a new stream.
func (d *Decoder) Reset() { d.build() }

// build wires the stages. Token stages (before the first decoder that joins tokens: Fuse or
// ByteLevel) see whole tokens; the join turns them into a text stream; text stages after it see
// chunks of that one growing token, which they treat exactly as HF treats the single token.
func (d *Decoder) build() {
	var tokFlush, joinFlush, textFlush []func() // each in pipeline order
	sink := func(s string) { d.out.WriteString(s) }
	var steps []decoderStep
	flatten(d.t.decoder, &steps)
	join := -1
	for i, s := range steps {
		switch s.(type) {
		case fuseDec, byteLevelDec:
			if join < 0 {
				join = i
			}
		}
	}
	before, after := steps, []decoderStep(nil)
	if join >= 0 {
		before, after = steps[:join], steps[join+1:]
	}

	// Text stages, built from the end of the pipeline backwards.
	text := sink
	addText := func(st textStage) {
		next := text
		textFlush = append([]func(){func() { st.flush(next) }}, textFlush...)
		text = func(s string) { st.write(s, next) }
	}
	if d.t.cleanup {
		for i := len(cleanUpPairs) - 1; i >= 0; i-- {
			addText(&literalReplaceText{pat: cleanUpPairs[i][0], content: cleanUpPairs[i][1]})
		}
	}
	for i := len(after) - 1; i >= 0; i-- {
		addText(textStageFor(after[i]))
	}

	// The join.
	tok := text
	switch {
	case d.t.decoder == nil:
		j, next := &spaceJoin{}, text
		tok = func(s string) { j.push(s, next) }
	case join >= 0:
		if _, ok := steps[join].(byteLevelDec); ok {
			j, next := &byteLevelJoin{}, text
			tok = func(s string) { j.push(s, next) }
			joinFlush = append(joinFlush, func() { j.flush(next) })
		}
	}

	// Token stages, backwards.
	for i := len(before) - 1; i >= 0; i-- {
		var f func()
		tok, f = tokStageFor(before[i], tok)
		if f != nil {
			tokFlush = append([]func(){f}, tokFlush...)
		}
	}
	d.entry = tok
	d.final = append(append(append(d.final[:0], tokFlush...), joinFlush...), textFlush...)
}

func flatten(s decoderStep, out *[]decoderStep) {
	switch x := s.(type) {
	case nil:
	case seqDec:
		for _, y := range x {
			flatten(y, out)
		}
	default:
		*out = append(*out, s)
	}
}

// tokStageFor returns the streaming form of a token-level step and its flush (nil if none).
func tokStageFor(s decoderStep, next func(string)) (func(string), func()) {
	switch x := s.(type) {
	case *replaceDec:
		return func(t string) { next(replaceAll(t, x.literal, x.re, x.content)) }, nil
	case *stripDec:
		return func(t string) { next(x.strip(t)) }, nil
	case *metaspaceDec:
		i := 0
		return func(t string) { next(x.token(i, t)); i++ }, nil
	case byteFallbackDec:
		var run []byte
		emit := func() {
			for _, s := range byteRunString(run) {
				next(s)
			}
			run = run[:0]
		}
		flush := func() {
			if len(run) > 0 {
				emit()
			}
		}
		return func(t string) {
			if b, ok := byteToken(t); ok {
				run = append(run, b)
				return
			}
			flush()
			next(t)
		}, flush
	}
	return next, nil // not reached: every step type is handled
}

// textStage processes the chunks of the single joined token.
type textStage interface {
	write(s string, next func(string))
	flush(next func(string))
}

func textStageFor(s decoderStep) textStage {
	switch x := s.(type) {
	case *replaceDec:
		if x.re == nil {
			return &literalReplaceText{pat: x.literal, content: x.content}
		}
		return &wholeText{f: func(t string) string { return replaceAll(t, "", x.re, x.content) }}
	case *stripDec:
		return &stripText{d: x}
	case *metaspaceDec:
		return &wholeChunkText{f: func(t string) string { return x.token(0, t) }}
	case byteFallbackDec:
		return &byteFallbackText{}
	case fuseDec:
		return &wholeChunkText{f: func(t string) string { return t }}
	case byteLevelDec:
		return &wholeText{f: func(t string) string { return lossyUTF8(byteLevelBytes(nil, t)) }}
	}
	return &wholeChunkText{f: func(t string) string { return t }}
}

// wholeChunkText applies a per-character transformation to each chunk.
type wholeChunkText struct{ f func(string) string }

func (w *wholeChunkText) write(s string, next func(string)) { next(w.f(s)) }
func (w *wholeChunkText) flush(func(string))                {}

// wholeText holds the whole token until the end (transformations that need all of it).
type wholeText struct {
	f   func(string) string
	buf strings.Builder
}

func (w *wholeText) write(s string, _ func(string)) { w.buf.WriteString(s) }
func (w *wholeText) flush(next func(string)) {
	next(w.f(w.buf.String()))
	w.buf.Reset()
}

// literalReplaceText replaces pat with content in the stream, holding back a tail that could
// be the start of a match.
type literalReplaceText struct {
	pat, content string
	pending      string
}

func (r *literalReplaceText) write(s string, next func(string)) {
	if r.pat == "" {
		next(s)
		return
	}
	t := r.pending + s
	var b strings.Builder
	for {
		i := strings.Index(t, r.pat)
		if i < 0 {
			break
		}
		b.WriteString(t[:i])
		b.WriteString(r.content)
		t = t[i+len(r.pat):]
	}
	hold := 0
	for k := min(len(r.pat)-1, len(t)); k > 0; k-- {
		if strings.HasSuffix(t, r.pat[:k]) {
			hold = k
			break
		}
	}
	b.WriteString(t[:len(t)-hold])
	r.pending = t[len(t)-hold:]
	if b.Len() > 0 {
		next(b.String())
	}
}

func (r *literalReplaceText) flush(next func(string)) {
	if r.pending != "" {
		next(r.pending)
		r.pending = ""
	}
}

// stripText strips up to start leading and stop trailing content characters of the stream.
type stripText struct {
	d        *stripDec
	started  bool // a character other than the stripped leading ones has been seen
	stripped int
	tail     string // trailing content characters held back (at most stop of them)
}

func (st *stripText) write(s string, next func(string)) {
	c := string(st.d.content)
	if !st.started {
		for st.stripped < st.d.start && strings.HasPrefix(s, c) {
			s = s[len(c):]
			st.stripped++
		}
		if s == "" {
			return
		}
		st.started = true
	}
	t := st.tail + s
	n, end := 0, len(t)
	for n < st.d.stop && strings.HasSuffix(t[:end], c) {
		end -= len(c)
		n++
	}
	st.tail = t[end:]
	if end > 0 {
		next(t[:end])
	}
}

func (st *stripText) flush(func(string)) { st.tail = "" }

// byteFallbackText handles ByteFallback after a join: the single token is converted only if it
// is exactly one "<0xHH>" token, which needs at most 6 bytes to decide.
type byteFallbackText struct {
	buf     string
	decided bool
}

func (b *byteFallbackText) write(s string, next func(string)) {
	if b.decided {
		next(s)
		return
	}
	b.buf += s
	if len(b.buf) > 6 {
		b.decided = true
		next(b.buf)
		b.buf = ""
	}
}

func (b *byteFallbackText) flush(next func(string)) {
	if b.buf != "" {
		next(strings.Join(byteFallbackDec{}.decodeChain([]string{b.buf}), ""))
	}
	b.buf = ""
}

// spaceJoin joins tokens with single spaces (no decoder configured).
type spaceJoin struct{ n int }

func (j *spaceJoin) push(t string, next func(string)) {
	if j.n > 0 {
		next(" ")
	}
	j.n++
	next(t)
}

// byteLevelJoin maps byte-level tokens to bytes and emits the UTF-8 text as soon as it is
// settled: complete characters, and one U+FFFD per maximal ill-formed subpart once the byte that
// ends it has arrived.
type byteLevelJoin struct{ pending []byte }

func (j *byteLevelJoin) push(t string, next func(string)) {
	j.pending = byteLevelBytes(j.pending, t)
	var out []byte
	b := j.pending
	for len(b) > 0 {
		n, valid, incomplete := utf8Step(b)
		if incomplete {
			break
		}
		if valid {
			out = append(out, b[:n]...)
		} else {
			out = append(out, replacementChar...)
		}
		b = b[n:]
	}
	j.pending = append(j.pending[:0], b...)
	if len(out) > 0 {
		next(string(out))
	}
}

func (j *byteLevelJoin) flush(next func(string)) {
	if len(j.pending) > 0 {
		next(lossyUTF8(j.pending))
		j.pending = j.pending[:0]
	}
}
