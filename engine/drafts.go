package engine

import (
	"errors"

	"tandem/compute"
	"tandem/model/gemma4"
	"tandem/spec"
)

// Drafting ahead in the general step, as spec.Generate drafts its rounds
// ahead (docs/speculative-decoding.md, "Drafting ahead"): once a step's
// verify and its picks are issued, the greedy drafting rows' next drafts
// are picked on the device on a guess of each row's verdict (spec.Guess),
// from the verify's pick and hidden state at the guessed row and the cache
// rolled back to it, before the host reads the picks. The device goes from
// the verify to those drafts, and the next step's verify takes them
// unread. A row whose verdict proves the guess right keeps its drafts (the
// tokens, hidden state and cache it would have drafted from, so the same
// drafts); a wrong guess discards them and the cache goes back to the
// verdict (kvcache.Cache.Untruncate), the row drafting as usual next step.
// Either way the verify decides the output.

// proposals reads a batch's drafts (every batch must be read, also where
// no row takes its drafts: its copies back are queued).
func proposals(dr *spec.Drawn) ([]spec.Proposal, error) {
	if _, err := dr.Finish(); err != nil {
		return nil, err
	}
	return dr.Proposals()
}

// aheadDraft is one row's part of a batch of drafts picked ahead.
type aheadDraft struct {
	batch *spec.Drawn
	x     int             // the row's sequence in the batch
	toks  *compute.Tensor // its drafts on the backend, I32 [k]
	a, k  int             // the guessed verdict (accepted drafts) and the drafts' depth
}

// mayDraftAhead reports whether draftAhead could pick drafts for some of
// rows: the engine drafts ahead, and some row is a greedy verify picked on
// the device whose request guesses.
func (e *Engine) mayDraftAhead(rows []row) bool {
	if !e.ahead || e.draw == nil || spec.HostRounds() {
		return false
	}
	for i := range rows {
		if rows[i].guesses() {
			return true
		}
	}
	return false
}

// guesses reports whether w is a verify whose next drafts may be picked
// ahead: drafts verified with every row picked on the device, for a
// request that guesses.
func (w *row) guesses() bool {
	return w.r.guess != nil && w.picks != nil && len(w.prop.Tokens) > 0
}

// draftAhead picks, while the step's verify runs, the next drafts of every
// row a guess applies to: greedy rows picking on the device (picks holds
// the head's picks, row w.pick0+j for verify row j), whose request
// guesses (spec.Guess) and would draft next step. Their caches are rolled
// back to the guesses; settleAhead puts them where the verdicts say.
func (e *Engine) draftAhead(rows []row, out *gemma4.Output, picks *compute.Tensor) {
	b := e.m.Backend()
	var ds []*spec.Assistant
	var rounds []spec.Round
	var who []int
	var guessed []int
	for i := range rows {
		w := &rows[i]
		r := w.r
		if !w.guesses() {
			continue
		}
		a, ok := r.guess.Next(len(w.prop.Tokens))
		if !ok {
			continue
		}
		// The round after a right guess: a+1 tokens emitted (a stop token
		// among them ends the request instead).
		k := max(0, min(e.cfg.DraftTokens, r.seq.Left()-(a+1)-1))
		if k == 0 || r.cache.Truncate(w.T+a+1) != nil {
			continue
		}
		off := out.Offsets[i]
		ds = append(ds, r.draft)
		rounds = append(rounds, spec.Round{Pending: -1, PendingAt: b.Slice(picks, w.pick0+a, w.pick0+a+1).Reshape(1),
			Hidden: b.Slice(out.Hidden, off+a, off+a+1), Snap: e.m.Snapshot(r.cache), K: k})
		who = append(who, i)
		guessed = append(guessed, a)
	}
	if len(who) == 0 {
		return
	}
	dr, err := e.draw(ds, rounds)
	if err != nil || dr == nil {
		// Not this step's failure: the rows draft as usual next step (and
		// meet it again, if it is real); settleAhead puts their caches back.
		return
	}
	toks := dr.Tokens()
	e.held = dr
	for j, i := range who {
		rows[i].next = &aheadDraft{batch: e.held, x: j, toks: toks[j], a: guessed[j], k: rounds[j].K}
	}
}

// fits reports whether n's drafts are the next round's, for a verdict of
// accepted drafts, the verify's picks (−1 for a NaN row, whose token the
// host picks, maybe another than the device's) and the next round's
// depth: the guessed verdict, a pick the host took as it is (then the
// next pending token is the one the drafts embedded), the same depth.
func (n *aheadDraft) fits(accepted int, picks []int32, depth int) bool {
	return accepted == n.a && n.a < len(picks) && picks[n.a] >= 0 && depth == n.k
}

// settleAhead puts row w's cache where its verdict v says (pending and the
// accepted drafts), and keeps the drafts picked ahead for the next step
// where they fit (the request going on).
func (e *Engine) settleAhead(w *row, v spec.Verdict) error {
	r := w.r
	if r.guess != nil && !(e.undrafted && len(w.prop.Tokens) == 0) { // a round left undrafted (adaptive.go) says nothing of acceptance
		r.guess.Saw(v.Accepted)
	}
	switch n := w.next; {
	case n == nil || r.seq.Done: // drafts for a round that never comes count as neither
	case n.fits(v.Accepted, w.picks, spec.Depth(r.seq, e.cfg.DraftTokens)):
		r.ahead = n
		r.stats.Ahead++
		e.draftsKept.Add(1)
	default:
		r.stats.AheadMissed++
		e.draftsMissed.Add(1)
	}
	return r.cache.SetLen(w.T + v.Accepted + 1)
}

// aheadProposals reads the drafts the last step picked ahead, after this
// step's verify was issued, and gives each row that verified them its
// proposal.
func (e *Engine) aheadProposals(rows []row) error {
	h := e.held
	e.held = nil
	var props []spec.Proposal
	var err error
	if h != nil {
		props, err = proposals(h)
	}
	var errs []error
	for i := range rows {
		a := rows[i].ahead
		if a == nil {
			continue
		}
		if err != nil || a.batch != h {
			errs = append(errs, errors.New("engine: drafts picked ahead were lost"))
			continue
		}
		rows[i].propose(props[a.x])
	}
	return errors.Join(append(errs, err)...)
}

// dropAhead reads the drafts picked ahead where no general step will:
// before a run of steps without drafters, when the engine goes idle, and
// when it stops (its requests ended, or were cancelled, after the step
// that picked them). A general step reads them itself (aheadProposals),
// after its verify is issued.
func (e *Engine) dropAhead() {
	h := e.held
	if h == nil {
		return
	}
	e.held = nil
	if _, err := proposals(h); err != nil {
		e.log.Warn("drafting ahead: reading unused drafts", "err", err)
	}
}
