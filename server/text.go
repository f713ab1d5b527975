package server

import (
	"strings"

	"tandem/chat"
	"tandem/tokenizer"
)

// textStream turns a request's output tokens into text as they arrive: streaming
// detokenization, then the request's stop strings. Stop tokens are not shown (the engine ends
// the request after one), nor are special tokens the output does not need.
type textStream struct {
	dec     *tokenizer.Decoder
	show    func(id int32) bool // whether a token's text goes into the output
	stopIDs []int32
	stop    *chat.StopMatcher
	stopped bool // a stop string matched: nothing more is emitted
}

func newTextStream(tok *tokenizer.Tokenizer, show func(int32) bool, stopIDs []int32, stops []string) *textStream {
	return &textStream{dec: tok.NewDecoder(false), show: show, stopIDs: stopIDs, stop: chat.NewStopMatcher(stops)}
}

// isStopToken reports whether id is one of the request's stop tokens.
func (t *textStream) isStopToken(id int32) bool { return containsID(t.stopIDs, id) }

// token feeds one generated token and returns the text now safe to emit; hit reports that a
// stop string matched (the text ends before it, and the request should end).
func (t *textStream) token(id int32) (text string, hit bool) {
	if t.stopped {
		return "", true
	}
	if t.isStopToken(id) || !t.show(id) {
		return "", false
	}
	text, t.stopped = t.stop.Feed(t.dec.Add(id))
	return text, t.stopped
}

// finish flushes what the decoder and the stop matcher hold back at the end of the output.
func (t *textStream) finish() (text string, hit bool) {
	if t.stopped {
		return "", true
	}
	text, t.stopped = t.stop.Feed(t.dec.Flush())
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
