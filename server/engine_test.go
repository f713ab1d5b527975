package server

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"tandem/chat"
	"tandem/compute/cpu"
	"tandem/engine"
	"tandem/model/gemma4"
	"tandem/tokenizer"
)

// Tests against the real engine on a tiny random-weight Gemma 4 E2B and its assistant, as
// `tandem serve` runs them: the model's own tokenizer, chat template and stop ids.

type realModel struct {
	dir      string
	target   *gemma4.Model
	drafter  *gemma4.Assistant
	tok      *tokenizer.Tokenizer
	tmpl     *chat.Template
	stopIDs  []int32
	loadErr  error
	loadOnce sync.Once
}

var tiny realModel

func TestMain(m *testing.M) {
	code := m.Run()
	if tiny.target != nil {
		tiny.drafter.Close()
		tiny.target.Close()
	}
	if tiny.dir != "" {
		os.RemoveAll(tiny.dir)
	}
	os.Exit(code)
}

func contentOf(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

func loadTiny(t *testing.T) *realModel {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: no real engine")
	}
	tiny.loadOnce.Do(func() {
		tiny.loadErr = func() error {
			dir, err := os.MkdirTemp("", "tandem-server-test-")
			if err != nil {
				return err
			}
			tiny.dir = dir
			b := cpu.New(0)
			for _, name := range []string{"gemma4-tiny-e2b", "gemma4-tiny-e2b-assistant"} {
				p, err := gemma4.LookupPreset(name)
				if err != nil {
					return err
				}
				if err := p.Generate(filepath.Join(dir, name), gemma4.GenerateOptions{Seed: 21}); err != nil {
					return err
				}
			}
			td := filepath.Join(dir, "gemma4-tiny-e2b")
			if tiny.target, err = gemma4.Load(td, b); err != nil {
				return err
			}
			if tiny.drafter, err = gemma4.LoadAssistant(filepath.Join(dir, "gemma4-tiny-e2b-assistant"), b); err != nil {
				return err
			}
			if err := tiny.drafter.Bind(tiny.target); err != nil {
				return err
			}
			if tiny.tok, err = tokenizer.LoadDir(td); err != nil {
				return err
			}
			if tiny.tmpl, err = chat.Load(td); err != nil {
				return err
			}
			for _, id := range gemma4.StopTokens {
				tiny.stopIDs = append(tiny.stopIDs, int32(id))
			}
			return nil
		}()
	})
	if tiny.loadErr != nil {
		t.Fatal(tiny.loadErr)
	}
	return &tiny
}

// realServer serves the tiny model, speculative when draft is set.
func realServer(t *testing.T, draft bool, edit func(*engine.Config)) (*httptest.Server, *engine.Engine) {
	t.Helper()
	m := loadTiny(t)
	ec := engine.Config{Model: m.target, CtxSize: 256, Parallel: 2}
	cfg := Config{Tokenizer: m.tok, Template: m.tmpl, ModelName: "tiny-e2b", StopTokens: m.stopIDs, MaxTokens: 24,
		ContextSize: 256, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if draft {
		ec.Drafter, ec.DraftTokens = m.drafter, 3
		cfg.Draft, cfg.DraftTokens = "tiny-e2b-assistant", 3
	}
	if edit != nil {
		edit(&ec)
	}
	eng, err := engine.New(ec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close(context.Background()) })
	cfg.Engine = eng
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	return ts, eng
}

// TestRealEngineLossless: greedy chat through the server is the same with and without the
// drafter, streamed or not, and carries speculative usage when drafting.
func TestRealEngineLossless(t *testing.T) {
	plainTS, _ := realServer(t, false, nil)
	specTS, _ := realServer(t, true, nil)
	for _, prompt := range []string{"Why is the sky blue?", "Write a function that adds two numbers."} {
		body := fmt.Sprintf(`{"messages":[{"role":"user","content":%q}],"temperature":0,"max_tokens":24}`, prompt)
		var want string
		for i, url := range []string{plainTS.URL, specTS.URL} {
			status, _, resp := post(t, url+"/v1/chat/completions", body)
			if status != 200 {
				t.Fatalf("%d %s", status, resp)
			}
			r := decodeJSON[chatResult](t, resp)
			got := fmt.Sprintf("%q|%q|%d|%s", strp(r.Choices[0].Message.Content), r.Choices[0].Message.ReasoningContent, len(r.Choices[0].Message.ToolCalls), r.Choices[0].FinishReason)
			if i == 0 {
				want = got
				if r.Usage.Speculative != nil {
					t.Errorf("plain decoding has speculative usage: %s", resp)
				}
				continue
			}
			if got != want {
				t.Errorf("speculative %s, plain %s", got, want)
			}
			if sp := r.Usage.Speculative; sp == nil || sp.Rounds == 0 || sp.MeanAcceptanceLength < 1 {
				t.Errorf("speculative usage %+v", sp)
			}
			// Streamed, the same answer.
			status, _, resp = post(t, url+"/v1/chat/completions", strings.Replace(body, "{", `{"stream":true,"stream_options":{"include_usage":true},`, 1))
			if status != 200 {
				t.Fatalf("%d %s", status, resp)
			}
			s := assembleChat(t, resp)
			m := r.Choices[0].Message
			if s.content != contentOf(m.Content) || s.reasoning != m.ReasoningContent || len(s.calls) != len(m.ToolCalls) || s.finish != r.Choices[0].FinishReason {
				t.Errorf("streamed %+v, not streamed %s", s, resp)
			}
			if s.usage == nil || s.usage.CompletionTokens != r.Usage.CompletionTokens {
				t.Errorf("streamed usage %+v, not streamed %+v", s.usage, r.Usage)
			}
		}
	}
}

// TestRealEngineCompletionsAndStops: text completions, a stop string taken from the greedy
// output itself, and logprobs with speculation on.
func TestRealEngineCompletionsAndStops(t *testing.T) {
	ts, eng := realServer(t, true, nil)
	status, _, resp := post(t, ts.URL+"/v1/completions", `{"prompt":[2,10,20,30,40],"temperature":0,"max_tokens":20,"skip_special_tokens":false}`)
	if status != 200 {
		t.Fatalf("%d %s", status, resp)
	}
	full := decodeJSON[completionResult](t, resp).Choices[0].Text
	rs := []rune(full)
	if len(rs) < 6 {
		t.Skipf("greedy output too short for a stop string: %q", full)
	}
	stop := string(rs[len(rs)/2 : len(rs)/2+2])
	wantText := full[:strings.Index(full, stop)]
	for _, stream := range []bool{false, true} {
		body := fmt.Sprintf(`{"prompt":[2,10,20,30,40],"temperature":0,"max_tokens":20,"skip_special_tokens":false,"stop":[%q],"stream":%v,"logprobs":2}`, stop, stream)
		status, _, resp := post(t, ts.URL+"/v1/completions", body)
		if status != 200 {
			t.Fatalf("%d %s", status, resp)
		}
		var text, finish string
		var ntok int
		if stream {
			for _, e := range readSSE(t, resp) {
				c := decodeJSON[completionResult](t, e)
				text += c.Choices[0].Text
				if c.Choices[0].FinishReason != nil {
					finish = *c.Choices[0].FinishReason
				}
				if lp := c.Choices[0].Logprobs; lp != nil {
					ntok += len(lp.Tokens)
				}
			}
		} else {
			c := decodeJSON[completionResult](t, resp).Choices[0]
			text, finish, ntok = c.Text, *c.FinishReason, len(c.Logprobs.Tokens)
		}
		if text != wantText || finish != "stop" {
			t.Errorf("stream %v: stop %q: text %q finish %q, want %q", stream, stop, text, finish, wantText)
		}
		if ntok == 0 {
			t.Errorf("stream %v: no logprobs", stream)
		}
	}
	// The engine finished (or cancelled) every request.
	deadline := time.Now().Add(5 * time.Second)
	for eng.Stats().Running > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if st := eng.Stats(); st.Running != 0 || st.Waiting != 0 {
		t.Errorf("stats after the requests: %+v", st)
	}
}

// TestRealEngineErrorsAndMetrics: the context limit is a 400 naming both numbers, and
// /metrics shows the engine's speculative counters.
func TestRealEngineErrorsAndMetrics(t *testing.T) {
	ts, _ := realServer(t, true, nil)
	long := strings.Repeat("7,", 300) + "7"
	status, _, resp := post(t, ts.URL+"/v1/completions", `{"prompt":[`+long+`],"max_tokens":4}`)
	if status != 400 || !strings.Contains(string(resp), "context_length_exceeded") || !strings.Contains(string(resp), "301") || !strings.Contains(string(resp), "256") {
		t.Errorf("long prompt: %d %s", status, resp)
	}
	status, _, resp = post(t, ts.URL+"/v1/completions", `{"prompt":[2,3,4],"max_tokens":254}`)
	if status != 400 || !strings.Contains(string(resp), "max_tokens (254)") {
		t.Errorf("prompt + max_tokens: %d %s", status, resp)
	}
	if status, _, resp := post(t, ts.URL+"/v1/chat/completions", `{"messages":[{"role":"user","content":"Hi"}],"max_tokens":8,"logprobs":true,"top_logprobs":2,"temperature":0.8,"seed":3,"frequency_penalty":0.5}`); status != 200 {
		t.Fatalf("%d %s", status, resp)
	}
	_, _, body := get(t, ts.URL+"/metrics")
	for _, w := range []string{"tandem:spec_decode_num_drafts_total", `tandem:spec_decode_num_accepted_tokens_per_pos_total{position="2"}`, "tandem:kv_cache_budget_tokens 512"} {
		if !strings.Contains(string(body), w) {
			t.Errorf("/metrics lacks %q", w)
		}
	}
	if strings.Contains(string(body), "tandem:spec_decode_num_draft_tokens_total 0\n") {
		t.Errorf("no draft tokens counted")
	}
}

// TestRealEngineDisconnect: a client leaving a stream frees the engine's row.
func TestRealEngineDisconnect(t *testing.T) {
	ts, eng := realServer(t, true, nil)
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", ts.URL+"/v1/completions",
		strings.NewReader(`{"prompt":[2,10,20],"max_tokens":200,"stream":true,"stop_token_ids":[],"temperature":1,"seed":1}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 16)
	if _, err := resp.Body.Read(buf); err != nil {
		t.Fatal(err)
	}
	cancel()
	resp.Body.Close()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if st := eng.Stats(); st.Running == 0 && st.Waiting == 0 && st.KVUsedTokens == 0 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Errorf("the engine still holds the request: %+v", eng.Stats())
}
