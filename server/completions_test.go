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
		off := 0
		for i := range n {
			if lp.TextOffset[i] != off {
				t.Errorf("stream %v: text_offset[%d] = %d, want %d", stream, i, lp.TextOffset[i], off)
			}
			off += utf8.RuneCountInString(lp.Tokens[i])
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
