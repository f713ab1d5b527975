package spec

import "testing"

// TestAheadGuess protects when drafting ahead guesses and what: never
// unless turned on; "always" guesses the last outcome (at most the round's
// depth) from the second round; "auto" only once the last eight rounds
// include seven alike, and only an outcome the round in flight can have.
func TestAheadGuess(t *testing.T) {
	for _, tc := range []struct {
		mode   string
		seen   []int
		k      int
		want   int
		guess  bool
		reason string
	}{
		{"", []int{0, 0, 0, 0, 0, 0, 0, 0, 0}, 3, 0, false, "off unless turned on"},
		{"0", []int{0, 0, 0, 0, 0, 0, 0, 0, 0}, 3, 0, false, "off"},
		{"always", nil, 3, 0, false, "nothing seen yet"},
		{"always", []int{2}, 3, 2, true, "the last outcome"},
		{"always", []int{0, 3}, 1, 1, true, "at most the depth in flight"},
		{"auto", []int{0, 0, 0, 0, 0, 0, 0}, 3, 0, false, "fewer than eight rounds"},
		{"auto", []int{0, 0, 0, 0, 0, 0, 0, 0}, 3, 0, true, "eight alike"},
		{"auto", []int{3, 3, 1, 3, 3, 3, 3, 3}, 3, 3, true, "seven of eight"},
		{"auto", []int{3, 3, 1, 3, 3, 2, 3, 3}, 3, 0, false, "six of eight"},
		{"auto", []int{1, 1, 0, 0, 0, 0, 0, 0, 0, 0}, 3, 0, true, "only the last eight count"},
		{"auto", []int{3, 3, 3, 3, 3, 3, 3, 3}, 2, 0, false, "an outcome the round cannot have"},
	} {
		g := newAheadGuess(tc.mode)
		for _, a := range tc.seen {
			g.saw(a)
		}
		got, ok := g.next(tc.k)
		if ok != tc.guess || ok && got != tc.want {
			t.Errorf("%s (%q after %v, depth %d): guess %d %v, want %d %v", tc.reason, tc.mode, tc.seen, tc.k, got, ok, tc.want, tc.guess)
		}
	}
}
