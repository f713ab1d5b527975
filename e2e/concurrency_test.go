package e2e

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"

	"tandem/serve"
)

// concurrentRequest is request i of the concurrency test: varied prompts, half greedy and half
// sampled with a seed (a seeded request draws the same tokens whatever runs beside it).
func concurrentRequest(i int) openai.ChatCompletionNewParams {
	p := userChat(fmt.Sprintf("%s (request %d)", chatPrompts[i%len(chatPrompts)], i), 40)
	if i%2 == 1 {
		p.Temperature, p.TopP, p.Seed = openai.Float(0.9), openai.Float(0.95), openai.Int(int64(1000+i))
	}
	return p
}

// 32 simultaneous streaming requests with the drafter: each one's output equals that request
// run alone, and the /metrics counters add up to the requests' usage.
func TestConcurrentStreams(t *testing.T) {
	const n = 32
	s := start(t, serve.Options{Draft: drafter, Parallel: 8, MaxQueue: 64, CtxSize: 512})
	ctx := context.Background()
	before := s.metrics(t)

	results := make([]chatResult, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	gate := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-gate
			results[i], errs[i] = runChat(ctx, s.client, concurrentRequest(i), true)
		}()
	}
	close(gate)
	wg.Wait()
	var prompt, completion, drafted, accepted int64
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("request %d: %v", i, errs[i])
		}
		r := results[i]
		prompt += r.Usage.PromptTokens
		completion += r.Usage.CompletionTokens
		if r.Speculative == nil {
			t.Fatalf("request %d: no speculative usage", i)
		}
		drafted += int64(r.Speculative.Drafted)
		accepted += int64(r.Speculative.Accepted)
	}

	// The request counter moves when each handler returns, a moment after its stream ended.
	const okChats = `tandem:http_requests_total{route="/v1/chat/completions",status="200"}`
	var after map[string]float64
	waitFor(t, "the request counter to reach 32", 10*time.Second, func() bool {
		after = s.metrics(t)
		return after[okChats]-before[okChats] >= n
	})
	delta := func(name string) int64 { return int64(after[name] - before[name]) }
	for _, c := range []struct {
		metric string
		want   int64
	}{
		{okChats, n},
		{"tandem:request_finished_total", n},
		{"tandem:prompt_tokens_total", prompt},
		{"tandem:generation_tokens_total", completion},
		{"tandem:spec_decode_num_draft_tokens_total", drafted},
		{"tandem:spec_decode_num_accepted_tokens_total", accepted},
		{"tandem:num_requests_running", 0},
		{"tandem:num_requests_waiting", 0},
		{"tandem:kv_cache_used_tokens", 0},
	} {
		if got := delta(c.metric); got != c.want {
			t.Errorf("%s moved by %d, want %d", c.metric, got, c.want)
		}
	}

	// The same requests one at a time.
	for i := range n {
		alone, err := runChat(ctx, s.client, concurrentRequest(i), true)
		if err != nil {
			t.Fatal(err)
		}
		got := results[i]
		if got.Content != alone.Content || got.Reasoning != alone.Reasoning || got.Finish != alone.Finish ||
			got.Usage.CompletionTokens != alone.Usage.CompletionTokens {
			t.Errorf("request %d: among 32 %q/%q (%s, %d tokens); alone %q/%q (%s, %d tokens)", i,
				got.Content, got.Reasoning, got.Finish, got.Usage.CompletionTokens,
				alone.Content, alone.Reasoning, alone.Finish, alone.Usage.CompletionTokens)
		}
	}
}

// A client that goes away mid-stream frees its row and KV at once; the streams beside it
// finish with the output they have alone.
func TestClientDisconnect(t *testing.T) {
	// No stop tokens: every request runs to max_tokens, so its length is known.
	s := start(t, serve.Options{Draft: drafter, Parallel: 4, StopTokens: []int32{}, CtxSize: 4096})
	ctx := context.Background()
	others := []openai.CompletionNewParams{textCompletion("Once upon a time", 600), textCompletion("The quick brown fox", 600)}
	want := make([]completionResult, len(others))
	for i, p := range others {
		var err error
		if want[i], err = runCompletion(ctx, s.client, p, false); err != nil {
			t.Fatal(err)
		}
	}

	got := make([]completionResult, len(others))
	var wg sync.WaitGroup
	for i, p := range others {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var err error
			if got[i], err = runCompletion(ctx, s.client, p, true); err != nil {
				t.Error(err)
			}
		}()
	}

	vctx, vcancel := context.WithCancel(ctx)
	stream := s.client.Completions.NewStreaming(vctx, textCompletion("Dear diary", 4000))
	for chunks := 0; chunks < 5 && stream.Next(); chunks++ { // read a few chunks, then go away
	}
	waitFor(t, "three requests running", 10*time.Second, func() bool { return s.health(t).Queue.Running == 3 })
	kv3 := s.health(t).Memory.KVUsedTokens
	vcancel()
	stream.Close()
	var h health
	waitFor(t, "the cancelled request to leave", 5*time.Second, func() bool { h = s.health(t); return h.Queue.Running < 3 })
	if h.Queue.Running == 2 && h.Memory.KVUsedTokens >= kv3 {
		t.Errorf("KV used %d tokens with three requests running, %d after one left", kv3, h.Memory.KVUsedTokens)
	}
	wg.Wait()
	for i := range others {
		if got[i].Text != want[i].Text || got[i].Finish != "length" || got[i].Usage.CompletionTokens != 600 {
			t.Errorf("stream %d beside the disconnect: %q (%s, %d tokens), alone %q", i, got[i].Text, got[i].Finish,
				got[i].Usage.CompletionTokens, want[i].Text)
		}
	}
	waitFor(t, "every row to be freed", 10*time.Second, func() bool {
		h = s.health(t)
		return h.Queue.Running == 0 && h.Memory.KVUsedTokens == 0
	})
	// The engine counted the victim as finished, well short of its 4000 tokens.
	m := s.metrics(t)
	if gen := m["tandem:generation_tokens_total"]; gen >= 2*600*2+1000 {
		t.Errorf("%v tokens generated: the cancelled request ran on", gen)
	}
}
