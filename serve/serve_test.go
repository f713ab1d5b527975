package serve

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"tandem/sample"
)

// TestDefaultSampling: generation_config.json's temperature, top_p, top_k and min_p are the
// defaults (the README's flag table says so for --min-p too), unless do_sample is false.
func TestDefaultSampling(t *testing.T) {
	for _, tc := range []struct {
		name, config string
		want         sample.Params
		wantErr      bool
	}{
		{"all four", `{"do_sample":true,"temperature":0.7,"top_p":0.9,"top_k":40,"min_p":0.05}`,
			sample.Params{Temperature: 0.7, TopP: 0.9, TopK: 40, MinP: 0.05}, false},
		{"no min_p", `{"temperature":1,"top_k":64}`, sample.Params{Temperature: 1, TopK: 64}, false},
		{"do_sample false", `{"do_sample":false,"temperature":0.7,"min_p":0.1}`, sample.Params{}, false},
		{"min_p out of range", `{"temperature":1,"min_p":1.5}`, sample.Params{}, true},
		{"no file", "", sample.Params{}, false},
	} {
		dir := t.TempDir()
		if tc.config != "" {
			if err := os.WriteFile(filepath.Join(dir, "generation_config.json"), []byte(tc.config), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		got, err := DefaultSampling(dir)
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("%s: %+v, err %v; want %+v (error %v)", tc.name, got, err, tc.want, tc.wantErr)
		}
	}
}

// TestLoadingAnswers protects the listener's answers while the models load: a 503 with
// Retry-After in the API's error shape, {"status":"loading"} on /health, and Run returning at
// once when its context ends during the load.
func TestLoadingAnswers(t *testing.T) {
	hold, held := make(chan struct{}), make(chan struct{})
	loadStarted = func() { close(held); <-hold }
	defer func() { loadStarted = nil }()
	defer close(hold) // the load goes on, fails on the missing directory, and is dropped
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, ln, Options{Model: filepath.Join(t.TempDir(), "none"), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	}()
	<-held
	url := "http://" + ln.Addr().String()
	for _, c := range []struct{ method, path, want string }{
		{"GET", "/health", `"status":"loading"`},
		{"POST", "/v1/completions", `"code":"model_loading"`},
	} {
		req, _ := http.NewRequest(c.method, url+c.path, strings.NewReader(`{"prompt":"hi"}`))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" || !strings.Contains(string(body), c.want) {
			t.Errorf("%s %s while loading: %d (Retry-After %q) %s", c.method, c.path, resp.StatusCode, resp.Header.Get("Retry-After"), body)
		}
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run stopped during the load: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return when its context ended during the load")
	}
}
