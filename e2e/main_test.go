package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"go.uber.org/goleak"

	"tandem/compute/computetest"
	"tandem/model/gemma4"
	"tandem/sample"
	"tandem/serve"
)

// The tiny generated Gemma 4 E2B target and its assistant drafter (random weights, every
// structural feature of the real models), written once for the whole run.
var target, drafter string

// transport is shared by every client so the leak check can close its idle connections.
var transport = &http.Transport{MaxIdleConnsPerHost: 64}

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "tandem-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	target, drafter = filepath.Join(dir, "gemma4-tiny-e2b"), filepath.Join(dir, "gemma4-tiny-e2b-assistant")
	for _, p := range []struct{ preset, dir string }{{"gemma4-tiny-e2b", target}, {"gemma4-tiny-e2b-assistant", drafter}} {
		pr, err := gemma4.LookupPreset(p.preset)
		if err == nil {
			err = pr.Generate(p.dir, gemma4.GenerateOptions{Seed: 1})
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "e2e: generating", p.preset+":", err)
			os.Exit(1)
		}
	}
	code := m.Run()
	os.RemoveAll(dir)
	// Every server was stopped by its test's cleanup; nothing of theirs may be left running.
	transport.CloseIdleConnections()
	if code == 0 {
		// The GPU backend's device thread lives as long as the process.
		if err := goleak.Find(goleak.IgnoreAnyFunction("tandem/compute/cuda.(*Device).loop")); err != nil {
			fmt.Fprintln(os.Stderr, "e2e: goroutines left after the tests:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// testServer is a tandem server running in-process on a loopback port.
type testServer struct {
	URL    string // http://127.0.0.1:PORT
	stop   context.CancelFunc
	done   chan error
	logs   *syncBuffer
	client openai.Client

	waitOnce sync.Once
	runErr   error
	returned bool
}

// wait returns serve.Run's result, or times out.
func (s *testServer) wait(d time.Duration) (err error, returned bool) {
	s.waitOnce.Do(func() {
		select {
		case s.runErr = <-s.done:
			s.returned = true
		case <-time.After(d):
		}
	})
	return s.runErr, s.returned
}

// start runs serve.Run with opt (Model defaults to the tiny target; greedy sampling unless
// set) and stops it when the test ends, failing the test unless Run returns nil.
func start(t testing.TB, opt serve.Options) *testServer {
	t.Helper()
	if opt.Model == "" {
		opt.Model = target
	}
	if opt.Sampling == nil {
		opt.Sampling = &greedy
	}
	if opt.ModelName == "" {
		opt.ModelName = "tiny"
	}
	if opt.Backend == nil {
		opt.Backend = computetest.Backend(t) // the GPU with TANDEM_TEST_BACKEND=cuda
	}
	s := &testServer{done: make(chan error, 1), logs: &syncBuffer{}}
	opt.Logger = slog.New(slog.NewTextHandler(s.logs, nil))
	ready := make(chan string, 1)
	opt.Ready = func(url string) { ready <- url }
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.stop = cancel
	go func() { s.done <- serve.Run(ctx, ln, opt) }()
	select {
	case s.URL = <-ready:
	case err := <-s.done:
		cancel()
		t.Fatalf("serve.Run returned before it was ready: %v", err)
	case <-time.After(60 * time.Second):
		cancel()
		t.Fatal("the server was not ready within 60s")
	}
	s.client = s.newClient(opt.APIKey)
	t.Cleanup(func() {
		s.stop()
		if err, ok := s.wait(60 * time.Second); !ok {
			t.Errorf("serve.Run did not return within 60s of its context ending")
		} else if err != nil {
			t.Errorf("serve.Run returned %v, want nil", err)
		}
		if t.Failed() {
			t.Logf("server log:\n%s", s.logs.String())
		}
	})
	return s
}

// greedy is the default sampling of test servers, so outputs are reproducible.
var greedy = sample.Params{}

// newClient is the official client pointed at the server, with retries off so every status
// the server sends is seen.
func (s *testServer) newClient(key string, extra ...option.RequestOption) openai.Client {
	if key == "" {
		key = "none"
	}
	opts := []option.RequestOption{
		option.WithBaseURL(s.URL + "/v1/"), option.WithAPIKey(key), option.WithMaxRetries(0),
		option.WithHTTPClient(&http.Client{Transport: transport}),
	}
	return openai.NewClient(append(opts, extra...)...)
}

// get fetches a path and returns the status and body.
func (s *testServer) get(t testing.TB, path string) (int, []byte) {
	t.Helper()
	resp, err := (&http.Client{Transport: transport}).Get(s.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

// post sends a JSON body with an optional bearer key.
func (s *testServer) post(t testing.TB, path, key string, body []byte) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, s.URL+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := (&http.Client{Transport: transport}).Do(req)
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

// health is the part of /health the tests read.
type health struct {
	Status string `json:"status"`
	Memory struct {
		KVUsedTokens   int `json:"kv_used_tokens"`
		KVBudgetTokens int `json:"kv_budget_tokens"`
	} `json:"memory"`
	Queue struct {
		Running int `json:"running"`
		Waiting int `json:"waiting"`
	} `json:"queue"`
	Requests int64 `json:"requests_total"`
}

func (s *testServer) health(t testing.TB) health {
	t.Helper()
	_, b := s.get(t, "/health")
	var h health
	if err := json.Unmarshal(b, &h); err != nil {
		t.Fatalf("/health: %v: %s", err, b)
	}
	return h
}

// waitFor polls cond until it holds or the time is up.
func waitFor(t testing.TB, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// metrics scrapes /metrics into name{labels} → value (Prometheus text format, no histograms
// needed here).
func (s *testServer) metrics(t testing.TB) map[string]float64 {
	t.Helper()
	code, b := s.get(t, "/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics: status %d", code)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		out[line[:i]] = v
	}
	return out
}

// syncBuffer is a bytes.Buffer safe for the server's concurrent log writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
