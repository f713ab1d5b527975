package server

import (
	"math"
	"unicode/utf8"

	"tandem/engine"
	"tandem/tokenizer"
)

// Log-probabilities in OpenAI's two formats. The engine computes them from the target's
// distribution, speculative decoding or not.

// chatLogprobs is choices[].logprobs of a chat completion.
type chatLogprobs struct {
	Content []chatTokenLogprob `json:"content"`
}

type chatTokenLogprob struct {
	Token       string           `json:"token"`
	Logprob     float64          `json:"logprob"`
	Bytes       []int            `json:"bytes"`
	TopLogprobs []chatTopLogprob `json:"top_logprobs"`
}

type chatTopLogprob struct {
	Token   string  `json:"token"`
	Logprob float64 `json:"logprob"`
	Bytes   []int   `json:"bytes"`
}

// completionLogprobs is choices[].logprobs of a text completion.
type completionLogprobs struct {
	Tokens        []string             `json:"tokens"`
	TokenLogprobs []float64            `json:"token_logprobs"`
	TopLogprobs   []map[string]float64 `json:"top_logprobs"`
	TextOffset    []int                `json:"text_offset"`
}

// finiteLogprob keeps JSON encodable what a distribution may hold: -Inf (a token filtered
// out) becomes -9999, as vLLM reports it.
func finiteLogprob(x float32) float64 {
	v := float64(x)
	if math.IsInf(v, 0) || math.IsNaN(v) {
		return -9999
	}
	return v
}

// tokenText is a token's text as a logprob entry shows it, and its bytes. A byte-fallback
// token (<0xE2>) is one byte of a UTF-8 sequence: its bytes are that byte, and its text is
// the byte when it is ASCII, else the decoded replacement.
func tokenText(tok *tokenizer.Tokenizer, id int32) (string, []int) {
	if b, ok := byteToken(tok, id); ok {
		if b < utf8.RuneSelf {
			return string(rune(b)), []int{int(b)}
		}
		return tok.Decode([]int32{id}, false), []int{int(b)}
	}
	text := tok.Decode([]int32{id}, false)
	bs := make([]int, len(text))
	for i := 0; i < len(text); i++ {
		bs[i] = int(text[i])
	}
	return text, bs
}

// byteToken reports whether id is a byte-fallback token (<0xE2>) and which byte it is.
func byteToken(tok *tokenizer.Tokenizer, id int32) (byte, bool) {
	if piece, ok := tok.Token(id); ok && len(piece) == 6 && piece[:3] == "<0x" && piece[5] == '>' {
		return parseHexByte(piece[3:5])
	}
	return 0, false
}

func parseHexByte(s string) (byte, bool) {
	var v byte
	for i := 0; i < 2; i++ {
		c := s[i]
		switch {
		case c >= '0' && c <= '9':
			v = v<<4 | (c - '0')
		case c >= 'a' && c <= 'f':
			v = v<<4 | (c - 'a' + 10)
		case c >= 'A' && c <= 'F':
			v = v<<4 | (c - 'A' + 10)
		default:
			return 0, false
		}
	}
	return v, true
}

func chatLogprob(tok *tokenizer.Tokenizer, lp engine.Logprob) chatTokenLogprob {
	text, bs := tokenText(tok, lp.Token)
	e := chatTokenLogprob{Token: text, Logprob: finiteLogprob(lp.Logprob), Bytes: bs, TopLogprobs: []chatTopLogprob{}}
	for _, alt := range lp.Top {
		t, b := tokenText(tok, alt.Token)
		e.TopLogprobs = append(e.TopLogprobs, chatTopLogprob{Token: t, Logprob: finiteLogprob(alt.Logprob), Bytes: b})
	}
	return e
}

// appendCompletionLogprob adds one token to a completions logprobs object; offset is the
// token's text offset in the completion, in characters.
func appendCompletionLogprob(c *completionLogprobs, tok *tokenizer.Tokenizer, lp engine.Logprob, offset int) {
	text, _ := tokenText(tok, lp.Token)
	c.Tokens = append(c.Tokens, text)
	c.TokenLogprobs = append(c.TokenLogprobs, finiteLogprob(lp.Logprob))
	top := make(map[string]float64, len(lp.Top))
	for _, alt := range lp.Top {
		t, _ := tokenText(tok, alt.Token)
		if _, dup := top[t]; !dup { // two tokens with one text: keep the likelier (listed first)
			top[t] = finiteLogprob(alt.Logprob)
		}
	}
	c.TopLogprobs = append(c.TopLogprobs, top)
	c.TextOffset = append(c.TextOffset, offset)
}
