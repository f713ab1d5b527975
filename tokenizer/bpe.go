package tokenizer

import (
	"sync"
	"unicode/utf8"
)

// bpeModel is HF's BPE model: a word is split into characters (byte-fallback tokens or the
// unknown token for characters outside the vocabulary), then the adjacent pair with the lowest
// merge rank is merged, leftmost first, until no pair has a merge. The merge loop keeps the
// symbols in a doubly linked list and candidate pairs in a binary heap ordered by (rank,
// position), as HF's Rust implementation does, so a word of n characters costs O(n log n).
type bpeModel struct {
	vocab        map[string]int32
	merges       *mergeTable // pairID(left id, right id) -> rank<<32 | merged id
	unk          int32       // -1: none
	fuseUnk      bool
	byteFallback bool
	byteIDs      [256]int32 // "<0xHH>" ids; -1 where missing
	prefix       string     // continuing_subword_prefix
	suffix       string     // end_of_word_suffix
	ignoreMerges bool

	// Initial symbols without string lookups, valid when prefix and suffix are empty:
	// asciiIDs/runeIDs give the id of each one-character vocabulary entry (-1: none), and
	// byteLevelIDs the id of each byte's byte-level character (for ByteLevel pre-tokenizers).
	asciiIDs     [128]int32
	runeIDs      map[rune]int32
	byteLevelIDs [256]int32

	cache    wordCache // word -> ids
	rawCache wordCache // raw bytes -> ids of their byte-level form (encodeBytes)
	pool     sync.Pool // *bpeScratch
}

// wordCache remembers the ids of words of at most cacheMaxWord bytes; it is emptied when it
// holds cacheMaxSize words (HF's cache holds 10,000 words and then stops adding).
type wordCache struct {
	mu sync.RWMutex
	m  map[string][]int32
}

func (c *wordCache) get(word []byte) ([]int32, bool) {
	c.mu.RLock()
	ids, ok := c.m[string(word)]
	c.mu.RUnlock()
	return ids, ok
}

func (c *wordCache) put(word string, ids []int32) {
	c.mu.Lock()
	if c.m == nil || len(c.m) >= cacheMaxSize {
		c.m = make(map[string][]int32)
	}
	c.m[word] = ids
	c.mu.Unlock()
}

const (
	cacheMaxWord = 256
	cacheMaxSize = 1 << 16 // entries; the cache is reset when it fills up
)

type bpeSym struct {
	id         int32
	prev, next int32
	gone       bool
}

// bpeCand is a candidate merge: key is rank<<32 | position (lower merges first, leftmost on
// ties); the merge is still valid when the symbols at pos and after it are left and right.
type bpeCand struct {
	key         uint64
	left, right int32
}

type bpeScratch struct {
	syms []bpeSym
	heap []bpeCand
}

func pairID(a, b int32) uint64 { return uint64(uint32(a))<<32 | uint64(uint32(b)) }

// prepare fills the lookup tables after the vocabulary is known.
func (m *bpeModel) prepare() {
	m.runeIDs = map[rune]int32{}
	for i := range m.asciiIDs {
		m.asciiIDs[i] = -1
	}
	for p, id := range m.vocab {
		r, n := utf8.DecodeRuneInString(p)
		if n != len(p) || (r == utf8.RuneError && n <= 1) {
			continue
		}
		if r < 128 {
			m.asciiIDs[r] = id
		} else {
			m.runeIDs[r] = id
		}
	}
	for b := 0; b < 256; b++ {
		m.byteLevelIDs[b] = -1
		if id, ok := m.vocab[byteToString[b]]; ok {
			m.byteLevelIDs[b] = id
		}
	}
}

func (m *bpeModel) scratch() *bpeScratch {
	if sc, ok := m.pool.Get().(*bpeScratch); ok {
		return sc
	}
	return &bpeScratch{}
}

// encode appends the ids of one pre-tokenized word to dst.
func (m *bpeModel) encode(word string, dst []int32) []int32 {
	if word == "" {
		return dst
	}
	if m.ignoreMerges {
		if id, ok := m.vocab[word]; ok {
			return append(dst, id)
		}
	}
	cacheable := len(word) <= cacheMaxWord
	if cacheable {
		if ids, ok := m.cache.get([]byte(word)); ok {
			return append(dst, ids...)
		}
	}
	sc := m.scratch()
	sc.syms = m.initialSymbols(word, sc.syms[:0])
	start := len(dst)
	dst = m.merge(sc, dst)
	m.pool.Put(sc)
	if cacheable {
		m.cache.put(word, append([]int32(nil), dst[start:]...))
	}
	return dst
}

// canEncodeBytes reports whether encodeBytes may be used for byte-level words.
func (m *bpeModel) canEncodeBytes() bool {
	if m.prefix != "" || m.suffix != "" || m.ignoreMerges {
		return false
	}
	for _, id := range m.byteLevelIDs {
		if id < 0 {
			return false
		}
	}
	return true
}

// encodeBytes encodes the byte-level form of raw (each byte as its byte-level character)
// without building that string; it has its own cache, keyed by the raw bytes.
func (m *bpeModel) encodeBytes(raw string, dst []int32) []int32 {
	if raw == "" {
		return dst
	}
	cacheable := len(raw) <= cacheMaxWord/2
	if cacheable {
		if ids, ok := m.rawCache.get([]byte(raw)); ok {
			return append(dst, ids...)
		}
	}
	sc := m.scratch()
	syms := sc.syms[:0]
	for i := 0; i < len(raw); i++ {
		syms = append(syms, bpeSym{id: m.byteLevelIDs[raw[i]], prev: int32(i) - 1, next: int32(i) + 1})
	}
	sc.syms = syms
	start := len(dst)
	dst = m.merge(sc, dst)
	m.pool.Put(sc)
	if cacheable {
		m.rawCache.put(raw, append([]int32(nil), dst[start:]...))
	}
	return dst
}

// initialSymbols splits a word into its first symbols (HF's merge_word): each character's
// vocabulary id, else its byte-fallback tokens, else the unknown token (runs fused with
// fuse_unk); characters with none of these are dropped, as in HF.
func (m *bpeModel) initialSymbols(w string, syms []bpeSym) []bpeSym {
	add := func(id int32) {
		n := int32(len(syms))
		syms = append(syms, bpeSym{id: id, prev: n - 1, next: n + 1})
	}
	plain := m.prefix == "" && m.suffix == ""
	pendingUnk := false
	var buf []byte
	for i := 0; i < len(w); {
		var id int32 = -1
		var r rune
		size := 1
		if c := w[i]; c < utf8.RuneSelf {
			r = rune(c)
		} else {
			r, size = utf8.DecodeRuneInString(w[i:])
		}
		end := i + size
		s := w[i:end]
		if plain {
			if r < 128 {
				id = m.asciiIDs[r]
			} else if v, ok := m.runeIDs[r]; ok {
				id = v
			}
		} else {
			buf = buf[:0]
			if i > 0 {
				buf = append(buf, m.prefix...)
			}
			buf = append(buf, s...)
			if end == len(w) {
				buf = append(buf, m.suffix...)
			}
			s = string(buf)
			if v, ok := m.vocab[s]; ok {
				id = v
			}
		}
		i = end
		if id >= 0 {
			if pendingUnk {
				add(m.unk)
				pendingUnk = false
			}
			add(id)
			continue
		}
		if m.byteFallback {
			all := true
			for j := 0; j < len(s); j++ {
				if m.byteIDs[s[j]] < 0 {
					all = false
					break
				}
			}
			if all {
				// As in HF, a pending unknown is not flushed here: it lands after these bytes.
				for j := 0; j < len(s); j++ {
					add(m.byteIDs[s[j]])
				}
				continue
			}
		}
		if m.unk >= 0 {
			if pendingUnk && !m.fuseUnk {
				add(m.unk)
			}
			pendingUnk = true
		}
	}
	if pendingUnk {
		add(m.unk)
	}
	return syms
}

// merge runs the merge loop over sc.syms and appends the resulting ids to dst.
func (m *bpeModel) merge(sc *bpeScratch, dst []int32) []int32 {
	syms := sc.syms
	if len(syms) == 0 {
		return dst
	}
	syms[len(syms)-1].next = -1
	h := sc.heap[:0]
	push := func(pos int32, left, right int32) {
		if v, ok := m.merges.get(pairID(left, right)); ok {
			h = heapPush(h, bpeCand{key: v>>32<<32 | uint64(uint32(pos)), left: left, right: right})
		}
	}
	for i := 0; i+1 < len(syms); i++ {
		if v, ok := m.merges.get(pairID(syms[i].id, syms[i+1].id)); ok {
			h = append(h, bpeCand{key: v>>32<<32 | uint64(i), left: syms[i].id, right: syms[i+1].id})
		}
	}
	heapInit(h)
	for len(h) > 0 {
		var c bpeCand
		c, h = heapPop(h)
		pos := int32(uint32(c.key))
		left := &syms[pos]
		if left.gone || left.next < 0 || left.id != c.left || syms[left.next].id != c.right {
			continue // stale: one of the two symbols has changed since the candidate was made
		}
		right := &syms[left.next]
		v, _ := m.merges.get(pairID(c.left, c.right))
		left.id = int32(uint32(v))
		right.gone = true
		left.next = right.next
		if right.next >= 0 {
			syms[right.next].prev = pos
		}
		if left.prev >= 0 {
			push(left.prev, syms[left.prev].id, left.id)
		}
		if left.next >= 0 {
			push(pos, left.id, syms[left.next].id)
		}
	}
	for i := int32(0); i >= 0; i = syms[i].next {
		dst = append(dst, syms[i].id)
	}
	sc.heap = h
	return dst
}

// A 4-ary min-heap of candidates: four 16-byte children share a cache line.

func heapInit(h []bpeCand) {
	if len(h) < 2 {
		return
	}
	for i := (len(h) - 2) / 4; i >= 0; i-- {
		heapDown(h, i)
	}
}

func heapPush(h []bpeCand, c bpeCand) []bpeCand {
	h = append(h, c)
	i := len(h) - 1
	for i > 0 {
		p := (i - 1) / 4
		if h[p].key <= c.key {
			break
		}
		h[i] = h[p]
		i = p
	}
	h[i] = c
	return h
}

func heapPop(h []bpeCand) (bpeCand, []bpeCand) {
	top := h[0]
	n := len(h) - 1
	h[0] = h[n]
	h = h[:n]
	if n > 1 {
		heapDown(h, 0)
	}
	return top, h
}

func heapDown(h []bpeCand, i int) {
	n := len(h)
	c := h[i]
	for {
		first := 4*i + 1
		if first >= n {
			break
		}
		m := first
		end := min(first+4, n)
		for j := first + 1; j < end; j++ {
			if h[j].key < h[m].key {
				m = j
			}
		}
		if h[m].key >= c.key {
			break
		}
		h[i] = h[m]
		i = m
	}
	h[i] = c
}
