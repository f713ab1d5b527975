package engine

import (
	"fmt"
	"slices"
	"time"

	"tandem/compute"
	"tandem/generation"
	"tandem/spec"
)

// start makes an admitted request a running row: its cache (from the
// prefix cache when a usable shared prefix is there), its sequence state,
// and, with a drafter, its own drafting stream.
func (e *Engine) start(r *request) {
	// Allocating the row's cache can fail (device memory is not counted in
	// tokens): that request fails, the engine goes on.
	defer func() {
		if p := recover(); p != nil {
			err := fmt.Errorf("engine: starting the request: %v", p)
			e.log.Error("start failed", "err", err)
			if slices.Contains(e.active, r) {
				e.end(r, FinishError, err)
				return
			}
			e.locked(func() {
				e.kvUsed -= r.reserve
				e.running--
				e.stats.Requests++
			})
			r.finish(FinishError, err)
		}
	}()
	r.started = time.Now()
	p := r.req.Prompt
	cache, reused := e.prefix.take(p)
	if cache == nil {
		cache = e.m.NewCache(e.maxStep)
	}
	// The reservation was counted in admit; entries give way to it. (The
	// prefix cache and kvUsed change only on this goroutine; the lock
	// publishes them to Stats.)
	e.prefix.shrink(e.budget - e.kvUsed)
	e.locked(func() {
		e.prefixN = e.prefix.tokens
		e.stats.PromptTokens += int64(len(p))
		e.stats.CachedTokens += int64(reused)
	})
	r.cache, r.fed = cache, reused
	r.usage.PromptTokens, r.usage.CachedTokens = len(p), reused
	r.seq = generation.NewSeq(p, generation.Options{MaxTokens: r.req.MaxTokens, Sample: r.req.Sample, StopTokens: r.req.StopTokens})
	e.active = append(e.active, r)
	if e.cfg.Drafter != nil {
		d, err := spec.NewAssistant(e.cfg.Drafter, e.cfg.Draft, r.req.Sample)
		if err != nil {
			e.end(r, FinishError, err)
			return
		}
		r.draft, r.stats, r.guess = d, spec.NewStats(e.cfg.DraftTokens), spec.NewGuess()
	}
}

// end removes a running request, releases its reservation, keeps its KV in
// the prefix cache when it finished normally (a cancelled or failed
// request's KV is freed), and sends the final event.
func (e *Engine) end(r *request, reason string, err error) {
	defer r.finish(reason, err) // whatever happens below, the request gets its final event
	e.active = slices.DeleteFunc(e.active, func(x *request) bool { return x == r })
	cache := r.cache
	r.cache, r.hidden, r.ahead = nil, nil, nil // drafts picked ahead: the next step, or dropAhead, reads them
	r.usage.Rounds, r.usage.Drafted, r.usage.Accepted, r.usage.Ahead = r.stats.Rounds, r.stats.Drafted, r.stats.Accepted, r.stats.Ahead
	e.locked(func() {
		e.kvUsed -= r.reserve
		e.running--
		e.stats.Requests++
	})
	if (reason == FinishStop || reason == FinishLength) && cache != nil {
		// The cache holds the prompt and the emitted tokens but the last
		// (never fed), and possibly rejected drafts beyond them.
		n := min(cache.Len(), len(r.seq.History))
		if cache.Truncate(n) == nil {
			e.keep(func() { e.prefix.put(r.seq.History[:n], cache, e.budget-e.kvUsed, e.servable(r, n)) })
		}
	}
}

// servable is how many of the n positions r's cache holds another request
// may reuse: all of them, or where prompt passes run at another precision
// than decoding, those its prompt passes wrote (prefixCache).
func (e *Engine) servable(r *request, n int) int {
	if e.m.PromptPrecision() == compute.PrecisionExact {
		return n
	}
	return min(n, len(r.req.Prompt))
}

// keep runs a prefix-cache insertion; one that fails (out of memory while
// copying KV) only loses the reuse.
func (e *Engine) keep(put func()) {
	defer func() {
		if p := recover(); p != nil {
			e.log.Warn("prefix cache: could not keep a request's KV", "err", p)
		}
		e.locked(func() { e.prefixN = e.prefix.tokens })
	}()
	put()
}

// rememberPrompt keeps a copy of a request's KV as its prompt is complete:
// its end snapshot may have moved too far past the prompt to roll back to
// it (the sliding rings keep only a window plus one step), and requests
// sharing the prompt (another sample, a retry) can start from it at once.
func (e *Engine) rememberPrompt(r *request) {
	if !e.prefix.on() || len(r.req.Prompt) < 2 {
		return
	}
	if room := e.budget - e.kvUsed; e.prefix.fits(len(r.req.Prompt), room) {
		e.keep(func() { e.prefix.put(r.req.Prompt, r.cache.Clone(), room, len(r.req.Prompt)) })
	}
}
