package engine

import (
	"cmp"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"strconv"
	"time"

	"tandem/compute"
	"tandem/generation"
	"tandem/model/gemma4"
	"tandem/sample"
	"tandem/spec"
)

// row is one running request's part of a step.
type row struct {
	r      *request
	tokens []int32       // fed to the target: a prompt chunk, or pending (+ drafts)
	prop   spec.Proposal // drafts, when speculating
	T      int           // the cache's length before the step
	// logits[j] is the target's logits at the row's j-th sampled position:
	// the last (prompt's last chunk, plain decoding) or verify row j.
	logits [][]float32
	// picks[j], for a request whose token depends on the argmax alone, is
	// that position's argmax picked on the device (−1 where the logits
	// hold a NaN: the host decides from logits[j] then).
	picks []int32
	// tops[j], for a request sampling with a top-k that decides its tokens
	// (sample.Params.TopNeeded), is that position's largest logits, ranked
	// on the device; logits[j] is read only where they do not decide.
	tops []sample.Top
	// ahead holds the drafts this step verifies, picked during the last
	// step (r.ahead); next the next step's, picked during this one on a
	// guess of its verdict (drafts.go).
	ahead, next *aheadDraft
	pick0       int // the row's first pick among the head's picks
	// late is how many drafts the step takes on the device (drawn, or
	// picked ahead), toks them once issued.
	late int
	toks *compute.Tensor
}

// propose gives w the drafts of p: its proposal, and its tokens after the
// pending one.
func (w *row) propose(p spec.Proposal) {
	w.prop = p
	w.tokens = append(slices.Clip(w.tokens), p.Tokens...)
}

// pickAt is position j's argmax: the device's pick, or sample.Argmax of
// the position's logits where there is none.
func (w *row) pickAt(j int, logits func(int) []float32) int32 {
	if p := w.picks[j]; p >= 0 {
		return p
	}
	return sample.Argmax(logits(j))
}

// step runs one scheduler step: drafts for every decoding request (the
// drafter's k steps batched over all of them), then one target forward
// pass over every running request — prompt chunks of the prefilling ones,
// pending tokens and drafts of the decoding ones — then each request's
// sampling or speculative walk, and its events.
//
// A request's tokens do not depend on what else is in the step: the
// kernels are batch-invariant, every request is fed the tokens at the
// positions it would be fed alone, and it samples through its own
// generation.Seq (and drafts through its own spec.Assistant) in the order
// generation.Generate and spec.Generate do.
//
// When every running request is greedy and past its prompt, the step goes
// to decodeAhead instead, which runs their steps one ahead of the host
// until another request could start or one ends; when some sample, to
// sampleAhead, which records each step while the last one runs.
func (e *Engine) step() {
	defer func() {
		// The kernels panic only on programming errors; a server must not
		// die of one. The step's requests fail, the engine goes on.
		if p := recover(); p != nil {
			err := fmt.Errorf("engine: internal error: %v", p)
			e.log.Error("step panicked", "err", err, "stack", string(debug.Stack()))
			e.failAll(err)
		}
	}()
	if rs := e.aheadRequests(); rs != nil {
		e.dropAhead() // no request here drafts: none will verify them
		e.aheadRuns.Add(1)
		if n := int64(len(rs)); n > e.aheadMost.Load() {
			e.aheadMost.Store(n)
		}
		e.decodeAhead(rs)
		return
	}
	if rs := e.sampleRequests(); rs != nil {
		e.dropAhead()
		e.lateRuns.Add(1)
		e.sampleAhead(rs)
		return
	}
	t0 := time.Now()
	rows := e.plan()
	adapting := e.adapting(rows)
	var a0 time.Time
	e.undrafted = false
	if adapting {
		e.undrafted, a0 = !e.adapt.draft(len(rows)), e.adapt.now()
	}
	drawn, who, err := e.draftAll(rows)
	if err != nil {
		e.failAll(fmt.Errorf("engine: drafting: %w", err))
		return
	}
	// A step counts as the mode it ran in: one decided without drafts may
	// still verify a greedy row's drafts picked ahead or taken back, one
	// decided with them may have none left to draft.
	drafted := adapting && e.greedyDrafts(rows)
	b := e.m.Backend()
	in := make([]gemma4.Row, len(rows))
	site := make([]byte, 0, 4*len(rows)+4)
	site = append(site, "step"...)
	onDevice := drawn != nil || slices.ContainsFunc(rows, func(w row) bool { return w.ahead != nil })
	if onDevice {
		site = append(site, "-late"...) // the tokens on the device: other ops
	}
	prompts := e.promptPass(rows)
	if prompts > 0 && prompts < len(rows) {
		site = append(site, "-split"...) // two passes (forward): other ops
	}
	for i := range rows {
		rows[i].T = rows[i].r.cache.Len()
		in[i] = gemma4.Row{Tokens: rows[i].tokens, Cache: rows[i].r.cache}
		site = strconv.AppendInt(append(site, ','), int64(len(rows[i].tokens)+rows[i].late), 10)
	}
	// Steps of one shape (rows × tokens) are recorded as one graph where
	// the backend records (CUDA graphs), in parts (Checkpoint): the step is
	// issued after the last one's results were read, with the device
	// idle, so it starts on the first layers while the host records the
	// rest, a step of lone tokens too. With drafts drawn ahead the step is
	// recorded while they run, every row's tokens on the device.
	end := compute.Record(b, string(site))
	if onDevice {
		var drafts []*compute.Tensor
		if drawn != nil {
			drafts = drawn.Tokens()
		}
		for j, i := range who {
			rows[i].toks = drafts[j]
		}
		for i := range in {
			next := b.FromI32(in[i].Tokens, len(in[i].Tokens))
			if t := rows[i].toks; t != nil {
				next = b.Concat(next, t)
			}
			in[i] = gemma4.Row{Next: next, Cache: in[i].Cache}
		}
	}
	out, err := e.forward(in, prompts)
	end()
	err = errors.Join(err, e.aheadProposals(rows))
	if drawn != nil {
		err = errors.Join(err, e.drawnProposals(rows, drawn, who))
	}
	if err != nil {
		e.failAll(fmt.Errorf("engine: forward pass: %w", err))
		return
	}
	e.logits(rows, out)
	var d Stats // this step's counters
	d.AcceptedPerPos = make([]int64, len(e.stats.AcceptedPerPos))
	for i := range rows {
		e.settle(&rows[i], i, out, &d)
	}
	if adapting {
		e.adapt.observe(len(rows), drafted, int(d.GeneratedTokens), e.adapt.now().Sub(a0))
	}
	e.locked(func() {
		e.stats.Steps++
		if adapting && !drafted {
			e.stats.UndraftedSteps++
		}
		e.stats.GeneratedTokens += d.GeneratedTokens
		e.stats.Drafts += d.Drafts
		e.stats.DraftTokens += d.DraftTokens
		e.stats.AcceptedTokens += d.AcceptedTokens
		for i, n := range d.AcceptedPerPos {
			e.stats.AcceptedPerPos[i] += n
		}
		e.rate.add(t0, time.Now(), int(d.GeneratedTokens))
	})
}

// adapting reports whether the step of rows is one adaptive drafting
// decides: every request past its prompt, and some greedy one drafting.
func (e *Engine) adapting(rows []row) bool {
	if e.adapt == nil || slices.ContainsFunc(rows, func(w row) bool { return w.r.prefilling() }) {
		return false
	}
	return slices.ContainsFunc(rows, func(w row) bool { return w.r.draft != nil && w.r.seq.Params().Greedy() })
}

// greedyDrafts reports whether some greedy row of the step verifies drafts.
func (e *Engine) greedyDrafts(rows []row) bool {
	return slices.ContainsFunc(rows, func(w row) bool {
		return w.r.seq.Params().Greedy() && (len(w.prop.Tokens) > 0 || w.late > 0)
	})
}

// plan picks each running request's tokens for this step.
func (e *Engine) plan() []row {
	rows := make([]row, len(e.active))
	for i, r := range e.active {
		rows[i] = row{r: r}
		if p := r.req.Prompt; r.prefilling() {
			rows[i].tokens = p[r.fed:min(r.fed+e.cfg.PrefillSize, len(p))]
		} else {
			rows[i].tokens = []int32{r.seq.History[len(r.seq.History)-1]} // pending
		}
	}
	if e.m.PromptPrecision() != compute.PrecisionExact { // prompt chunks first: forward runs them apart
		slices.SortStableFunc(rows, func(a, b row) int {
			return cmp.Compare(boolInt(!a.r.prefilling()), boolInt(!b.r.prefilling()))
		})
	}
	return rows
}

// forward runs a step's pass over in (rows' inputs): one pass, or where
// prompt passes run at another precision than decoding
// (gemma4.Model.SetPromptPrecision), one over the prompt chunks, which plan
// put first (the first n of in: promptPass), and one over the rest, their
// outputs joined. A request's tokens then still do not depend on what else
// is in the step.
func (e *Engine) forward(in []gemma4.Row, n int) (*gemma4.Output, error) {
	opt := gemma4.ForwardOptions{Logits: gemma4.LogitsNone, Checkpoint: true}
	if n == 0 {
		return e.m.Forward(in, opt)
	}
	prompts := opt
	prompts.Prompt = true
	if n == len(in) {
		return e.m.Forward(in, prompts)
	}
	e.splitSteps.Add(1)
	a, err := e.m.Forward(in[:n], prompts)
	if err != nil {
		return nil, err
	}
	z, err := e.m.Forward(in[n:], opt)
	if err != nil {
		return nil, err
	}
	b := e.m.Backend()
	na, nz, H := a.Offsets[len(a.Offsets)-1], z.Offsets[len(z.Offsets)-1], a.Hidden.Dim(-1)
	h := b.Concat(a.Hidden.Reshape(1, na*H), z.Hidden.Reshape(1, nz*H)).Reshape(na+nz, H)
	offsets := slices.Clone(a.Offsets)
	for _, o := range z.Offsets[1:] {
		offsets = append(offsets, na+o)
	}
	return &gemma4.Output{Hidden: h, Offsets: offsets}, nil
}

// promptPass is how many of rows, from the first, forward runs as a
// prompt pass: the prompt chunks (plan puts them first) where prompt passes
// have a precision of their own, else none.
func (e *Engine) promptPass(rows []row) int {
	if e.m.PromptPrecision() == compute.PrecisionExact {
		return 0
	}
	n := 0
	for n < len(rows) && rows[n].r.prefilling() {
		n++
	}
	return n
}

func boolInt(v bool) int {
	if v {
		return 1
	}
	return 0
}

// draftAll proposes drafts for every decoding request with a drafter, in
// one batch, and appends them to its row. Where they are drawn ahead
// (e.draw) it returns the drafts in flight and the rows they are for
// (who), appending nothing yet: the step's forward pass takes them unread
// and drawnProposals reads them. A request carrying a proposal whose
// verify was taken back verifies it without drafting.
func (e *Engine) draftAll(rows []row) (*spec.Drawn, []int, error) {
	var ds []*spec.Assistant
	var rounds []spec.Round
	var who []int
	for i, w := range rows {
		r := w.r
		if r.draft == nil || r.prefilling() {
			continue
		}
		if r.carry != nil {
			rows[i].propose(*r.carry)
			r.carry = nil
			continue
		}
		if r.ahead != nil && e.undrafted && r.seq.Params().Greedy() {
			// Plain steps are faster now: the drafts picked ahead go unused
			// (aheadProposals still reads their batch), or a greedy row
			// would go on drafting ahead step after step.
			r.ahead = nil
			r.stats.Ahead--
		}
		if r.ahead != nil { // picked during the last step (aheadProposals reads them)
			rows[i].ahead, rows[i].late, rows[i].toks, r.ahead = r.ahead, r.ahead.k, r.ahead.toks, nil
			e.draftsUsed.Add(1)
			continue
		}
		k := spec.Depth(r.seq, e.cfg.DraftTokens)
		if e.undrafted && r.seq.Params().Greedy() {
			k = 0 // plain steps are faster at this batch size (adaptive.go)
		}
		if k > 0 {
			ds = append(ds, r.draft)
			rounds = append(rounds, spec.Round{Pending: w.tokens[0], Hidden: r.hidden, Snap: e.m.Snapshot(r.cache),
				History: r.seq.History, Prompt: r.seq.Prompt, K: k})
			who = append(who, i)
		}
	}
	if len(ds) == 0 {
		return nil, nil, nil
	}
	if e.draw != nil && e.m.DeviceTokens() && !spec.HostRounds() {
		drawn, err := e.draw(ds, rounds)
		if err != nil || drawn != nil {
			for j, i := range who {
				rows[i].late = rounds[j].K
			}
			return drawn, who, err
		}
	}
	props, err := e.propose(ds, rounds)
	if err != nil {
		return nil, nil, err
	}
	for j, i := range who {
		if len(props[j].Tokens) != rounds[j].K {
			return nil, nil, fmt.Errorf("drafter proposed %d tokens, asked for %d", len(props[j].Tokens), rounds[j].K)
		}
		rows[i].propose(props[j])
	}
	return nil, nil, nil
}

// drawnProposals reads the drafts drawn ahead for rows who and appends
// them to their rows. A row whose drafts met a top that did not decide
// one read stand-ins in the step just run: its verify is taken back (its
// cache truncated, before the rest is drafted, which attends to it) and
// its proposal, completed on the host, waits in its request for the next
// step.
func (e *Engine) drawnProposals(rows []row, drawn *spec.Drawn, who []int) error {
	ok, err := drawn.Finish()
	if err != nil {
		return err
	}
	var errs []error
	for j, i := range who {
		if !ok[j] {
			errs = append(errs, rows[i].r.cache.Truncate(rows[i].T))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	props, err := drawn.Proposals()
	if err != nil {
		return err
	}
	for j, i := range who {
		if !ok[j] {
			p := props[j]
			rows[i].r.carry = &p
			continue
		}
		rows[i].propose(props[j])
	}
	return nil
}

// logits computes the LM-head rows the step's sampling and walks will
// read, in at most two batched passes: the LM head is the largest matmul,
// and one pass over many rows reads its weights once. Pass one: the last
// position of a prompt's last chunk or of a plain decoding step, and verify
// row 0 of every speculative round. Pass two: verify rows 1..k of the
// rounds that may accept their first draft (a greedy round whose row 0
// picks it; every sampling round, whose acceptance draws a random number
// the walk must draw itself). The head is batch-invariant, so every row
// gets the bits it would get alone.
//
// Requests whose token depends on the argmax alone (greedy without
// penalties or logprobs) read no logits: every position they may sample,
// verify rows included, joins pass one, and their argmaxes are picked on
// the device, so the host reads one number per position instead of a
// vocabulary of logits.
func (e *Engine) logits(rows []row, out *gemma4.Output) {
	var idx, pidx, tidx []int32
	var slots []*[]float32
	var pslots []*int32
	var tslots []*sample.Top
	V, tn := e.m.Config.Text.VocabSize, 0
	for i := range rows {
		w := &rows[i]
		r := w.r
		if w.r.carry != nil {
			continue // its verify read stand-ins: verified again next step
		}
		pickOnly := r.seq.Params().ArgmaxOnly() && !r.logprobs
		topN := r.seq.Params().TopNeeded(V)
		if r.logprobs {
			topN = 0
		}
		// The positions a request samples: the last, or every verify row.
		first, n := out.Offsets[i+1]-1, 1
		if !r.prefilling() && r.draft != nil {
			first, n = out.Offsets[i], len(w.prop.Tokens)+1
		}
		switch {
		case r.prefilling() && r.fed+len(w.tokens) < len(r.req.Prompt):
			continue // a middle chunk: nothing to sample
		case pickOnly:
			w.logits, w.picks, w.pick0 = make([][]float32, n), make([]int32, n), len(pidx)
			for j := range n {
				pidx = append(pidx, int32(first+j))
				pslots = append(pslots, &w.picks[j])
			}
			continue
		case topN > 0:
			tn = max(tn, topN) // a longer top's head is a shorter one
			w.logits, w.tops = make([][]float32, n), make([]sample.Top, n)
			for j := range n {
				tidx = append(tidx, int32(first+j))
				tslots = append(tslots, &w.tops[j])
			}
			continue
		case r.prefilling() || r.draft == nil:
			w.logits = make([][]float32, 1)
			idx = append(idx, int32(out.Offsets[i+1]-1))
		default:
			w.logits = make([][]float32, len(w.prop.Tokens)+1)
			idx = append(idx, int32(out.Offsets[i]))
		}
		slots = append(slots, &w.logits[0])
	}
	// Drafting ahead needs nothing read but the picks, copied back behind
	// the head before the drafts are issued.
	ahead := len(idx)+len(tidx) == 0 && e.mayDraftAhead(rows)
	ids, read := e.head(out, idx, slots, pidx, pslots, tidx, tslots, tn, ahead)
	read1 := false
	if ahead {
		defer func() {
			if !read1 { // a panic while drafting ahead: its copies back are still waited for
				read()
			}
		}()
		e.draftAhead(rows, out, ids) // while the verify runs, before its picks are read
	}
	read1 = true
	read()
	idx, slots = idx[:0], slots[:0]
	for i := range rows {
		w := &rows[i]
		k := len(w.prop.Tokens)
		if k == 0 || w.picks != nil || w.tops != nil {
			continue
		}
		if !e.cfg.Judge.Synthetic && w.r.seq.Params().Greedy() && w.r.seq.Sample(w.logits[0]) != w.prop.Tokens[0] {
			continue // the walk stops at row 0 (a synthetic coin may not)
		}
		for j := 1; j <= k; j++ {
			idx = append(idx, int32(out.Offsets[i]+j))
			slots = append(slots, &w.logits[j])
		}
	}
	_, readRest := e.head(out, idx, slots, nil, nil, nil, nil, 0, false)
	readRest()
}

// head runs the LM head over hidden rows idx, then pidx, then tidx of out,
// in one pass, and returns the picks on the device (I32 [len(pidx), 1],
// nil for none) and the function that reads the results: row idx[j]'s
// logits go to *slots[j]; row pidx[j]'s argmax, picked on the device
// (TopK 1: the lowest index on ties, as sample.Argmax), to *pslots[j], or
// −1 where the row holds a NaN (where the device's pick and sample.Argmax
// part); row tidx[j]'s tn largest logits (TopK) to *tslots[j]. With
// early, a backend that reads asynchronously copies the picks back at
// once, so that read waits for nothing issued after the head.
func (e *Engine) head(out *gemma4.Output, idx []int32, slots []*[]float32, pidx []int32, pslots []*int32,
	tidx []int32, tslots []*sample.Top, tn int, early bool) (picks *compute.Tensor, read func()) {
	n, np := len(idx), len(pidx)
	if n+np+len(tidx) == 0 {
		return nil, func() {}
	}
	b := e.m.Backend()
	V := e.m.Config.Text.VocabSize
	all := e.m.Logits(b.Gather(out.Hidden, append(append(slices.Clip(idx), pidx...), tidx...)))
	var pvals, tvals, tids *compute.Tensor
	var readVals, readIDs func() []uint32 // the picks, copied back behind the head
	if np > 0 {
		pvals, picks = b.TopK(b.Slice(all, n, n+np), 1)
		if pf, ok := b.(compute.Prefetcher); ok && early {
			readVals, readIDs = pf.Prefetch(pvals), pf.Prefetch(picks)
		}
	}
	if len(tidx) > 0 {
		tvals, tids = b.TopK(b.Slice(all, n+np, n+np+len(tidx)), tn)
	}
	return picks, func() {
		if np > 0 {
			var vs []float32
			var is []int32
			if readVals != nil {
				vs, is = compute.Float32s(readVals()), compute.Int32s(readIDs())
			} else {
				vs, is = b.ToF32(pvals), b.ToI32(picks)
			}
			for j, s := range pslots {
				if *s = is[j]; vs[j] != vs[j] {
					*s = -1
				}
			}
		}
		if len(tidx) > 0 {
			for j, top := range sample.Tops(b.ToF32(tvals), b.ToI32(tids), tn, V) {
				*tslots[j] = top
			}
		}
		if n > 0 {
			lg := b.ToF32(b.Slice(all, 0, n))
			for j, s := range slots {
				*s = lg[j*V : (j+1)*V : (j+1)*V]
			}
		}
	}
}

// settle applies a step's outcome to row i's request: it advances the
// prompt, or samples, or walks the verify rows; emits the tokens; and ends
// the request when its sequence is done.
func (e *Engine) settle(w *row, i int, out *gemma4.Output, d *Stats) {
	r := w.r
	if w.r.carry != nil {
		return // nothing emitted: the next step verifies r.carry
	}
	b := e.m.Backend()
	var emitted []int32
	var lps []Logprob
	switch {
	case r.prefilling() || r.draft == nil:
		if r.prefilling() {
			r.fed += len(w.tokens)
			if r.prefilling() {
				return
			}
			e.rememberPrompt(r)
			if r.draft != nil {
				r.hidden = b.Gather(out.Hidden, []int32{int32(out.Offsets[i+1] - 1)})
			}
		}
		var tok int32
		last := func(int) []float32 { return spec.VerifyRows(e.m, out.Hidden, out.Offsets[i+1]-1, 1)(0) }
		switch {
		case w.picks != nil:
			tok = w.pickAt(0, last)
			r.seq.Emit(tok)
		case w.tops != nil:
			var ok bool
			if tok, ok = r.seq.SampleTop(w.tops[0]); !ok {
				tok = r.seq.Sample(last(0))
			}
			r.seq.Emit(tok)
		default:
			lg := w.logits[0]
			tok, _ = r.seq.Next(lg)
			if r.logprobs {
				lps = append(lps, logprobOf(lg, tok, r.top))
			}
		}
		emitted = []int32{tok}
	default:
		k := len(w.prop.Tokens)
		lazy := spec.VerifyRows(e.m, out.Hidden, out.Offsets[i], k+1)
		rowLogits := func(j int) []float32 {
			if w.logits[j] == nil {
				w.logits[j] = lazy(j)
				if w.picks == nil && w.tops == nil { // not expected: logits computed what the walk reads
					e.lateHeads++
				} // (picks and tops leave logits to the rows they do not decide)
			}
			return w.logits[j]
		}
		var v spec.Verdict
		if w.picks != nil {
			v = e.cfg.Judge.RoundPicked(r.seq, &r.stats, w.prop, func(j int) int32 { return w.pickAt(j, rowLogits) })
		} else {
			v = e.cfg.Judge.RoundTop(r.seq, &r.stats, w.prop, w.tops, rowLogits)
		}
		emitted = v.Emitted
		if r.logprobs {
			for j, tok := range v.Emitted {
				lps = append(lps, logprobOf(rowLogits(j), tok, r.top))
			}
		}
		if k > 0 {
			d.Drafts++
		}
		d.DraftTokens += int64(k)
		d.AcceptedTokens += int64(v.Kept)
		for j := range v.Kept {
			d.AcceptedPerPos[j]++
		}
		// Keep pending and the accepted drafts; the next round starts from
		// the verify row that produced the correction or bonus (drafting
		// ahead may have rolled the cache back further).
		if err := e.settleAhead(w, v); err != nil {
			r.usage.CompletionTokens += len(emitted)
			d.GeneratedTokens += int64(len(emitted))
			r.push(emitted, lps)
			e.end(r, FinishError, fmt.Errorf("engine: %w", err))
			return
		}
		r.hidden = b.Gather(out.Hidden, []int32{int32(out.Offsets[i] + v.Accepted)})
	}
	r.usage.CompletionTokens += len(emitted)
	d.GeneratedTokens += int64(len(emitted))
	r.push(emitted, lps)
	if r.seq.Done {
		reason := FinishLength
		if r.seq.StopReason == generation.StopToken {
			reason = FinishStop
		}
		e.end(r, reason, nil)
	}
}

// failAll ends every running request with err.
func (e *Engine) failAll(err error) {
	for _, r := range slices.Clone(e.active) {
		e.end(r, FinishError, err)
	}
}
