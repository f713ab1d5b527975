package tokenizer

// mergeTable maps a pair of token ids to rank<<32 | merged id. It is an open-addressing hash
// table with linear probing over one array of entries, which the merge loop's many lookups
// (two per merge) reach with a single cache miss, faster than a Go map at Gemma's 515k merges.
type mergeTable struct {
	entries []mergeEntry
	mask    uint64
	n       int
}

type mergeEntry struct {
	key uint64 // pairID(left, right) + 1; 0 marks an empty slot
	val uint64
}

func newMergeTable(n int) *mergeTable {
	size := 16
	for size < n*2 {
		size <<= 1
	}
	return &mergeTable{entries: make([]mergeEntry, size), mask: uint64(size - 1)}
}

func mergeHash(k uint64) uint64 {
	k *= 0x9E3779B97F4A7C15
	return k ^ k>>29
}

func (t *mergeTable) get(pair uint64) (uint64, bool) {
	k := pair + 1
	for i := mergeHash(k) & t.mask; ; i = (i + 1) & t.mask {
		e := &t.entries[i]
		if e.key == k {
			return e.val, true
		}
		if e.key == 0 {
			return 0, false
		}
	}
}

// set inserts or replaces (a later merge of the same pair replaces an earlier one, as in HF).
func (t *mergeTable) set(pair, val uint64) {
	if (t.n+1)*2 > len(t.entries) {
		old := t.entries
		t.entries = make([]mergeEntry, len(old)*2)
		t.mask = uint64(len(t.entries) - 1)
		t.n = 0
		for _, e := range old {
			if e.key != 0 {
				t.set(e.key-1, e.val)
			}
		}
	}
	k := pair + 1
	for i := mergeHash(k) & t.mask; ; i = (i + 1) & t.mask {
		e := &t.entries[i]
		if e.key == k {
			e.val = val
			return
		}
		if e.key == 0 {
			e.key, e.val = k, val
			t.n++
			return
		}
	}
}
