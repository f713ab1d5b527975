package server

import (
	"strings"
	"unicode/utf8"

	"tandem/chat"
	"tandem/tokenizer"
)

// textStream turns a request's output tokens into text as they arrive: streaming
// detokenization, then the request's stop strings. Stop tokens are not shown (the engine ends
// the request after one), nor are special tokens the output does not need.
type textStream struct {
	tok     *tokenizer.Tokenizer
	dec     *tokenizer.Decoder
	show    func(id int32) bool // whether a token's text goes into the output
	stopIDs map[int32]bool
	stop    *chat.StopMatcher
	stopped bool // a stop string matched: nothing more is emitted
	// released counts the characters (runes) the decoder has given out so far. The output
	// is a prefix of that text (stop strings only cut its end), so offsets counted in it
	// index the output (see offset).
	released int
}

func newTextStream(tok *tokenizer.Tokenizer, show func(int32) bool, stopIDs []int32, stops []string) *textStream {
	set := make(map[int32]bool, len(stopIDs))
	for _, id := range stopIDs {
		set[id] = true
	}
	return &textStream{tok: tok, dec: tok.NewDecoder(false), show: show, stopIDs: set, stop: chat.NewStopMatcher(stops)}
}

// isStopToken reports whether id is one of the request's stop tokens.
func (t *textStream) isStopToken(id int32) bool { return t.stopIDs[id] }

// token feeds one generated token and returns the text now safe to emit; hit reports that a
// stop string matched (the text ends before it, and the request should end).
func (t *textStream) token(id int32) (text string, hit bool) {
	if t.stopped {
		return "", true
	}
	if t.isStopToken(id) || !t.show(id) {
		return "", false
	}
	out := t.dec.Add(id)
	t.released += utf8.RuneCountInString(out)
	text, t.stopped = t.stop.Feed(out)
	return text, t.stopped
}

// offset is the text offset (in characters of the output) of token id, just fed to token;
// before is released as it was before. The decoder may release text late: a byte-fallback
// token's character comes out with the token after its last byte, so what a token releases
// can begin with earlier tokens' text. The token's own text is at the end of what it
// released, so it starts that many characters before released; a token that released
// nothing (a byte of an unfinished character, a hidden special token, a stop token) sits at
// before.
func (t *textStream) offset(id int32, before int) int {
	if t.released == before || t.isStopToken(id) || !t.show(id) {
		return before
	}
	own := 0
	if _, isByte := byteToken(t.tok, id); !isByte {
		own = utf8.RuneCountInString(t.tok.Decode([]int32{id}, false))
	}
	return max(before, t.released-own)
}

// finish flushes what the decoder and the stop matcher hold back at the end of the output.
func (t *textStream) finish() (text string, hit bool) {
	if t.stopped {
		return "", true
	}
	out := t.dec.Flush()
	t.released += utf8.RuneCountInString(out)
	text, t.stopped = t.stop.Feed(out)
	if !t.stopped {
		text += t.stop.Flush()
	}
	return text, t.stopped
}

// markerTokens are the special tokens chat output keeps in its text: those that make up the
// markers the output parser splits on (Gemma 4's <|channel>, <|tool_call>, <|"|>, …). Other
// special tokens are dropped, as skip_special_tokens does.
func markerTokens(tok *tokenizer.Tokenizer, m chat.Markers) map[int32]bool {
	markers := []string{m.ThinkStart, m.ThinkEnd, m.ToolCallStart, m.ToolCallEnd, m.StringDelim}
	keep := map[int32]bool{}
	for _, id := range tok.SpecialTokens() {
		piece, ok := tok.Token(id)
		if !ok || piece == "" {
			continue
		}
		for _, mk := range markers {
			if mk != "" && strings.Contains(mk, piece) {
				keep[id] = true
				break
			}
		}
	}
	return keep
}
