// Package spec runs speculative decoding: a drafter proposes k tokens, the
// target verifies the pending token and the k drafts in one forward pass,
// and a walk keeps the longest prefix the target agrees with (spec §3).
//
// The output is exactly what plain decoding would produce: bit for bit at
// temperature 0 (the target's kernels are batch-invariant, so a verify pass
// gives each position the same logits as a one-token step), and in
// distribution when sampling (rejection sampling against the drafter's
// distribution). docs/speculative-decoding.md explains the loop and its
// invariants.
package spec

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	"tandem/compute"
	"tandem/generation"
	"tandem/kvcache"
	"tandem/model/gemma4"
	"tandem/sample"
)

// MaxDraftTokens bounds the draft depth: deeper rounds only add drafter and
// verify work once acceptance has decayed.
const MaxDraftTokens = 64

// ErrInvalidDraftDepth reports a draft depth outside [1, MaxDraftTokens].
var ErrInvalidDraftDepth = fmt.Errorf("spec: the number of draft tokens must be between 1 and %d", MaxDraftTokens)

// Options controls Generate. The embedded generation options mean what
// they mean for plain decoding.
type Options struct {
	generation.Options
	DraftTokens int // k: drafts per round
	Draft       gemma4.DraftOptions
	// SyntheticAcceptance in [0, 1] replaces the walk for benchmarks:
	// each draft is accepted with this probability (a seeded coin), so the
	// mechanism's speed can be measured without trained weights. The
	// drafter and the verify pass still run for real; the output is then
	// NOT the target's.
	Synthetic           bool
	SyntheticAcceptance float64
}

// Stats describe a speculative generation.
type Stats struct {
	Rounds   int `json:"rounds"`
	Drafted  int `json:"drafted"`
	Accepted int `json:"accepted"`
	// AcceptedAt[i] counts rounds whose draft i+1 was accepted; DraftedAt[i]
	// rounds that proposed a draft i+1.
	AcceptedAt []int `json:"accepted_at"`
	DraftedAt  []int `json:"drafted_at"`
	// DraftTime is the time in the drafter's calls and VerifyTime the rest
	// of the rounds. Rounds kept on the device only issue the drafts in
	// the drafter's calls; waiting for them falls in VerifyTime.
	DraftTime  time.Duration `json:"-"`
	VerifyTime time.Duration `json:"-"`
	// Ahead counts rounds whose drafts were issued before the previous
	// round's verdict was read, on a guess of its outcome that proved
	// right; AheadMissed the guesses that proved wrong, whose drafts were
	// discarded (rounds kept on the device only; see Guess). Drafts
	// for a round the sequence ended before count in neither.
	Ahead       int `json:"drafted_ahead"`
	AheadMissed int `json:"ahead_missed"`
	// RoundTimes is each round's wall time, from the last verdict (or the
	// prefill) to its own.
	RoundTimes []time.Duration `json:"-"`
}

// AcceptanceRate is accepted drafts over proposed drafts.
func (s Stats) AcceptanceRate() float64 {
	if s.Drafted == 0 {
		return 0
	}
	return float64(s.Accepted) / float64(s.Drafted)
}

// MeanAcceptLength is the tokens each target forward yields: accepted
// drafts plus the correction or bonus token, per round.
func (s Stats) MeanAcceptLength() float64 {
	if s.Rounds == 0 {
		return 0
	}
	return float64(s.Accepted+s.Rounds) / float64(s.Rounds)
}

// Result of Generate.
type Result struct {
	generation.Result
	Stats Stats
}

// Proposal is a drafter's k tokens; Probs[i], when sampling, is the
// distribution Tokens[i] was drawn from (nil for greedy drafting).
type Proposal struct {
	Tokens []int32
	Probs  []sample.Dist
}

// Round is what a drafter knows when a round starts.
type Round struct {
	Pending int32           // the emitted token the target has not processed yet, at position Snap.Len
	Hidden  *compute.Tensor // [1, H]: the target's post-norm hidden at position Snap.Len−1
	Snap    gemma4.Snapshot // the target's committed K/V
	History []int32         // prompt and emitted tokens, Pending last
	Prompt  int             // the prompt's length within History (for the penalties)
	K       int
	// PendingAt, when set, is the pending token as an I32 tensor [1] on
	// the backend, not yet read by the host: a round drafted ahead starts
	// from the last verify's pick before its verdict is read. Pending is
	// then −1 and History nil; only ProposeAt sees such a round.
	PendingAt *compute.Tensor
}

// Drafter proposes tokens for a round.
type Drafter interface {
	Propose(r Round) (Proposal, error)
}

// A DeviceDrafter can also draft on the backend (greedily), leaving its
// drafts there as an I32 tensor [r.K] for the verify to take unread.
// Assistant is one.
type DeviceDrafter interface {
	Drafter
	// DraftsOnDevice reports whether ProposeAt applies (its drafting is
	// greedy).
	DraftsOnDevice() bool
	// ProposeAt drafts r.K tokens; it must take the pending token from
	// r.PendingAt when that is set (a round drafted ahead).
	ProposeAt(r Round) (*compute.Tensor, error)
}

// The speculative loop's switches, read by every Generate: rounds on the
// host (=host), drafting ahead (auto, always, 0) and the layers of a
// verify's first recorded part (firstPart).
const (
	roundsEnv    = "TANDEM_SPEC_ROUNDS"
	aheadEnv     = "TANDEM_SPEC_AHEAD"
	firstPartEnv = "TANDEM_SPEC_FIRST_PART"
)

// Live reports whether name is one of the switches Generate reads at every
// call, so that a process may change it between calls (tandem bench
// --sweep).
func Live(name string) bool { return name == roundsEnv || name == aheadEnv || name == firstPartEnv }

var warnedFirstPart atomic.Bool

// firstPart is TANDEM_SPEC_FIRST_PART=N: a greedy device round's verify
// (issueRound) records its first N layers as a part of their own before
// the rest (gemma4.ForwardOptions.FirstPart; 0: the model's six). The
// device, done with the drafts issued ahead, waits for a verify's first
// part from the verdict before it on, and recording six layers takes the
// host about 0.3 ms on the 31B shape. Two layers by default: on the H200
// (twenty-eighth session, 31B, synthetic acceptance 0) the device's time
// between a round's graphs fell from 0.19 to 0.14 ms and the ratio to
// plain decode rose from 0.849–0.851× to 0.853–0.855× (one, two and three
// layers within the noise of each other).
const firstPartDefault = 2

func firstPart() int {
	v := os.Getenv(firstPartEnv)
	if v == "" {
		return firstPartDefault
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 || n > 64 {
		if !warnedFirstPart.Swap(true) {
			slog.Warn("ignoring an environment setting", "name", firstPartEnv, "value", v, "want", "a whole number from 0 to 64")
		}
		return firstPartDefault
	}
	return n
}

// HostRounds reports whether TANDEM_SPEC_ROUNDS=host asks for rounds whose
// drafts the host reads before the verify (for comparisons); the serving
// engine's steps read it too.
func HostRounds() bool { return os.Getenv(roundsEnv) == "host" }

// Generate decodes up to MaxTokens tokens after prompt with drafter d.
// onToken, if set, sees each token as it is emitted.
func Generate(ctx context.Context, m *gemma4.Model, d Drafter, prompt []int32, opt Options, onToken func(int32)) (*Result, error) {
	if opt.DraftTokens < 1 || opt.DraftTokens > MaxDraftTokens {
		return nil, fmt.Errorf("%w (got %d)", ErrInvalidDraftDepth, opt.DraftTokens)
	}
	if err := opt.Options.Validate(m, len(prompt)); err != nil {
		return nil, err
	}
	if opt.Synthetic && (opt.SyntheticAcceptance < 0 || opt.SyntheticAcceptance > 1) {
		return nil, fmt.Errorf("spec: synthetic acceptance must be in [0, 1], got %v", opt.SyntheticAcceptance)
	}
	b := m.Backend()
	k := opt.DraftTokens
	res := &Result{Result: generation.Result{PromptTokens: len(prompt), StopReason: generation.StopLength}}
	res.Stats = NewStats(k)
	chunk := min(opt.PrefillSize, len(prompt))
	cache := m.NewCache(max(chunk, k+1))
	start := time.Now()
	logits, hidden, err := generation.Prefill(ctx, m, cache, prompt, chunk)
	if err != nil {
		return nil, err
	}
	res.Prefill = time.Since(start)
	start = time.Now()
	seq := generation.NewSeq(prompt, opt.Options)
	defer func() {
		res.Tokens = seq.Tokens()
		if seq.Done {
			res.StopReason = seq.StopReason
		}
		res.Decode = time.Since(start)
	}()
	judge := Judge{Synthetic: opt.Synthetic, SyntheticAcceptance: opt.SyntheticAcceptance}
	// Greedy rounds stay on the device where they can (issueRound): the
	// host then reads once per round instead of after every draft and the
	// verify. TANDEM_SPEC_ROUNDS=host keeps them on the host, for
	// comparisons.
	dd, onDevice := d.(DeviceDrafter)
	pf, async := b.(compute.Prefetcher)
	onDevice = onDevice && dd.DraftsOnDevice() && async && opt.Sample.ArgmaxOnly() && m.DeviceTokens() &&
		!HostRounds()
	tok, done := seq.Next(b.ToF32(logits))
	if onToken != nil {
		onToken(tok)
	}
	guess := NewGuess()
	var next *ahead // drafts issued for this round before the last verdict was read
	roundStart := time.Now()
	for !done {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		r := Round{Pending: seq.History[len(seq.History)-1], Hidden: hidden, History: seq.History, Prompt: seq.Prompt, K: Depth(seq, k)}
		if r.K > 0 {
			r.Snap = m.Snapshot(cache)
		}
		T := cache.Len()
		var v Verdict
		var verified *compute.Tensor // the verify pass's hidden states
		if onDevice {
			var drafts *compute.Tensor
			if next != nil {
				if next.fits(r) {
					drafts = next.drafts
					res.Stats.Ahead++
				} else {
					res.Stats.AheadMissed++
				}
			}
			var in *inFlight
			if in, err = issueRound(m, dd, pf, cache, &res.Stats, r, drafts); err != nil {
				return res, err
			}
			// While the device verifies, draft the next round on a guess of
			// this one's outcome, so the device goes on to it at once. A
			// failure there is not this round's: the next round drafts as
			// usual (and meets it again, if it is real).
			if next, err = draftAhead(m, dd, cache, seq, k, &res.Stats, in, guess); err != nil {
				next, err = nil, nil
			}
			v, verified = in.finish(m, seq, judge, &res.Stats)
		} else if a, ok := d.(*Assistant); ok && r.K > 0 && m.DeviceTokens() && !HostRounds() {
			v, verified, err = lateRound(m, a, seq, cache, judge, &res.Stats, r)
		} else {
			v, verified, err = hostRound(m, d, seq, cache, judge, &res.Stats, r)
		}
		if err != nil {
			return res, err
		}
		now := time.Now()
		res.Stats.RoundTimes = append(res.Stats.RoundTimes, now.Sub(roundStart))
		roundStart = now
		guess.Saw(v.Accepted)
		if onToken != nil {
			for _, tok := range v.Emitted {
				onToken(tok)
			}
		}
		if done = seq.Done; done {
			// As without drafting ahead: the cache holds the whole verify.
			if full := T + r.K + 1; cache.Len() < full {
				if err := cache.Untruncate(full); err != nil {
					return res, err
				}
			}
			break
		}
		// Keep pending and the accepted drafts; the next round's hidden is
		// the verify row that produced the correction or bonus. Drafting
		// ahead may have rolled the cache back further than that.
		if err := cache.SetLen(T + v.Accepted + 1); err != nil {
			return res, err
		}
		hidden = b.Slice(verified, v.Accepted, v.Accepted+1)
	}
	return res, nil
}

// hostRound runs one round reading on the host: the drafter's proposal,
// the verify pass, and the judge on the verify rows' logits. It returns the
// verdict and the verify pass's hidden states.
func hostRound(m *gemma4.Model, d Drafter, seq *generation.Seq, cache *kvcache.Cache, judge Judge, st *Stats,
	r Round) (Verdict, *compute.Tensor, error) {
	b := m.Backend()
	var prop Proposal
	if r.K > 0 {
		t0 := time.Now()
		var err error
		if prop, err = d.Propose(r); err != nil {
			return Verdict{}, nil, err
		}
		if len(prop.Tokens) != r.K {
			return Verdict{}, nil, fmt.Errorf("spec: drafter proposed %d tokens, asked for %d", len(prop.Tokens), r.K)
		}
		st.DraftTime += time.Since(t0)
	}
	t0 := time.Now()
	end := compute.Record(b, fmt.Sprintf("verify%d", r.K+1))
	out, err := m.Forward([]gemma4.Row{{Tokens: append([]int32{r.Pending}, prop.Tokens...), Cache: cache}}, gemma4.ForwardOptions{Logits: gemma4.LogitsNone})
	if err != nil {
		end()
		return Verdict{}, nil, err
	}
	tops := verifyTops(m, seq, out.Hidden)
	end()
	v := judge.RoundTop(seq, st, prop, tops(), VerifyRows(m, out.Hidden, 0, r.K+1))
	st.VerifyTime += time.Since(t0)
	return v, out.Hidden, nil
}

// verifyTops issues the top of each verify row's logits where the
// sequence samples with a top-k, whose distributions they decide
// (sample.Params.FromTop): the host then reads them instead of the
// vocabulary. The function it returns reads them (nil where there are
// none).
func verifyTops(m *gemma4.Model, seq *generation.Seq, hidden *compute.Tensor) func() []sample.Top {
	b, V := m.Backend(), m.Config.Text.VocabSize
	n := seq.Params().TopNeeded(V)
	if n == 0 {
		return func() []sample.Top { return nil }
	}
	vals, ids := b.TopK(m.Logits(hidden), n)
	return func() []sample.Top { return sample.Tops(b.ToF32(vals), b.ToI32(ids), n, V) }
}

// lateRound is hostRound for a drafter that draws ahead (DrawBatch): the
// verify is recorded while the drafts run, its tokens theirs on the
// device, so that it launches as the last drafts are drawn. Where a top
// did not decide a draft the verify read stand-ins: it is taken back, and
// the round verifies its drafts, completed on the host, as hostRound does.
func lateRound(m *gemma4.Model, d *Assistant, seq *generation.Seq, cache *kvcache.Cache, judge Judge, st *Stats,
	r Round) (Verdict, *compute.Tensor, error) {
	b := m.Backend()
	t0 := time.Now()
	dr, err := DrawBatch([]*Assistant{d}, []Round{r})
	if err != nil {
		return Verdict{}, nil, err
	}
	if dr == nil {
		return hostRound(m, d, seq, cache, judge, st, r)
	}
	st.DraftTime += time.Since(t0)
	t0 = time.Now()
	T := cache.Len()
	end := compute.Record(b, fmt.Sprintf("verify-late%d", r.K+1))
	toks := b.Concat(b.FromI32([]int32{r.Pending}, 1), dr.Tokens()[0])
	out, err := m.Forward([]gemma4.Row{{Next: toks, Cache: cache}}, gemma4.ForwardOptions{Logits: gemma4.LogitsNone})
	var tops func() []sample.Top
	if err == nil {
		tops = verifyTops(m, seq, out.Hidden)
	}
	end()
	drawn, ferr := dr.Finish()
	if err = errors.Join(err, ferr); err != nil {
		return Verdict{}, nil, err
	}
	if !drawn[0] {
		// Before the rest is drafted: the drafter attends to the cache.
		if err := cache.Truncate(T); err != nil {
			return Verdict{}, nil, err
		}
	}
	props, err := dr.Proposals()
	if err != nil {
		return Verdict{}, nil, err
	}
	if !drawn[0] {
		st.DraftTime += time.Since(t0)
		return hostRound(m, proposed(props[0]), seq, cache, judge, st, r)
	}
	v := judge.RoundTop(seq, st, props[0], tops(), VerifyRows(m, out.Hidden, 0, r.K+1))
	st.VerifyTime += time.Since(t0)
	return v, out.Hidden, nil
}

// proposed is a Drafter whose proposal is made.
type proposed Proposal

func (p proposed) Propose(Round) (Proposal, error) { return Proposal(p), nil }

// inFlight is a device round whose verify is issued and whose reads are
// queued, its verdict not yet read.
type inFlight struct {
	r                           Round
	hidden                      *compute.Tensor // the verify pass's hidden states [K+1, H]
	idx                         *compute.Tensor // each verify row's pick, [K+1, 1] I32
	readToks, readVals, readIdx func() []uint32
	idxBits                     []uint32 // the picks, once finish has read them
	t0                          time.Time
	aheadTime                   time.Duration // issuing the next round's drafts ahead, in DraftTime
}

// issueRound issues one greedy round on the device: the drafter's steps
// (unless drafts, issued ahead, are given), each taking the token the last
// one chose, the verify pass over the pending token and the drafts, each
// verify row's argmax (TopK 1, the lowest index on ties, as sample.Argmax),
// and the reads of the picks, which finish waits for. DraftTime counts
// only issuing the drafts; the wait for them is in VerifyTime.
func issueRound(m *gemma4.Model, d DeviceDrafter, pf compute.Prefetcher, cache *kvcache.Cache, st *Stats, r Round,
	drafts *compute.Tensor) (*inFlight, error) {
	b := m.Backend()
	t0 := time.Now()
	toks := b.FromI32([]int32{r.Pending}, 1)
	if r.K > 0 {
		if drafts == nil {
			var err error
			if drafts, err = d.ProposeAt(r); err != nil {
				return nil, err
			}
		}
		if drafts.Len() != r.K {
			return nil, fmt.Errorf("spec: drafter proposed %d tokens, asked for %d", drafts.Len(), r.K)
		}
		toks = b.Concat(toks, drafts)
	}
	st.DraftTime += time.Since(t0)
	t0 = time.Now()
	end := compute.Record(b, fmt.Sprintf("verify-at%d", r.K+1))
	// A round without drafts (the last of a budget) verifies one token,
	// issued after the verdict while the device waits: in parts, like a
	// verify of several, so that the device starts on its first layers.
	out, err := m.Forward([]gemma4.Row{{Next: toks, Cache: cache}}, gemma4.ForwardOptions{Logits: gemma4.LogitsNone, Checkpoint: true,
		FirstPart: firstPart()})
	if err != nil {
		end()
		return nil, err
	}
	vals, idx := b.TopK(m.Logits(out.Hidden), 1)
	end()
	return &inFlight{r: r, hidden: out.Hidden, idx: idx, readToks: pf.Prefetch(toks), readVals: pf.Prefetch(vals),
		readIdx: pf.Prefetch(idx), t0: t0}, nil
}

// finish reads the round's picks and judges it. A NaN logit is where the
// device's argmax and the host's part, so a row whose pick is NaN is
// decided from its logits on the host. It returns the verdict and the
// verify pass's hidden states.
func (in *inFlight) finish(m *gemma4.Model, seq *generation.Seq, judge Judge, st *Stats) (Verdict, *compute.Tensor) {
	r := in.r
	tokBits, valBits, idxBits := in.readToks(), in.readVals(), in.readIdx()
	in.idxBits = idxBits
	prop := Proposal{Tokens: make([]int32, r.K)}
	for i := range prop.Tokens {
		prop.Tokens[i] = int32(tokBits[i+1])
	}
	rows := VerifyRows(m, in.hidden, 0, r.K+1)
	pick := func(i int) int32 {
		if v := math.Float32frombits(valBits[i]); v != v {
			return sample.Argmax(rows(i))
		}
		return int32(idxBits[i])
	}
	v := judge.RoundPicked(seq, st, prop, pick)
	st.VerifyTime += time.Since(in.t0) - in.aheadTime
	return v, in.hidden
}
