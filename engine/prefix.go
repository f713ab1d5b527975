package engine

import (
	"slices"

	"tandem/kvcache"
)

// prefixCache keeps the KV of finished requests (and of prompts) so that a
// later request sharing a token prefix — a chat's next turn is the last
// prompt, the answer and a new message — only prefills the rest.
//
// An entry can serve a prefix only as far back as its cache can roll back:
// full layers keep every position, but a sliding layer's ring keeps the
// last window plus one step, so a cache that went on past a position may
// have overwritten keys that position still needs. kvcache.CanTruncate
// says exactly that; entries record the shortest prefix they can serve.
// Reuse copies the entry's cache, so the entry stays for others.
//
// Where prompt passes compute at another precision than decoding
// (gemma4.Model.SetPromptPrecision), a position a decode step wrote holds
// other keys than a prompt pass would: an entry then serves prefixes only
// as far as prompt passes wrote it (high), so that a request's keys are
// the ones its own prefill would write.
type prefixCache struct {
	limit   int // most tokens held; 0: off
	entries []*prefixEntry
	tokens  int // held
	clock   uint64
}

type prefixEntry struct {
	tokens []int32 // the positions the cache holds
	cache  *kvcache.Cache
	low    int    // the shortest prefix it can roll back to
	high   int    // the longest prefix it serves: the positions prompt passes wrote
	used   uint64 // last use, for LRU eviction
}

func newPrefixCache(limit int) *prefixCache { return &prefixCache{limit: limit} }

func (p *prefixCache) on() bool { return p.limit > 0 }

// fits reports whether an entry of n tokens may be kept when the KV budget
// leaves room tokens for the prefix cache.
func (p *prefixCache) fits(n, room int) bool { return p.on() && n <= p.limit && n <= room }

// take returns a copy of the cache of the longest prefix of prompt that an
// entry can serve, truncated to it, and its length; nil and 0 if none. It
// leaves at least the prompt's last token to compute: its logits (and the
// drafter's hidden state) are not kept.
func (p *prefixCache) take(prompt []int32) (*kvcache.Cache, int) {
	var best *prefixEntry
	bestN := 0
	for _, e := range p.entries {
		n := min(commonPrefix(e.tokens, prompt), len(prompt)-1, e.high)
		if n >= e.low && n > bestN {
			best, bestN = e, n
		}
	}
	if best == nil {
		return nil, 0
	}
	p.clock++
	best.used = p.clock
	c := best.cache.Clone()
	if err := c.Truncate(bestN); err != nil {
		return nil, 0 // cannot happen: n >= low
	}
	return c, bestN
}

// put keeps cache, which holds exactly tokens, of which the first high
// may serve a prefix (see high), evicting the least recently used entries
// to stay within the limit and room (what the KV budget leaves). An entry
// serves the prefixes from low (how far back it rolls) to high; one that
// serves none is not kept (a request's end snapshot at bf16 prompts: its
// rings have moved past its prompt). Entries it makes redundant (serving a
// range of the same tokens within its own) go; it is not kept if an entry
// makes it redundant.
func (p *prefixCache) put(tokens []int32, c *kvcache.Cache, room, high int) {
	n := len(tokens)
	high = min(high, n)
	if !p.fits(n, room) || n < 1 || c.Len() != n {
		return
	}
	low := n
	for low > 1 && c.CanTruncate(low-1) {
		low--
	}
	if high < low {
		return
	}
	for _, e := range p.entries {
		if e.low <= low && e.high >= high && commonPrefix(e.tokens, tokens) >= high {
			return // e serves everything this entry would
		}
	}
	p.entries = slices.DeleteFunc(p.entries, func(e *prefixEntry) bool {
		if e.low >= low && e.high <= high && commonPrefix(e.tokens, tokens) >= e.high {
			p.tokens -= len(e.tokens)
			return true
		}
		return false
	})
	p.shrink(min(p.limit, room) - n)
	p.clock++
	p.entries = append(p.entries, &prefixEntry{tokens: slices.Clone(tokens), cache: c, low: low, high: high, used: p.clock})
	p.tokens += n
}

// shrink evicts least recently used entries until at most n tokens are
// held.
func (p *prefixCache) shrink(n int) {
	for p.tokens > max(n, 0) && len(p.entries) > 0 {
		lru := 0
		for i, e := range p.entries {
			if e.used < p.entries[lru].used {
				lru = i
			}
		}
		p.tokens -= len(p.entries[lru].tokens)
		p.entries = slices.Delete(p.entries, lru, lru+1)
	}
}

func commonPrefix(a, b []int32) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}
