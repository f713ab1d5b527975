package engine

import (
	"fmt"
	"math"
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
// anything else, or nothing, lets a lone greedy request decode ahead.
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
	return async && cfg.Model.DeviceTokens() && cfg.beforeStep == nil && aheadSetting()
}

// aheadRequest is the running request whose next steps may be decoded
// ahead, or nil: the only one, past its prompt, without a drafter, whose
// tokens depend on the argmax alone (greedy without penalties or
// logprobs).
func (e *Engine) aheadRequest() *request {
	if !e.ahead || len(e.active) != 1 {
		return nil
	}
	r := e.active[0]
	if r.prefilling() || r.draft != nil || r.logprobs || !r.seq.Params().ArgmaxOnly() {
		return nil
	}
	return r
}

// keepAhead reports whether another step of r may be issued before its
// last token is read: r wants at least two more tokens and is still
// wanted, no queued request could be admitted in its place (a free slot
// and a waiting request end the run, so that it joins the next step), and
// no queued request was cancelled (reap ends it within a step).
func (e *Engine) keepAhead(r *request) bool {
	if r.seq.Left() <= 1 || r.ctx.Err() != nil {
		return false
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.abort || (len(e.queue) > 0 && len(e.active) < e.cfg.Parallel) {
		return false
	}
	return !slices.ContainsFunc(e.queue, func(q *request) bool { return q.ctx.Err() != nil })
}

// decodeAhead decodes the lone request r one step ahead of the host, as
// generation.Generate does for a lone greedy sequence: each step's token
// is picked on the device (TopK 1: the maximum, lowest index on ties, as
// sample.Argmax) and the next step is issued with it before the host
// reads it, so the device never waits while the host reads a token, emits
// it and records the next step. Without it the serving engine decoded the
// E2B shape at 0.67× the direct path on the H200, the host's recording of
// each step added to the device's. The tokens are the engine's without it.
//
// The run ends, its last step read and emitted, when r is done, cancelled,
// or another request could start; the next engine step then goes on from
// r's pending token as usual. A NaN logit is where the device's pick (NaN
// wins) and the host's (NaN never wins) part: that step's token is the
// host's, and the step issued ahead with the device's is rolled back.
func (e *Engine) decodeAhead(r *request) {
	b := e.m.Backend()
	pf := b.(compute.Prefetcher)
	// A pick is a step's logits and its device-chosen token, on its way to
	// the host; read must be called once (it frees the readback).
	type pick struct {
		logits, idx *compute.Tensor
		val, which  func() []uint32
		read        bool
	}
	// Every readback is waited for once, on every path: a panic (caught by
	// step) would otherwise leave the GPU's pinned readback slots taken.
	var issued []*pick
	defer func() {
		for _, p := range issued {
			if !p.read {
				func() {
					defer func() { _ = recover() }()
					p.val()
					p.which()
				}()
			}
		}
	}()
	issue := func(row gemma4.Row) (*pick, error) {
		end := compute.Record(b, "decode") // a plain decode step, as generation's
		out, err := e.m.Forward([]gemma4.Row{row}, gemma4.ForwardOptions{Logits: gemma4.LogitsLast})
		end()
		if err != nil {
			return nil, err
		}
		v, i := b.TopK(out.Logits, 1)
		p := &pick{logits: out.Logits, idx: i.Reshape(1), val: pf.Prefetch(v), which: pf.Prefetch(i)}
		issued = append(slices.DeleteFunc(issued, func(q *pick) bool { return q.read }), p) // at most cur and next
		return p, nil
	}
	read := func(p *pick) (float32, int32) {
		p.read = true
		return math.Float32frombits(p.val()[0]), int32(p.which()[0])
	}
	t0 := time.Now()
	cur, err := issue(gemma4.Row{Tokens: []int32{r.seq.History[len(r.seq.History)-1]}, Cache: r.cache})
	if err != nil {
		e.failAll(fmt.Errorf("engine: forward pass: %w", err))
		return
	}
	for {
		var next *pick
		var aheadErr error // reported once cur's token is out, as a step on the host's turn would
		if e.keepAhead(r) {
			next, aheadErr = issue(gemma4.Row{Next: cur.idx, Cache: r.cache})
		}
		v, tok := read(cur)
		var rollback error // reported once the token is out, as settle does
		if v != v {
			tok = sample.Argmax(b.ToF32(cur.logits))
			if next != nil {
				read(next)
				next = nil
				rollback = r.cache.Truncate(r.cache.Len() - 1)
			}
		}
		r.seq.Emit(tok)
		now := time.Now()
		e.locked(func() {
			e.stats.Steps++
			e.stats.GeneratedTokens++
			e.rate.add(t0, now, 1)
		})
		t0 = now
		r.usage.CompletionTokens++
		r.push([]int32{tok}, nil)
		if rollback != nil {
			e.end(r, FinishError, fmt.Errorf("engine: %w", rollback))
			return
		}
		if r.seq.Done {
			if next != nil {
				read(next) // wasted device work; the cache keeps the token it fed, whose KV is right
			}
			reason := FinishLength
			if r.seq.StopReason == generation.StopToken {
				reason = FinishStop
			}
			e.end(r, reason, nil)
			return
		}
		if aheadErr != nil {
			e.failAll(fmt.Errorf("engine: forward pass: %w", aheadErr))
			return
		}
		if next == nil {
			return
		}
		cur = next
	}
}
