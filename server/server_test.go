package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"tandem/engine"
)

// apiErr is an error response as a client decodes it.
type apiErr struct {
	Error struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    *string `json:"code"`
	} `json:"error"`
}

func TestNewChecksConfig(t *testing.T) {
	tok, _ := fixtures(t)
	fe := newFake(nil)
	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		{"no engine", Config{Tokenizer: tok, ModelName: "m"}},
		{"no tokenizer", Config{Engine: fe, ModelName: "m"}},
		{"no model name", Config{Engine: fe, Tokenizer: tok}},
		{"stop token outside vocabulary", Config{Engine: fe, Tokenizer: tok, ModelName: "m", StopTokens: []int32{9999}}},
		{"negative body limit", Config{Engine: fe, Tokenizer: tok, ModelName: "m", MaxBodyBytes: -1}},
	} {
		if _, err := New(tc.cfg); err == nil {
			t.Errorf("%s: New succeeded", tc.name)
		}
	}
}

func TestRoutes(t *testing.T) {
	fe := newFake(encode(t, "Hi."))
	fe.stats = engine.Stats{Running: 2, Waiting: 1, KVUsedTokens: 100, KVBudgetTokens: 400, DecodeTokensRate: 12.5}
	_, ts, _ := newTestServer(t, fe, func(c *Config) { c.ContextSize = 256; c.Draft = "tiny-assistant"; c.DraftTokens = 3 })
	for _, tc := range []struct {
		method, path string
		status       int
		want         []string // substrings of the body
	}{
		{"GET", "/v1/models", 200, []string{`"object":"list"`, `"id":"tiny"`, `"max_model_len":256`}},
		{"GET", "/v1/models/tiny", 200, []string{`"id":"tiny"`, `"object":"model"`}},
		{"GET", "/v1/models/other", 404, []string{`"code":"model_not_found"`}},
		{"GET", "/health", 200, []string{`"status":"ok"`, `"model":"tiny"`, `"device":"cpu"`, `"running":2`, `"waiting":1`,
			`"kv_usage":0.25`, `"tokens_per_second":12.5`, `"go_heap_bytes":`, `"draft":"tiny-assistant"`}},
		{"GET", "/metrics", 200, []string{"tandem:num_requests_running 2"}},
		{"GET", "/nope", 404, []string{`"type":"invalid_request_error"`, "no route GET /nope"}},
		{"POST", "/v1", 404, []string{`"error"`}},
		{"DELETE", "/v1/models", 405, []string{`"code":"method_not_allowed"`}},
		{"GET", "/v1/chat/completions", 405, []string{"use POST"}},
		{"PUT", "/v1/completions", 405, []string{"use POST"}},
		{"POST", "/health", 405, []string{"use GET"}},
	} {
		req, _ := http.NewRequest(tc.method, ts.URL+tc.path, strings.NewReader("{}"))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		buf := make([]byte, 1<<16)
		for {
			n, err := resp.Body.Read(buf)
			b.Write(buf[:n])
			if err != nil {
				break
			}
		}
		resp.Body.Close()
		if resp.StatusCode != tc.status {
			t.Errorf("%s %s: status %d, want %d (%s)", tc.method, tc.path, resp.StatusCode, tc.status, b.String())
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(b.String(), w) {
				t.Errorf("%s %s: body lacks %q:\n%s", tc.method, tc.path, w, b.String())
			}
		}
		if tc.status == 405 && resp.Header.Get("Allow") == "" {
			t.Errorf("%s %s: 405 without Allow", tc.method, tc.path)
		}
		if tc.path != "/metrics" && !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
			t.Errorf("%s %s: Content-Type %q", tc.method, tc.path, resp.Header.Get("Content-Type"))
		}
	}
}

// TestRequestErrors checks that every kind of bad request gets its status, OpenAI's error
// shape, and a message naming the field.
func TestRequestErrors(t *testing.T) {
	fe := newFake(encode(t, "Hi."))
	_, ts, _ := newTestServer(t, fe, nil)
	const msgs = `"messages":[{"role":"user","content":"Hi"}]`
	chatURL, complURL := ts.URL+"/v1/chat/completions", ts.URL+"/v1/completions"
	for _, tc := range []struct {
		name, url, body string
		status          int
		param, code     string
		msg             string // a substring of the message
	}{
		{"malformed JSON", chatURL, `{"messages": [`, 400, "", "", "malformed JSON"},
		{"trailing garbage", chatURL, `{"messages":[]} x`, 400, "", "", "malformed JSON"},
		{"empty body", chatURL, ``, 400, "", "", "empty"},
		{"not an object", chatURL, `[1,2]`, 400, "", "", "must be a JSON object"},
		{"wrong type temperature", chatURL, `{` + msgs + `,"temperature":"hot"}`, 400, "temperature", "", "temperature: want a number, got a string"},
		{"wrong type max_tokens", chatURL, `{` + msgs + `,"max_tokens":1.5}`, 400, "max_tokens", "", "max_tokens: want an integer, got the number 1.5"},
		{"max_tokens a string", chatURL, `{` + msgs + `,"max_tokens":"5"}`, 400, "max_tokens", "", "max_tokens: want an integer, got a string"},
		{"n past int32", chatURL, `{` + msgs + `,"n":1e10}`, 400, "n", "", "want an integer"},
		{"n a boolean", chatURL, `{` + msgs + `,"n":true}`, 400, "n", "", "n: want an integer, got a boolean"},
		{"wrong type stream", chatURL, `{` + msgs + `,"stream":"yes"}`, 400, "stream", "", "want a boolean"},
		{"wrong type include_usage", chatURL, `{` + msgs + `,"stream":true,"stream_options":{"include_usage":1}}`, 400, "stream_options.include_usage", "", "want a boolean"},
		{"wrong type stop", chatURL, `{` + msgs + `,"stop":5}`, 400, "stop", "", "stop: want a string or an array"},
		{"messages not an array", chatURL, `{"messages":"hi"}`, 400, "messages", "", "want an array"},
		{"messages missing", chatURL, `{}`, 400, "messages", "", "messages is required"},
		{"messages empty", chatURL, `{"messages":[]}`, 400, "messages", "", "must not be empty"},
		{"message not an object", chatURL, `{"messages":[3]}`, 400, "messages[0]", "", "want a message object"},
		{"unknown role", chatURL, `{"messages":[{"role":"robot","content":"x"}]}`, 400, "messages[0].role", "", "unknown role"},
		{"content wrong type", chatURL, `{"messages":[{"role":"user","content":5}]}`, 400, "messages[0].content", "", "want a string or an array"},
		{"image part", chatURL, `{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]}`, 400, "messages[0].content[0].type", "", "only text"},
		{"bad tool call", chatURL, `{"messages":[{"role":"assistant","tool_calls":[{"x":1}]}]}`, 400, "messages[0].tool_calls[0]", "", "want"},
		{"tools wrong type", chatURL, `{` + msgs + `,"tools":{"a":1}}`, 400, "tools", "", "want an array"},
		{"tool without name", chatURL, `{` + msgs + `,"tools":[{"type":"function","function":{}}]}`, 400, "tools[0].function.name", "", "name"},
		{"tool_choice required", chatURL, `{` + msgs + `,"tool_choice":"required"}`, 400, "tool_choice", "", "not supported"},
		{"tool_choice bad", chatURL, `{` + msgs + `,"tool_choice":"sometimes"}`, 400, "tool_choice", "", "sometimes"},
		{"response_format json", chatURL, `{` + msgs + `,"response_format":{"type":"json_object"}}`, 400, "response_format", "", "not supported"},
		{"temperature out of range", chatURL, `{` + msgs + `,"temperature":3}`, 400, "temperature", "", "[0, 2]"},
		{"top_p zero", chatURL, `{` + msgs + `,"top_p":0}`, 400, "top_p", "", "(0, 1]"},
		{"top_k negative", chatURL, `{` + msgs + `,"top_k":-5}`, 400, "top_k", "", ">= 0"},
		{"min_p out of range", chatURL, `{` + msgs + `,"min_p":1.5}`, 400, "min_p", "", "[0, 1]"},
		{"max_tokens zero", chatURL, `{` + msgs + `,"max_tokens":0}`, 400, "max_tokens", "", "at least 1"},
		{"max_completion_tokens negative", chatURL, `{` + msgs + `,"max_completion_tokens":-1}`, 400, "max_completion_tokens", "", "at least 1"},
		{"top_logprobs out of range", chatURL, `{` + msgs + `,"logprobs":true,"top_logprobs":30}`, 400, "top_logprobs", "", "[0, 20]"},
		{"top_logprobs without logprobs", chatURL, `{` + msgs + `,"top_logprobs":2}`, 400, "top_logprobs", "", "logprobs"},
		{"frequency_penalty out of range", chatURL, `{` + msgs + `,"frequency_penalty":5}`, 400, "frequency_penalty", "", "[-2, 2]"},
		{"empty stop string", chatURL, `{` + msgs + `,"stop":[""]}`, 400, "stop", "", "empty"},
		{"stop_token_ids outside vocabulary", chatURL, `{` + msgs + `,"stop_token_ids":[100000]}`, 400, "stop_token_ids", "", "outside the vocabulary"},
		{"logit_bias", chatURL, `{` + msgs + `,"logit_bias":{"5":10}}`, 400, "logit_bias", "", "not supported"},
		{"n > 1", chatURL, `{` + msgs + `,"n":2}`, 400, "n", "", "not supported"},
		{"n = 0", chatURL, `{` + msgs + `,"n":0}`, 400, "n", "", "at least 1"},
		{"stream_options without stream", chatURL, `{` + msgs + `,"stream_options":{"include_usage":true}}`, 400, "stream_options", "", "stream is true"},
		{"enable_thinking not a bool", chatURL, `{` + msgs + `,"chat_template_kwargs":{"enable_thinking":"yes"}}`, 400, "chat_template_kwargs.enable_thinking", "", "boolean"},
		{"reserved template variable", chatURL, `{` + msgs + `,"chat_template_kwargs":{"messages":[]}}`, 400, "chat_template_kwargs.messages", "", `"messages" is set by the server`},
		{"add_generation_prompt in kwargs", chatURL, `{` + msgs + `,"chat_template_kwargs":{"enable_thinking":true,"add_generation_prompt":false}}`, 400,
			"chat_template_kwargs.add_generation_prompt", "", "chat_template_kwargs.add_generation_prompt: \"add_generation_prompt\" is set by the server and cannot be given in chat_template_kwargs"},
		{"tool_choice object", chatURL, `{` + msgs + `,"tool_choice":{"type":"function","function":{"name":"f"}}}`, 400, "tool_choice", "", "not supported"},
		{"too many stop_token_ids", chatURL, `{` + msgs + `,"stop_token_ids":[` + strings.Repeat("1,", 256) + `1]}`, 400, "stop_token_ids", "", "at most 256 token ids, got 257"},
		{"too many stop_token_ids, completions", complURL, `{"prompt":"x","stop_token_ids":[` + strings.Repeat("1,", 4096) + `1]}`, 400, "stop_token_ids", "", "at most 256 token ids, got 4097"},
		{"reasoning_effort bad", chatURL, `{` + msgs + `,"reasoning_effort":"max"}`, 400, "reasoning_effort", "", "one of"},
		{"unknown model", chatURL, `{"model":"gpt-5",` + msgs + `}`, 404, "model", "model_not_found", "gpt-5"},
		{"unknown model, completions", complURL, `{"model":"gpt-5","prompt":"x"}`, 404, "model", "model_not_found", "gpt-5"},
		{"prompt missing", complURL, `{}`, 400, "prompt", "", "required"},
		{"prompt wrong type", complURL, `{"prompt":{"a":1}}`, 400, "prompt", "", "want a string"},
		{"several prompts", complURL, `{"prompt":["a","b"]}`, 400, "prompt", "", "a list of 2 prompts"},
		{"several id prompts", complURL, `{"prompt":[[1,2],[3]]}`, 400, "prompt", "", "a list of 2 prompts"},
		{"prompt ids outside vocabulary", complURL, `{"prompt":[2,99999]}`, 400, "prompt", "", "outside the vocabulary"},
		{"prompt ids empty", complURL, `{"prompt":[]}`, 400, "prompt", "", "empty"},
		{"completions logprobs out of range", complURL, `{"prompt":"x","logprobs":50}`, 400, "logprobs", "", "[0, 20]"},
		{"best_of", complURL, `{"prompt":"x","best_of":3}`, 400, "best_of", "", "not supported"},
		{"suffix", complURL, `{"prompt":"x","suffix":"y"}`, 400, "suffix", "", "not supported"},
		{"echo with logprobs", complURL, `{"prompt":"x","echo":true,"logprobs":1}`, 400, "echo", "", "not supported"},
	} {
		status, _, body := post(t, tc.url, tc.body)
		if status != tc.status {
			t.Errorf("%s: status %d, want %d: %s", tc.name, status, tc.status, body)
			continue
		}
		var e apiErr
		if err := json.Unmarshal(body, &e); err != nil || e.Error.Message == "" || e.Error.Type == "" {
			t.Errorf("%s: not an OpenAI error: %s", tc.name, body)
			continue
		}
		if !strings.Contains(e.Error.Message, tc.msg) {
			t.Errorf("%s: message %q lacks %q", tc.name, e.Error.Message, tc.msg)
		}
		if strings.Contains(e.Error.Message, "Options.") {
			t.Errorf("%s: message %q names the server's internals", tc.name, e.Error.Message)
		}
		if tc.param != "" && (e.Error.Param == nil || *e.Error.Param != tc.param) {
			t.Errorf("%s: param %v, want %q", tc.name, strp(e.Error.Param), tc.param)
		}
		if tc.code != "" && (e.Error.Code == nil || *e.Error.Code != tc.code) {
			t.Errorf("%s: code %v, want %q", tc.name, strp(e.Error.Code), tc.code)
		}
	}
	// None of those reached the engine.
	fe.set(func(f *fakeEngine) {
		if len(f.requests) != 0 {
			t.Errorf("%d bad requests reached the engine", len(f.requests))
		}
	})
}

func strp(s *string) string {
	if s == nil {
		return "<null>"
	}
	return *s
}

// TestEngineErrors maps the engine's Submit errors to statuses.
func TestEngineErrors(t *testing.T) {
	for _, tc := range []struct {
		name       string
		err        error
		status     int
		code, msg  string
		retryAfter bool
	}{
		{"queue full", engine.ErrQueueFull, 429, "queue_full", "busy", true},
		{"shutting down", engine.ErrClosed, 503, "shutting_down", "shutting down", false},
		{"context", &engine.ContextError{PromptTokens: 9000, MaxTokens: 100, CtxSize: 8192}, 400, "context_length_exceeded", "9000 tokens; the context size is 8192", false},
		{"context with max_tokens", &engine.ContextError{PromptTokens: 8000, MaxTokens: 500, CtxSize: 8192}, 400, "context_length_exceeded", "8000 tokens) plus max_tokens (500) exceeds the context size of 8192", false},
		{"invalid", errInvalid("token id 5000 is outside the vocabulary"), 400, "", "outside the vocabulary", false},
	} {
		fe := newFake(encode(t, "Hi."))
		fe.submitErr = tc.err
		_, ts, _ := newTestServer(t, fe, nil)
		for _, url := range []string{ts.URL + "/v1/chat/completions", ts.URL + "/v1/completions"} {
			for _, stream := range []string{"false", "true"} {
				status, h, body := post(t, url, `{"messages":[{"role":"user","content":"Hi"}],"prompt":"Hi","stream":`+stream+`}`)
				if status != tc.status {
					t.Errorf("%s %s stream=%s: status %d, want %d: %s", tc.name, url, stream, status, tc.status, body)
					continue
				}
				e := decodeJSON[apiErr](t, body)
				if !strings.Contains(e.Error.Message, tc.msg) || (tc.code != "" && strp(e.Error.Code) != tc.code) {
					t.Errorf("%s: error %s", tc.name, body)
				}
				if tc.retryAfter && h.Get("Retry-After") == "" {
					t.Errorf("%s: no Retry-After header", tc.name)
				}
			}
		}
	}
}

type errInvalid string

func (e errInvalid) Error() string { return string(e) }

func TestAuth(t *testing.T) {
	fe := newFake(encode(t, "Hi."))
	_, ts, _ := newTestServer(t, fe, func(c *Config) { c.APIKey = "sekret" })
	chat := `{"messages":[{"role":"user","content":"Hi"}]}`
	for _, tc := range []struct {
		name, method, path, header string
		status                     int
	}{
		{"no key", "POST", "/v1/chat/completions", "", 401},
		{"wrong key", "POST", "/v1/chat/completions", "Bearer nope", 401},
		{"key as prefix", "POST", "/v1/chat/completions", "Bearer sekret2", 401},
		{"no Bearer", "POST", "/v1/chat/completions", "sekret", 401},
		{"right key", "POST", "/v1/chat/completions", "Bearer sekret", 200},
		{"lower-case scheme", "POST", "/v1/chat/completions", "bearer sekret", 200},
		{"empty key", "POST", "/v1/chat/completions", "Bearer ", 401},
		{"completions without key", "POST", "/v1/completions", "", 401},
		{"models without key", "GET", "/v1/models", "", 401},
		{"models with key", "GET", "/v1/models", "Bearer sekret", 200},
		{"health stays open", "GET", "/health", "", 200},
		{"metrics stay open", "GET", "/metrics", "", 200},
	} {
		var status int
		var body []byte
		if tc.method == "POST" {
			status, _, body = post(t, ts.URL+tc.path, chat, "Authorization", tc.header)
		} else {
			status, _, body = get(t, ts.URL+tc.path, "Authorization", tc.header)
		}
		if status != tc.status {
			t.Errorf("%s: status %d, want %d: %s", tc.name, status, tc.status, body)
		}
		if status == 401 {
			e := decodeJSON[apiErr](t, body)
			if e.Error.Type != "authentication_error" || strp(e.Error.Code) != "invalid_api_key" {
				t.Errorf("%s: %s", tc.name, body)
			}
		}
	}
}

func TestBodyTooLarge(t *testing.T) {
	fe := newFake(encode(t, "Hi."))
	_, ts, _ := newTestServer(t, fe, func(c *Config) { c.MaxBodyBytes = 1000 })
	big := `{"messages":[{"role":"user","content":"` + strings.Repeat("a", 2000) + `"}]}`
	status, _, body := post(t, ts.URL+"/v1/chat/completions", big)
	if status != http.StatusRequestEntityTooLarge {
		t.Fatalf("status %d: %s", status, body)
	}
	if e := decodeJSON[apiErr](t, body); !strings.Contains(e.Error.Message, "1000 bytes") {
		t.Errorf("message %q", e.Error.Message)
	}
	// Just under the limit is fine.
	ok := `{"messages":[{"role":"user","content":"` + strings.Repeat("a", 900) + `"}]}`
	if status, _, body := post(t, ts.URL+"/v1/chat/completions", ok); status != 200 {
		t.Fatalf("status %d: %s", status, body)
	}
}

// TestPanicIsRecovered: a panic in a handler is a 500 in OpenAI's shape, logged, and the
// server goes on serving.
func TestPanicIsRecovered(t *testing.T) {
	fe := newFake(encode(t, "Hi."))
	fe.panicOn = true
	_, ts, logs := newTestServer(t, fe, nil)
	status, _, body := post(t, ts.URL+"/v1/completions", `{"prompt":"Hi"}`)
	if status != 500 {
		t.Fatalf("status %d: %s", status, body)
	}
	if e := decodeJSON[apiErr](t, body); e.Error.Type != "server_error" {
		t.Errorf("%s", body)
	}
	if !strings.Contains(logs.String(), "panic") {
		t.Errorf("panic not logged: %s", logs)
	}
	fe.set(func(f *fakeEngine) { f.panicOn = false })
	if status, _, body := post(t, ts.URL+"/v1/completions", `{"prompt":"Hi"}`); status != 200 {
		t.Fatalf("after a panic: status %d: %s", status, body)
	}
}

func TestDrain(t *testing.T) {
	fe := newFake(encode(t, "Hi."))
	s, ts, _ := newTestServer(t, fe, nil)
	s.Drain()
	if status, _, body := get(t, ts.URL+"/health"); status != 503 || !strings.Contains(string(body), `"draining"`) {
		t.Errorf("health while draining: %d %s", status, body)
	}
	status, h, body := post(t, ts.URL+"/v1/chat/completions", `{"messages":[{"role":"user","content":"Hi"}]}`)
	if status != 503 || !strings.Contains(string(body), "shutting_down") || h.Get("Retry-After") == "" {
		t.Errorf("chat while draining: %d %s (Retry-After %q)", status, body, h.Get("Retry-After"))
	}
}

// TestBodyLimitFollowsTheContext protects the default body cap: 64 bytes a token of the
// context, between 1 and 16 MiB, 16 MiB without a context size, and a set cap as it is.
func TestBodyLimitFollowsTheContext(t *testing.T) {
	tok, _ := fixtures(t)
	fe := newFake(encode(t, "Hi."))
	for _, tc := range []struct {
		ctx       int
		set, want int64
	}{
		{0, 0, 16 << 20}, {256, 0, 1 << 20}, {65536, 0, 4 << 20}, {1 << 20, 0, 16 << 20}, {256, 5000, 5000},
	} {
		s, err := New(Config{Engine: fe, Tokenizer: tok, ModelName: "m", ContextSize: tc.ctx, MaxBodyBytes: tc.set})
		if err != nil {
			t.Fatal(err)
		}
		if s.cfg.MaxBodyBytes != tc.want {
			t.Errorf("context %d, set %d: body cap %d, want %d", tc.ctx, tc.set, s.cfg.MaxBodyBytes, tc.want)
		}
	}
}

// TestTooManyMessages: more messages than the context has tokens are refused before the
// template renders them (a template may scan them once for each).
func TestTooManyMessages(t *testing.T) {
	fe := newFake(encode(t, "Hi."))
	_, ts, _ := newTestServer(t, fe, func(c *Config) { c.ContextSize = 40 })
	msg := `{"role":"user","content":"x"}`
	many := `{"messages":[` + strings.TrimSuffix(strings.Repeat(msg+",", 41), ",") + `]}`
	status, _, body := post(t, ts.URL+"/v1/chat/completions", many)
	if e := decodeJSON[apiErr](t, body); status != 400 || strp(e.Error.Code) != "context_length_exceeded" || strp(e.Error.Param) != "messages" {
		t.Fatalf("41 messages for a context of 40: %d %s", status, body)
	}
}

// TestPromptTurns: the prompts being rendered and tokenized at once are bounded, and a
// client that leaves while waiting for a turn ends its request.
func TestPromptTurns(t *testing.T) {
	fe := newFake(encode(t, "Hi."))
	s, _, _ := newTestServer(t, fe, nil)
	var held []func()
	for range cap(s.prep) {
		release, err := s.prepSlot(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, release)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := s.prepSlot(ctx); err == nil {
		t.Fatal("a turn past the bound was given")
	} else if ae, ok := err.(*apiError); !ok || ae.Status != 499 {
		t.Fatalf("waiting past the client: %v", err)
	}
	held[0]()
	release, err := s.prepSlot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	release()
}

// TestLogLine: one line per request with method, route, status, tokens and duration.
func TestLogLine(t *testing.T) {
	out := append(encode(t, "Hello there."), turnEnd)
	fe := newFake(out)
	_, ts, logs := newTestServer(t, fe, nil)
	post(t, ts.URL+"/v1/chat/completions", `{"messages":[{"role":"user","content":"Hi"}]}`)
	get(t, ts.URL+"/nope")
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("want 2 log lines, got %q", lines)
	}
	for _, w := range []string{"method=POST", "route=/v1/chat/completions", "status=200", "prompt_tokens=", fmt.Sprintf("completion_tokens=%d", len(out)), "duration=", "finish=stop"} {
		if !strings.Contains(lines[0], w) {
			t.Errorf("log line lacks %q: %s", w, lines[0])
		}
	}
	if !strings.Contains(lines[1], "status=404") || !strings.Contains(lines[1], "route=other") {
		t.Errorf("second line: %s", lines[1])
	}
}

// TestWholeNumbersAsIntegers: integer fields take whole numbers written as floats (5.0, 1e1),
// as Python clients send them and vLLM accepts.
func TestWholeNumbersAsIntegers(t *testing.T) {
	fe := newFake(encode(t, "Hi."))
	_, ts, _ := newTestServer(t, fe, nil)
	for _, body := range []string{
		`{"messages":[{"role":"user","content":"Hi"}],"max_tokens":5.0,"n":1.0,"top_k":4e0}`,
		`{"messages":[{"role":"user","content":"Hi"}],"max_completion_tokens":1e1,"logprobs":true,"top_logprobs":2.0}`,
	} {
		if status, _, resp := post(t, ts.URL+"/v1/chat/completions", body); status != 200 {
			t.Errorf("%s: %d %s", body, status, resp)
		}
	}
	if status, _, resp := post(t, ts.URL+"/v1/completions", `{"prompt":"Hi","max_tokens":3.0,"logprobs":1.0,"best_of":1.0}`); status != 200 {
		t.Errorf("completions: %d %s", status, resp)
	}
}

// TestBodyDeadlineIsTheBodysAlone protects the body's read deadline: a body that does not
// arrive in time is a 408 (the reply goes out, the connection ends), and a stream that runs
// longer than the deadline keeps its request.
func TestBodyDeadlineIsTheBodysAlone(t *testing.T) {
	defer func(d time.Duration) { bodyReadTimeout = d }(bodyReadTimeout)
	bodyReadTimeout = 100 * time.Millisecond
	fe := newFake(append(encode(t, "Hello there, a long answer."), turnEnd))
	fe.set(func(f *fakeEngine) { f.hold = 1 }) // one event, then the request waits for its context
	_, ts, _ := newTestServer(t, fe, nil)

	// A stream held open well past the deadline is not cancelled.
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", ts.URL+"/v1/chat/completions",
		strings.NewReader(`{"messages":[{"role":"user","content":"Hi"}],"stream":true}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-fe.cancelled:
		t.Fatal("a stream was cancelled by the body's read deadline")
	case <-time.After(5 * bodyReadTimeout):
	}
	cancel()
	resp.Body.Close()
	select {
	case <-fe.cancelled: // the client leaving still ends it
	case <-time.After(5 * time.Second):
		t.Fatal("the client left and the request went on")
	}

	// A body that stops arriving is a 408.
	conn, err := net.Dial("tcp", strings.TrimPrefix(ts.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"prompt\":")
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	reply, _ := io.ReadAll(conn)
	if !strings.HasPrefix(string(reply), "HTTP/1.1 408") || !strings.Contains(string(reply), "request_timeout") {
		t.Fatalf("a body that stopped arriving: %q", reply)
	}
}
