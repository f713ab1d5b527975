package spec

import (
	"log/slog"
	"os"
	"sync/atomic"
	"time"

	"tandem/compute"
	"tandem/generation"
	"tandem/kvcache"
	"tandem/model/gemma4"
)

// Drafting ahead. A device round's verify takes the device a whole target
// step, and the host waits for its verdict before it can record the next
// round's drafts: the device then idles from the verify's end until the
// first draft kernel arrives. When the verdict is predictable (a drafter
// that is nearly always wrong, or nearly always right) the host instead
// drafts the next round while the verify runs, from the verify's own pick
// and hidden state at the guessed row and the cache rolled back to the
// guess, and the device goes from the verify straight to those drafts.
//
// A right guess drafts exactly what the round would have drafted after the
// verdict (the same token, hidden state and cache, so the same ops), and
// the round then takes those drafts. A wrong one's drafts are discarded and
// the round drafts as usual, after the device has run the wasted drafts.
// Either way the verify decides the output: the tokens and the statistics
// are those of rounds that never draft ahead.

// ahead is a round drafted before the previous verdict was read.
type ahead struct {
	accepted int             // the guessed outcome of the previous round
	picks    *[]uint32       // the previous verify's device picks, once read: the drafts embedded picks[accepted]
	k        int             // drafts, the round's depth had the guess been right
	snapLen  int             // the cache length the drafts read
	drafts   *compute.Tensor // [k] I32 on the device
}

// fits reports whether r is the round a was drafted for: the guessed
// outcome came true (the cache is back at the guessed length), the pending
// token is the device's pick the drafts embedded (a NaN row's pick is the
// host's, which may differ), and the depth is the same.
func (a *ahead) fits(r Round) bool {
	picks := *a.picks
	return r.K == a.k && r.Snap.Len == a.snapLen && a.accepted < len(picks) && uint32(r.Pending) == picks[a.accepted]
}

// draftAhead issues the next round's drafts on a guess of in's outcome, if
// guess makes one and the round would draft: the cache is rolled back to
// the guess (Generate restores it if the guess was wrong). It returns nil
// when it drafts nothing.
func draftAhead(m *gemma4.Model, d DeviceDrafter, cache *kvcache.Cache, seq *generation.Seq, k int, st *Stats,
	in *inFlight, guess *Guess) (*ahead, error) {
	a, ok := guess.Next(in.r.K)
	if !ok {
		return nil, nil
	}
	// The round after a right guess: a+1 tokens emitted, so its depth is
	// Depth's after them (a stop token among them ends the sequence
	// instead, and the drafts go unused).
	kn := max(0, min(k, seq.Left()-(a+1)-1))
	if kn == 0 {
		return nil, nil
	}
	t0 := time.Now()
	defer func() {
		in.aheadTime = time.Since(t0)
		st.DraftTime += in.aheadTime
	}()
	if err := cache.Truncate(cache.Len() - in.r.K + a); err != nil {
		return nil, err
	}
	b := m.Backend()
	r := Round{Pending: -1, PendingAt: b.Slice(in.idx, a, a+1).Reshape(1), Hidden: b.Slice(in.hidden, a, a+1),
		Snap: m.Snapshot(cache), K: kn}
	drafts, err := d.ProposeAt(r)
	if err != nil {
		return nil, err
	}
	return &ahead{accepted: a, picks: &in.idxBits, k: kn, snapLen: cache.Len(), drafts: drafts}, nil
}

// Guess decides when to draft ahead and on which outcome, from the
// accepted counts of the last rounds. A right guess saves the round the
// host's time between the verdict and the first draft kernel (a millisecond
// or more on the H200); a wrong one costs the device the wasted drafts
// (about 2 ms on the 31B shape), so it guesses only when the last rounds
// agree (all of them, at least three, until eight were seen; then seven
// of the last eight). That is the default (TANDEM_SPEC_AHEAD unset or =auto): on the
// H200 it took the 31B shape's round at synthetic acceptance 0 from 28.6
// to 27.4 ms. =always guesses the last round's outcome every round (for
// tests and comparisons); =0 (off, false, no) never drafts ahead.
type Guess struct {
	mode string
	last [aheadWindow]int // accepted counts, a ring
	n    int              // rounds seen
}

// aheadWindow is how many rounds Guess looks back over, and
// aheadAgree how many of them must share the outcome it guesses. Before
// the window fills, it guesses once the first aheadStart rounds, and every
// one after them, agree: a generation's first rounds would otherwise never
// draft ahead (a 64-token run at synthetic acceptance 0 lost its first 8
// of 63 rounds' guesses).
const aheadWindow, aheadAgree, aheadStart = 8, 7, 3

var warnedAhead atomic.Bool

// NewGuess starts a sequence's guesses in the mode TANDEM_SPEC_AHEAD
// names (Generate's, and the serving engine's for each request).
func NewGuess() *Guess { return newGuess(os.Getenv(aheadEnv)) }

func newGuess(mode string) *Guess {
	switch mode {
	case "", "auto":
		mode = "auto"
	case "always":
	case "0", "off", "false", "no":
		mode = "off"
	default:
		if !warnedAhead.Swap(true) { // once, not per request
			slog.Warn("ignoring an environment setting", "name", aheadEnv, "value", mode, "want", "auto, always, 0 or off")
		}
		mode = "auto"
	}
	return &Guess{mode: mode}
}

// Saw records a round's accepted count.
func (g *Guess) Saw(accepted int) {
	g.last[g.n%aheadWindow] = accepted
	g.n++
}

// Next returns the outcome to draft the coming round on, for a round of k
// drafts now in flight, and whether to draft ahead at all.
func (g *Guess) Next(k int) (int, bool) {
	switch {
	case g.n == 0 || g.mode != "auto" && g.mode != "always":
		return 0, false
	case g.mode == "always":
		return min(g.last[(g.n-1)%aheadWindow], k), true
	case g.n < aheadStart:
		return 0, false
	}
	need := aheadAgree
	if g.n < aheadWindow {
		need = g.n // before the window fills, every round so far must agree
	}
	count := map[int]int{}
	for _, a := range g.last[:min(g.n, aheadWindow)] {
		count[a]++
	}
	for a, c := range count {
		if c >= need && a <= k {
			return a, true
		}
	}
	return 0, false
}
