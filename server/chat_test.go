package server

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"tandem/engine"
)

const userHi = `"messages":[{"role":"user","content":"Hi"}]`

// chatResult is a non-streaming chat response as a client decodes it.
type chatResult struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Model   string `json:"model"`
	Choices []struct {
		Index   int `json:"index"`
		Message struct {
			Role             string     `json:"role"`
			Content          *string    `json:"content"`
			ReasoningContent string     `json:"reasoning_content"`
			ToolCalls        []toolCall `json:"tool_calls"`
		} `json:"message"`
		Logprobs     *chatLogprobs `json:"logprobs"`
		FinishReason string        `json:"finish_reason"`
	} `json:"choices"`
	Usage *usage `json:"usage"`
}

// streamResult is what a client assembles from a chat stream.
type streamResult struct {
	role, content, reasoning string
	calls                    []toolCall
	finish                   string
	usage                    *usage
	logprobs                 []chatTokenLogprob
	chunks                   []chatChunk
}

func assembleChat(t *testing.T, body []byte) streamResult {
	t.Helper()
	var r streamResult
	events := readSSE(t, body)
	for i, e := range events {
		c := decodeJSON[chatChunk](t, e)
		r.chunks = append(r.chunks, c)
		if c.Object != "chat.completion.chunk" || c.ID == "" || !strings.HasPrefix(c.Model, "tiny") {
			t.Fatalf("chunk %d: %s", i, e)
		}
		if c.ID != r.chunks[0].ID {
			t.Fatalf("chunk %d has id %s, the first %s", i, c.ID, r.chunks[0].ID)
		}
		if c.Usage != nil {
			if len(c.Choices) != 0 || !strings.Contains(string(e), `"choices":[]`) {
				t.Fatalf("the usage chunk has choices: %s", e)
			}
			if i != len(events)-1 {
				t.Fatalf("the usage chunk is not the last")
			}
			r.usage = c.Usage
			continue
		}
		if len(c.Choices) != 1 {
			t.Fatalf("chunk %d: %d choices", i, len(c.Choices))
		}
		ch := c.Choices[0]
		if r.finish != "" {
			t.Fatalf("chunk %d after the finish chunk: %s", i, e)
		}
		if ch.Delta.Role != "" {
			if i != 0 {
				t.Fatalf("role in chunk %d", i)
			}
			r.role = ch.Delta.Role
		}
		if ch.Delta.Content != nil {
			r.content += *ch.Delta.Content
		}
		if ch.Delta.ReasoningContent != nil {
			r.reasoning += *ch.Delta.ReasoningContent
		}
		r.calls = append(r.calls, ch.Delta.ToolCalls...)
		if ch.Logprobs != nil {
			r.logprobs = append(r.logprobs, ch.Logprobs.Content...)
		}
		if ch.FinishReason != nil {
			r.finish = *ch.FinishReason
		}
	}
	if r.role != "assistant" {
		t.Fatalf("no role chunk first")
	}
	if r.finish == "" {
		t.Fatalf("no finish_reason")
	}
	return r
}

func TestChatCompletion(t *testing.T) {
	out := append(encode(t, "Hello there, how are you today?"), turnEnd)
	fe := newFake(out)
	_, ts, _ := newTestServer(t, fe, nil)
	status, _, body := post(t, ts.URL+"/v1/chat/completions", `{"model":"tiny",`+userHi+`,"max_tokens":50,"temperature":0}`)
	if status != 200 {
		t.Fatalf("%d %s", status, body)
	}
	r := decodeJSON[chatResult](t, body)
	if r.Object != "chat.completion" || !strings.HasPrefix(r.ID, "chatcmpl-") || r.Model != "tiny" || len(r.Choices) != 1 {
		t.Fatalf("%s", body)
	}
	c := r.Choices[0]
	if c.Message.Role != "assistant" || c.Message.Content == nil || *c.Message.Content != "Hello there, how are you today?" {
		t.Errorf("message %+v", c.Message)
	}
	if c.FinishReason != "stop" || c.Logprobs != nil || strings.Contains(string(body), `"reasoning_content"`) || strings.Contains(string(body), "tool_calls") {
		t.Errorf("%s", body)
	}
	u := r.Usage
	if u == nil || u.CompletionTokens != len(out) || u.PromptTokens == 0 || u.TotalTokens != u.PromptTokens+u.CompletionTokens {
		t.Errorf("usage %+v", u)
	}
	if !strings.Contains(string(body), `"prompt_tokens_details":{"cached_tokens":0}`) || strings.Contains(string(body), "speculative") {
		t.Errorf("usage details: %s", body)
	}

	// What reached the engine: the rendered template, the chat stop ids, the settings.
	req := fe.lastRequest()
	tok, _ := fixtures(t)
	if got := tok.Decode(req.Prompt, false); got != "<bos><|turn>user\nHi<turn|>\n<|turn>model\n" {
		t.Errorf("prompt %q", got)
	}
	if req.MaxTokens != 50 || req.Sample.Temperature != 0 || req.Logprobs || req.TopLogprobs != -1 {
		t.Errorf("request %+v", req)
	}
	for _, id := range gemmaStops {
		if !containsID(req.StopTokens, id) {
			t.Errorf("stop ids %v lack %d", req.StopTokens, id)
		}
	}
}

func TestChatStreaming(t *testing.T) {
	text := "Streaming works, token by token: ☃ and 日本."
	out := append(encode(t, text), turnEnd)
	for _, per := range []int{1, 2, 5, 100} { // tokens per engine event (speculative rounds)
		fe := newFake(out)
		fe.perEvent = per
		_, ts, _ := newTestServer(t, fe, nil)
		status, h, body := post(t, ts.URL+"/v1/chat/completions", `{`+userHi+`,"stream":true,"stream_options":{"include_usage":true}}`)
		if status != 200 || h.Get("Content-Type") != "text/event-stream" {
			t.Fatalf("%d %v %s", status, h, body)
		}
		r := assembleChat(t, body)
		if r.content != text || r.finish != "stop" || r.reasoning != "" || len(r.calls) != 0 {
			t.Errorf("per %d: %+v", per, r)
		}
		if r.usage == nil || r.usage.CompletionTokens != len(out) {
			t.Errorf("per %d: usage %+v", per, r.usage)
		}
		// Without include_usage there is no usage chunk.
		_, _, body = post(t, ts.URL+"/v1/chat/completions", `{`+userHi+`,"stream":true}`)
		if r := assembleChat(t, body); r.usage != nil || strings.Contains(string(body), `"usage"`) {
			t.Errorf("usage without include_usage: %s", body)
		}
	}
}

func TestChatMaxTokens(t *testing.T) {
	fe := newFake(encode(t, "one two three four five six seven eight nine ten"))
	_, ts, _ := newTestServer(t, fe, nil)
	_, _, body := post(t, ts.URL+"/v1/chat/completions", `{`+userHi+`,"max_completion_tokens":3,"max_tokens":9}`)
	r := decodeJSON[chatResult](t, body)
	if r.Choices[0].FinishReason != "length" || r.Usage.CompletionTokens != 3 || fe.lastRequest().MaxTokens != 3 {
		t.Errorf("%s", body)
	}
}

// TestDefaultMaxTokensFitsTheContext: without max_tokens a request gets what fits.
func TestDefaultMaxTokensFitsTheContext(t *testing.T) {
	fe := newFake(encode(t, "ok"))
	_, ts, _ := newTestServer(t, fe, func(c *Config) { c.ContextSize = 40; c.MaxTokens = 1000 })
	post(t, ts.URL+"/v1/completions", `{"prompt":"Hi"}`)
	req := fe.lastRequest()
	if req.MaxTokens != 40-len(req.Prompt) {
		t.Errorf("max tokens %d with a %d-token prompt in a 40-token context", req.MaxTokens, len(req.Prompt))
	}
	post(t, ts.URL+"/v1/completions", `{"prompt":"Hi","max_tokens":100}`)
	if req := fe.lastRequest(); req.MaxTokens != 100 {
		t.Errorf("an explicit max_tokens changed: %d", req.MaxTokens)
	}
}

func TestSamplingDefaultsAndOverrides(t *testing.T) {
	fe := newFake(encode(t, "ok"))
	_, ts, _ := newTestServer(t, fe, func(c *Config) {
		c.Sampling.Temperature, c.Sampling.TopP, c.Sampling.TopK = 1, 0.95, 64
	})
	post(t, ts.URL+"/v1/chat/completions", `{`+userHi+`}`)
	a := fe.lastRequest().Sample
	if a.Temperature != 1 || a.TopP != 0.95 || a.TopK != 64 {
		t.Errorf("defaults %+v", a)
	}
	post(t, ts.URL+"/v1/chat/completions", `{`+userHi+`}`)
	if b := fe.lastRequest().Sample; b.Seed == a.Seed {
		t.Errorf("two unseeded requests share seed %d", a.Seed)
	}
	post(t, ts.URL+"/v1/chat/completions", `{`+userHi+`,"temperature":0.5,"top_k":-1,"min_p":0.1,"seed":7,"repetition_penalty":1.1,"frequency_penalty":0.5,"presence_penalty":-1}`)
	if c := fe.lastRequest().Sample; c.Temperature != 0.5 || c.TopK != 0 || c.TopP != 0.95 || c.MinP != 0.1 || c.Seed != 7 || c.RepetitionPenalty != 1.1 ||
		c.FrequencyPenalty != 0.5 || c.PresencePenalty != -1 {
		t.Errorf("overrides %+v", c)
	}
}

// TestStopStrings: a stop string split over tokens and over engine events is found, the text
// ends before it, no chunk shows a part of it, and the engine's request is cancelled.
func TestStopStrings(t *testing.T) {
	text := "The answer is 42. END of story, and more after."
	out := encode(t, text)
	if len(out) < 8 {
		t.Fatalf("fixture too short: %v", out)
	}
	for _, per := range []int{1, 2, 3, 7} {
		for _, stream := range []bool{false, true} {
			fe := newFake(out)
			fe.perEvent = per
			_, ts, _ := newTestServer(t, fe, nil)
			body := `{` + userHi + `,"stop":["zzz","END of"],"stream":` + map[bool]string{false: "false", true: "true"}[stream] + `,"stream_options":null}`
			status, _, resp := post(t, ts.URL+"/v1/chat/completions", body)
			if status != 200 {
				t.Fatalf("%d %s", status, resp)
			}
			var content, finish string
			if stream {
				r := assembleChat(t, resp)
				content, finish = r.content, r.finish
				for _, c := range r.chunks {
					if len(c.Choices) > 0 && c.Choices[0].Delta.Content != nil && strings.Contains(*c.Choices[0].Delta.Content, "END") {
						t.Errorf("per %d: a chunk shows the stop string: %q", per, *c.Choices[0].Delta.Content)
					}
				}
			} else {
				r := decodeJSON[chatResult](t, resp)
				content, finish = *r.Choices[0].Message.Content, r.Choices[0].FinishReason
				// Tokens up to the one that completed the stop string are counted.
				if n := r.Usage.CompletionTokens; n <= 0 || n >= len(out) {
					t.Errorf("per %d: completion tokens %d of %d", per, n, len(out))
				}
			}
			if content != "The answer is 42. " || finish != "stop" {
				t.Errorf("per %d stream %v: content %q finish %q", per, stream, content, finish)
			}
		}
	}

	// A stop string that never matches holds text back only while it might.
	fe := newFake(encode(t, "a < b and c <= d"))
	fe.perEvent = 1
	_, ts, _ := newTestServer(t, fe, nil)
	_, _, resp := post(t, ts.URL+"/v1/chat/completions", `{`+userHi+`,"stop":"<<<","stream":true}`)
	if r := assembleChat(t, resp); r.content != "a < b and c <= d" {
		t.Errorf("content %q", r.content)
	}
}

// TestStopCancelsEngine: after a stop string the engine's request is cancelled, not run to
// max_tokens.
func TestStopCancelsEngine(t *testing.T) {
	fe := newFake(encode(t, "stop here please"))
	fe.perEvent = 1
	fe.hold = len(encode(t, "stop here")) // then the fake waits for cancellation
	_, ts, _ := newTestServer(t, fe, nil)
	status, _, body := post(t, ts.URL+"/v1/completions", `{"prompt":"x","stop":" here"}`)
	if status != 200 {
		t.Fatalf("%d %s", status, body)
	}
	select {
	case <-fe.cancelled:
	case <-time.After(5 * time.Second):
		t.Fatal("the engine's request was not cancelled")
	}
	if !strings.Contains(string(body), `"text":"stop"`) {
		t.Errorf("%s", body)
	}
}

func TestChatLogprobs(t *testing.T) {
	out := append(encode(t, "Yes, ☃!"), turnEnd)
	fe := newFake(out)
	fe.perEvent = 2
	_, ts, _ := newTestServer(t, fe, nil)
	tok, _ := fixtures(t)

	check := func(name string, lps []chatTokenLogprob, top int) {
		t.Helper()
		if len(lps) != len(out) { // one per token, the stop token included
			t.Fatalf("%s: %d entries for %d tokens", name, len(lps), len(out))
		}
		if last := lps[len(lps)-1]; last.Token != "<turn|>" {
			t.Errorf("%s: the stop token's entry is %+v", name, last)
		}
		lps = lps[:len(lps)-1]
		var all []byte
		for i, lp := range lps {
			if lp.Logprob > 0 || lp.Bytes == nil || lp.TopLogprobs == nil {
				t.Errorf("%s: entry %d %+v", name, i, lp)
			}
			want := top
			if top >= 5 && i%2 == 0 { // the fake adds a -Inf alternative to each event's first token
				want++
			}
			if len(lp.TopLogprobs) != want {
				t.Errorf("%s: entry %d has %d alternatives, want %d", name, i, len(lp.TopLogprobs), want)
			}
			for _, b := range lp.Bytes {
				all = append(all, byte(b))
			}
		}
		if string(all) != tok.Decode(out[:len(out)-1], false) {
			t.Errorf("%s: the bytes spell %q", name, all)
		}
	}
	for _, top := range []int{0, 2, 5} {
		body := `{` + userHi + `,"logprobs":true,"top_logprobs":` + string(rune('0'+top)) + `}`
		status, _, resp := post(t, ts.URL+"/v1/chat/completions", body)
		if status != 200 {
			t.Fatalf("%d %s", status, resp)
		}
		if strings.Contains(string(resp), "Inf") || !json.Valid(resp) {
			t.Fatalf("%s", resp)
		}
		r := decodeJSON[chatResult](t, resp)
		if r.Choices[0].Logprobs == nil {
			t.Fatalf("no logprobs: %s", resp)
		}
		check("non-streaming", r.Choices[0].Logprobs.Content, top)
		if req := fe.lastRequest(); !req.Logprobs || req.TopLogprobs != top {
			t.Errorf("engine request logprobs %v %d", req.Logprobs, req.TopLogprobs)
		}

		status, _, resp = post(t, ts.URL+"/v1/chat/completions", strings.Replace(body, "{", `{"stream":true,`, 1))
		if status != 200 {
			t.Fatalf("%d %s", status, resp)
		}
		check("streaming", assembleChat(t, resp).logprobs, top)
	}
	// logprobs without top_logprobs: no alternatives; the JSON shape has the four fields.
	_, _, resp := post(t, ts.URL+"/v1/chat/completions", `{`+userHi+`,"logprobs":true}`)
	raw := decodeJSON[struct {
		Choices []struct {
			Logprobs struct {
				Content []map[string]json.RawMessage `json:"content"`
			} `json:"logprobs"`
		} `json:"choices"`
	}](t, resp)
	for _, k := range []string{"token", "logprob", "bytes", "top_logprobs"} {
		if _, ok := raw.Choices[0].Logprobs.Content[0][k]; !ok {
			t.Errorf("logprob entry lacks %q: %s", k, resp)
		}
	}
}

// TestReasoningAndToolCalls: Gemma 4 thinking comes back as reasoning_content and a tool call
// as tool_calls, however the output is split into engine events.
func TestReasoningAndToolCalls(t *testing.T) {
	text := "<|channel>thought\nThe user wants the time.<channel|>Let me check.<|tool_call>call:get_time{zone:<|\"|>Europe/Oslo<|\"|>,utc:true}<tool_call|>"
	out := append(encode(t, text), 50) // Gemma 4 stops at <|tool_response>
	const tools = `"tools":[{"type":"function","function":{"name":"get_time","parameters":{"type":"object","properties":{"zone":{"type":"string"}}}}}]`
	for _, per := range []int{1, 3, 8, 200} {
		fe := newFake(out)
		fe.perEvent = per
		_, ts, _ := newTestServer(t, fe, func(c *Config) { c.MaxTokens = 1000 })
		status, _, resp := post(t, ts.URL+"/v1/chat/completions", `{`+userHi+`,`+tools+`,"chat_template_kwargs":{"enable_thinking":true}}`)
		if status != 200 {
			t.Fatalf("%d %s", status, resp)
		}
		r := decodeJSON[chatResult](t, resp)
		m := r.Choices[0].Message
		if m.ReasoningContent != "The user wants the time." || m.Content == nil || *m.Content != "Let me check." {
			t.Errorf("per %d: %s", per, resp)
		}
		if len(m.ToolCalls) != 1 || r.Choices[0].FinishReason != "tool_calls" {
			t.Fatalf("per %d: %s", per, resp)
		}
		c := m.ToolCalls[0]
		if c.Type != "function" || !strings.HasPrefix(c.ID, "call_") || c.Function.Name != "get_time" || c.Function.Arguments != `{"zone":"Europe/Oslo","utc":true}` || c.Index != nil {
			t.Errorf("per %d: tool call %+v", per, c)
		}
		// The template saw the tools and thinking.
		tok, _ := fixtures(t)
		prompt := tok.Decode(fe.lastRequest().Prompt, false)
		if !strings.Contains(prompt, "<|think|>") || !strings.Contains(prompt, "<|tool>declaration:get_time") {
			t.Errorf("prompt %q", prompt)
		}

		status, _, resp = post(t, ts.URL+"/v1/chat/completions", `{`+userHi+`,`+tools+`,"stream":true}`)
		if status != 200 {
			t.Fatalf("%d %s", status, resp)
		}
		s := assembleChat(t, resp)
		if s.reasoning != "The user wants the time." || s.content != "Let me check." || s.finish != "tool_calls" || len(s.calls) != 1 {
			t.Fatalf("per %d: %+v", per, s)
		}
		if c := s.calls[0]; c.Index == nil || *c.Index != 0 || c.Function.Name != "get_time" || c.Function.Arguments != `{"zone":"Europe/Oslo","utc":true}` {
			t.Errorf("per %d: streamed call %+v", per, c)
		}
	}

	// A call and nothing else: content is null. tool_choice none: the call stays content.
	fe := newFake(append(encode(t, "<|tool_call>call:f{}<tool_call|>"), 50))
	_, ts, _ := newTestServer(t, fe, nil)
	_, _, resp := post(t, ts.URL+"/v1/chat/completions", `{`+userHi+`,`+tools+`}`)
	if !strings.Contains(string(resp), `"content":null`) || !strings.Contains(string(resp), `"arguments":"{}"`) {
		t.Errorf("%s", resp)
	}
	_, _, resp = post(t, ts.URL+"/v1/chat/completions", `{`+userHi+`,`+tools+`,"tool_choice":"none"}`)
	if r := decodeJSON[chatResult](t, resp); len(r.Choices[0].Message.ToolCalls) != 0 || r.Choices[0].FinishReason != "stop" ||
		!strings.Contains(*r.Choices[0].Message.Content, "call:f") {
		t.Errorf("tool_choice none: %s", resp)
	}
	tok, _ := fixtures(t)
	if p := tok.Decode(fe.lastRequest().Prompt, false); strings.Contains(p, "declaration") {
		t.Errorf("tool_choice none showed the tools: %q", p)
	}
}

// TestMessagesReachTheTemplate: content parts, system prompts, tool calls with arguments as
// JSON strings, tool results, reasoning_effort.
func TestMessagesReachTheTemplate(t *testing.T) {
	fe := newFake(encode(t, "ok"))
	_, ts, _ := newTestServer(t, fe, nil)
	tok, _ := fixtures(t)
	body := `{"messages":[
		{"role":"system","content":"Be brief."},
		{"role":"user","content":[{"type":"text","text":"What time"},{"type":"text","text":"is it?"}]},
		{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"get_time","arguments":"{\"zone\": \"UTC\", \"a\": 1}"}}]},
		{"role":"tool","tool_call_id":"c1","content":"12:00"}
	],"reasoning_effort":"none"}`
	status, _, resp := post(t, ts.URL+"/v1/chat/completions", body)
	if status != 200 {
		t.Fatalf("%d %s", status, resp)
	}
	got := tok.Decode(fe.lastRequest().Prompt, false)
	for _, w := range []string{"<|turn>system\nBe brief.<turn|>", "What time\nis it?", `<|tool_call>call:get_time{zone:<|"|>UTC<|"|>,a:1}<tool_call|>`,
		`<|tool_response>response:get_time{value:<|"|>12:00<|"|>}<tool_response|>`} {
		if !strings.Contains(got, w) {
			t.Errorf("prompt lacks %q:\n%s", w, got)
		}
	}
	if strings.Contains(got, "<|think|>") {
		t.Errorf("reasoning_effort none left thinking on")
	}
}

// TestDisconnectCancels: a client that goes away cancels the engine's request.
func TestDisconnectCancels(t *testing.T) {
	for _, stream := range []bool{true, false} {
		fe := newFake(encode(t, "a long answer that never ends"))
		fe.perEvent = 1
		fe.hold = 2
		_, ts, logs := newTestServer(t, fe, nil)
		ctx, cancel := context.WithCancel(context.Background())
		body := `{` + userHi + `,"stream":` + map[bool]string{false: "false", true: "true"}[stream] + `}`
		req, _ := http.NewRequestWithContext(ctx, "POST", ts.URL+"/v1/chat/completions", strings.NewReader(body))
		done := make(chan struct{})
		go func() {
			defer close(done)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return
			}
			buf := make([]byte, 64)
			resp.Body.Read(buf) // the first chunk
			cancel()
			resp.Body.Close()
		}()
		if !stream {
			time.Sleep(50 * time.Millisecond)
			cancel()
		}
		select {
		case <-fe.cancelled:
		case <-time.After(5 * time.Second):
			t.Fatalf("stream %v: the engine never saw the cancellation", stream)
		}
		cancel()
		<-done
		// The handler returns and logs the request.
		deadline := time.Now().Add(5 * time.Second)
		for !strings.Contains(logs.String(), "client_gone=true") && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if !strings.Contains(logs.String(), "client_gone=true") {
			t.Errorf("stream %v: log %s", stream, logs)
		}
	}
}

// TestEngineShutdownMidRequest: a request the engine cancels on shutdown is not an answer
// with an invented finish_reason: it is a 503 shutting_down before a stream starts, and an
// error event in OpenAI's shape (then [DONE]) after. The log still says how it ended.
func TestEngineShutdownMidRequest(t *testing.T) {
	fe := newFake(encode(t, "partial answer"))
	fe.finishCan = true
	_, ts, logs := newTestServer(t, fe, nil)
	wantErr := func(what string, e apiErr) {
		t.Helper()
		if e.Error.Type != "server_error" || e.Error.Code == nil || *e.Error.Code != "shutting_down" ||
			!strings.Contains(e.Error.Message, "shut down before the response was complete") || e.Error.Param != nil {
			t.Errorf("%s: error %+v", what, e.Error)
		}
	}
	for _, route := range []struct{ path, body string }{
		{"/v1/chat/completions", `{` + userHi + `}`},
		{"/v1/completions", `{"prompt":"Hi"}`},
	} {
		status, _, resp := post(t, ts.URL+route.path, route.body)
		if status != http.StatusServiceUnavailable {
			t.Errorf("%s: status %d %s", route.path, status, resp)
		}
		wantErr(route.path, decodeJSON[apiErr](t, resp))

		status, _, resp = post(t, ts.URL+route.path, strings.Replace(route.body, "{", `{"stream":true,`, 1))
		events := readSSE(t, resp) // ends with [DONE]
		if status != 200 || len(events) < 2 {
			t.Fatalf("%s stream: %d %s", route.path, status, resp)
		}
		wantErr(route.path+" stream", decodeJSON[apiErr](t, events[len(events)-1]))
		text := ""
		for _, e := range events[:len(events)-1] {
			if strings.Contains(string(e), `"finish_reason":"`) {
				t.Errorf("%s stream: a finish reason in %s", route.path, e)
			}
			if strings.Contains(route.path, "chat") {
				c := decodeJSON[chatChunk](t, e)
				text += contentOf(c.Choices[0].Delta.Content)
			} else {
				text += decodeJSON[completionResult](t, e).Choices[0].Text
			}
		}
		if !strings.HasPrefix("partial answer", text) {
			t.Errorf("%s stream: text %q before the error", route.path, text)
		}
	}
	if n := strings.Count(logs.String(), "finish=cancelled"); n != 4 {
		t.Errorf("%d log lines with finish=cancelled, want 4:\n%s", n, logs)
	}
	if !strings.Contains(logs.String(), "status=503") {
		t.Errorf("log: %s", logs)
	}

	// The answer was complete after all when the text the detokenizer still held ("é", whose
	// bytes wait for the next token) completes a stop string.
	fe = newFake(encode(t, "café"))
	fe.finishCan = true
	_, ts, _ = newTestServer(t, fe, nil)
	status, _, resp := post(t, ts.URL+"/v1/completions", `{"prompt":"Hi","stop":"é"}`)
	if c := decodeJSON[completionResult](t, resp).Choices; status != 200 || c[0].Text != "caf" || *c[0].FinishReason != "stop" {
		t.Errorf("a stop string in the held-back text: %d %s", status, resp)
	}
}

func TestSpeculativeUsage(t *testing.T) {
	fe := newFake(append(encode(t, "fast and exact"), turnEnd))
	fe.usage = engine.Usage{Rounds: 4, Drafted: 12, Accepted: 9, CachedTokens: 5}
	_, ts, _ := newTestServer(t, fe, func(c *Config) { c.Draft = "assistant" })
	for _, body := range []string{`{` + userHi + `}`, `{` + userHi + `,"stream":true,"stream_options":{"include_usage":true}}`} {
		_, _, resp := post(t, ts.URL+"/v1/chat/completions", body)
		var u *usage
		if strings.Contains(body, "stream") {
			u = assembleChat(t, resp).usage
		} else {
			u = decodeJSON[chatResult](t, resp).Usage
		}
		if u == nil || u.Speculative == nil {
			t.Fatalf("%s", resp)
		}
		sp := u.Speculative
		if sp.Rounds != 4 || sp.Drafted != 12 || sp.Accepted != 9 || sp.AcceptanceRate != 0.75 || sp.MeanAcceptanceLength != 13.0/4 {
			t.Errorf("%+v", sp)
		}
		if u.PromptTokensDetails.CachedTokens != 5 {
			t.Errorf("cached %d", u.PromptTokensDetails.CachedTokens)
		}
	}
}

// TestEngineFailure: an engine failure is a 500 before a stream starts and an error event in
// OpenAI's shape (then [DONE]) after. The engine's own error text (a recovered panic's value,
// say) goes to the log with the response id, not to the client.
func TestEngineFailure(t *testing.T) {
	fe := newFake(encode(t, "half an answer"))
	fe.failErr = errors.New("engine: panic: runtime error: index out of range [7] with length 3 in /src/engine/step.go:42")
	_, ts, logs := newTestServer(t, fe, nil)
	check := func(what string, e apiErr, id string) {
		t.Helper()
		m := e.Error.Message
		if strings.Contains(m, "panic") || strings.Contains(m, "step.go") || e.Error.Type != "server_error" ||
			e.Error.Code == nil || *e.Error.Code != "internal_error" || id == "" || !strings.Contains(m, id) {
			t.Errorf("%s: error %+v (response id %q)", what, e.Error, id)
		}
		if !strings.Contains(logs.String(), "index out of range [7]") || !strings.Contains(logs.String(), "id="+id) {
			t.Errorf("%s: the log lacks the failure or the id %s:\n%s", what, id, logs)
		}
	}
	status, _, resp := post(t, ts.URL+"/v1/chat/completions", `{`+userHi+`}`)
	if status != 500 {
		t.Errorf("%d %s", status, resp)
	}
	e := decodeJSON[apiErr](t, resp)
	id := regexp.MustCompile(`chatcmpl-[0-9a-f]+`).FindString(e.Error.Message)
	check("chat", e, id)

	status, _, resp = post(t, ts.URL+"/v1/completions", `{"prompt":"Hi","stream":true}`)
	events := readSSE(t, resp)
	if status != 200 {
		t.Errorf("%d %s", status, resp)
	}
	check("completions stream", decodeJSON[apiErr](t, events[len(events)-1]), decodeJSON[completionResult](t, events[0]).ID)
	if !strings.Contains(logs.String(), "finish=error") {
		t.Errorf("log: %s", logs)
	}
}

// TestNoChatTemplate: a model without a template serves completions; chat is a clear 400.
func TestNoChatTemplate(t *testing.T) {
	fe := newFake(encode(t, "ok"))
	_, ts, _ := newTestServer(t, fe, func(c *Config) { c.Template = nil })
	status, _, resp := post(t, ts.URL+"/v1/chat/completions", `{`+userHi+`}`)
	if status != 400 || !strings.Contains(string(resp), "no chat template") {
		t.Errorf("%d %s", status, resp)
	}
	if status, _, resp := post(t, ts.URL+"/v1/completions", `{"prompt":"Hi"}`); status != 200 {
		t.Errorf("%d %s", status, resp)
	}
}
