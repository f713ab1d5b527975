package cuda

import (
	"slices"
	"testing"
)

// TestTableMemo protects the reuse of uploaded index tables: the same
// contents give the same device table, changed contents (even in the
// caller's own slice) a new one with the new values, and the least
// recently used table is the one evicted.
func TestTableMemo(t *testing.T) {
	g := backendOrSkip(t)
	xs := []int32{4, 5, 6}
	first := g.table(xs)
	if again := g.table([]int32{4, 5, 6}); ptrOf(again) != ptrOf(first) {
		t.Fatal("the same contents were uploaded twice")
	}
	xs[1] = 50 // the caller reuses its slice
	changed := g.table(xs)
	if ptrOf(changed) == ptrOf(first) {
		t.Fatal("changed contents reused the old table")
	}
	if got := g.ToI32(changed); !slices.Equal(got, []int32{4, 50, 6}) {
		t.Fatalf("table holds %v, want [4 50 6]", got)
	}
	if got := g.ToI32(g.table([]int32{4, 5})); !slices.Equal(got, []int32{4, 5}) {
		t.Fatalf("a shorter table with the same prefix holds %v", got)
	}
	g.table([]int32{4, 5, 6}) // most recent now
	for i := range tableMemoSize - 1 {
		g.table([]int32{int32(1000 + i)})
	}
	if ptrOf(g.table([]int32{4, 5, 6})) != ptrOf(first) {
		t.Fatal("a recently used table was evicted")
	}
	held := func(xs []int32) bool {
		for _, e := range g.tables.entries {
			if slices.Equal(e.host, xs) {
				return true
			}
		}
		return false
	}
	if held([]int32{4, 50, 6}) || len(g.tables.entries) != tableMemoSize {
		t.Fatalf("the memo holds %d tables (the least recently used kept: %v), want %d", len(g.tables.entries), held([]int32{4, 50, 6}), tableMemoSize)
	}
}

// TestAlternate protects the pattern Gather memoises under the MoE switches:
// only a stacked gate/up product's half rows, so ids that change every pass
// (embeddings, logit rows) do not crowd the table memo.
func TestAlternate(t *testing.T) {
	for _, tc := range []struct {
		ids  []int32
		want bool
	}{
		{[]int32{0, 2, 4, 6}, true},
		{[]int32{1, 3}, true},
		{[]int32{0}, false},
		{[]int32{2, 4, 6}, false},
		{[]int32{0, 2, 5}, false},
		{[]int32{0, 1, 2}, false},
		{[]int32{17, 99, 3}, false},
	} {
		if got := alternate(tc.ids); got != tc.want {
			t.Errorf("alternate(%v) = %v, want %v", tc.ids, got, tc.want)
		}
	}
}
