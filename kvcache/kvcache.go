// Package kvcache holds the keys and values a decoder layer has computed for
// one sequence, for full-attention layers (every position) and sliding-window
// layers (a ring that keeps the window plus headroom).
//
// Speculative decoding writes several tokens in one forward pass and then
// keeps only some of them. Truncate drops the rest; the ring's headroom
// guarantees that a forward of up to MaxStep tokens never overwrites a key
// that a later query may still see, so rolling back loses nothing.
package kvcache

import (
	"fmt"

	"tandem/compute"
)

// Spec describes one layer's cache.
type Spec struct {
	KVHeads, HeadDim int
	// Window > 0 makes a sliding-window ring; 0 keeps every position.
	Window int
}

// Layer is one layer's K/V storage: [slots, KVHeads, HeadDim] tensors and
// the absolute position held by each slot (−1 when empty).
//
// A ring starts small and grows like a full layer until it reaches its
// capacity (ring: Window + MaxStep − 1 slots), so a sequence shorter than
// the window holds only what it needs. It grows before any write would
// wrap, so until then slot p holds position p, as in a full layer, and
// growing keeps every slot where it is.
type Layer struct {
	spec Spec
	b    compute.Backend
	k, v *compute.Tensor
	pos  []int32
	ring int // a ring's capacity; 0 for a full layer
}

// Cache is one sequence's K/V for every layer that owns a cache. All layers
// advance together: Len is the number of positions written.
type Cache struct {
	b       compute.Backend
	layers  []*Layer
	n       int
	maxStep int
	// furthest is the largest Len reached since New or Reset: every
	// position below it has been written into the rings, overwriting older
	// ones, so a rollback must stay within maxStep of it.
	furthest int
	// restorable is Len after the last forward pass: until the next write,
	// the positions a truncation forgot are still in place (Untruncate).
	restorable int
}

// New makes an empty cache. maxStep is the most tokens one forward pass may
// write (the prefill chunk or the verify width, whichever is larger); rings
// get maxStep−1 slots of headroom beyond their window.
func New(b compute.Backend, specs []Spec, maxStep int) *Cache {
	if maxStep < 1 {
		maxStep = 1
	}
	c := &Cache{b: b, maxStep: maxStep}
	for _, s := range specs {
		l := &Layer{spec: s, b: b}
		if s.Window > 0 {
			l.ring = s.Window + maxStep - 1
			l.alloc(min(l.ring, minSlots)) // View of an empty ring needs a slot
		} else {
			l.alloc(0) // grows on Write; View(0) of an empty layer works
		}
		c.layers = append(c.layers, l)
	}
	return c
}

// minSlots is the fewest slots a layer grows to.
const minSlots = 64

// grow makes room for positions up to need (exclusive): a full layer to
// the power of two from minSlots that holds them, a ring as far as its
// capacity. Powers of two bound the copies, and what Bytes says; a ring
// never grows once full.
func (l *Layer) grow(need int) {
	c := len(l.pos)
	if need <= c || l.ring > 0 && c >= l.ring {
		return
	}
	n := slotsFor(need)
	if l.ring > 0 {
		n = min(n, l.ring)
	}
	l.alloc(n)
}

// slotsFor is the power of two from minSlots that holds n positions.
func slotsFor(n int) int {
	s := minSlots
	for s < n {
		s *= 2
	}
	return s
}

// Len is the number of positions written (0..Len−1).
func (c *Cache) Len() int { return c.n }

// MaxStep is the most tokens one forward pass may write.
func (c *Cache) MaxStep() int { return c.maxStep }

// Layer returns layer i's storage.
func (c *Cache) Layer(i int) *Layer { return c.layers[i] }

// NumLayers is the number of layers with storage.
func (c *Cache) NumLayers() int { return len(c.layers) }

// Advance records that every layer has been written n more positions.
func (c *Cache) Advance(n int) {
	c.n += n
	c.furthest = max(c.furthest, c.n)
	c.restorable = c.n
}

// Truncate keeps positions [0, n) and forgets the rest, after a speculative
// round keeps fewer tokens than it wrote. It may only drop positions written
// by the last forward passes whose total width is at most MaxStep, counted
// from the furthest position ever written: successive truncations add up,
// since the rings overwrote old keys when the dropped positions were written.
func (c *Cache) Truncate(n int) error {
	if n < 0 || n > c.n {
		return fmt.Errorf("kvcache: truncate to %d, cache holds %d positions", n, c.n)
	}
	if back := c.furthest - n; back > c.maxStep {
		now := ""
		if c.furthest > c.n {
			now = fmt.Sprintf(" (the furthest length written; now %d)", c.n)
		}
		return fmt.Errorf("kvcache: cannot roll back %d positions, from %d%s to %d (at most %d, the forward step width)", back, c.furthest, now, n, c.maxStep)
	}
	for _, l := range c.layers {
		if l.spec.Window > 0 {
			for i, p := range l.pos {
				if int(p) >= n {
					l.pos[i] = -1
				}
			}
		}
	}
	c.n = n
	return nil
}

// Untruncate undoes truncations made since the last forward pass: the
// cache holds positions [0, n) again, for n up to the length that pass
// left. Nothing has written over the positions a truncation forgot, so
// their keys and values are still in place. A speculative round that rolled
// back to a guess of how many drafts would be accepted, to draft the next
// round early, restores what it guessed wrong.
func (c *Cache) Untruncate(n int) error {
	if n < c.n || n > c.restorable {
		return fmt.Errorf("kvcache: untruncate to %d: the cache holds %d positions and the last forward pass left %d", n, c.n, c.restorable)
	}
	for _, l := range c.layers {
		if l.spec.Window > 0 {
			for p := c.n; p < n; p++ {
				l.pos[p%len(l.pos)] = int32(p)
			}
		}
	}
	c.n = n
	return nil
}

// SetLen truncates or untruncates the cache to n positions.
func (c *Cache) SetLen(n int) error {
	if n > c.n {
		return c.Untruncate(n)
	}
	return c.Truncate(n)
}

// CanTruncate reports whether Truncate(n) would succeed.
func (c *Cache) CanTruncate(n int) bool {
	return n >= 0 && n <= c.n && c.furthest-n <= c.maxStep
}

// Clone returns an independent copy of the cache: the same positions, the
// same keys and values, and the same rollback limit (the rings of the copy
// have lost what the original's have). A prefix cache keeps clones so that
// a later sequence can continue from a shared prefix while the original
// goes on.
func (c *Cache) Clone() *Cache {
	d := &Cache{b: c.b, n: c.n, maxStep: c.maxStep, furthest: c.furthest, restorable: c.n}
	for _, l := range c.layers {
		m := &Layer{spec: l.spec, b: l.b, ring: l.ring}
		slots := len(l.pos)
		if l.spec.Window == 0 {
			slots = c.n // the positions a view can reach; Write grows it
		}
		m.alloc(slots)
		if slots > 0 {
			m.b.Copy(m.k, 0, m.b.Slice(l.k, 0, slots))
			m.b.Copy(m.v, 0, m.b.Slice(l.v, 0, slots))
			copy(m.pos, l.pos[:slots])
		}
		d.layers = append(d.layers, m)
	}
	return d
}

// Reset empties the cache, keeping its memory.
func (c *Cache) Reset() {
	c.n, c.furthest, c.restorable = 0, 0, 0
	for _, l := range c.layers {
		for i := range l.pos {
			l.pos[i] = -1
		}
	}
}

func (l *Layer) alloc(slots int) {
	k := l.b.Zeros(compute.F32, slots, l.spec.KVHeads, l.spec.HeadDim)
	v := l.b.Zeros(compute.F32, slots, l.spec.KVHeads, l.spec.HeadDim)
	pos := make([]int32, slots)
	for i := range pos {
		pos[i] = -1
	}
	if l.k != nil {
		n := min(len(l.pos), slots)
		l.b.Copy(k, 0, l.b.Slice(l.k, 0, n))
		l.b.Copy(v, 0, l.b.Slice(l.v, 0, n))
		copy(pos, l.pos[:n])
	}
	l.k, l.v, l.pos = k, v, pos
}

// Write stores k and v [n, KVHeads, HeadDim] for positions start..start+n−1.
// Full layers grow as needed; rings write slot position mod capacity.
func (l *Layer) Write(start int, k, v *compute.Tensor) {
	n := k.Dim(0)
	if r, ok := l.Slots(start, n); ok {
		l.b.Copy(r.K, r.Slot, k)
		l.b.Copy(r.V, r.Slot, v)
		return
	}
	c := len(l.pos) // a ring's write that wraps: two runs
	for done := 0; done < n; {
		slot := (start + done) % c
		m := min(n-done, c-slot) // contiguous run up to the ring's end
		l.b.Copy(l.k, slot, l.b.Slice(k, done, done+m))
		l.b.Copy(l.v, slot, l.b.Slice(v, done, done+m))
		for i := range m {
			l.pos[slot+i] = int32(start + done + i)
		}
		done += m
	}
}

// Slots returns the cache's storage for positions start..start+n−1 as a
// run of its slots, when those slots are contiguous (always in
// a full layer, which grows as needed; in a ring unless the run wraps), and
// records the positions as written: the caller then writes those slots, as
// an op that produces the keys and values in place instead of Write's copy
// does (compute.QKVNorms). ok is false, and nothing recorded, for a run that wraps. The
// positions are recorded before the data lands: a write that then fails
// leaves them naming stale slots, so a failed step's cache must be dropped
// or truncated (as after any failed forward).
func (l *Layer) Slots(start, n int) (run compute.KVRun, ok bool) {
	slot := start
	l.grow(start + n)
	if l.ring > 0 {
		// A ring has MaxStep−1 slots of headroom beyond its window: a wider
		// write would overwrite keys the write's first queries still need.
		// Forward rejects such rows, so reaching here is a programming error.
		if step := l.ring - l.spec.Window + 1; n > step {
			panic(fmt.Sprintf("kvcache: writing %d positions into a ring of window %d and %d slots (at most %d, the cache's MaxStep, per write)", n, l.spec.Window, l.ring, step))
		}
		c := len(l.pos) // below the capacity only while no write has wrapped
		if slot = start % c; slot+n > c {
			return run, false
		}
	}
	for i := range n {
		l.pos[slot+i] = int32(start + i)
	}
	return compute.KVRun{K: l.k, V: l.v, Slot: slot, N: n}, true
}

// View returns the keys, values and per-slot positions to attend over after
// the cache holds positions [0, upto), and the slot to start reducing at.
// Full layers return exactly upto slots in position order (positions nil:
// slot s is position s; start 0). Rings return every slot with its position
// (−1 for empty slots) and the slot after the newest position, which holds
// the oldest: visiting from there reduces keys in position order, so results
// do not depend on the ring's capacity.
func (l *Layer) View(upto int) (k, v *compute.Tensor, pos []int32, start int) {
	if l.spec.Window == 0 {
		return l.b.Slice(l.k, 0, upto), l.b.Slice(l.v, 0, upto), nil, 0
	}
	return l.k, l.v, l.pos, upto % len(l.pos)
}

// Spec returns the layer's shape.
func (l *Layer) Spec() Spec { return l.spec }

// Bytes is the memory the cache holds now (K and V of every layer).
func (c *Cache) Bytes() int64 {
	var n int64
	for _, l := range c.layers {
		n += int64(len(l.pos)) * int64(l.spec.KVHeads*l.spec.HeadDim) * 2 * 4
	}
	return n
}

// Bytes bounds the memory a cache of these layers takes once it holds
// tokens positions, written in steps of at most maxStep: full layers grow
// by doubling from 64 slots (so they hold less than twice what they need),
// rings too, up to Window + maxStep − 1 slots; K and V in F32.
func Bytes(specs []Spec, tokens, maxStep int) int64 {
	full := 0
	if tokens > 0 {
		full = slotsFor(tokens)
	}
	var n int64
	for _, s := range specs {
		slots := full
		if s.Window > 0 {
			slots = min(slotsFor(tokens), s.Window+max(maxStep, 1)-1)
		}
		n += int64(slots) * int64(s.KVHeads*s.HeadDim) * 2 * 4
	}
	return n
}
