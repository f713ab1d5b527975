package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestServeFlagErrors(t *testing.T) {
	model := tinyModel(t, "gemma4-tiny-e2b")
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"serve"}, []string{"--model is required"}},
		{[]string{"serve", "--model", model, "--device", "tpu"}, []string{"--device", "tpu"}},
		{[]string{"serve", "--model", model, "--log-format", "xml"}, []string{"--log-format", "xml"}},
		{[]string{"serve", "--model", model, "--num-draft-tokens", "2"}, []string{"--num-draft-tokens needs --draft"}},
		{[]string{"serve", "--model", model, "--adaptive-drafts"}, []string{"--adaptive-drafts needs --draft"}},
		{[]string{"serve", "--model", model, "--draft", model, "--draft-position", "T+1"}, []string{"--draft-position", "T+1"}},
		// 0 is not "the default": the help says 1–64.
		{[]string{"serve", "--model", model, "--draft", model, "--num-draft-tokens", "0"}, []string{"--num-draft-tokens: the number of draft tokens must be between 1 and 64, got 0"}},
		{[]string{"serve", "--model", model, "--draft", model, "--num-draft-tokens", "65"}, []string{"--num-draft-tokens: the number of draft tokens must be between 1 and 64, got 65"}},
		{[]string{"serve", "--model", model, "--port", "70000"}, []string{"--port 70000"}},
		{[]string{"serve", "--model", model, "--parallel", "-1"}, []string{"--parallel -1"}},
		{[]string{"serve", "--model", model, "--temp", "-1"}, []string{"temperature"}},
		{[]string{"serve", "--model", model, "--shutdown-grace", "-1s"}, []string{"--shutdown-grace"}},
		{[]string{"serve", "--model", t.TempDir(), "--port", "0"}, []string{"config.json"}},
	} {
		_, _, err := execute(t, c.args...)
		wantError(t, err, c.want...)
	}
}

// lockedBuffer collects the command's stderr while it runs.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// runServe starts `tandem serve args…` in-process and returns its base URL (read from the
// ready log line), its stderr, a stop function (the signal's path: the context ends) and the
// command's result.
func runServe(t *testing.T, args ...string) (url string, stderr *lockedBuffer, stop func() error) {
	t.Helper()
	root := newRoot()
	stderr = &lockedBuffer{}
	root.SetOut(io.Discard)
	root.SetErr(stderr)
	root.SetArgs(append([]string{"serve", "--port", "0"}, args...))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()
	re := regexp.MustCompile(`"?url"?[=:]"?(http://[0-9.:]+)`)
	deadline := time.Now().Add(30 * time.Second)
	for {
		if m := re.FindStringSubmatch(stderr.String()); m != nil {
			url = m[1]
			break
		}
		select {
		case err := <-done:
			cancel()
			t.Fatalf("serve exited before it was ready: %v\n%s", err, stderr.String())
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("serve was not ready in 30s:\n%s", stderr.String())
		}
	}
	return url, stderr, func() error {
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(30 * time.Second):
			t.Fatal("serve did not return within 30s of its context ending")
			return nil
		}
	}
}

func TestServe(t *testing.T) {
	model := tinyModel(t, "gemma4-tiny-e2b")
	drafter := tinyModel(t, "gemma4-tiny-e2b-assistant")
	t.Setenv("TANDEM_API_KEY", "from-env")
	url, stderr, stop := runServe(t, "--model", model, "--draft", drafter, "--log-format", "json", "--temp", "0", "--parallel", "2")

	get := func(path, key string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, url+path, nil)
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := get("/v1/models", ""); code != http.StatusUnauthorized {
		t.Errorf("/v1/models without the key from TANDEM_API_KEY: status %d", code)
	}
	// The model name defaults to the model directory's base name.
	if code, body := get("/v1/models", "from-env"); code != http.StatusOK || !strings.Contains(body, `"gemma4-tiny-e2b"`) {
		t.Errorf("/v1/models: %d %s", code, body)
	}
	req, _ := http.NewRequest(http.MethodPost, url+"/v1/completions",
		strings.NewReader(`{"model":"gemma4-tiny-e2b","prompt":"Hello","max_tokens":8}`))
	req.Header.Set("Authorization", "Bearer from-env")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var out struct {
		Usage struct {
			CompletionTokens int             `json:"completion_tokens"`
			Speculative      json.RawMessage `json:"speculative"`
		} `json:"usage"`
	}
	json.NewDecoder(resp.Body).Decode(&out)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || out.Usage.CompletionTokens < 1 || len(out.Usage.Speculative) == 0 {
		t.Errorf("completion: status %d, usage %+v", resp.StatusCode, out.Usage)
	}

	if err := stop(); err != nil {
		t.Fatalf("serve returned %v after its context ended, want nil (exit 0)", err)
	}
	// JSON log lines: ready (with the URL), one per request, shutting down, stopped.
	var msgs []string
	for _, line := range strings.Split(stderr.String(), "\n") {
		var rec struct {
			Msg string `json:"msg"`
		}
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg != "" {
			msgs = append(msgs, rec.Msg)
		}
	}
	joined := strings.Join(msgs, "|")
	for _, want := range []string{"tandem serve: ready", "tandem serve: shutting down", "tandem serve: stopped"} {
		if !strings.Contains(joined, want) {
			t.Errorf("log has no %q line; messages: %v", want, msgs)
		}
	}
	if !strings.Contains(stderr.String(), "loading weights") {
		t.Errorf("no progress bar while loading:\n%s", stderr.String())
	}
}

// TestServeNoGrace: --shutdown-grace 0 cancels running requests at once instead of meaning
// the default 10s: the stream of a long request ends with the shutting_down error event.
func TestServeNoGrace(t *testing.T) {
	model := tinyModel(t, "gemma4-tiny-e2b")
	// Only <bos> ends a completion, which greedy decoding of this model never writes: the
	// request runs until it is cancelled.
	if err := os.WriteFile(filepath.Join(model, "generation_config.json"), []byte(`{"eos_token_id": [2]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	url, stderr, stop := runServe(t, "--model", model, "--shutdown-grace", "0", "--temp", "0", "--ctx-size", "4096")
	resp, err := http.Post(url+"/v1/completions", "application/json",
		strings.NewReader(`{"prompt":"Once upon a time","max_tokens":4000,"stream":true,"stop_token_ids":[]}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	buf := make([]byte, 1)
	if _, err := resp.Body.Read(buf); err != nil { // the stream has begun
		t.Fatal(err)
	}
	start := time.Now()
	stopped := make(chan error, 1)
	go func() { stopped <- stop() }()
	rest, _ := io.ReadAll(resp.Body)
	if err := <-stopped; err != nil {
		t.Fatalf("serve returned %v, want nil", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("shutdown took %s with --shutdown-grace 0", d)
	}
	if !strings.Contains(string(rest), `"code":"shutting_down"`) || !strings.HasSuffix(string(rest), "data: [DONE]\n\n") {
		t.Errorf("the stream's end: %.300q", rest[max(0, len(rest)-300):])
	}
	if !regexp.MustCompile(`shutting down.*grace_s=0 `).MatchString(stderr.String()) {
		t.Errorf("no shutdown line with grace_s=0:\n%s", stderr.String())
	}
}
