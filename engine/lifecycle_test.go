package engine

import (
	"context"
	"errors"
	"math"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"tandem/sample"
)

// TestCancellationFreesTheRow cancels a request mid-generation: its final
// event says cancelled, its reservation is released at once, and the
// requests running beside it produce exactly their tokens.
func TestCancellationFreesTheRow(t *testing.T) {
	e := start(t, Config{Drafter: helper, Parallel: 4, PrefillSize: 16, CtxSize: 512, PrefixCacheTokens: -1})
	long := Request{Prompt: promptOf(30, 1), MaxTokens: 400}
	others := []Request{
		{Prompt: promptOf(12, 2), MaxTokens: 150},
		{Prompt: promptOf(40, 3), MaxTokens: 150, Sample: sample.Params{Temperature: 1, TopK: 5, Seed: 3}},
		{Prompt: promptOf(5, 4), MaxTokens: 150, Sample: sample.Params{Temperature: 50, Seed: 4}},
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	lc := submit(t, e, ctx, long)
	var oc []<-chan Event
	for _, r := range others {
		oc = append(oc, submit(t, e, context.Background(), r))
	}
	var got []int32
	for ev := range lc {
		got = append(got, ev.Tokens...)
		if len(got) >= 3 {
			break
		}
	}
	before := e.Stats()
	if before.Running != 4 || before.KVUsedTokens != 30+400+12+150+40+150+5+150 {
		t.Fatalf("before cancelling: %d running, %d KV tokens reserved", before.Running, before.KVUsedTokens)
	}
	cancel()
	cancelled := time.Now()
	rest := collect(t, lc)
	if rest.final.FinishReason != FinishCancelled || rest.final.Err != nil {
		t.Fatalf("final event %+v, want finish reason %q", rest.final, FinishCancelled)
	}
	if wait := time.Since(cancelled); wait > 5*time.Second {
		t.Errorf("the cancelled request ended %v after its context", wait)
	}
	if n := len(got) + len(rest.tokens); n != rest.final.Usage.CompletionTokens || n >= long.MaxTokens {
		t.Errorf("cancelled request: %d tokens delivered, usage %+v", n, rest.final.Usage)
	}
	// The others have well over a hundred tokens to go: still running.
	if after := e.Stats(); after.Running != 3 || after.KVUsedTokens != before.KVUsedTokens-(30+400) {
		t.Errorf("after cancelling: %d running, %d KV tokens reserved; want 3 and %d", after.Running, after.KVUsedTokens, before.KVUsedTokens-430)
	}
	for i, r := range others {
		g := collect(t, oc[i])
		want, reason, _ := alone(t, r, assistantFor(t, r.Sample), DefaultDraftTokens, 16)
		if !slices.Equal(g.tokens, want) || g.final.FinishReason != reason {
			t.Errorf("request %d beside the cancelled one: %v (%s), alone %v (%s)", i, g.tokens, g.final.FinishReason, want, reason)
		}
	}
}

// TestCancelWhileQueued: a request cancelled before it was admitted ends
// with a cancelled final event and leaves the queue.
func TestCancelWhileQueued(t *testing.T) {
	e := start(t, Config{Parallel: 1, CtxSize: 2048})
	ctxA, cancelA := context.WithCancel(context.Background())
	defer cancelA()
	a := submit(t, e, ctxA, Request{Prompt: promptOf(8, 1), MaxTokens: 2000})
	<-a // running
	ctxB, cancelB := context.WithCancel(context.Background())
	b := submit(t, e, ctxB, Request{Prompt: promptOf(8, 2), MaxTokens: 5})
	if s := e.Stats(); s.Waiting != 1 || s.Running != 1 {
		t.Fatalf("%d waiting, %d running; want 1 and 1", s.Waiting, s.Running)
	}
	cancelB()
	g := collect(t, b)
	if g.final.FinishReason != FinishCancelled || len(g.tokens) != 0 || !g.final.Started.IsZero() || g.final.Queued.IsZero() {
		t.Fatalf("queued request after cancel: %d tokens, final %+v", len(g.tokens), g.final)
	}
	if s := e.Stats(); s.Waiting != 0 || s.Running != 1 {
		t.Fatalf("after cancelling the queued request: %d waiting, %d running", s.Waiting, s.Running)
	}
	cancelA()
	if g := collect(t, a); g.final.FinishReason != FinishCancelled {
		t.Fatalf("running request: final %+v", g.final)
	}
}

// TestQueueFull: with every row busy and the queue at MaxQueue, Submit
// refuses at once.
func TestQueueFull(t *testing.T) {
	e := start(t, Config{Parallel: 1, MaxQueue: 1, CtxSize: 2048})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a := submit(t, e, ctx, Request{Prompt: promptOf(8, 1), MaxTokens: 2000})
	<-a // admitted and running: the queue is empty again
	b := submit(t, e, ctx, Request{Prompt: promptOf(8, 2), MaxTokens: 5})
	if _, err := e.Submit(ctx, Request{Prompt: promptOf(8, 3), MaxTokens: 5}); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("third request: error %v, want ErrQueueFull", err)
	}
	if s := e.Stats(); s.Running != 1 || s.Waiting != 1 {
		t.Fatalf("%d running, %d waiting", s.Running, s.Waiting)
	}
	cancel()
	for _, ch := range []<-chan Event{a, b} {
		if g := collect(t, ch); g.final.FinishReason != FinishCancelled {
			t.Fatalf("final %+v", g.final)
		}
	}
}

// TestSubmitRejectsBadRequests: every invalid request is refused
// synchronously with an error naming the problem.
func TestSubmitRejectsBadRequests(t *testing.T) {
	e := start(t, Config{CtxSize: 64})
	ok := promptOf(10, 1)
	for _, tc := range []struct {
		name string
		r    Request
		want string // a substring of the error
		ctx  *ContextError
	}{
		{"empty prompt", Request{MaxTokens: 4}, "prompt is empty", nil},
		{"no tokens asked for", Request{Prompt: ok}, "max tokens must be positive, got 0", nil},
		{"negative max tokens", Request{Prompt: ok, MaxTokens: -3}, "got -3", nil},
		{"negative token id", Request{Prompt: []int32{2, -1}, MaxTokens: 4}, "prompt token 1 is -1, outside the vocabulary [0, 512)", nil},
		{"token id past the vocabulary", Request{Prompt: []int32{2, 512}, MaxTokens: 4}, "prompt token 1 is 512", nil},
		{"bad temperature", Request{Prompt: ok, MaxTokens: 4, Sample: sample.Params{Temperature: -1}}, "temperature", nil},
		{"frequency penalty out of range", Request{Prompt: ok, MaxTokens: 4, Sample: sample.Params{FrequencyPenalty: 2.5}}, "frequency_penalty must be in [-2, 2], got 2.5", nil},
		{"presence penalty out of range", Request{Prompt: ok, MaxTokens: 4, Sample: sample.Params{PresencePenalty: -3}}, "presence_penalty", nil},
		{"too many top logprobs", Request{Prompt: ok, MaxTokens: 4, Logprobs: true, TopLogprobs: 21}, "top logprobs must be in [0, 20]", nil},
		{"prompt plus max tokens over the context", Request{Prompt: ok, MaxTokens: 55}, "the prompt (10 tokens) plus max_tokens (55) exceeds the context size of 64 tokens",
			&ContextError{PromptTokens: 10, MaxTokens: 55, CtxSize: 64}},
		{"max tokens that would overflow", Request{Prompt: ok, MaxTokens: math.MaxInt}, "exceeds the context size of 64 tokens",
			&ContextError{PromptTokens: 10, MaxTokens: math.MaxInt, CtxSize: 64}},
		{"prompt alone over the context", Request{Prompt: promptOf(64, 1), MaxTokens: 1}, "the prompt has 64 tokens; the context size is 64",
			&ContextError{PromptTokens: 64, MaxTokens: 1, CtxSize: 64}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ch, err := e.Submit(context.Background(), tc.r)
			if err == nil || ch != nil {
				t.Fatalf("Submit accepted it")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q, want it to contain %q", err, tc.want)
			}
			var ce *ContextError
			if errors.As(err, &ce) != (tc.ctx != nil) || (ce != nil && *ce != *tc.ctx) {
				t.Fatalf("error %#v, want context error %+v", err, tc.ctx)
			}
		})
	}
	// The largest request that fits is accepted, and a cancelled context
	// is refused up front.
	if g := collect(t, submit(t, e, context.Background(), Request{Prompt: ok, MaxTokens: 54})); g.final.FinishReason != FinishLength {
		t.Fatalf("a request of exactly the context size: %+v", g.final)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := e.Submit(ctx, Request{Prompt: ok, MaxTokens: 1}); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled context: error %v", err)
	}
	if s := e.Stats(); s.Requests != 1 {
		t.Fatalf("%d requests counted, want 1", s.Requests)
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	unbound, err := loadUnbound()
	if err != nil {
		t.Fatal(err)
	}
	defer unbound.Close()
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"no model", Config{}, "engine: no model"},
		{"context beyond the model", Config{Model: target, CtxSize: 5000}, "context size 5000 is outside [1, 4096]"},
		{"negative parallel", Config{Model: target, Parallel: -1}, "parallel must be positive, got -1"},
		{"negative prefill size", Config{Model: target, PrefillSize: -2}, "prefill size must be positive"},
		{"negative queue", Config{Model: target, MaxQueue: -1}, "max queue must be positive"},
		{"draft depth", Config{Model: target, Drafter: helper, DraftTokens: 65}, "number of draft tokens must be between 1 and 64 (got 65)"},
		{"unbound drafter", Config{Model: target, Drafter: unbound}, "the drafter is not bound to the model"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, err := New(tc.cfg)
			if err == nil {
				closeEngine(t, e)
				t.Fatal("New accepted it")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q, want it to contain %q", err, tc.want)
			}
		})
	}
}

// TestCloseLetsRequestsFinish: Close stops admitting but lets running and
// queued requests finish; later Submits fail with ErrClosed.
func TestCloseLetsRequestsFinish(t *testing.T) {
	e, err := New(Config{Model: target, Drafter: helper, Parallel: 1, CtxSize: 256})
	if err != nil {
		t.Fatal(err)
	}
	var chans []<-chan Event
	for i := range 3 {
		chans = append(chans, submit(t, e, context.Background(), Request{Prompt: promptOf(6, uint64(i)), MaxTokens: 20}))
	}
	if err := e.Close(context.Background()); err != nil {
		t.Fatalf("Close: %v", err)
	}
	for i, ch := range chans {
		if g := collect(t, ch); g.final.FinishReason != FinishLength || len(g.tokens) != 20 {
			t.Fatalf("request %d: %d tokens, final %+v", i, len(g.tokens), g.final)
		}
	}
	if _, err := e.Submit(context.Background(), Request{Prompt: promptOf(6, 9), MaxTokens: 2}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Submit after Close: %v", err)
	}
	if err := e.Close(context.Background()); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// TestCloseCancelsWhatIsLeft: when Close's context ends first, running and
// queued requests are cancelled and Close reports the context's error.
func TestCloseCancelsWhatIsLeft(t *testing.T) {
	e, err := New(Config{Model: target, Parallel: 1, CtxSize: 4096})
	if err != nil {
		t.Fatal(err)
	}
	running := submit(t, e, context.Background(), Request{Prompt: promptOf(6, 1), MaxTokens: 4000})
	queued := submit(t, e, context.Background(), Request{Prompt: promptOf(6, 2), MaxTokens: 4000})
	<-running
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := e.Close(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Close: %v, want the deadline", err)
	}
	for i, ch := range []<-chan Event{running, queued} {
		if g := collect(t, ch); g.final.FinishReason != FinishCancelled {
			t.Fatalf("request %d: final %+v", i, g.final)
		}
	}
	if s := e.Stats(); s.Running != 0 || s.Waiting != 0 || s.KVUsedTokens != 0 || s.Requests != 2 {
		t.Fatalf("after Close: %+v", s)
	}
}

// TestNoGoroutinesLeftAfterClose: the scheduler (and anything it started)
// is gone once Close returns.
func TestNoGoroutinesLeftAfterClose(t *testing.T) {
	base := runtime.NumGoroutine()
	e, err := New(Config{Model: target, Drafter: helper, Parallel: 2})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	a := submit(t, e, context.Background(), Request{Prompt: promptOf(20, 1), MaxTokens: 10})
	b := submit(t, e, ctx, Request{Prompt: promptOf(20, 2), MaxTokens: 1000})
	collect(t, a)
	cancel()
	collect(t, b)
	if err := e.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	n := runtime.NumGoroutine()
	for deadline := time.Now().Add(2 * time.Second); n > base && time.Now().Before(deadline); n = runtime.NumGoroutine() {
		time.Sleep(10 * time.Millisecond)
	}
	if n > base {
		buf := make([]byte, 1<<16)
		t.Fatalf("%d goroutines after Close, %d before New:\n%s", n, base, buf[:runtime.Stack(buf, true)])
	}
}

// TestSlowReaderDoesNotStallOthers: a reader that does not read at all
// until the end holds up nobody; its tokens arrive coalesced, complete.
func TestSlowReaderDoesNotStallOthers(t *testing.T) {
	e := start(t, Config{Drafter: helper, Parallel: 2, CtxSize: 256})
	slow := Request{Prompt: promptOf(10, 1), MaxTokens: 60}
	fast := Request{Prompt: promptOf(10, 2), MaxTokens: 60}
	sc := submit(t, e, context.Background(), slow)
	fc := submit(t, e, context.Background(), fast)
	if g := collect(t, fc); len(g.tokens) != 60 {
		t.Fatalf("fast reader: %d tokens", len(g.tokens))
	}
	waitFor(t, "the slow reader's request to finish", func() bool { return e.Stats().Running == 0 })
	g := collect(t, sc)
	want, _, _ := alone(t, slow, assistantFor(t, slow.Sample), DefaultDraftTokens, 0)
	if !slices.Equal(g.tokens, want) {
		t.Fatalf("slow reader: %v, alone %v", g.tokens, want)
	}
	if g.events > eventBuffer {
		t.Fatalf("slow reader got %d events for %d tokens; want them coalesced into at most %d", g.events, len(g.tokens), eventBuffer)
	}
}
