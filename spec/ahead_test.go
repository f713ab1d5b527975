package spec

import (
	"testing"

	"tandem/model/gemma4"
)

// TestAheadGuess protects when drafting ahead guesses and what: as
// "auto" unless turned off (=0, =off); "always" guesses the last outcome (at most the round's
// depth) from the second round; "auto" once the first three rounds and
// every one since agree, or, from the eighth on, seven of the last eight,
// and only an outcome the round in flight can have.
func TestAheadGuess(t *testing.T) {
	for _, tc := range []struct {
		mode   string
		seen   []int
		k      int
		want   int
		guess  bool
		reason string
	}{
		{"", []int{0, 0, 0, 0, 0, 0, 0, 0}, 3, 0, true, "auto unless turned off"},
		{"yes", []int{0, 0, 0, 0, 0, 0, 0, 0}, 3, 0, true, "auto for a value it does not know"},
		{"yes", []int{0, 0}, 3, 0, false, "auto for a value it does not know, fewer than three rounds"},
		{"0", []int{0, 0, 0, 0, 0, 0, 0, 0, 0}, 3, 0, false, "off"},
		{"off", []int{0, 0, 0, 0, 0, 0, 0, 0, 0}, 3, 0, false, "off"},
		{"false", []int{0, 0, 0, 0, 0, 0, 0, 0, 0}, 3, 0, false, "off"},
		{"always", nil, 3, 0, false, "nothing seen yet"},
		{"always", []int{2}, 3, 2, true, "the last outcome"},
		{"always", []int{0, 3}, 1, 1, true, "at most the depth in flight"},
		{"auto", []int{0, 0}, 3, 0, false, "fewer than three rounds"},
		{"auto", []int{0, 0, 0}, 3, 0, true, "the first three alike"},
		{"auto", []int{2, 2, 2, 2, 2, 2, 2}, 3, 2, true, "fewer than eight rounds, all alike"},
		{"auto", []int{0, 0, 0, 1, 0, 0, 0}, 3, 0, false, "fewer than eight rounds, one unlike"},
		{"auto", []int{1, 0, 0, 0}, 3, 0, false, "fewer than eight rounds, the first unlike"},
		{"auto", []int{3, 3, 3}, 2, 0, false, "the first three alike, an outcome the round cannot have"},
		{"auto", []int{0, 0, 0, 0, 0, 0, 0, 0}, 3, 0, true, "eight alike"},
		{"auto", []int{3, 3, 1, 3, 3, 3, 3, 3}, 3, 3, true, "seven of eight"},
		{"auto", []int{3, 3, 1, 3, 3, 2, 3, 3}, 3, 0, false, "six of eight"},
		{"auto", []int{1, 1, 0, 0, 0, 0, 0, 0, 0, 0}, 3, 0, true, "only the last eight count"},
		{"auto", []int{3, 3, 3, 3, 3, 3, 3, 3}, 2, 0, false, "an outcome the round cannot have"},
	} {
		g := newGuess(tc.mode)
		for _, a := range tc.seen {
			g.Saw(a)
		}
		got, ok := g.Next(tc.k)
		if ok != tc.guess || ok && got != tc.want {
			t.Errorf("%s (%q after %v, depth %d): guess %d %v, want %d %v", tc.reason, tc.mode, tc.seen, tc.k, got, ok, tc.want, tc.guess)
		}
	}
}

// TestAheadFits protects which rounds take drafts made ahead: only the
// round of the guessed outcome (the cache back at the guessed length), at
// the guessed depth, whose pending token is the device's pick at the
// guessed row. A NaN row's pick is the host's and may differ from the
// device's, which the drafts embedded.
func TestAheadFits(t *testing.T) {
	picks := []uint32{11, 12, 13, 14}
	a := &ahead{accepted: 1, picks: &picks, k: 3, snapLen: 42}
	round := func(pending int32, k, snapLen int) Round {
		return Round{Pending: pending, K: k, Snap: gemma4.Snapshot{Len: snapLen}}
	}
	for _, tc := range []struct {
		name string
		r    Round
		want bool
	}{
		{"the guessed round", round(12, 3, 42), true},
		{"another outcome", round(12, 3, 43), false},
		{"the host picked another token (a NaN row)", round(99, 3, 42), false},
		{"the pick of another row", round(13, 3, 42), false},
		{"another depth", round(12, 2, 42), false},
	} {
		if got := a.fits(tc.r); got != tc.want {
			t.Errorf("%s: fits = %v, want %v", tc.name, got, tc.want)
		}
	}
	if short := (&ahead{accepted: 4, picks: &picks, k: 3, snapLen: 42}); short.fits(round(14, 3, 42)) {
		t.Error("fits a guess past the picks read")
	}
}

// TestFirstPartDefault pins a verify's first recorded part
// (TANDEM_SPEC_FIRST_PART): two layers unless set to a layer count, 0
// being the model's six; values that are not counts keep the default.
// (TestFirstPartSplitsTheVerify's ten-layer model cannot tell one, two
// and three layers apart.)
func TestFirstPartDefault(t *testing.T) {
	for _, tc := range []struct {
		v    string
		want int
	}{{"", 2}, {"0", 0}, {"1", 1}, {"6", 6}, {"64", 64}, {"65", 2}, {"-1", 2}, {"two", 2}} {
		t.Setenv(firstPartEnv, tc.v)
		if got := firstPart(); got != tc.want {
			t.Errorf("TANDEM_SPEC_FIRST_PART=%q: %d layers, want %d", tc.v, got, tc.want)
		}
	}
}
