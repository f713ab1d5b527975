package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"

	"tandem/chat"
	"tandem/serve"
)

// apiStatus is the HTTP status of a client error (0 when err is not an API error).
func apiStatus(err error) (int, *openai.Error) {
	var e *openai.Error
	if errors.As(err, &e) {
		return e.StatusCode, e
	}
	return 0, nil
}

// With an API key, completions need it (401 otherwise, in OpenAI's error shape); /health and
// /metrics stay open.
func TestAPIKey(t *testing.T) {
	s := start(t, serve.Options{APIKey: "sekrit"})
	ctx := context.Background()
	for _, key := range []string{"", "wrong"} {
		_, err := runChat(ctx, s.newClient(key), userChat("Hi", 2), false)
		if code, e := apiStatus(err); code != http.StatusUnauthorized || e.Type == "" || e.Message == "" {
			t.Errorf("key %q: %v, want a 401 with a type and message", key, err)
		}
	}
	if _, err := runChat(ctx, s.newClient("sekrit"), userChat("Hi", 2), false); err != nil {
		t.Errorf("the right key: %v", err)
	}
	for _, path := range []string{"/health", "/metrics"} {
		if code, _ := s.get(t, path); code != http.StatusOK {
			t.Errorf("%s without a key: status %d", path, code)
		}
	}
}

// Request errors: an unknown model (404), a prompt or prompt + max_tokens beyond the context
// (400 naming both numbers), a body over the limit (413).
func TestRequestErrors(t *testing.T) {
	const ctxSize = 128
	s := start(t, serve.Options{CtxSize: ctxSize})
	ctx := context.Background()

	p := userChat("Hi", 2)
	p.Model = "no-such-model"
	if code, e := apiStatus(func() error { _, err := runChat(ctx, s.client, p, false); return err }()); code != http.StatusNotFound ||
		!strings.Contains(e.Message, "no-such-model") {
		t.Errorf("unknown model: status %d %v", code, e)
	}

	long := strings.Repeat("word ", 200)
	n := promptTokens(t, []chat.Message{{Role: "user", Content: long}}, chat.Options{})
	_, err := runChat(ctx, s.client, userChat(long, 8), false)
	if code, e := apiStatus(err); code != http.StatusBadRequest || !strings.Contains(e.Message, strconv.Itoa(n)) ||
		!strings.Contains(e.Message, strconv.Itoa(ctxSize)) {
		t.Errorf("prompt of %d tokens, context %d: %v", n, ctxSize, err)
	}
	short := "Hi"
	n = promptTokens(t, []chat.Message{{Role: "user", Content: short}}, chat.Options{})
	_, err = runChat(ctx, s.client, userChat(short, ctxSize), false)
	if code, e := apiStatus(err); code != http.StatusBadRequest || !strings.Contains(e.Message, strconv.Itoa(n)) ||
		!strings.Contains(e.Message, strconv.Itoa(ctxSize)) {
		t.Errorf("prompt of %d tokens + max_tokens %d, context %d: %v", n, ctxSize, ctxSize, err)
	}

	body, _ := json.Marshal(map[string]any{"model": "tiny", "prompt": strings.Repeat("x", 17<<20), "max_tokens": 1})
	code, _, resp := s.post(t, "/v1/completions", "", body)
	if code != http.StatusRequestEntityTooLarge || !bytes.Contains(resp, []byte(`"error"`)) {
		t.Errorf("a 17 MiB body: status %d %.200s", code, resp)
	}
}

// A full queue answers 429 with Retry-After. One slot and one queue place: a long request
// runs, a second waits, a third is refused.
func TestQueueFull(t *testing.T) {
	s := start(t, serve.Options{Parallel: 1, MaxQueue: 1, StopTokens: []int32{}, CtxSize: 4096})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	for i, what := range []string{"one request to run", "a second to wait"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Never stops by itself (no stop tokens); cancelled below.
			runCompletion(ctx, s.client, textCompletion("The quick brown fox", 4000), true)
		}()
		waitFor(t, what, 30*time.Second, func() bool {
			h := s.health(t)
			return h.Queue.Running == 1 && h.Queue.Waiting == i
		})
	}
	body := []byte(`{"model":"tiny","prompt":"Hello","max_tokens":4}`)
	code, hdr, resp := s.post(t, "/v1/completions", "", body)
	if code != http.StatusTooManyRequests || hdr.Get("Retry-After") == "" || !bytes.Contains(resp, []byte(`"error"`)) {
		t.Errorf("third request: status %d, Retry-After %q, %s", code, hdr.Get("Retry-After"), resp)
	}
	_, err := runCompletion(context.Background(), s.client, textCompletion("Hello", 4), false)
	if code, _ := apiStatus(err); code != http.StatusTooManyRequests {
		t.Errorf("the official client: %v, want a 429", err)
	}
	cancel()
	wg.Wait()
	waitFor(t, "the cancelled requests to leave", 30*time.Second, func() bool {
		h := s.health(t)
		return h.Queue.Running == 0 && h.Queue.Waiting == 0 && h.Memory.KVUsedTokens == 0
	})
}
