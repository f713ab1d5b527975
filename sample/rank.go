package sample

import (
	"math"
	"slices"
	"sync"
)

// A ranking is a row of logits' candidates in descending order, the lower
// index first among equal values (-0 equals +0), NaN left out: the order a
// stable sort of every index by value gives. A vocabulary of 262,144 took
// sort.SliceStable about 100 ms a token; this takes a few.
//
// Each entry packs the value's key (descKey) above its index, so entries
// are unique and ascending entries are that order.
type ranking struct {
	ranked []uint64 // the candidates, ranked; aliases buf
	buf    []uint64
	tmp    []uint64
	lens   []int   // entries each chunk kept
	counts []int32 // a radix digit's counts, for each chunk
}

// rankings keeps rankings' memory between tokens. Not a sync.Pool: every
// collection would empty it, and a token allocates megabytes.
var rankings struct {
	sync.Mutex
	free []*ranking
}

// newRanking ranks l's values, cut to the topK largest and every value tied
// with the k-th (topK <= 0, or at least the candidates: no cut). free gives
// its memory back.
//
// Chunks of l (parallel) pack their entries, and with a cut keep only their
// own top k's buckets (an entry among the top k overall is among its
// chunk's); the chunks' entries, concatenated in order, are then cut again
// and sorted.
func newRanking(l []float32, topK int) *ranking {
	rankings.Lock()
	var r *ranking
	if n := len(rankings.free); n > 0 {
		r, rankings.free = rankings.free[n-1], rankings.free[:n-1]
	} else {
		r = new(ranking)
	}
	rankings.Unlock()
	n, nc := len(l), chunks(len(l))
	r.buf = slices.Grow(r.buf[:0], n)[:n]
	r.lens = slices.Grow(r.lens[:0], nc)[:nc]
	r.counts = slices.Grow(r.counts[:0], max(nc, 1)<<radixBits)[:max(nc, 1)<<radixBits]
	parallel(n, func(c, lo, hi int) {
		part := r.buf[lo:lo]
		for i, v := range l[lo:hi] {
			if v == v {
				part = append(part, uint64(descKey(v))<<32|uint64(lo+i))
			}
		}
		if topK > 0 {
			part = head(part, topK, r.counts[c<<radixBits:(c+1)<<radixBits])
		}
		r.lens[c] = len(part)
	})
	m := 0
	for c, k := range r.lens {
		m += copy(r.buf[m:], r.buf[c*chunk:c*chunk+k])
	}
	ranked := r.buf[:m]
	cut := topK > 0 && topK < m
	if cut {
		ranked = head(ranked, topK, r.counts[:1<<radixBits])
	}
	r.sort(ranked)
	if cut {
		kth := ranked[topK-1] >> 32
		n := topK
		for n < len(ranked) && ranked[n]>>32 == kth {
			n++
		}
		ranked = ranked[:n]
	}
	r.ranked = ranked
	return r
}

func (r *ranking) free() {
	r.ranked = nil
	rankings.Lock()
	if len(rankings.free) < 8 {
		rankings.free = append(rankings.free, r)
	}
	rankings.Unlock()
}

// entryIndex unpacks a ranked entry's index.
func entryIndex(e uint64) int32 { return int32(uint32(e)) }

// descKey maps a non-NaN value to a key that sorts ascending as the values
// sort descending, with -0 and +0 the same key.
func descKey(v float32) uint32 {
	if v == 0 {
		v = 0
	}
	b := math.Float32bits(v)
	if b&(1<<31) != 0 {
		b = ^b
	} else {
		b |= 1 << 31
	}
	return ^b
}

// radixBits is a radix digit: 2,048 buckets stay in the cache,
// where 65,536 made every scattered write a miss.
const radixBits = 11

// head keeps, in place and in their order, the entries whose key's top
// digit is at most that of the k-th smallest entry: every entry among the
// k smallest, and usually few more. count is scratch of 1<<radixBits.
func head(ranked []uint64, k int, count []int32) []uint64 {
	if k >= len(ranked) {
		return ranked
	}
	const shift = 64 - radixBits
	clear(count)
	for _, e := range ranked {
		count[e>>shift]++
	}
	last, sum := 0, 0
	for d, c := range count {
		sum += int(c)
		if sum >= k {
			last = d
			break
		}
	}
	kept := ranked[:0]
	for _, e := range ranked {
		if int(e>>shift) <= last {
			kept = append(kept, e)
		}
	}
	return kept
}

// sort sorts entries ascending. They arrive in index order, so sorting by
// key alone, stably, sorts them wholly: a least-significant-digit radix sort
// over the key's 32 bits does that in linear time.
func (r *ranking) sort(ranked []uint64) {
	if len(ranked) < 1<<12 {
		slices.Sort(ranked)
		return
	}
	r.tmp = slices.Grow(r.tmp[:0], len(ranked))[:len(ranked)]
	src, dst := ranked, r.tmp
	count := r.counts[:1<<radixBits]
	for shift := 32; shift < 64; shift += radixBits {
		clear(count)
		for _, e := range src {
			count[e>>shift&(1<<radixBits-1)]++
		}
		var sum int32
		for d, c := range count {
			count[d] = sum
			sum += c
		}
		for _, e := range src {
			d := e >> shift & (1<<radixBits - 1)
			dst[count[d]] = e
			count[d]++
		}
		src, dst = dst, src
	}
	copy(ranked, src) // three passes: the result is in tmp
}
