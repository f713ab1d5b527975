package spec

import (
	"errors"
	"fmt"
	"slices"

	"tandem/compute"
	"tandem/model/gemma4"
	"tandem/sample"
)

// lateDrafting reports whether drafting may draw ahead (drawAhead), and
// with how many of each row's largest logits: where the backend uploads
// late, some sequence samples, and every sampling one samples with a
// top-k that its tops decide. A greedy sequence among them takes its
// top's first where the second is below it: top-k's k + 1 are at least
// two.
func lateDrafting(a *gemma4.Assistant, ds []*Assistant, rs []Round) (compute.LateUploader, int) {
	late, ok := a.Backend().(compute.LateUploader)
	if !ok {
		return nil, 0
	}
	var ps []sample.Params
	for i, r := range rs {
		if r.K > 0 && !ds[i].Sample.Greedy() {
			ps = append(ps, ds[i].Sample)
		}
	}
	if len(ps) == 0 {
		return nil, 0 // nothing sampled (DrawBatch picks greedy drafts on the device)
	}
	n := sample.TopsNeeded(a.Config.Text.VocabSize, ps...)
	if n == 0 || !a.TopFits(n) {
		return nil, 0 // the head selects fewer tokens than the tops need
	}
	return late, n
}

// drawing is drafting whose steps drawAhead issued, their drafts drawn on
// the device thread.
type drawing struct {
	g     *drafting
	late  compute.LateUploader
	n     int // largest logits per row
	steps []*lateStep
	gots  []func() error
	// stop is set (on the device thread) once a top did not decide a draft
	// or drawing failed (err): nothing more is drawn.
	stop bool
	err  error
}

// issued is a drafter step issued ahead of the host: its rows draft for
// sequences idx, and toks are their drafts on the backend, I32
// [len(idx)] (drawn late, or picked there).
type issued struct {
	idx  []int
	out  *gemma4.StepOutput
	toks *compute.Tensor
}

// rowsAfter is drafter step j's rows and the sequences they draft for:
// every sequence that asked for more than j drafts, embedding the token
// and hidden state prev (step j−1, nil for the first) left on the backend,
// or the round's (its pending token on the backend where PendingAt is
// set: a round drafted ahead of the last verdict).
func (g *drafting) rowsAfter(j int, prev *issued) ([]gemma4.DraftRow, []int) {
	b := g.a.Backend()
	var rows []gemma4.DraftRow
	var idx []int
	for i, r := range g.rs {
		if r.K <= j {
			continue
		}
		row := gemma4.DraftRow{Token: g.toks[i], Next: r.PendingAt, Hidden: g.hidden[i], Snap: r.Snap}
		if prev != nil {
			x := slices.Index(prev.idx, i) // a sequence drafting at j drafted at j−1
			row.Next, row.Hidden = b.Slice(prev.toks, x, x+1), b.Slice(prev.out.Next, x, x+1)
		}
		rows = append(rows, row)
		idx = append(idx, i)
	}
	return rows, idx
}

// tokensOf is sequence i's drafts on backend b, I32 [its K]: its row of
// each of the n steps step(0..n−1) it drafted in.
func tokensOf(b compute.Backend, i, n int, step func(int) *issued) *compute.Tensor {
	var t *compute.Tensor
	for j := range n {
		s := step(j)
		x := slices.Index(s.idx, i)
		if x < 0 {
			break
		}
		d := b.Slice(s.toks, x, x+1)
		if t == nil {
			t = d
		} else {
			t = b.Concat(t, d)
		}
	}
	return t
}

// lateStep is one drafter step drawAhead issued; its toks are a late
// upload.
type lateStep struct {
	issued
	read func() ([][]uint32, error) // its tops, copied back behind it
	drew []bool                     // each row's draft drawn from its top
}

// drawAhead issues every drafter step of g, each recorded while the last
// one runs, its tokens a late upload (compute.LateUploader) drawn on the
// device thread from the last step's tops, copied back behind it, just
// before the step launches. Without it the device waited, every step, for
// the host to read the tops, draw, and record the step. The draws are
// onHost's, in the same order. The last step's drafts are not queued yet
// (last), nor waited for (finish). lateDrafting has checked that the head
// gives n of its logits.
func (g *drafting) drawAhead(late compute.LateUploader, n int) (*drawing, error) {
	a, b := g.a, g.a.Backend()
	w := &drawing{g: g, late: late, n: n}
	for j := range g.steps {
		end := compute.Record(b, fmt.Sprintf("draft-late%d,%d", min(j, 1), len(g.rs)))
		var prev *lateStep
		if j > 0 {
			prev = w.steps[j-1]
			w.queue(prev)
		}
		s := &lateStep{}
		var rows []gemma4.DraftRow
		if prev != nil {
			rows, s.idx = g.rowsAfter(j, &prev.issued)
		} else {
			rows, s.idx = g.rowsAfter(j, nil)
		}
		opt := g.ds[0].Opt
		opt.LaunchEarly = j == 0 // later steps are recorded while the last one runs
		out, err := a.Step(rows, opt)
		var vals, ids *compute.Tensor
		ok := false
		if err == nil {
			vals, ids, ok = a.TopAt(out.Normed, n)
			if !ok { // lateDrafting checked TopFits(n)
				err = fmt.Errorf("spec: drafting: the head cannot give its %d largest logits", n)
			}
		}
		if err != nil {
			end()
			return nil, errors.Join(err, w.wait())
		}
		s.out, s.read = out, late.ReadLate(vals, ids)
		end()
		w.steps = append(w.steps, s)
	}
	return w, nil
}

// queue queues s's drafts as a late upload, drawn just before what reads
// them launches (in the recording in progress, if any; else at once).
func (w *drawing) queue(s *lateStep) {
	var got func() error
	s.toks, got = w.late.LateI32(len(s.idx), w.draw(s))
	w.gots = append(w.gots, got)
}

// draw is the values of the late upload of s's drafts.
func (w *drawing) draw(s *lateStep) func() []int32 {
	g := w.g
	V := g.a.Config.Text.VocabSize
	return func() (out []int32) {
		out = make([]int32, len(s.idx)) // stand-ins where nothing is drawn
		defer func() {
			if p := recover(); p != nil {
				w.err, w.stop = errors.Join(w.err, fmt.Errorf("spec: drafting: %v", p)), true
			}
		}()
		host, err := s.read()
		if err != nil {
			w.err, w.stop = errors.Join(w.err, err), true
		}
		if w.stop {
			return out
		}
		s.drew = make([]bool, len(s.idx))
		for x, top := range sample.Tops(compute.Float32s(host[0]), compute.Int32s(host[1]), w.n, V) {
			i := s.idx[x]
			if g.ds[i].Sample.Greedy() {
				// The argmax is the top's first, where nothing ties it and
				// it is no NaN (the device's Argmax decides those).
				if v := top.Values; v[0] != v[0] || v[1] == v[0] {
					w.stop = true
					continue
				}
				out[x] = top.IDs[0]
				s.drew[x] = true
				g.props[i].Tokens = append(g.props[i].Tokens, out[x])
				continue
			}
			q, ok := g.ds[i].Sample.FromTop(top)
			if !ok {
				w.stop = true
				continue
			}
			out[x] = q.Draw(g.ds[i].rng.Uniform())
			s.drew[x] = true
			g.props[i].add(q, out[x])
		}
		return out
	}
}

// last queues the last step's drafts (in the recording in progress: the
// verify that reads them).
func (w *drawing) last() { w.queue(w.steps[len(w.steps)-1]) }

// tokens is sequence i's drafts on the backend, I32 [its K], once last
// has queued the last step's.
func (w *drawing) tokens(i int) *compute.Tensor {
	return tokensOf(w.g.a.Backend(), i, len(w.steps), func(j int) *issued { return &w.steps[j].issued })
}

// wait waits for every draw queued.
func (w *drawing) wait() error {
	var errs []error
	for _, got := range w.gots {
		errs = append(errs, got())
	}
	return errors.Join(append(errs, w.err)...)
}

// finish waits for the draws and leaves g as onHost would: it returns the
// step onHost goes on from (g.steps where every draft was drawn from its
// top). Where one was not, that step's undecided drafts are drawn from
// whole rows, and the later steps, which embedded stand-ins, are
// discarded.
func (w *drawing) finish() (from int, err error) {
	if err := w.wait(); err != nil {
		return 0, err
	}
	g, b := w.g, w.g.a.Backend()
	for j, s := range w.steps {
		undecided := false
		var greedy []int32
		for x, i := range s.idx {
			switch {
			case s.drew != nil && s.drew[x]:
			case g.ds[i].Sample.Greedy():
				undecided = true
				if greedy == nil { // every row's, once a step, as onHost reads them
					greedy = g.a.Argmax(s.out.Normed)
				}
				g.props[i].Tokens = append(g.props[i].Tokens, greedy[x])
			default:
				undecided = true
				q := g.wholeRow(s.out, x, i)
				g.props[i].add(q, q.Draw(g.ds[i].rng.Uniform()))
			}
			g.toks[i], g.hidden[i] = g.props[i].Tokens[j], b.Slice(s.out.Next, x, x+1)
		}
		if undecided {
			return j + 1, nil
		}
	}
	return g.steps, nil
}

// Drawn is drafting for many sequences drawn ahead (DrawBatch), the
// drafts left on the backend for a verify to take unread.
type Drawn struct {
	g    *drafting
	w    *drawing // sampled drafts
	p    *picking // greedy drafts
	from int      // the step onHost goes on from, once Finish has run
}

// DrawBatch is ProposeBatch drawing ahead, for a caller that verifies the
// drafts unread: greedy drafts picked on the device (pickAhead) where
// every sequence drafts greedily, else drawn on the device thread
// (drawAhead) where every sampling one samples from its tops; nil where it
// cannot (a sequence that needs its whole row, a backend that does not
// upload late, a head that cannot give the tops), and the caller proposes
// as before.
func DrawBatch(ds []*Assistant, rs []Round) (*Drawn, error) {
	g, err := newDrafting(ds, rs)
	if err != nil || g == nil {
		return nil, err
	}
	if g.greedy() {
		p, err := g.pickAhead()
		if err != nil {
			return nil, err
		}
		return &Drawn{g: g, p: p}, nil
	}
	return g.drawBatch()
}

// greedy reports whether every sequence of g that drafts drafts greedily.
func (g *drafting) greedy() bool {
	for i, d := range g.ds {
		if g.rs[i].K > 0 && !d.Sample.Greedy() {
			return false
		}
	}
	return true
}

// picking is greedy drafting whose steps pickAhead issued.
type picking struct {
	steps []pickStep
}

// pickStep is one drafter step pickAhead issued; its toks are the picks.
type pickStep struct {
	issued
	read func() []uint32 // the picks, copied back behind the step (nil: read them at Finish)
}

// pickAhead issues every drafter step of g, each embedding the argmaxes
// the last one picked on the backend (Assistant.ArgmaxAt, the tokens
// onHost's Argmax reads), so that the host reads nothing before the
// verify is issued: onHost waited for every step's picks before recording
// the next. A backend that reads asynchronously (compute.Prefetcher)
// copies each step's picks back behind it.
func (g *drafting) pickAhead() (*picking, error) {
	a, b := g.a, g.a.Backend()
	pf, _ := b.(compute.Prefetcher)
	p := &picking{}
	// Rounds drafted ahead embed their first tokens from the backend:
	// other ops, so graph sites of their own.
	site := "draft-picks"
	if slices.ContainsFunc(g.rs, func(r Round) bool { return r.PendingAt != nil }) {
		site = "draft-picks-ahead"
	}
	for j := range g.steps {
		end := compute.Record(b, fmt.Sprintf("%s%d,%d", site, min(j, 1), len(g.rs)))
		var s pickStep
		var rows []gemma4.DraftRow
		if j > 0 {
			rows, s.idx = g.rowsAfter(j, &p.steps[j-1].issued)
		} else {
			rows, s.idx = g.rowsAfter(j, nil)
		}
		opt := g.ds[0].Opt
		// Later steps are recorded while the last one runs, and so is the
		// first of rounds drafted ahead (behind the last verify).
		opt.LaunchEarly = j == 0 && site == "draft-picks"
		out, err := a.Step(rows, opt)
		if err != nil {
			end()
			p.drop()
			return nil, err
		}
		s.out, s.toks = out, a.ArgmaxAt(out.Normed)
		end()
		if pf != nil {
			s.read = pf.Prefetch(s.toks)
		}
		p.steps = append(p.steps, s)
	}
	return p, nil
}

// drop waits out the reads p queued: each must be waited for once.
func (p *picking) drop() {
	for _, s := range p.steps {
		if s.read != nil {
			s.read()
		}
	}
}

// tokens is sequence i's drafts on the backend, I32 [its K].
func (p *picking) tokens(b compute.Backend, i int) *compute.Tensor {
	return tokensOf(b, i, len(p.steps), func(j int) *issued { return &p.steps[j].issued })
}

// finish reads the picks into g's proposals, as onHost would have left
// them.
func (p *picking) finish(g *drafting) {
	b := g.a.Backend()
	for _, s := range p.steps {
		var picks []int32
		if s.read != nil {
			picks = compute.Int32s(s.read())
		} else {
			picks = b.ToI32(s.toks)
		}
		for x, i := range s.idx {
			g.toks[i], g.hidden[i] = picks[x], b.Slice(s.out.Next, x, x+1)
			g.props[i].Tokens = append(g.props[i].Tokens, picks[x])
		}
	}
}

// drawBatch is DrawBatch for g.
func (g *drafting) drawBatch() (*Drawn, error) {
	late, n := lateDrafting(g.a, g.ds, g.rs)
	if n == 0 {
		return nil, nil
	}
	w, err := g.drawAhead(late, n)
	if err != nil {
		return nil, err
	}
	return &Drawn{g: g, w: w}, nil
}

// Tokens queues the last drafts (in the recording in progress: the verify
// that reads them) and returns each sequence's drafts on the backend, I32
// [its K] (nil for a sequence that asked for none). Call it once.
func (d *Drawn) Tokens() []*compute.Tensor {
	if d.w != nil {
		d.w.last()
	}
	out := make([]*compute.Tensor, len(d.g.rs))
	for i, r := range d.g.rs {
		switch {
		case r.K == 0:
		case d.p != nil:
			out[i] = d.p.tokens(d.g.a.Backend(), i)
		default:
			out[i] = d.w.tokens(i)
		}
	}
	return out
}

// Finish waits for the draws and reports, for each sequence, whether its
// drafts are the tokens Tokens gave. Where a top did not decide a draft,
// the drafts from there on were stand-ins, for that sequence and every
// one drafting past it: their verifies must be taken back (their caches
// truncated) before Proposals drafts the rest, since the drafter attends
// to the target's cache.
func (d *Drawn) Finish() ([]bool, error) {
	ok := make([]bool, len(d.g.rs))
	if d.p != nil { // greedy: the device's picks are the drafts
		d.p.finish(d.g)
		d.from = d.g.steps
		for i := range ok {
			ok[i] = true
		}
		return ok, nil
	}
	var err error
	if d.from, err = d.w.finish(); err != nil {
		return nil, err
	}
	for i := range ok {
		ok[i] = true
		for _, s := range d.w.steps {
			if x := slices.Index(s.idx, i); x >= 0 && (s.drew == nil || !s.drew[x]) {
				ok[i] = false
			}
		}
	}
	return ok, nil
}

// Proposals returns each sequence's proposal, after Finish: the drafts
// drawn ahead, completed on the host where Finish reported stand-ins (the
// same draws ProposeBatch makes).
func (d *Drawn) Proposals() ([]Proposal, error) {
	if err := d.g.onHost(d.from); err != nil {
		return nil, err
	}
	return d.g.props, nil
}
