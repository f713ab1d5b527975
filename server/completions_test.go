package server

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

type completionResult struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Model   string `json:"model"`
	Choices []struct {
		Index        int                 `json:"index"`
		Text         string              `json:"text"`
		Logprobs     *completionLogprobs `json:"logprobs"`
		FinishReason *string             `json:"finish_reason"`
	} `json:"choices"`
	Usage *usage `json:"usage"`
}

func TestCompletion(t *testing.T) {
	text := "Once upon a time, there was a fox."
	out := append(encode(t, text), 1) // <eos>
	tok, _ := fixtures(t)
	for _, tc := range []struct {
		name, prompt string
		wantPrompt   []int32
	}{
		{"string", `"Hello"`, tok.Encode("Hello", true)},
		{"token ids", `[2, 10, 20, 30]`, []int32{2, 10, 20, 30}},
		{"a list of one string", `["Hello"]`, tok.Encode("Hello", true)},
		{"a list of one id list", `[[2, 10]]`, []int32{2, 10}},
	} {
		fe := newFake(out)
		_, ts, _ := newTestServer(t, fe, nil)
		status, _, body := post(t, ts.URL+"/v1/completions", `{"model":"tiny","prompt":`+tc.prompt+`,"max_tokens":40}`)
		if status != 200 {
			t.Fatalf("%s: %d %s", tc.name, status, body)
		}
		r := decodeJSON[completionResult](t, body)
		if r.Object != "text_completion" || !strings.HasPrefix(r.ID, "cmpl-") || len(r.Choices) != 1 {
			t.Fatalf("%s: %s", tc.name, body)
		}
		c := r.Choices[0]
		if c.Text != text || c.FinishReason == nil || *c.FinishReason != "stop" || c.Logprobs != nil {
			t.Errorf("%s: %s", tc.name, body)
		}
		if r.Usage.PromptTokens != len(tc.wantPrompt) || r.Usage.CompletionTokens != len(out) {
			t.Errorf("%s: usage %+v", tc.name, r.Usage)
		}
		if got := fe.lastRequest().Prompt; !slices.Equal(got, tc.wantPrompt) {
			t.Errorf("%s: prompt %v, want %v", tc.name, got, tc.wantPrompt)
		}
	}
}

func TestCompletionStreaming(t *testing.T) {
	text := "Streaming text ☃, in pieces."
	out := append(encode(t, text), 1)
	for _, per := range []int{1, 4} {
		fe := newFake(out)
		fe.perEvent = per
		_, ts, _ := newTestServer(t, fe, nil)
		status, _, body := post(t, ts.URL+"/v1/completions", `{"prompt":"Hi","stream":true,"stream_options":{"include_usage":true},"echo":true}`)
		if status != 200 {
			t.Fatalf("%d %s", status, body)
		}
		var got, finish string
		var u *usage
		events := readSSE(t, body)
		for i, e := range events {
			c := decodeJSON[completionResult](t, e)
			if c.Object != "text_completion" {
				t.Fatalf("%s", e)
			}
			if c.Usage != nil {
				if i != len(events)-1 || len(c.Choices) != 0 {
					t.Fatalf("usage chunk %d: %s", i, e)
				}
				u = c.Usage
				continue
			}
			got += c.Choices[0].Text
			if c.Choices[0].FinishReason != nil {
				finish = *c.Choices[0].FinishReason
			}
		}
		if got != "Hi"+text || finish != "stop" || u == nil || u.CompletionTokens != len(out) {
			t.Errorf("per %d: text %q finish %q usage %+v", per, got, finish, u)
		}
	}
}

// TestCompletionLogprobs checks the legacy shape: tokens, token_logprobs, top_logprobs (a map
// per token) and text_offset (characters before each token).
func TestCompletionLogprobs(t *testing.T) {
	text := "Tokens ☃ here"
	out := append(encode(t, text), 1)
	fe := newFake(out)
	fe.perEvent = 2
	_, ts, _ := newTestServer(t, fe, nil)
	for _, stream := range []bool{false, true} {
		body := fmt.Sprintf(`{"prompt":"Hi","logprobs":2,"stream":%v}`, stream)
		status, _, resp := post(t, ts.URL+"/v1/completions", body)
		if status != 200 {
			t.Fatalf("%d %s", status, resp)
		}
		lp := &completionLogprobs{}
		if stream {
			for _, e := range readSSE(t, resp) {
				c := decodeJSON[completionResult](t, e)
				if len(c.Choices) == 1 && c.Choices[0].Logprobs != nil {
					x := c.Choices[0].Logprobs
					lp.Tokens = append(lp.Tokens, x.Tokens...)
					lp.TokenLogprobs = append(lp.TokenLogprobs, x.TokenLogprobs...)
					lp.TopLogprobs = append(lp.TopLogprobs, x.TopLogprobs...)
					lp.TextOffset = append(lp.TextOffset, x.TextOffset...)
				}
			}
		} else {
			for _, k := range []string{`"tokens":`, `"token_logprobs":`, `"top_logprobs":`, `"text_offset":`} {
				if !strings.Contains(string(resp), k) {
					t.Errorf("no %s in %s", k, resp)
				}
			}
			lp = decodeJSON[completionResult](t, resp).Choices[0].Logprobs
		}
		n := len(out) // one per token, the stop token included
		if len(lp.Tokens) != n || len(lp.TokenLogprobs) != n || len(lp.TopLogprobs) != n || len(lp.TextOffset) != n {
			t.Fatalf("stream %v: lengths %d %d %d %d, want %d", stream, len(lp.Tokens), len(lp.TokenLogprobs), len(lp.TopLogprobs), len(lp.TextOffset), n)
		}
		// text_offset indexes the text: "☃" is three byte-fallback tokens.
		if want := []int{0, 1, 5, 6, 7, 7, 7, 8, 9, 11, 12, 13}; !slices.Equal(lp.TextOffset, want) {
			t.Errorf("stream %v: text_offset %v, want %v", stream, lp.TextOffset, want)
		}
		for i := range n {
			if len(lp.TopLogprobs[i]) == 0 || len(lp.TopLogprobs[i]) > 2 || lp.TokenLogprobs[i] >= 0 {
				t.Errorf("stream %v: entry %d: %v %v", stream, i, lp.TopLogprobs[i], lp.TokenLogprobs[i])
			}
		}
	}
}

// TestSkipSpecialTokens: completions drop special tokens from the text unless asked not to.
func TestSkipSpecialTokens(t *testing.T) {
	out := append(encode(t, "a<|channel>b"), 1)
	fe := newFake(out)
	_, ts, _ := newTestServer(t, fe, nil)
	_, _, resp := post(t, ts.URL+"/v1/completions", `{"prompt":"Hi"}`)
	if c := decodeJSON[completionResult](t, resp).Choices[0].Text; c != "ab" {
		t.Errorf("text %q", c)
	}
	_, _, resp = post(t, ts.URL+"/v1/completions", `{"prompt":"Hi","skip_special_tokens":false}`)
	if c := decodeJSON[completionResult](t, resp).Choices[0].Text; c != "a<|channel>b" {
		t.Errorf("text %q", c)
	}
}

// TestCompletionTextOffset: text_offset counts characters of the returned text, as the
// detokenizer released them: the byte-fallback tokens of "é" share its offset (not one
// U+FFFD each), a special token skip_special_tokens hides adds nothing, and every token's
// text starts at its offset.
func TestCompletionTextOffset(t *testing.T) {
	tok, _ := fixtures(t)
	out := append(encode(t, "café<|channel> ok"), 1) // c a f <0xC3> <0xA9> <|channel> ▁ ok <eos>
	if p, _ := tok.Token(out[3]); p != "<0xC3>" || !tok.IsSpecial(out[5]) {
		t.Fatalf("the fixture's tokens changed: %v", out)
	}
	for _, tc := range []struct {
		skip       bool
		text       string
		wantOffset []int
	}{
		// The hidden <|channel> is not detokenized (bytes on either side of it would join, as
		// in HF's decode), so "é" is still held back when it comes: its offset is where the
		// text stood, before "é".
		{true, "café ok", []int{0, 1, 2, 3, 3, 3, 4, 5, 7}},
		{false, "café<|channel> ok", []int{0, 1, 2, 3, 3, 4, 14, 15, 17}},
	} {
		for _, per := range []int{1, 2, 3} {
			fe := newFake(out)
			fe.perEvent = per
			_, ts, _ := newTestServer(t, fe, nil)
			for _, stream := range []bool{false, true} {
				what := fmt.Sprintf("skip %v, %d per event, stream %v", tc.skip, per, stream)
				status, _, resp := post(t, ts.URL+"/v1/completions",
					fmt.Sprintf(`{"prompt":"Hi","logprobs":0,"stream":%v,"skip_special_tokens":%v}`, stream, tc.skip))
				if status != 200 {
					t.Fatalf("%s: %d %s", what, status, resp)
				}
				var text string
				var offsets []int
				var tokens []string
				if stream {
					for _, e := range readSSE(t, resp) {
						c := decodeJSON[completionResult](t, e)
						text += c.Choices[0].Text
						if lp := c.Choices[0].Logprobs; lp != nil {
							offsets = append(offsets, lp.TextOffset...)
							tokens = append(tokens, lp.Tokens...)
						}
					}
				} else {
					c := decodeJSON[completionResult](t, resp).Choices[0]
					text, offsets, tokens = c.Text, c.Logprobs.TextOffset, c.Logprobs.Tokens
				}
				if text != tc.text || !slices.Equal(offsets, tc.wantOffset) {
					t.Errorf("%s: text %q offsets %v, want %q %v", what, text, offsets, tc.text, tc.wantOffset)
					continue
				}
				rs := []rune(text)
				for i, tk := range tokens {
					shown := !strings.ContainsRune(tk, utf8.RuneError) && tk != "<eos>" && (!tc.skip || tk != "<|channel>")
					if shown && !strings.HasPrefix(string(rs[offsets[i]:]), strings.ReplaceAll(tk, "▁", " ")) {
						t.Errorf("%s: token %d %q is not at its offset %d in %q", what, i, tk, offsets[i], text)
					}
				}
			}
		}
	}
}

// TestStopTokenIDs: up to 256 stop_token_ids are accepted; the request's ids reach the engine
// after the server's, and one listed last still ends the text.
func TestStopTokenIDs(t *testing.T) {
	out := encode(t, "one two three")
	two := encode(t, " two")[0]
	ids := make([]string, 0, 256)
	for i := range 255 {
		ids = append(ids, fmt.Sprint(300+i%50)) // duplicates are fine
	}
	ids = append(ids, fmt.Sprint(two))
	fe := newFake(out)
	_, ts, _ := newTestServer(t, fe, nil)
	status, _, resp := post(t, ts.URL+"/v1/completions", `{"prompt":"Hi","stop_token_ids":[`+strings.Join(ids, ",")+`]}`)
	if status != 200 {
		t.Fatalf("%d %s", status, resp)
	}
	if c := decodeJSON[completionResult](t, resp).Choices[0]; c.Text != "one" || *c.FinishReason != "stop" {
		t.Errorf("text %q, finish %q", c.Text, *c.FinishReason)
	}
	if got := fe.lastRequest().StopTokens; len(got) != len(gemmaStops)+256 || got[len(got)-1] != two {
		t.Errorf("the engine's stop tokens: %v", got)
	}
}
