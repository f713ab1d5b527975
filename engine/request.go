package engine

import (
	"context"
	"slices"
	"time"

	"tandem/compute"
	"tandem/generation"
	"tandem/kvcache"
	"tandem/spec"
)

// eventBuffer is each request's channel capacity. The scheduler never
// blocks on a channel: it sends a token event only while two slots are
// free and otherwise coalesces tokens into the next event, so the last
// slot is always there for the final event.
const eventBuffer = 8

// request is one submitted request. Until admitted it sits in the queue;
// from then on only the scheduler goroutine touches it.
type request struct {
	ctx      context.Context
	req      Request
	out      chan Event
	reserve  int // KV tokens held while running: prompt + max tokens
	logprobs bool
	top      int

	queued, started, first time.Time
	pending                Event // tokens not delivered yet
	usage                  Usage

	// Decoding state, from admission.
	seq    *generation.Seq
	cache  *kvcache.Cache
	fed    int             // prompt tokens in the cache
	hidden *compute.Tensor // [1, H]: the target's post-norm hidden state before the pending token (drafting only)
	draft  *spec.Assistant // nil: plain decoding
	stats  spec.Stats
	// carry is a proposal whose verify was taken back (its drafts, drawn
	// ahead, met a top that did not decide one; spec.Drawn): the next step
	// verifies it instead of drafting anew, so the drafter's random stream
	// is drawn as alone.
	carry *spec.Proposal
	// guess decides when the request's next drafts are picked before the
	// last verdict is read, and ahead holds them once that verdict proved
	// the guess right (drafts.go).
	guess *spec.Guess
	ahead *aheadDraft
}

func newRequest(ctx context.Context, r Request) *request {
	// The caller keeps its slices; the engine reads its own copies.
	r.Prompt, r.StopTokens = slices.Clone(r.Prompt), slices.Clone(r.StopTokens)
	return &request{
		ctx:      ctx,
		req:      r,
		out:      make(chan Event, eventBuffer),
		reserve:  len(r.Prompt) + r.MaxTokens,
		logprobs: r.Logprobs && r.TopLogprobs >= 0,
		top:      max(r.TopLogprobs, 0),
		queued:   time.Now(),
	}
}

// prefilling reports whether part of the prompt is still to be fed.
func (r *request) prefilling() bool { return r.fed < len(r.req.Prompt) }

// push adds emitted tokens (and their logprobs) and delivers what it can.
func (r *request) push(tokens []int32, lps []Logprob) {
	if len(tokens) == 0 {
		return
	}
	if r.first.IsZero() {
		r.first = time.Now()
	}
	r.pending.Tokens = append(r.pending.Tokens, tokens...)
	r.pending.Logprobs = append(r.pending.Logprobs, lps...)
	r.flush()
}

// flush sends the pending tokens if the reader has left room, keeping the
// last slot for the final event.
func (r *request) flush() {
	if len(r.pending.Tokens) == 0 || len(r.out) >= cap(r.out)-1 {
		return
	}
	ev := r.pending
	r.pending = Event{}
	r.stamp(&ev)
	r.out <- ev
}

// finish sends the final event, with any tokens still pending, and closes
// the channel. The send never blocks (see eventBuffer).
func (r *request) finish(reason string, err error) {
	ev := r.pending
	r.pending = Event{}
	ev.Done, ev.FinishReason, ev.Usage, ev.Err = true, reason, r.usage, err
	r.stamp(&ev)
	r.out <- ev
	close(r.out)
}

func (r *request) stamp(ev *Event) {
	ev.Queued, ev.Started, ev.FirstToken = r.queued, r.started, r.first
}
