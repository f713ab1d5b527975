package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"tandem/chat"
	"tandem/engine"
	"tandem/tokenizer"
)

// fakeEngine answers every request with a fixed output, a few tokens per event, the way the
// real engine does: it stops after a stop token or MaxTokens, reports logprobs when asked,
// and ends a cancelled request with FinishCancelled.
type fakeEngine struct {
	mu        sync.Mutex
	output    []int32 // tokens every request generates
	perEvent  int     // tokens per event (a speculative round yields several); 0: 1
	submitErr error
	stats     engine.Stats
	// hold, when set, makes a request wait for its context to end after sending hold
	// tokens (a slow generation a client walks away from).
	hold      int
	finishCan bool // end every request with FinishCancelled (the engine shutting down)
	usage     engine.Usage
	panicOn   bool
	failErr   error // the final event's Err (a failure inside the engine)

	requests  []engine.Request
	cancelled chan struct{} // gets a value when a request's context ends before it finished
}

func newFake(output []int32) *fakeEngine {
	return &fakeEngine{output: output, perEvent: 3, cancelled: make(chan struct{}, 16)}
}

func (f *fakeEngine) Stats() engine.Stats {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.stats
}

func (f *fakeEngine) set(fn func(f *fakeEngine)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

func (f *fakeEngine) lastRequest() engine.Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.requests[len(f.requests)-1]
}

func (f *fakeEngine) Submit(ctx context.Context, r engine.Request) (<-chan engine.Event, error) {
	f.mu.Lock()
	boom := f.panicOn
	f.requests = append(f.requests, r)
	err := f.submitErr
	f.mu.Unlock()
	if boom {
		panic("fake engine: boom")
	}
	if err != nil {
		return nil, err
	}
	ch := make(chan engine.Event)
	go f.run(ctx, r, ch)
	return ch, nil
}

func (f *fakeEngine) run(ctx context.Context, r engine.Request, ch chan<- engine.Event) {
	defer close(ch)
	queued := time.Now()
	var toks []int32
	finish := engine.FinishLength
	for _, id := range f.output {
		if len(toks) == r.MaxTokens {
			break
		}
		toks = append(toks, id)
		if slices.Contains(r.StopTokens, id) {
			finish = engine.FinishStop
			break
		}
	}
	if len(toks) < r.MaxTokens && finish != engine.FinishStop {
		finish = engine.FinishStop // the output ran out: as if it ended with EOS
	}
	if f.finishCan {
		finish = engine.FinishCancelled
	}
	per := max(f.perEvent, 1)
	usage := f.usage
	usage.PromptTokens = len(r.Prompt)
	final := func(reason string, n int) engine.Event {
		u := usage
		u.CompletionTokens = n
		return engine.Event{Done: true, FinishReason: reason, Usage: u, Queued: queued, Started: queued}
	}
	sent := 0
	for sent < len(toks) {
		if f.hold > 0 && sent >= f.hold {
			break
		}
		n := min(per, len(toks)-sent)
		ev := engine.Event{Tokens: toks[sent : sent+n]}
		if r.Logprobs {
			for i, id := range ev.Tokens {
				lp := engine.Logprob{Token: id, Logprob: -0.5 - float32(sent+i)/10}
				for k := 0; k < r.TopLogprobs; k++ {
					alt := id
					if k > 0 {
						alt = int32(400 + k)
					}
					lp.Top = append(lp.Top, engine.TokenLogprob{Token: alt, Logprob: lp.Logprob - float32(k)})
				}
				if i == 0 && k0(r) {
					lp.Top = append(lp.Top, engine.TokenLogprob{Token: 3, Logprob: float32(math.Inf(-1))})
				}
				ev.Logprobs = append(ev.Logprobs, lp)
			}
		}
		select {
		case ch <- ev:
		case <-ctx.Done():
			f.notifyCancel()
			ch <- final(engine.FinishCancelled, sent)
			return
		}
		sent += n
	}
	if f.hold > 0 && sent < len(toks) {
		<-ctx.Done()
		f.notifyCancel()
		ch <- final(engine.FinishCancelled, sent)
		return
	}
	last := final(finish, len(toks))
	if f.failErr != nil {
		last.Err = f.failErr
	}
	select {
	case ch <- last:
	case <-ctx.Done():
		f.notifyCancel()
		ch <- final(engine.FinishCancelled, len(toks))
	}
}

func (f *fakeEngine) notifyCancel() {
	select {
	case f.cancelled <- struct{}{}:
	default:
	}
}

// k0: an extra -Inf alternative appears when many alternatives are asked for, to check that
// it is encoded as a finite number.
func k0(r engine.Request) bool { return r.TopLogprobs >= 5 }

// Test fixtures: a synthetic Gemma-family tokenizer and the Gemma 4 chat template.
var (
	fixtureOnce sync.Once
	testTok     *tokenizer.Tokenizer
	testTmpl    *chat.Template
)

func fixtures(t testing.TB) (*tokenizer.Tokenizer, *chat.Template) {
	t.Helper()
	fixtureOnce.Do(func() {
		tj, cj, err := tokenizer.Synthetic("gemma", 512)
		if err != nil {
			panic(err)
		}
		if testTok, err = tokenizer.Parse(tj, cj); err != nil {
			panic(err)
		}
		if testTmpl, err = chat.Parse(chat.Gemma4Template, "<bos>", "<eos>"); err != nil {
			panic(err)
		}
	})
	return testTok, testTmpl
}

// Gemma 4 stop ids: <eos>, <turn|>, <|tool_response>.
var gemmaStops = []int32{1, 106, 50}

const turnEnd = 106

// encode is the token ids of text (special-token markers included).
func encode(t testing.TB, text string) []int32 {
	tok, _ := fixtures(t)
	return tok.Encode(text, false)
}

// newTestServer serves a fake engine; edit adjusts the config.
func newTestServer(t testing.TB, fe *fakeEngine, edit func(*Config)) (*Server, *httptest.Server, *syncBuffer) {
	t.Helper()
	tok, tmpl := fixtures(t)
	logs := &syncBuffer{}
	cfg := Config{Engine: fe, Tokenizer: tok, Template: tmpl, ModelName: "tiny", Device: "cpu",
		StopTokens: gemmaStops, MaxTokens: 64,
		Logger: slog.New(slog.NewTextHandler(logs, nil))}
	if edit != nil {
		edit(&cfg)
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	return s, ts, logs
}

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// post sends a JSON body and returns the status and body.
func post(t testing.TB, url, body string, header ...string) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, b
}

func get(t testing.TB, url string, header ...string) (int, http.Header, []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, b
}

// readSSE parses an event stream into its data payloads; it fails unless the stream ends
// with [DONE] and every event is "data: …" followed by a blank line.
func readSSE(t testing.TB, body []byte) []json.RawMessage {
	t.Helper()
	var events []json.RawMessage
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	done := false
	expectBlank := false
	for sc.Scan() {
		line := sc.Text()
		if expectBlank {
			if line != "" {
				t.Fatalf("SSE: want a blank line after an event, got %q", line)
			}
			expectBlank = false
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			t.Fatalf("SSE: want a data line, got %q", line)
		}
		if done {
			t.Fatalf("SSE: data after [DONE]: %q", line)
		}
		expectBlank = true
		if data == "[DONE]" {
			done = true
			continue
		}
		if !json.Valid([]byte(data)) {
			t.Fatalf("SSE: invalid JSON %q", data)
		}
		events = append(events, json.RawMessage(data))
	}
	if !done {
		t.Fatalf("SSE: no [DONE] in %q", body)
	}
	return events
}

// decodeJSON decodes b into a generic value, failing the test on error.
func decodeJSON[T any](t testing.TB, b []byte) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("decoding %s: %v", b, err)
	}
	return v
}
