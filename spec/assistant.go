package spec

import (
	"errors"
	"fmt"
	"slices"

	"tandem/compute"
	"tandem/model/gemma4"
	"tandem/sample"
)

// Assistant drafts with a Gemma 4 assistant bound to the target.
type Assistant struct {
	A      *gemma4.Assistant
	Opt    gemma4.DraftOptions
	Sample sample.Params
	rng    *sample.Sampler
}

// NewAssistant wraps a bound assistant. Sampling drafts use their own
// random stream, seeded from the sampling seed.
func NewAssistant(a *gemma4.Assistant, opt gemma4.DraftOptions, p sample.Params) (*Assistant, error) {
	if a.Target() == nil {
		return nil, gemma4.ErrNotBound
	}
	dp := p
	dp.Seed = p.Seed ^ 0x6472616674 // "draft": a stream independent of the target's
	return &Assistant{A: a, Opt: opt, Sample: p, rng: sample.New(dp)}, nil
}

// Propose runs k drafter steps at one query position: the first from the
// target's hidden, each next from the drafter's own post-projection.
// Greedy drafting takes the centroid head's fast argmax; sampling draws
// from the full distribution, processed like the target's (temperature,
// top-k, top-p, min-p, penalties over the history and earlier drafts).
func (d *Assistant) Propose(r Round) (Proposal, error) {
	ps, err := ProposeBatch([]*Assistant{d}, []Round{r})
	if err != nil {
		return Proposal{}, err
	}
	return ps[0], nil
}

// DraftsOnDevice implements DeviceDrafter: drafting on the device is
// greedy only.
func (d *Assistant) DraftsOnDevice() bool { return d.Sample.Greedy() }

// ProposeAt drafts greedily on the backend: r.K drafter steps, each
// embedding the token the last one chose there, with no read by the host in
// between. The drafts come back as an I32 tensor [r.K]; they are the
// tokens Propose drafts greedily (the same ops; only the reads differ).
func (d *Assistant) ProposeAt(r Round) (*compute.Tensor, error) {
	if !d.Sample.Greedy() {
		return nil, fmt.Errorf("spec: drafting on the device is greedy only")
	}
	a, b := d.A, d.A.Backend()
	row := gemma4.DraftRow{Token: r.Pending, Next: r.PendingAt, Hidden: r.Hidden, Snap: r.Snap}
	var drafts *compute.Tensor
	// A round drafted ahead embeds its first token from the device: other
	// ops than a round that drafts after the verdict, so its steps keep
	// graphs of their own.
	site := "draft-at"
	if r.PendingAt != nil {
		site = "draft-ahead-at"
	}
	for j := range r.K {
		end := compute.Record(b, fmt.Sprintf("%s%d", site, min(j, 1)))
		// The round's first step starts on an idle device: its first layer
		// runs while the host records the rest. Later steps, and a round
		// drafted ahead, are issued while the device still runs earlier
		// work.
		opt := d.Opt
		opt.LaunchEarly = j == 0 && r.PendingAt == nil
		out, err := a.Step([]gemma4.DraftRow{row}, opt)
		if err != nil {
			end()
			return nil, err
		}
		tok := a.ArgmaxAt(out.Normed)
		end()
		if drafts == nil {
			drafts = tok
		} else {
			drafts = b.Concat(drafts, tok)
		}
		row = gemma4.DraftRow{Next: tok, Hidden: out.Next, Snap: r.Snap}
	}
	return drafts, nil
}

// ProposeBatch drafts for many sequences at once: step j runs the drafter
// once over every sequence that asked for more than j drafts. ds[i] drafts
// rs[i] with its own sampling settings and random stream; all must wrap the
// same assistant with the same options. Each sequence gets the drafts it
// would get alone: the drafter's kernels are batch-invariant, and its
// random numbers are drawn in the same order.
func ProposeBatch(ds []*Assistant, rs []Round) ([]Proposal, error) {
	if len(ds) != len(rs) {
		return nil, fmt.Errorf("spec: %d drafters for %d rounds", len(ds), len(rs))
	}
	if len(ds) == 0 {
		return nil, nil
	}
	a, opt := ds[0].A, ds[0].Opt
	for i, d := range ds {
		if d.A != a || d.Opt != opt {
			return nil, fmt.Errorf("spec: drafter %d wraps another assistant or other options than drafter 0", i)
		}
	}
	b := a.Backend()
	props := make([]Proposal, len(rs))
	toks := make([]int32, len(rs))
	hidden := make([]*compute.Tensor, len(rs))
	hist := make([][]int32, len(rs))
	steps := 0
	for i, r := range rs {
		toks[i], hidden[i] = r.Pending, r.Hidden
		steps = max(steps, r.K)
	}
	from := 0
	if late, n := lateDrafting(a, ds, rs); n > 0 {
		var err error
		if from, err = proposeLate(a, ds, rs, late, n, props, toks, hidden, hist, steps); err != nil {
			return nil, err
		}
	}
	for j := from; j < steps; j++ {
		var rows []gemma4.DraftRow
		var idx []int // rows[x] drafts for sequence idx[x]
		for i, r := range rs {
			if r.K > j {
				rows = append(rows, gemma4.DraftRow{Token: toks[i], Hidden: hidden[i], Snap: r.Snap})
				idx = append(idx, i)
			}
		}
		// Recorded (CUDA graphs) up to the first download of its result.
		end := compute.Record(b, fmt.Sprintf("draft%d", len(rows)))
		out, err := a.Step(rows, opt)
		if err != nil {
			end()
			return nil, err
		}
		var greedy []int32 // computed once for all rows, when some row drafts greedily
		tops := topsFor(a, out.Normed, ds, idx)
		for x, i := range idx {
			d := ds[i]
			if d.Sample.Greedy() {
				if greedy == nil {
					greedy = a.Argmax(out.Normed)
				}
				toks[i] = greedy[x]
			} else {
				if hist[i] == nil {
					hist[i] = slices.Clone(rs[i].History)
				}
				q, ok := sample.Dist{}, false
				if tops != nil {
					q, ok = d.Sample.FromTop(tops[x])
				}
				if !ok {
					// One row at a time: the centroid head fills the tokens
					// outside its clusters with the minimum over all rows
					// of the call (as HF does), so a batched call would
					// change q (top-k's cut never reaches those tokens).
					lg := b.ToF32(a.Logits(b.Slice(out.Normed, x, x+1)))
					q = sample.Dense(d.Sample.DistributionAfter(lg, hist[i], rs[i].Prompt))
				}
				toks[i] = q.Draw(d.rng.Uniform())
				props[i].Probs = append(props[i].Probs, q)
				hist[i] = append(hist[i], toks[i])
			}
			props[i].Tokens = append(props[i].Tokens, toks[i])
			hidden[i] = b.Slice(out.Next, x, x+1)
		}
		end()
	}
	return props, nil
}

// topsFor is each of a drafter step's rows' largest logits, read in one
// download, where some row samples with a top-k that they decide
// (sample.Params.TopNeeded); nil where none does, or the head cannot give
// them. rows[x] drafts for ds[idx[x]].
func topsFor(a *gemma4.Assistant, normed *compute.Tensor, ds []*Assistant, idx []int) []sample.Top {
	V, n := a.Config.Text.VocabSize, 0
	for _, i := range idx {
		n = max(n, ds[i].Sample.TopNeeded(V))
	}
	if n == 0 {
		return nil
	}
	vals, ids, ok := a.TopAt(normed, n)
	if !ok {
		return nil
	}
	b := a.Backend()
	return sample.Tops(b.ToF32(vals), b.ToI32(ids), n, V)
}

// lateDrafting reports whether ProposeBatch may draft through proposeLate,
// and with how many of each row's largest logits: where the backend uploads
// late and every sequence samples with a top-k that its tops decide.
func lateDrafting(a *gemma4.Assistant, ds []*Assistant, rs []Round) (compute.LateUploader, int) {
	late, ok := a.Backend().(compute.LateUploader)
	if !ok {
		return nil, 0
	}
	V, n := a.Config.Text.VocabSize, 0
	for i, r := range rs {
		if r.K == 0 {
			continue
		}
		k := ds[i].Sample.TopNeeded(V)
		if k == 0 || ds[i].Sample.Greedy() {
			return nil, 0
		}
		n = max(n, k)
	}
	return late, n
}

// proposeLate drafts as ProposeBatch does, for sequences that all sample
// from their tops (lateDrafting): each step is recorded while the last one
// runs, its tokens a late upload (compute.LateUploader) drawn on the device
// thread from the last step's tops, copied back behind it, just before the
// step launches. Without it the device waited, every step, for the host to
// read the tops, draw, and record the step. The draws are ProposeBatch's,
// in the same order. Where a top does not decide a draft (a tie at top-k's
// cut, a NaN), nothing more is drawn: that step's undecided drafts are
// drawn from whole rows, and it returns the step ProposeBatch's own loop
// goes on from (steps when every draft was drawn), having set props, toks,
// hidden and hist as that loop would have.
func proposeLate(a *gemma4.Assistant, ds []*Assistant, rs []Round, late compute.LateUploader, n int,
	props []Proposal, toks []int32, hidden []*compute.Tensor, hist [][]int32, steps int) (int, error) {
	b, V := a.Backend(), a.Config.Text.VocabSize
	for i, r := range rs {
		if r.K > 0 && hist[i] == nil {
			hist[i] = slices.Clone(r.History)
		}
	}
	type step struct {
		idx  []int // rows[x] drafts for sequence idx[x]
		out  *gemma4.StepOutput
		read func() ([][]uint32, error)
		drew []bool // each row's draft drawn from its top
	}
	var done []*step
	stop := false // a top did not decide a draft, or drawing failed: draw nothing more
	var drawErr error
	// draw is the values of the late upload of s's drafts (on the device
	// thread, one step after another).
	draw := func(s *step) func() []int32 {
		return func() (out []int32) {
			out = make([]int32, len(s.idx)) // stand-ins where nothing is drawn
			defer func() {
				if p := recover(); p != nil {
					drawErr, stop = fmt.Errorf("spec: drafting: %v", p), true
				}
			}()
			host, err := s.read()
			if err != nil {
				drawErr, stop = err, true
			}
			if stop {
				return out
			}
			s.drew = make([]bool, len(s.idx))
			for x, top := range sample.Tops(compute.Float32s(host[0]), compute.Int32s(host[1]), n, V) {
				i := s.idx[x]
				q, ok := ds[i].Sample.FromTop(top)
				if !ok {
					stop = true
					continue
				}
				out[x] = q.Draw(ds[i].rng.Uniform())
				s.drew[x] = true
				props[i].Tokens = append(props[i].Tokens, out[x])
				props[i].Probs = append(props[i].Probs, q)
			}
			return out
		}
	}
	var gots []func() error
	wait := func() error {
		var errs []error
		for _, got := range gots {
			errs = append(errs, got())
		}
		return errors.Join(append(errs, drawErr)...)
	}
	var prev *step
	for j := range steps {
		end := compute.Record(b, fmt.Sprintf("draft-late%d,%d", min(j, 1), len(rs)))
		var fed *compute.Tensor
		if prev != nil {
			var got func() error
			fed, got = late.LateI32(len(prev.idx), draw(prev))
			gots = append(gots, got)
		}
		s := &step{}
		var rows []gemma4.DraftRow
		for i, r := range rs {
			if r.K <= j {
				continue
			}
			row := gemma4.DraftRow{Token: toks[i], Hidden: hidden[i], Snap: r.Snap}
			if prev != nil {
				x := slices.Index(prev.idx, i) // a sequence drafting at j drafted at j−1
				row.Next, row.Hidden = b.Slice(fed, x, x+1), b.Slice(prev.out.Next, x, x+1)
			}
			rows = append(rows, row)
			s.idx = append(s.idx, i)
		}
		opt := ds[0].Opt
		opt.LaunchEarly = j == 0 // later steps are recorded while the last one runs
		out, err := a.Step(rows, opt)
		var vals, ids *compute.Tensor
		ok := false
		if err == nil {
			vals, ids, ok = a.TopAt(out.Normed, n)
		}
		switch {
		case err != nil:
			end()
			return 0, errors.Join(err, wait())
		case !ok && j == 0:
			end()
			return 0, nil // the head cannot give n of its logits: drafted as ProposeBatch drafts
		case !ok:
			end()
			return 0, errors.Join(errors.New("spec: drafting: the head gave a step's tops and not the next one's"), wait())
		}
		s.out, s.read = out, late.ReadLate(vals, ids)
		end()
		done = append(done, s)
		prev = s
	}
	_, got := late.LateI32(len(prev.idx), draw(prev)) // the last drafts, drawn now
	gots = append(gots, got)
	if err := wait(); err != nil {
		return 0, err
	}
	for j, s := range done {
		undecided := false
		for x, i := range s.idx {
			if s.drew == nil || !s.drew[x] {
				// As ProposeBatch's loop draws it (one row at a time).
				undecided = true
				lg := b.ToF32(a.Logits(b.Slice(s.out.Normed, x, x+1)))
				q := sample.Dense(ds[i].Sample.DistributionAfter(lg, hist[i], rs[i].Prompt))
				props[i].Tokens = append(props[i].Tokens, q.Draw(ds[i].rng.Uniform()))
				props[i].Probs = append(props[i].Probs, q)
			}
			toks[i], hidden[i] = props[i].Tokens[j], b.Slice(s.out.Next, x, x+1)
			hist[i] = append(hist[i], toks[i])
		}
		if undecided {
			return j + 1, nil
		}
	}
	return steps, nil
}
