package spec

import (
	"fmt"

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
	g, err := newDrafting(ds, rs)
	if err != nil || g == nil {
		return nil, err
	}
	dr, err := g.drawBatch()
	if err != nil {
		return nil, err
	}
	if dr != nil {
		dr.w.last() // drawn now: no verify takes them unread
		if _, err := dr.Finish(); err != nil {
			return nil, err
		}
		return dr.Proposals()
	}
	if err := g.onHost(0); err != nil {
		return nil, err
	}
	return g.props, nil
}

// drafting is ProposeBatch's state: each sequence's proposal so far, and
// the token and hidden its next step embeds.
type drafting struct {
	a      *gemma4.Assistant
	ds     []*Assistant
	rs     []Round
	props  []Proposal
	toks   []int32
	hidden []*compute.Tensor
	steps  int // the most drafts a sequence asked for
}

// newDrafting checks ds against rs; nil where there is nothing to draft.
func newDrafting(ds []*Assistant, rs []Round) (*drafting, error) {
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
	g := &drafting{a: a, ds: ds, rs: rs, props: make([]Proposal, len(rs)), toks: make([]int32, len(rs)),
		hidden: make([]*compute.Tensor, len(rs))}
	for i, r := range rs {
		g.toks[i], g.hidden[i] = r.Pending, r.Hidden
		g.steps = max(g.steps, r.K)
	}
	return g, nil
}

// onHost runs the steps from from on, reading each step's logits (or
// tops, or argmaxes) on the host before the next.
func (g *drafting) onHost(from int) error {
	a, b, opt := g.a, g.a.Backend(), g.ds[0].Opt
	for j := from; j < g.steps; j++ {
		var rows []gemma4.DraftRow
		var idx []int // rows[x] drafts for sequence idx[x]
		for i, r := range g.rs {
			if r.K > j {
				rows = append(rows, gemma4.DraftRow{Token: g.toks[i], Hidden: g.hidden[i], Snap: r.Snap})
				idx = append(idx, i)
			}
		}
		// Recorded (CUDA graphs) up to the first download of its result.
		end := compute.Record(b, fmt.Sprintf("draft%d", len(rows)))
		out, err := a.Step(rows, opt)
		if err != nil {
			end()
			return err
		}
		var greedy []int32 // computed once for all rows, when some row drafts greedily
		tops := topsFor(a, out.Normed, g.ds, idx)
		for x, i := range idx {
			d := g.ds[i]
			if d.Sample.Greedy() {
				if greedy == nil {
					greedy = a.Argmax(out.Normed)
				}
				g.toks[i] = greedy[x]
				g.props[i].Tokens = append(g.props[i].Tokens, g.toks[i])
			} else {
				q, ok := sample.Dist{}, false
				if tops != nil {
					q, ok = d.Sample.FromTop(tops[x])
				}
				if !ok {
					q = g.wholeRow(out, x, i)
				}
				g.add(i, q, q.Draw(d.rng.Uniform()))
			}
			g.hidden[i] = b.Slice(out.Next, x, x+1)
		}
		end()
	}
	return nil
}

// wholeRow is sequence i's draft distribution from the whole logits of
// row x of a step's output. One row at a time: the centroid head fills the
// tokens outside its clusters with the minimum over all rows of the call
// (as HF does), so a batched call would change q (top-k's cut never
// reaches those tokens).
func (g *drafting) wholeRow(out *gemma4.StepOutput, x, i int) sample.Dist {
	b := g.a.Backend()
	lg := b.ToF32(g.a.Logits(b.Slice(out.Normed, x, x+1)))
	hist := withDrafts(g.rs[i].History, g.props[i].Tokens) // the penalties see the drafts so far
	return sample.Dense(g.ds[i].Sample.DistributionAfter(lg, hist, g.rs[i].Prompt))
}

// add appends a sampled draft tok, drawn from q, to sequence i's proposal.
func (g *drafting) add(i int, q sample.Dist, tok int32) {
	g.toks[i] = tok
	g.props[i].add(q, tok)
}

// add appends a sampled draft tok, drawn from q.
func (p *Proposal) add(q sample.Dist, tok int32) {
	p.Tokens = append(p.Tokens, tok)
	p.Probs = append(p.Probs, q)
}

// topsFor is each of a drafter step's rows' largest logits, read back
// for every row at once, where some row samples with a top-k that they decide
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
