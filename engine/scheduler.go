package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"tandem/compute"
	"tandem/generation"
	"tandem/model/gemma4"
	"tandem/spec"
)

// Defaults for zero Config fields.
const (
	DefaultDraftTokens = 3
	DefaultParallel    = 4
	DefaultMaxQueue    = 64
	DefaultCtxSize     = 8192
	// MaxTopLogprobs bounds Request.TopLogprobs (OpenAI's limit).
	MaxTopLogprobs = 20
)

// Engine runs requests on one model: a single scheduler goroutine owns the
// model, the caches and every running request; Submit, Stats and Close
// talk to it through a mutex-guarded queue and counters.
type Engine struct {
	m       *gemma4.Model
	cfg     Config // defaults filled in
	maxStep int    // every cache's step width: a prefill chunk or a verify pass
	budget  int    // KV tokens: CtxSize × Parallel
	log     *slog.Logger
	// propose drafts for many sequences (spec.ProposeBatch; tests script it).
	propose func([]*spec.Assistant, []spec.Round) ([]spec.Proposal, error)
	// draw draws drafts ahead for a verify that takes them unread
	// (spec.DrawBatch); nil where drafts are proposed (tests that script
	// them).
	draw func([]*spec.Assistant, []spec.Round) (*spec.Drawn, error)

	wake chan struct{} // capacity 1: "look at the queue"
	done chan struct{} // closed when the loop has exited

	mu      sync.Mutex
	queue   []*request
	closing bool // Close was called: Submit refuses
	abort   bool // Close's context ended: cancel what is left
	kvUsed  int  // reserved by running requests (written by the scheduler only)
	prefixN int  // held by the prefix cache (a copy of prefix.tokens for Stats)
	running int
	stats   Stats // cumulative counters
	rate    rateWindow

	// Owned by the scheduler goroutine.
	active     []*request
	prefix     *prefixCache
	lateHeads  int          // verify rows the walk read that logits did not compute (tests expect none)
	ahead      bool         // greedy requests may decode ahead (canAhead)
	late       bool         // sampled requests may sample ahead (canSampleAhead)
	aheadRuns  atomic.Int64 // runs decoded ahead (read by tests)
	splitSteps atomic.Int64 // steps whose prompt chunks ran as a pass of their own (forward; read by tests)
	aheadMost  atomic.Int64 // the most requests a run decoded together (tests)
	lateRuns   atomic.Int64 // runs sampled ahead (tests)
	// held is the drafts the last step picked ahead (drafts.go), read in
	// the step after it; draftsKept and draftsMissed count the rows whose
	// guess proved right and wrong, draftsUsed those a step verified
	// (tests).
	// adapt decides whether a step's greedy requests draft
	// (Config.AdaptiveDrafts; nil: always), and undrafted is this step's
	// decision.
	adapt                                *adaptive
	undrafted                            bool
	held                                 *spec.Drawn
	draftsKept, draftsMissed, draftsUsed atomic.Int64 // draftsUsed: verified by the next step
}

// New checks cfg, fills in its defaults and starts the scheduler.
func New(cfg Config) (*Engine, error) { return newEngine(cfg, spec.ProposeBatch, spec.DrawBatch) }

func newEngine(cfg Config, propose func([]*spec.Assistant, []spec.Round) ([]spec.Proposal, error),
	draw func([]*spec.Assistant, []spec.Round) (*spec.Drawn, error)) (*Engine, error) {
	if cfg.Model == nil {
		return nil, errors.New("engine: no model")
	}
	maxPos := cfg.Model.Config.Text.MaxPositionEmbeddings
	var errs []error
	if cfg.Drafter != nil && cfg.Drafter.Target() != cfg.Model {
		errs = append(errs, errors.New("the drafter is not bound to the model"))
	}
	if cfg.DraftTokens == 0 {
		cfg.DraftTokens = DefaultDraftTokens
	}
	if cfg.DraftTokens < 1 || cfg.DraftTokens > spec.MaxDraftTokens {
		errs = append(errs, fmt.Errorf("%w (got %d)", spec.ErrInvalidDraftDepth, cfg.DraftTokens))
	}
	if j := cfg.Judge; j.Synthetic && !(j.SyntheticAcceptance >= 0 && j.SyntheticAcceptance <= 1) {
		errs = append(errs, fmt.Errorf("synthetic acceptance must be in [0, 1], got %v", j.SyntheticAcceptance))
	}
	if cfg.CtxSize == 0 {
		cfg.CtxSize = min(maxPos, DefaultCtxSize)
	}
	if cfg.CtxSize < 1 || cfg.CtxSize > maxPos {
		errs = append(errs, fmt.Errorf("context size %d is outside [1, %d], the model's max positions", cfg.CtxSize, maxPos))
	}
	if cfg.Parallel == 0 {
		cfg.Parallel = DefaultParallel
	}
	if cfg.Parallel < 1 {
		errs = append(errs, fmt.Errorf("parallel must be positive, got %d", cfg.Parallel))
	}
	if cfg.PrefillSize == 0 {
		cfg.PrefillSize = generation.DefaultPrefillSize
	}
	if cfg.PrefillSize < 1 {
		errs = append(errs, fmt.Errorf("prefill size must be positive, got %d", cfg.PrefillSize))
	}
	if cfg.MaxQueue == 0 {
		cfg.MaxQueue = DefaultMaxQueue
	}
	if cfg.MaxQueue < 1 {
		errs = append(errs, fmt.Errorf("max queue must be positive, got %d", cfg.MaxQueue))
	}
	if cfg.PrefixCacheTokens == 0 {
		cfg.PrefixCacheTokens = cfg.CtxSize
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	e := &Engine{
		m:       cfg.Model,
		cfg:     cfg,
		maxStep: cfg.PrefillSize,
		budget:  cfg.CtxSize * cfg.Parallel,
		log:     slog.Default().With("component", "engine"),
		propose: propose,
		draw:    draw,
		wake:    make(chan struct{}, 1),
		done:    make(chan struct{}),
		prefix:  newPrefixCache(max(cfg.PrefixCacheTokens, 0)),
		ahead:   canAhead(cfg),
		late:    canSampleAhead(cfg),
	}
	if cfg.Drafter != nil {
		e.maxStep = max(e.maxStep, cfg.DraftTokens+1)
		e.stats.AcceptedPerPos = make([]int64, cfg.DraftTokens)
		if cfg.AdaptiveDrafts {
			e.adapt = newAdaptive()
		}
	}
	if err := checkMemory(cfg, e.maxStep); err != nil {
		return nil, err
	}
	go e.loop()
	return e, nil
}

// checkMemory refuses, at start-up, a KV budget the device cannot hold:
// otherwise the server would start and fail requests once caches fill.
// Only backends with memory of their own report it (GPUs).
func checkMemory(cfg Config, maxStep int) error {
	mi, ok := cfg.Model.Backend().(compute.MemoryInfo)
	if !ok {
		return nil
	}
	free, _, err := mi.MemInfo()
	if err != nil {
		return fmt.Errorf("engine: reading free device memory: %w", err)
	}
	// Every running request at the full context, plus one more for the
	// prefix cache's copies; a tenth of what is free stays for activations.
	per := cfg.Model.CacheBytes(cfg.CtxSize, maxStep)
	need := int64(cfg.Parallel+1) * per
	if float64(need) > 0.9*float64(free) {
		return fmt.Errorf("engine: KV caches for %d parallel requests of %d tokens (and the prefix cache) need up to %.2f GiB, "+
			"but %.2f GiB of device memory is free after the weights (90%% may go to caches): lower the context size or the parallel requests",
			cfg.Parallel, cfg.CtxSize, gib(need), gib(int64(free)))
	}
	return nil
}

func gib(n int64) float64 { return float64(n) / (1 << 30) }

// Submit queues r. It returns ErrQueueFull, ErrClosed, a *ContextError,
// or another error for a request that is invalid (bad sampling values,
// empty prompt, token ids outside the vocabulary). Cancelling ctx ends the
// request within one step; its final event then has FinishReason
// FinishCancelled and its KV is freed.
//
// The engine never blocks on the channel: a slow reader gets its tokens
// coalesced into fewer events and holds up nobody, and a reader that
// stops reading (after cancelling ctx) leaves nothing behind.
func (e *Engine) Submit(ctx context.Context, r Request) (<-chan Event, error) {
	if err := e.validate(&r); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	req := newRequest(ctx, r)
	e.mu.Lock()
	switch {
	case e.closing:
		e.mu.Unlock()
		return nil, ErrClosed
	case len(e.queue) >= e.cfg.MaxQueue:
		e.mu.Unlock()
		return nil, ErrQueueFull
	}
	e.queue = append(e.queue, req)
	e.mu.Unlock()
	e.signal()
	return req.out, nil
}

// validate checks a request against the model and the context size.
func (e *Engine) validate(r *Request) error {
	if len(r.Prompt) == 0 {
		return errors.New("engine: the prompt is empty")
	}
	if r.MaxTokens <= 0 {
		return fmt.Errorf("engine: max tokens must be positive, got %d", r.MaxTokens)
	}
	V := e.m.Config.Text.VocabSize
	for i, t := range r.Prompt {
		if t < 0 || int(t) >= V {
			return fmt.Errorf("engine: prompt token %d is %d, outside the vocabulary [0, %d)", i, t, V)
		}
	}
	if r.Logprobs && (r.TopLogprobs < -1 || r.TopLogprobs > MaxTopLogprobs) {
		return fmt.Errorf("engine: top logprobs must be in [0, %d] (or -1 for none), got %d", MaxTopLogprobs, r.TopLogprobs)
	}
	if err := r.Sample.Validate(); err != nil {
		return fmt.Errorf("engine: %w", err)
	}
	if r.MaxTokens > e.cfg.CtxSize-len(r.Prompt) { // not len+max: that can overflow
		return &ContextError{PromptTokens: len(r.Prompt), MaxTokens: r.MaxTokens, CtxSize: e.cfg.CtxSize}
	}
	return nil
}

// Stats returns a snapshot of the engine's state and counters.
func (e *Engine) Stats() Stats {
	e.mu.Lock()
	defer e.mu.Unlock()
	s := e.stats
	s.AcceptedPerPos = slices.Clone(e.stats.AcceptedPerPos)
	s.Running, s.Waiting = e.running, len(e.queue)
	s.KVUsedTokens, s.KVBudgetTokens, s.PrefixTokens = e.kvUsed, e.budget, e.prefixN
	s.DecodeTokensRate = e.rate.rate(time.Now())
	return s
}

// Close stops admitting, lets running and queued requests finish until ctx
// ends, then cancels what is left, and returns when the loop has exited:
// nil when everything finished, ctx's error when some requests were
// cancelled. Later calls wait for the same exit and return nil.
func (e *Engine) Close(ctx context.Context) error {
	e.mu.Lock()
	e.closing = true
	e.mu.Unlock()
	e.signal()
	select {
	case <-e.done:
		return nil
	case <-ctx.Done():
	}
	e.mu.Lock()
	e.abort = true
	e.mu.Unlock()
	e.signal()
	<-e.done
	return ctx.Err()
}

// signal wakes the scheduler if it is idle.
func (e *Engine) signal() {
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// loop is the scheduler: between steps it drops cancelled requests and
// admits queued ones; each step is one forward pass of the target over
// every running request.
func (e *Engine) loop() {
	defer close(e.done)
	defer e.dropAhead() // drafts picked ahead that no step will verify
	for {
		e.mu.Lock()
		abort, closing, queued := e.abort, e.closing, len(e.queue)
		e.mu.Unlock()
		if abort {
			e.cancelAll()
			return
		}
		e.reap()
		e.admit()
		if len(e.active) > 0 {
			if e.cfg.beforeStep != nil {
				e.cfg.beforeStep()
			}
			e.step()
			continue
		}
		e.dropAhead()
		if closing && queued == 0 {
			return
		}
		// Idle: with nothing running the whole budget is free, so admit
		// took every queued request there was.
		<-e.wake
	}
}

// reap ends every request whose context is done, queued or running.
func (e *Engine) reap() {
	e.mu.Lock()
	var gone []*request
	e.queue = slices.DeleteFunc(e.queue, func(r *request) bool {
		if r.ctx.Err() != nil {
			gone = append(gone, r)
			return true
		}
		return false
	})
	e.mu.Unlock()
	for _, r := range gone {
		r.finish(FinishCancelled, nil)
		e.count(func(s *Stats) { s.Requests++ })
	}
	for _, r := range slices.Clone(e.active) {
		if r.ctx.Err() != nil {
			e.end(r, FinishCancelled, nil)
		}
	}
}

// cancelAll ends everything, for Close after its context ended.
func (e *Engine) cancelAll() {
	for _, r := range slices.Clone(e.active) {
		e.end(r, FinishCancelled, nil)
	}
	e.mu.Lock()
	queued := e.queue
	e.queue = nil
	e.mu.Unlock()
	for _, r := range queued {
		r.finish(FinishCancelled, nil)
		e.count(func(s *Stats) { s.Requests++ })
	}
}

// admit starts queued requests in order while a row is free and the head's
// reservation fits the KV budget (prefix-cache entries give way to it).
// Strict order: a large request at the head is not overtaken forever by
// small ones behind it.
func (e *Engine) admit() {
	for len(e.active) < e.cfg.Parallel {
		e.mu.Lock()
		if len(e.queue) == 0 || e.queue[0].reserve > e.budget-e.kvUsed {
			e.mu.Unlock()
			return
		}
		r := e.queue[0]
		e.queue = e.queue[1:]
		e.kvUsed += r.reserve
		e.running++
		e.mu.Unlock()
		e.start(r)
	}
}

// count updates the cumulative counters under the lock.
func (e *Engine) count(f func(*Stats)) { e.locked(func() { f(&e.stats) }) }

// locked runs f holding the lock (released even if f panics: the step's
// recover must not deadlock on it).
func (e *Engine) locked(f func()) {
	e.mu.Lock()
	defer e.mu.Unlock()
	f()
}
