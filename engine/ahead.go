package engine

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"time"

	"tandem/compute"
	"tandem/generation"
	"tandem/model/gemma4"
	"tandem/sample"
)

// aheadEnv is read each time an engine starts: "0", "off", "false" or
// "no" keeps every engine step on the host's turn (for comparisons);
// anything else, or nothing, lets greedy requests decode ahead and sampled
// ones sample ahead.
const aheadEnv = "TANDEM_ENGINE_AHEAD"

// Live reports whether name is a switch New reads, so that a process may
// change it between engines (tandem bench --sweep --engine).
func Live(name string) bool { return name == aheadEnv }

func aheadSetting() bool {
	switch os.Getenv(aheadEnv) {
	case "0", "off", "false", "no":
		return false
	}
	return true
}

// canAhead reports whether the engine may decode ahead at all: the
// backend reads results asynchronously (compute.Prefetcher), the model
// takes device-chosen tokens, and no test gates the steps one at a time
// (a step decoded ahead is issued before the previous one's token is out).
func canAhead(cfg Config) bool {
	_, async := cfg.Model.Backend().(compute.Prefetcher)
	return async && canRun(cfg)
}

// canRun reports what running steps ahead of the host (decodeAhead,
// sampleAhead) needs beyond the backend: a model that takes device tokens,
// no test gating the steps, and TANDEM_ENGINE_AHEAD not off.
func canRun(cfg Config) bool {
	return cfg.Model.DeviceTokens() && cfg.beforeStep == nil && aheadSetting()
}

// aheadRequests are the running requests whose next steps may be decoded
// ahead together, or nil: every one of them past its prompt, without a
// drafter, its tokens depending on the argmax alone (greedy without
// penalties or logprobs).
func (e *Engine) aheadRequests() []*request { return e.runRequests(e.ahead, true) }

// runRequests are the running requests, if on and every one is past its
// prompt, without a drafter or logprobs, and (argmaxOnly) greedy on the
// argmax alone; else nil.
func (e *Engine) runRequests(on, argmaxOnly bool) []*request {
	if !on || len(e.active) == 0 {
		return nil
	}
	for _, r := range e.active {
		if r.prefilling() || r.draft != nil || r.logprobs || argmaxOnly && !r.seq.Params().ArgmaxOnly() {
			return nil
		}
	}
	return slices.Clone(e.active)
}

// keepAhead reports whether another step of rs may be issued before their
// last tokens are read: each wants at least two more tokens and is still
// wanted, no queued request could be admitted (a free slot and a waiting
// request end the run, so that it joins the next step), and no queued
// request was cancelled (reap ends it within a step).
func (e *Engine) keepAhead(rs []*request) bool {
	for _, r := range rs {
		if r.seq.Left() <= 1 || r.ctx.Err() != nil {
			return false
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.abort || (len(e.queue) > 0 && len(e.active) < e.cfg.Parallel) {
		return false
	}
	return !slices.ContainsFunc(e.queue, func(q *request) bool { return q.ctx.Err() != nil })
}

// decodeAhead decodes the requests rs one step ahead of the host, as
// generation.Generate does for a lone greedy sequence: each step's tokens
// are picked on the device (TopK 1: the maximum, lowest index on ties, as
// sample.Argmax) and the next step is issued with them before the host
// reads them, so the device never waits while the host reads the tokens,
// emits them and records the next step. Without it the serving engine
// decoded the E2B shape at 0.67× the direct path on the H200, the host's
// recording of each step added to the device's. The tokens are the
// engine's without it: each request is fed what it would be fed alone.
//
// The run ends, its last step read and emitted, when keepAhead says so;
// the next engine step then goes on from each request's pending token as
// usual. When a request ends (its stop token) or a position's logits hold
// a NaN (where the device's pick, NaN, and the host's part: the host's
// stands) while a step is in flight, that step is rolled back for every
// request still running and the run ends. A request that ended keeps in
// its cache the token the step fed, whose KV is right, unless the host
// overruled that token's pick, when its step is rolled back too.
func (e *Engine) decodeAhead(rs []*request) {
	b := e.m.Backend()
	pf := b.(compute.Prefetcher)
	// Every readback is waited for once, on every path: a panic (caught by
	// step) would otherwise leave the GPU's pinned readback slots taken.
	var cur, next *generation.Picks
	defer func() {
		for _, p := range []*generation.Picks{cur, next} {
			if p != nil && p.Pending() {
				func() {
					defer func() { _ = recover() }()
					p.Read()
				}()
			}
		}
	}()
	site := "decode" // a plain decode step, as generation's
	if len(rs) > 1 {
		site = fmt.Sprintf("decode,%d", len(rs))
	}
	issue := func(rows []gemma4.Row) (*generation.Picks, error) {
		end := compute.Record(b, site)
		out, err := e.m.Forward(rows, gemma4.ForwardOptions{Logits: gemma4.LogitsLast})
		end()
		if err != nil {
			return nil, err
		}
		return generation.PickOnDevice(b, pf, out.Logits), nil
	}
	rows := make([]gemma4.Row, len(rs))
	for i, r := range rs {
		rows[i] = gemma4.Row{Tokens: []int32{r.seq.History[len(r.seq.History)-1]}, Cache: r.cache}
	}
	t0 := time.Now()
	var err error
	if cur, err = issue(rows); err != nil {
		e.failAll(fmt.Errorf("engine: forward pass: %w", err))
		return
	}
	for {
		next = nil
		var aheadErr error // reported once cur's tokens are out, as a step on the host's turn would
		if e.keepAhead(rs) {
			for i, r := range rs {
				rows[i] = gemma4.Row{Next: b.Slice(cur.Idx, i, i+1), Cache: r.cache}
			}
			next, aheadErr = issue(rows)
		}
		vals, toks := cur.Read()
		nan := make([]bool, len(rs)) // rows whose choice the host made: the step ahead fed another token
		for i, v := range vals {
			if v != v {
				toks[i] = sample.Argmax(b.ToF32(b.Slice(cur.Logits, i, i+1)))
				nan[i] = true
			}
		}
		var ended bool
		t0, ended = e.emitRun(rs, toks, t0)
		if next != nil && (slices.Contains(nan, true) || ended) {
			next.Read() // fed a pick the host overruled, or a finished request's token
			next = nil
			e.rollBack(rs, nan)
		}
		if e.endStep(rs, ended, aheadErr) || next == nil {
			return
		}
		cur = next
	}
}

// canSampleAhead reports whether the engine may sample ahead: the backend
// uploads late (compute.LateUploader), the model takes device tokens, and
// no test gates the steps (as canAhead).
func canSampleAhead(cfg Config) bool {
	_, late := cfg.Model.Backend().(compute.LateUploader)
	return late && canRun(cfg)
}

// sampleRequests are the running requests whose steps sampleAhead may run,
// or nil: every one past its prompt, without a drafter or logprobs.
func (e *Engine) sampleRequests() []*request { return e.runRequests(e.late, false) }

// sampleAhead runs the steps of rs as generation.Generate runs a sampled
// sequence's: each step is recorded while the last one runs, its tokens a
// late upload (compute.LateUploader) that the device thread samples from
// the last step's logits, copied back behind it (ReadLate), just before
// the step's first part launches. Without it the device waited, each step,
// for the host to read the logits, sample, and record the step. The tokens
// are the engine's without it: each request samples through its own Seq,
// in order.
//
// The run ends as decodeAhead's does: when keepAhead says so, its last
// tokens sampled on the host; or when a request ends while a step is in
// flight, which is then rolled back for the requests still running (an
// ended request keeps the token it fed, whose KV is right).
func (e *Engine) sampleAhead(rs []*request) {
	b := e.m.Backend()
	late := b.(compute.LateUploader)
	site := "decode-sampled" // as generation's
	if len(rs) > 1 {
		site = fmt.Sprintf("decode-sampled,%d", len(rs))
	}
	opt := gemma4.ForwardOptions{Logits: gemma4.LogitsLast, Checkpoint: true}
	rows := make([]gemma4.Row, len(rs))
	for i, r := range rs {
		rows[i] = gemma4.Row{Tokens: []int32{r.seq.History[len(r.seq.History)-1]}, Cache: r.cache}
	}
	// Where every request samples with a top-k, the device ranks each
	// row's top and only those come back (sample.Params.FromTop).
	V := e.m.Config.Text.VocabSize
	ps := make([]sample.Params, len(rs))
	for i, r := range rs {
		ps[i] = r.seq.Params()
	}
	n := sample.TopsNeeded(V, ps...)
	var vals, ids *compute.Tensor // cur's top, where n > 0
	forward := func() (*compute.Tensor, error) {
		out, err := e.m.Forward(rows, opt)
		if err != nil {
			return nil, err
		}
		if n > 0 {
			vals, ids = b.TopK(out.Logits, n)
		}
		return out.Logits, nil
	}
	end := compute.Record(b, site)
	cur, err := forward()
	end()
	if err != nil {
		e.failAll(fmt.Errorf("engine: forward pass: %w", err))
		return
	}
	t0 := time.Now()
	// sampleAll picks each request's token from host: the last step's
	// tops ([len(rs), n] values and ids) or its logits [len(rs), V]. A
	// request whose top does not decide its token (a tie at top-k's cut, a
	// NaN) draws nothing and is listed in undecided.
	fromLogits := func(l []float32) []int32 {
		toks := make([]int32, len(rs))
		for i, r := range rs {
			toks[i] = r.seq.Sample(l[i*V : (i+1)*V])
		}
		return toks
	}
	sampleAll := func(host [][]uint32) (toks []int32, undecided []int) {
		if n == 0 {
			return fromLogits(compute.Float32s(host[0])), nil
		}
		toks = make([]int32, len(rs))
		for i, top := range sample.Tops(compute.Float32s(host[0]), compute.Int32s(host[1]), n, V) {
			var ok bool
			if toks[i], ok = rs[i].seq.SampleTop(top); !ok {
				undecided = append(undecided, i)
			}
		}
		return toks, undecided
	}
	for {
		var toks []int32
		var undecided []int
		var next *compute.Tensor
		var aheadErr error // reported once cur's tokens are out, as a step on the host's turn would
		if e.keepAhead(rs) {
			var read func() ([][]uint32, error)
			if n > 0 {
				read = late.ReadLate(vals, ids)
			} else {
				read = late.ReadLate(cur)
			}
			var sampleErr error
			end := compute.Record(b, site)
			fed, got := late.LateI32(len(rs), func() (picked []int32) {
				defer func() {
					if p := recover(); p != nil {
						sampleErr, picked = fmt.Errorf("sampling: %v", p), make([]int32, len(rs)) // tokens in the vocabulary, for the step issued
					}
				}()
				host, err := read()
				if err != nil {
					sampleErr = err
					return make([]int32, len(rs))
				}
				toks, undecided = sampleAll(host)
				return toks
			})
			for i, r := range rs {
				rows[i] = gemma4.Row{Next: b.Slice(fed, i, i+1), Cache: r.cache}
			}
			next, aheadErr = forward()
			end()
			if err := errors.Join(got(), sampleErr); err != nil {
				e.failAll(fmt.Errorf("engine: %w", err))
				return
			}
			// The step went out with stand-ins for these: sample them from
			// their logits; once the tokens are out, the step is rolled
			// back and the run ends (the scheduler's next step feeds every
			// token).
			for _, i := range undecided {
				toks[i] = rs[i].seq.Sample(b.ToF32(b.Slice(cur, i, i+1)))
			}
		} else {
			toks = fromLogits(b.ToF32(cur))
		}
		var ended bool
		t0, ended = e.emitRun(rs, toks, t0)
		if next != nil && (ended || len(undecided) > 0) {
			// An ended request keeps its step unless it fed a stand-in.
			overruled := make([]bool, len(rs))
			for _, i := range undecided {
				overruled[i] = true
			}
			next = nil
			e.rollBack(rs, overruled)
		}
		if e.endStep(rs, ended, aheadErr) || next == nil {
			return
		}
		cur = next
	}
}

// emitRun counts a step of a run ahead, whose work began at t0, and emits
// each request's token; it returns when the step's tokens came out, and
// whether a request ended.
func (e *Engine) emitRun(rs []*request, toks []int32, t0 time.Time) (now time.Time, ended bool) {
	now = time.Now()
	e.locked(func() {
		e.stats.Steps++
		e.stats.GeneratedTokens += int64(len(rs))
		e.rate.add(t0, now, len(rs))
	})
	for i, r := range rs {
		r.seq.Emit(toks[i])
		r.usage.CompletionTokens++
		r.push([]int32{toks[i]}, nil)
		ended = ended || r.seq.Done
	}
	return now, ended
}

// endStep ends the requests of a run that are done, with their reasons,
// and reports whether the run fails: its step ahead failed (aheadErr)
// while no request ended. With a request ended the run stops anyway; a
// step ahead that failed touched no cache (Forward checks before it
// writes), and the next step on the host's turn meets and reports the same
// error.
func (e *Engine) endStep(rs []*request, ended bool, aheadErr error) bool {
	e.endDone(rs)
	if aheadErr != nil && !ended {
		e.failAll(fmt.Errorf("engine: forward pass: %w", aheadErr))
		return true
	}
	return false
}

// endDone ends the requests of a run that are done, with their reasons.
func (e *Engine) endDone(rs []*request) {
	for _, r := range rs {
		if r.seq.Done {
			reason := FinishLength
			if r.seq.StopReason == generation.StopToken {
				reason = FinishStop
			}
			e.end(r, reason, nil)
		}
	}
}

// rollBack takes the step in flight of a run out of its requests' caches,
// but for a request that ended on a token the host did not overrule (its
// row of overruled, nil for none): it keeps the token it fed, whose KV is
// right.
func (e *Engine) rollBack(rs []*request, overruled []bool) {
	for i, r := range rs {
		if r.seq.Done && (overruled == nil || !overruled[i]) {
			continue
		}
		if err := r.cache.Truncate(r.cache.Len() - 1); err != nil {
			if r.seq.Done {
				r.cache = nil // ended later; keep nothing of a cache that holds a wrong token
				continue
			}
			e.end(r, FinishError, fmt.Errorf("engine: %w", err))
		}
	}
}
