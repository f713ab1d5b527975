// Package engine serves many generation requests on one model at once:
// a request queue, continuous batching (rows join and leave between steps,
// prefill chunks interleaved with decode steps), admission by a KV budget,
// per-request cancellation, a prefix cache, and speculative decoding for
// every request when a drafter is configured.
//
// A request's output does not depend on what else is running: the kernels
// are batch-invariant, so greedy output is bit-identical to the request run
// alone, and a seeded sampled request draws the same tokens.
//
// The engine works in token ids; text, chat templates, stop strings and the
// HTTP API belong to the server.
package engine

import (
	"errors"
	"fmt"
	"time"

	"tandem/model/gemma4"
	"tandem/sample"
	"tandem/spec"
)

// Errors Submit returns; the server maps them to HTTP statuses.
var (
	// ErrQueueFull: the queue holds Config.MaxQueue waiting requests (429).
	ErrQueueFull = errors.New("engine: the request queue is full")
	// ErrClosed: the engine is shutting down or closed (503).
	ErrClosed = errors.New("engine: shutting down")
)

// ContextError reports a request that cannot fit the context: the prompt
// plus the tokens asked for exceed Config.CtxSize (400).
type ContextError struct {
	PromptTokens int
	MaxTokens    int
	CtxSize      int
}

func (e *ContextError) Error() string {
	if e.PromptTokens >= e.CtxSize {
		return fmt.Sprintf("the prompt has %d tokens; the context size is %d", e.PromptTokens, e.CtxSize)
	}
	return fmt.Sprintf("the prompt (%d tokens) plus max_tokens (%d) exceeds the context size of %d tokens", e.PromptTokens, e.MaxTokens, e.CtxSize)
}

// Config configures an Engine.
type Config struct {
	Model *gemma4.Model
	// Drafter, if set (already bound to Model), makes every request
	// speculative with DraftTokens drafts per round.
	Drafter     *gemma4.Assistant
	DraftTokens int                 // 0: 3
	Draft       gemma4.DraftOptions // query position, shared-KV cap
	// CtxSize is the most tokens (prompt + output) one request may hold;
	// 0: min(the model's max positions, 8192).
	CtxSize int
	// Parallel is the most requests decoding at once (rows per step); 0: 4.
	// The KV budget is CtxSize × Parallel tokens.
	Parallel int
	// PrefillSize is the most prompt tokens one step feeds per request; 0:
	// generation.DefaultPrefillSize.
	PrefillSize int
	// MaxQueue is the most requests waiting for admission; 0: 64.
	MaxQueue int
	// PrefixCacheTokens bounds the KV tokens kept for reuse by later
	// requests sharing a prompt prefix; 0: CtxSize; negative: off.
	PrefixCacheTokens int
	// Judge decides speculative rounds; its zero value is the target's
	// own decision (the greedy walk, rejection sampling). Benchmarks set
	// its synthetic coin (tandem bench --engine --synthetic-acceptance),
	// whose output is NOT the target's.
	Judge spec.Judge
	// AdaptiveDrafts lets greedy requests stop drafting while steps
	// without drafts emit more tokens a second than steps with them, at
	// the step's batch size, as measured while the engine runs (the
	// faster mode is taken, the other tried now and then; adaptive.go).
	// Greedy output is the same either way (not under Judge's synthetic
	// coin, which is drawn per draft); sampled requests always draft.
	AdaptiveDrafts bool

	// beforeStep, if set (tests only), runs on the scheduler before each
	// step: a test can hold the engine between steps to look at it.
	beforeStep func()
}

// Request is one generation request, in tokens.
type Request struct {
	Prompt     []int32
	MaxTokens  int // > 0
	Sample     sample.Params
	StopTokens []int32 // generation ends after emitting one of these
	// TopLogprobs ≥ 0 asks for each emitted token's log-probability and
	// that many alternatives; -1 (or Logprobs false) asks for none.
	Logprobs    bool
	TopLogprobs int
}

// Logprob is an emitted token's log-probability under the target's
// distribution (log-softmax of the logits, before sampling transforms),
// with the most likely alternatives.
type Logprob struct {
	Token   int32
	Logprob float32
	Top     []TokenLogprob
}

// TokenLogprob is one alternative.
type TokenLogprob struct {
	Token   int32
	Logprob float32
}

// Finish reasons.
const (
	FinishStop      = "stop"      // a stop token was emitted
	FinishLength    = "length"    // MaxTokens reached
	FinishCancelled = "cancelled" // the request's context ended
	FinishError     = "error"     // the engine failed (Event.Err says why)
)

// Usage counts a request's tokens and speculative work.
type Usage struct {
	PromptTokens     int
	CachedTokens     int // prompt tokens whose KV came from the prefix cache
	CompletionTokens int
	// Speculative decoding: rounds (target verify passes), drafts proposed
	// and drafts accepted.
	Rounds   int
	Drafted  int
	Accepted int
	// Ahead counts the rounds whose drafts were picked before the last
	// verdict was read, on a guess of it that proved right (drafts.go).
	Ahead int
}

// MeanAcceptLength is the tokens each verify pass yielded.
func (u Usage) MeanAcceptLength() float64 {
	if u.Rounds == 0 {
		return 0
	}
	return float64(u.Accepted+u.Rounds) / float64(u.Rounds)
}

// Event is what a request's channel delivers: newly emitted tokens, then
// one final event with Done set. The channel is closed after the final
// event.
type Event struct {
	Tokens   []int32
	Logprobs []Logprob // one per token when asked for
	Done     bool
	// Final event only.
	FinishReason string
	Usage        Usage
	Err          error // a failure inside the engine (the request ended)
	// Timing: when the request was queued, admitted, and produced its
	// first token (zero until then).
	Queued, Started, FirstToken time.Time
}

// Stats is a snapshot of the engine's state and cumulative counters.
type Stats struct {
	Running, Waiting int
	KVUsedTokens     int // reserved by running requests
	KVBudgetTokens   int
	PrefixTokens     int // held by the prefix cache

	// Cumulative counters.
	Requests         int64 // finished, any reason
	PromptTokens     int64
	CachedTokens     int64
	GeneratedTokens  int64
	Steps            int64 // forward passes of the target
	Drafts           int64 // speculative rounds with at least one draft
	UndraftedSteps   int64 // steps whose greedy requests did not draft (AdaptiveDrafts)
	DraftTokens      int64
	AcceptedTokens   int64
	AcceptedPerPos   []int64 // accepted drafts by position 1..k
	DecodeTokensRate float64 // generated tokens/s over the last few seconds
}
