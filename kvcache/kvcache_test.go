package kvcache_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"tandem/compute"
	"tandem/compute/cpu"
	"tandem/kvcache"
)

// The cache's job: every key a later query may attend to is in the view,
// with the value last written for its position, and nothing else is. These
// tests write keys whose values encode (position, version) so a lost key, a
// stale key or a key in the wrong slot shows up as a wrong number.

const heads, dim = 2, 3

// keyValue is the value written at (position, head, element) by the
// version-th write of that position. Exact in float32 for the sizes used.
func keyValue(pos, version, h, d int) float32 {
	return float32(((pos*64+version%64)*heads+h)*dim + d)
}

// kvBlock makes K and V [n, heads, dim] for positions start..start+n−1.
// versions[i] is the version of position start+i; V is −K−0.5.
func kvBlock(b *cpu.Backend, start int, versions []int) (k, v *compute.Tensor) {
	n := len(versions)
	kd := make([]float32, 0, n*heads*dim)
	for i := range n {
		for h := range heads {
			for d := range dim {
				kd = append(kd, keyValue(start+i, versions[i], h, d))
			}
		}
	}
	vd := make([]float32, len(kd))
	for i, x := range kd {
		vd[i] = -x - 0.5
	}
	return b.FromF32(kd, n, heads, dim), b.FromF32(vd, n, heads, dim)
}

// write writes positions [c.Len(), c.Len()+n) of version 0 into every layer
// and advances the cache.
func write(b *cpu.Backend, c *kvcache.Cache, n int) {
	k, v := kvBlock(b, c.Len(), make([]int, n))
	for i := range c.NumLayers() {
		c.Layer(i).Write(c.Len(), k, v)
	}
	c.Advance(n)
}

// slotHolds reports whether slot s of the viewed K and V holds the values
// of (pos, version).
func slotHolds(kf, vf []float32, s, pos, version int) bool {
	for h := range heads {
		for d := range dim {
			i := (s*heads+h)*dim + d
			want := keyValue(pos, version, h, d)
			if kf[i] != want || vf[i] != -want-0.5 {
				return false
			}
		}
	}
	return true
}

func TestFullLayerGrowsAndKeepsContents(t *testing.T) {
	// Growth (at 64 slots, then doubling) must carry every written key
	// over; View returns exactly upto slots, in position order.
	for _, widths := range [][]int{
		{1},
		{7},
		{64, 1},
		{63, 2, 70},
		{200},
		{5, 59, 1, 128, 3},
	} {
		t.Run(fmt.Sprint(widths), func(t *testing.T) {
			b := cpu.New(1)
			c := kvcache.New(b, []kvcache.Spec{{KVHeads: heads, HeadDim: dim}}, 1)
			for _, w := range widths {
				write(b, c, w)
				for _, upto := range []int{c.Len(), c.Len() / 2, 0} {
					k, v, pos, start := c.Layer(0).View(upto)
					if k.Dim(0) != upto || v.Dim(0) != upto || pos != nil || start != 0 {
						t.Fatalf("View(%d) after %d written: %d and %d slots, positions %v, start %d; want %d slots, nil positions, start 0",
							upto, c.Len(), k.Dim(0), v.Dim(0), pos, start, upto)
					}
					if !slices.Equal(k.Shape(), []int{upto, heads, dim}) {
						t.Fatalf("View(%d): K shape %v", upto, k.Shape())
					}
					kf, vf := b.ToF32(k), b.ToF32(v)
					for s := range upto {
						if !slotHolds(kf, vf, s, s, 0) {
							t.Fatalf("after writing %d positions, slot %d does not hold position %d", c.Len(), s, s)
						}
					}
				}
			}
		})
	}
}

func TestViewOfAnEmptyCache(t *testing.T) {
	// A fresh cache views as empty: no slots for a full layer, every slot
	// empty (−1) for a ring.
	b := cpu.New(1)
	c := kvcache.New(b, []kvcache.Spec{{KVHeads: heads, HeadDim: dim}, {KVHeads: heads, HeadDim: dim, Window: 4}}, 3)
	k, v, pos, start := c.Layer(0).View(0)
	if k.Dim(0) != 0 || v.Dim(0) != 0 || pos != nil || start != 0 {
		t.Errorf("full layer: View(0) of an empty cache gave %v %v %v %d", k, v, pos, start)
	}
	k, _, pos, start = c.Layer(1).View(0)
	if k.Dim(0) != 6 || len(pos) != 6 || start != 0 || slices.ContainsFunc(pos, func(p int32) bool { return p != -1 }) {
		t.Errorf("ring: View(0) of an empty cache gave %v, positions %v, start %d; want 6 empty slots", k, pos, start)
	}
}

// checkRing checks a ring's view after positions [0, upto) were written,
// where latest[p] is the version last written at p (−1: must not be held);
// len(latest) >= upto.
func checkRing(t *testing.T, b *cpu.Backend, l *kvcache.Layer, upto int, latest []int) {
	t.Helper()
	k, v, pos, start := l.View(upto)
	slots := len(pos)
	if k.Dim(0) != slots || v.Dim(0) != slots {
		t.Fatalf("View(%d): %d K and %d V slots for %d positions", upto, k.Dim(0), v.Dim(0), slots)
	}
	if start != upto%slots {
		t.Fatalf("View(%d): start %d, want %d (upto mod %d slots)", upto, start, upto%slots, slots)
	}
	kf, vf := b.ToF32(k), b.ToF32(v)
	held := map[int]bool{}
	for s, p := range pos {
		if p < 0 {
			if p != -1 {
				t.Fatalf("View(%d): slot %d has position %d; empty slots are −1", upto, s, p)
			}
			continue
		}
		pi := int(p)
		switch {
		case pi >= upto:
			t.Fatalf("View(%d): slot %d holds position %d, beyond what the cache holds", upto, s, pi)
		case pi%slots != s:
			t.Fatalf("View(%d): position %d is in slot %d, want %d (position mod %d)", upto, pi, s, pi%slots, slots)
		case held[pi]:
			t.Fatalf("View(%d): position %d is in two slots", upto, pi)
		case latest[pi] < 0:
			t.Fatalf("View(%d): slot %d holds position %d, which was rolled back", upto, s, pi)
		case !slotHolds(kf, vf, s, pi, latest[pi]):
			t.Fatalf("View(%d): slot %d (position %d) does not hold the values last written there", upto, s, pi)
		}
		held[pi] = true
	}
	// Visiting from start must meet positions in increasing order: the
	// attention kernel reduces keys in that order.
	last := -1
	for i := range slots {
		if p := int(pos[(start+i)%slots]); p >= 0 {
			if p <= last {
				t.Fatalf("View(%d): from slot %d positions are not increasing: %v", upto, start, pos)
			}
			last = p
		}
	}
}

func TestRingWritesPositionModCapacity(t *testing.T) {
	for _, tc := range []struct {
		window, maxStep int
		widths          []int
	}{
		{window: 1, maxStep: 1, widths: []int{1, 1, 1, 1}},
		{window: 4, maxStep: 1, widths: []int{1, 1, 1, 1, 1, 1, 1, 1, 1}},
		{window: 4, maxStep: 3, widths: []int{3, 3, 3, 1, 2, 3}},
		{window: 5, maxStep: 8, widths: []int{8, 7, 8, 1, 8}},
		{window: 16, maxStep: 4, widths: []int{4, 4, 4, 4, 4, 3, 4, 2, 4, 4, 4}},
	} {
		t.Run(fmt.Sprintf("window %d step %d", tc.window, tc.maxStep), func(t *testing.T) {
			b := cpu.New(1)
			c := kvcache.New(b, []kvcache.Spec{{KVHeads: heads, HeadDim: dim, Window: tc.window}}, tc.maxStep)
			capacity := tc.window + tc.maxStep - 1
			var latest []int
			for _, w := range tc.widths {
				write(b, c, w)
				for range w {
					latest = append(latest, 0)
				}
				_, _, pos, _ := c.Layer(0).View(c.Len())
				if len(pos) != capacity {
					t.Fatalf("ring of window %d, step %d has %d slots, want %d (window + step − 1)", tc.window, tc.maxStep, len(pos), capacity)
				}
				checkRing(t, b, c.Layer(0), c.Len(), latest)
				// The ring holds exactly the newest min(len, capacity) positions.
				want := make([]int32, capacity)
				for s := range want {
					want[s] = -1
				}
				for p := max(0, c.Len()-capacity); p < c.Len(); p++ {
					want[p%capacity] = int32(p)
				}
				if !slices.Equal(pos, want) {
					t.Fatalf("after %d positions: slot positions %v, want %v", c.Len(), pos, want)
				}
			}
		})
	}
}

// snapshot is what a cache shows: its length and each ring's positions.
func snapshot(c *kvcache.Cache) string {
	s := fmt.Sprint(c.Len())
	for i := range c.NumLayers() {
		if c.Layer(i).Spec().Window > 0 {
			_, _, pos, _ := c.Layer(i).View(c.Len())
			s += fmt.Sprint(pos)
		}
	}
	return s
}

// fullAndRing makes a cache of a full layer (0) and a ring (1).
func fullAndRing(b compute.Backend, window, step int) *kvcache.Cache {
	return kvcache.New(b, []kvcache.Spec{{KVHeads: heads, HeadDim: dim}, {KVHeads: heads, HeadDim: dim, Window: window}}, step)
}

// opArg is the number of an op such as "w3" or "t-1".
func opArg(t *testing.T, op string) int {
	t.Helper()
	var n int
	if _, err := fmt.Sscanf(op[1:], "%d", &n); err != nil {
		t.Fatalf("bad op %q", op)
	}
	return n
}

// checkErr fails unless err is nil where want is empty and otherwise
// contains want.
func checkErr(t *testing.T, err error, want string) {
	t.Helper()
	switch {
	case want == "" && err != nil:
		t.Fatalf("unexpected error: %v", err)
	case want != "" && err == nil:
		t.Fatalf("succeeded, want an error containing %q", want)
	case want != "" && !strings.Contains(err.Error(), want):
		t.Fatalf("error %q, want it to contain %q", err, want)
	}
}

func TestTruncate(t *testing.T) {
	const window, step = 4, 3 // ring of 6 slots
	for _, tc := range []struct {
		ops     string // "wN": a forward pass of N tokens; "tN": truncate to N
		wantErr string // from the last truncation; the others must succeed
	}{
		{ops: "w3 w3 t6"},                      // keep everything
		{ops: "w3 w3 t3"},                      // drop the last pass
		{ops: "w3 w3 w2 t7"},                   // drop part of the last pass
		{ops: "w3 w2 w1 t3"},                   // drop the step width over three passes
		{ops: "w2 t0"},                         // drop everything of a short cache
		{ops: "w3 w3 w3 t8 t6"},                // two truncations within the step width
		{ops: "w3 w3 w3 t6 w3 t6 w2 t7 w1 t6"}, // speculative rounds
		{ops: "w3 t-1", wantErr: "kvcache: truncate to -1, cache holds 3 positions"},
		{ops: "w3 t4", wantErr: "kvcache: truncate to 4, cache holds 3 positions"},
		{ops: "w3 w3 w3 t5", wantErr: "kvcache: cannot roll back 4 positions, from 9 to 5 (at most 3, the forward step width)"},
		{ops: "w3 w3 w3 t0", wantErr: "cannot roll back 9 positions, from 9 to 0"},
		// Each call is within the step width, but together they reach keys
		// the ring has already overwritten.
		{ops: "w3 w3 w3 t6 t4", wantErr: "kvcache: cannot roll back 5 positions, from 9 (the furthest length written; now 6) to 4 (at most 3"},
		{ops: "w3 w3 w3 t6 w1 t5", wantErr: "cannot roll back 4 positions, from 9 (the furthest length written; now 7) to 5"},
	} {
		t.Run(tc.ops, func(t *testing.T) {
			b := cpu.New(1)
			c := fullAndRing(b, window, step)
			ops := strings.Fields(tc.ops)
			var err error
			for i, op := range ops {
				n := opArg(t, op)
				if op[0] == 'w' {
					write(b, c, n)
					continue
				}
				before := snapshot(c)
				if err = c.Truncate(n); err != nil {
					if i != len(ops)-1 {
						t.Fatalf("%s: %v", op, err)
					}
					if after := snapshot(c); after != before {
						t.Fatalf("a refused truncate changed the cache: %s, was %s", after, before)
					}
					break
				}
				if c.Len() != n {
					t.Fatalf("Len %d after truncate to %d", c.Len(), n)
				}
				_, _, pos, _ := c.Layer(1).View(n)
				for s, p := range pos {
					if int(p) >= n {
						t.Fatalf("after truncate to %d, ring slot %d still holds position %d", n, s, p)
					}
				}
			}
			checkErr(t, err, tc.wantErr)
		})
	}
}

// TestUntruncate protects the rollback of a guess: after truncations, and
// before the next forward pass, the cache can hold again any length up to
// what that pass left, with every ring slot holding the position and the
// values it held before; once a pass has written, or past that length, it
// refuses and changes nothing.
func TestUntruncate(t *testing.T) {
	for _, tc := range []struct {
		window, step int    // 4, 3 (a ring of 6 slots) where 0
		ops          string // "wN": a forward pass of N tokens; "tN": truncate to N; "uN": untruncate to N; "c0": clone; "r0": reset
		wantErr      string // from the last op; the others must succeed
	}{
		{ops: "w3 w3 t4 u6"},
		{ops: "w3 w3 t3 u5 t4 u6"},
		{ops: "w3 w3 w3 t7 t6 u9"},    // past the ring's wrap
		{ops: "w3 w3 t4 u4"},          // nothing to restore
		{ops: "w3 w3 t4 u6 w2 t7 u8"}, // a round after a restored guess
		{ops: "w3 u4", wantErr: "kvcache: untruncate to 4: the cache holds 3 positions and the last forward pass left 3"},
		{ops: "w3 w3 t4 w1 u6", wantErr: "the last forward pass left 5"},
		{ops: "w3 w3 t4 u3", wantErr: "untruncate to 3: the cache holds 4 positions"},
		{ops: "w3 w3 t4 c0 u6", wantErr: "the cache holds 4 positions and the last forward pass left 4"}, // a clone keeps only what it holds
		{ops: "w3 w3 t4 r0 u3", wantErr: "the cache holds 0 positions and the last forward pass left 0"},
		// A ring of 139 slots that starts with 64 and grows before it wraps.
		{window: 100, step: 40, ops: "w40 w40 t50 u80"},              // grown to 128 by the second pass
		{window: 100, step: 40, ops: "w30 w30 w10 t45 u70"},          // grown by a pass that straddles 64
		{window: 100, step: 40, ops: "w40 w40 w40 w40 t125 u160"},    // full, and past its wrap
		{window: 100, step: 40, ops: "w40 w30 c0 w40 w40 t140 u150"}, // a clone of a part-grown ring grows on its own
		{window: 100, step: 40, ops: "w40 w40 t50 c0 u80", wantErr: "the cache holds 50 positions and the last forward pass left 50"},
	} {
		window, step := 4, 3
		if tc.window > 0 {
			window, step = tc.window, tc.step
		}
		t.Run(fmt.Sprintf("window %d/%s", window, tc.ops), func(t *testing.T) {
			b := cpu.New(1)
			c := fullAndRing(b, window, step)
			ops := strings.Fields(tc.ops)
			states := map[int]string{} // length → the cache's positions when a pass left it there
			var err error
			for i, op := range ops {
				n := opArg(t, op)
				before := snapshot(c)
				switch op[0] {
				case 'w':
					write(b, c, n)
					states[c.Len()] = snapshot(c)
					if _, _, pos, _ := c.Layer(1).View(c.Len()); len(pos) > window+step-1 {
						t.Fatalf("after %s the ring has %d slots, past its capacity %d", op, len(pos), window+step-1)
					}
					continue
				case 't':
					err = c.Truncate(n)
				case 'u':
					err = c.Untruncate(n)
				case 'c':
					c = c.Clone()
					continue
				case 'r':
					c.Reset()
					continue
				}
				if err != nil {
					if i != len(ops)-1 {
						t.Fatalf("%s: %v", op, err)
					}
					if after := snapshot(c); after != before {
						t.Fatalf("a refused %s changed the cache: %s, was %s", op, after, before)
					}
					break
				}
				if c.Len() != n {
					t.Fatalf("Len %d after %s", c.Len(), op)
				}
				if want, ok := states[n]; ok && op[0] == 'u' && snapshot(c) != want {
					t.Fatalf("after %s the ring holds %s, want %s as the pass left it", op, snapshot(c), want)
				}
				if op[0] == 'u' { // every restored slot holds its position's values
					k, v, pos, _ := c.Layer(1).View(n)
					kf, vf := b.ToF32(k), b.ToF32(v)
					for s, p := range pos {
						if p >= 0 && !slotHolds(kf, vf, s, int(p), 0) {
							t.Fatalf("after %s ring slot %d does not hold position %d's values", op, s, p)
						}
					}
					// and every position of the window up to n is held
					held := map[int32]bool{}
					for _, p := range pos {
						held[p] = true
					}
					for p := max(0, n-window); p < n; p++ {
						if !held[int32(p)] {
							t.Fatalf("after %s the ring lost position %d of the window (%v)", op, p, pos)
						}
					}
				}
			}
			checkErr(t, err, tc.wantErr)
		})
	}
}

func TestResetEmpties(t *testing.T) {
	b := cpu.New(1)
	c := kvcache.New(b, []kvcache.Spec{{KVHeads: heads, HeadDim: dim}, {KVHeads: heads, HeadDim: dim, Window: 3}}, 2)
	for range 5 {
		write(b, c, 2)
	}
	c.Reset()
	if c.Len() != 0 {
		t.Fatalf("Len %d after Reset", c.Len())
	}
	if k, _, _, _ := c.Layer(0).View(0); k.Dim(0) != 0 {
		t.Fatalf("full layer views %d slots after Reset", k.Dim(0))
	}
	_, _, pos, start := c.Layer(1).View(0)
	if start != 0 || slices.ContainsFunc(pos, func(p int32) bool { return p != -1 }) {
		t.Fatalf("ring after Reset: positions %v, start %d; want all empty, start 0", pos, start)
	}
	// A reset cache starts over like a new one, rollback limit included.
	write(b, c, 2)
	if err := c.Truncate(0); err != nil {
		t.Fatalf("truncate after Reset and one write: %v", err)
	}
	write(b, c, 1)
	checkRing(t, b, c.Layer(1), 1, []int{0, -1, -1, -1})
}

func TestRingNeverLosesAKeyInsideTheWindow(t *testing.T) {
	// Random speculative rounds: write up to MaxStep tokens, sometimes roll
	// some back (several times in a row, too), and write again. A naive
	// reference keeps every position and how often it was written. After
	// each write, every query of the pass must find each key of its window
	// (q−W, q] in the ring with the values last written there. Truncate must
	// accept exactly the rollbacks that stay within MaxStep of the furthest
	// length written (and within [0, Len]).
	// Every other trial's window is wider than a ring's first 64 slots, so
	// the ring grows (keeping every slot) before it first wraps.
	r := rand.New(rand.NewPCG(1, 2))
	for trial := range 300 {
		window, step := 1+r.IntN(9), 1+r.IntN(8)
		if trial%2 == 1 {
			window = 40 + r.IntN(200)
		}
		name := fmt.Sprintf("trial %d window %d step %d", trial, window, step)
		b := cpu.New(1)
		c := kvcache.New(b, []kvcache.Spec{{KVHeads: heads, HeadDim: dim, Window: window}}, step)
		l := c.Layer(0)
		var (
			writes   []int // writes[p]: how often position p was written
			furthest int   // the furthest Len reached
		)
		for round := range 40 + 80*(trial%2) {
			n := c.Len()
			w := 1 + r.IntN(step)
			vs := make([]int, w)
			for i := range vs {
				if n+i == len(writes) {
					writes = append(writes, 0)
				}
				vs[i] = writes[n+i] // this write's version
				writes[n+i]++
			}
			k, v := kvBlock(b, n, vs)
			l.Write(n, k, v)
			kv, vv, pos, start := l.View(n + w)
			kf, vf := b.ToF32(kv), b.ToF32(vv)
			slot := map[int]int{}
			for s, p := range pos {
				if p >= 0 {
					slot[int(p)] = s
				}
			}
			for q := n; q < n+w; q++ {
				for p := max(0, q-window+1); p <= q; p++ {
					s, ok := slot[p]
					if !ok {
						t.Fatalf("%s round %d: the query at %d cannot see position %d (ring positions %v, start %d)", name, round, q, p, pos, start)
					}
					if !slotHolds(kf, vf, s, p, writes[p]-1) {
						t.Fatalf("%s round %d: slot %d holds stale values for position %d", name, round, s, p)
					}
				}
			}
			c.Advance(w)
			furthest = max(furthest, c.Len())
			for r.IntN(3) == 0 { // zero or more truncations
				to := c.Len() - r.IntN(step+3) + 1
				ok := to >= 0 && to <= c.Len() && furthest-to <= step
				before := snapshot(c)
				err := c.Truncate(to)
				if ok != (err == nil) {
					t.Fatalf("%s round %d: truncate from %d to %d (furthest %d): error %v, want success %v", name, round, c.Len(), to, furthest, err, ok)
				}
				if err != nil {
					if after := snapshot(c); after != before {
						t.Fatalf("%s: a refused truncate changed the cache", name)
					}
				}
			}
			// The ring holds kept positions only, with their latest values.
			latest := make([]int, c.Len())
			for p := range latest {
				latest[p] = writes[p] - 1
			}
			checkRing(t, b, l, c.Len(), latest)
		}
	}
}

func TestWriteWiderThanTheStepPanics(t *testing.T) {
	// Forward refuses more than MaxStep tokens per row, so a wider write
	// reaching a ring is a programming error: it would overwrite keys that
	// the pass's first queries still need (a ring has only MaxStep − 1
	// slots of headroom), and must not pass silently.
	for _, tc := range []struct {
		window, step, n int
		panics          bool
	}{
		{window: 4, step: 3, n: 3},
		{window: 4, step: 3, n: 4, panics: true}, // within capacity 6, beyond the step
		{window: 4, step: 3, n: 7, panics: true}, // beyond capacity
		{window: 0, step: 3, n: 100},             // full layers grow
	} {
		t.Run(fmt.Sprintf("window %d step %d write %d", tc.window, tc.step, tc.n), func(t *testing.T) {
			b := cpu.New(1)
			c := kvcache.New(b, []kvcache.Spec{{KVHeads: heads, HeadDim: dim, Window: tc.window}}, tc.step)
			k, v := kvBlock(b, 0, make([]int, tc.n))
			var msg any
			func() {
				defer func() { msg = recover() }()
				c.Layer(0).Write(0, k, v)
			}()
			if (msg != nil) != tc.panics {
				t.Fatalf("panic %v, want panic %v", msg, tc.panics)
			}
			if msg != nil && !strings.Contains(fmt.Sprint(msg), "kvcache:") {
				t.Fatalf("panic %q does not say where it came from", msg)
			}
		})
	}
}

// TestClone checks that a clone holds the same keys, keeps the original's
// rollback limit, and is independent of it afterwards.
func TestClone(t *testing.T) {
	const window, step = 4, 3 // ring of 6 slots
	b := cpu.New(1)
	specs := []kvcache.Spec{{KVHeads: heads, HeadDim: dim}, {KVHeads: heads, HeadDim: dim, Window: window}}
	c := kvcache.New(b, specs, step)
	for _, n := range []int{3, 3, 3} {
		write(b, c, n)
	}
	if err := c.Truncate(7); err != nil {
		t.Fatal(err)
	}
	d := c.Clone()
	if snapshot(d) != snapshot(c) || d.MaxStep() != c.MaxStep() {
		t.Fatalf("clone %s (max step %d), original %s (%d)", snapshot(d), d.MaxStep(), snapshot(c), c.MaxStep())
	}
	for i := range d.NumLayers() {
		kc, vc, _, sc := c.Layer(i).View(7)
		kd, vd, _, sd := d.Layer(i).View(7)
		if !slices.Equal(b.ToF32(kc), b.ToF32(kd)) || !slices.Equal(b.ToF32(vc), b.ToF32(vd)) || sc != sd {
			t.Fatalf("layer %d: the clone's keys or values differ", i)
		}
	}
	// The original reached 9: both may roll back to 6, neither to 5.
	for _, tc := range []struct {
		n    int
		want bool
	}{{7, true}, {6, true}, {5, false}, {8, false}, {-1, false}} {
		if got := d.CanTruncate(tc.n); got != tc.want {
			t.Errorf("clone CanTruncate(%d) = %v, want %v", tc.n, got, tc.want)
		}
		if got := c.CanTruncate(tc.n); got != tc.want {
			t.Errorf("CanTruncate(%d) = %v, want %v", tc.n, got, tc.want)
		}
		if err := d.Clone().Truncate(tc.n); (err == nil) != tc.want {
			t.Errorf("Truncate(%d) = %v, CanTruncate says %v", tc.n, err, tc.want)
		}
	}
	// Writing to the clone leaves the original alone, and the clone's
	// full layer grows past the length it was cloned at.
	before := snapshot(c)
	write(b, d, 3)
	write(b, d, 3)
	if snapshot(c) != before {
		t.Fatalf("writing to the clone changed the original: %s, was %s", snapshot(c), before)
	}
	if d.Len() != 13 {
		t.Fatalf("clone Len %d, want 13", d.Len())
	}
	kf, vf, _, _ := d.Layer(0).View(13)
	for p := range 13 {
		if !slotHolds(b.ToF32(kf), b.ToF32(vf), p, p, 0) {
			t.Fatalf("clone's full layer lost position %d", p)
		}
	}
}

// Bytes must bound what a cache really allocates: full layers and rings
// after growing by doubling, rings up to their capacity (a window of 700
// grows past its first 64 slots; one of 5 starts full), whatever the
// first write's width.
func TestBytesBoundsTheCache(t *testing.T) {
	b := cpu.New(1)
	specs := []kvcache.Spec{{KVHeads: 2, HeadDim: 8}, {KVHeads: 1, HeadDim: 16, Window: 5}, {KVHeads: 1, HeadDim: 8, Window: 700}}
	for _, tc := range []struct{ tokens, step int }{{1, 1}, {64, 1}, {65, 4}, {100, 100}, {201, 100}, {300, 16}, {1000, 512}} {
		c := kvcache.New(b, specs, tc.step)
		for p := 0; p < tc.tokens; p += tc.step {
			n := min(tc.step, tc.tokens-p)
			for i := range c.NumLayers() {
				l := c.Layer(i)
				k := b.Zeros(compute.F32, n, l.Spec().KVHeads, l.Spec().HeadDim)
				l.Write(p, k, k)
			}
			c.Advance(n)
		}
		got := c.Bytes()
		if want := kvcache.Bytes(specs, tc.tokens, tc.step); got > want || want > 2*got+1024 {
			t.Errorf("%d tokens in steps of %d: the cache holds %d bytes, Bytes says %d", tc.tokens, tc.step, got, want)
		}
	}
}

// Writing a step's keys and values in place through Slots (as a producer
// that writes the cache directly does) leaves every layer as Write leaves
// it; a ring's run that wraps is refused with nothing recorded, and Write
// takes it in two runs.
func TestSlotsMatchWrite(t *testing.T) {
	b := cpu.New(1)
	specs := []kvcache.Spec{{KVHeads: heads, HeadDim: dim}, {KVHeads: heads, HeadDim: dim, Window: 4}}
	viaWrite, viaSlots := kvcache.New(b, specs, 3), kvcache.New(b, specs, 3)
	widths := []int{3, 1, 3, 2, 3, 3, 1}
	for range 20 { // past 64 positions: the full layer grows, copying what it holds
		widths = append(widths, 3, 2)
	}
	for _, n := range widths {
		k, v := kvBlock(b, viaWrite.Len(), make([]int, n))
		for i := range viaWrite.NumLayers() {
			viaWrite.Layer(i).Write(viaWrite.Len(), k, v)
			l := viaSlots.Layer(i)
			_, _, before, _ := l.View(viaSlots.Len())
			before = slices.Clone(before)
			r, ok := l.Slots(viaSlots.Len(), n)
			if !ok {
				if l.Spec().Window == 0 {
					t.Fatalf("a full layer refused positions %d..%d", viaSlots.Len(), viaSlots.Len()+n-1)
				}
				if _, _, after, _ := l.View(viaSlots.Len()); !slices.Equal(after, before) {
					t.Fatalf("a refused run changed the ring's positions: %v, then %v", before, after)
				}
				l.Write(viaSlots.Len(), k, v)
				continue
			}
			if r.N != n || r.K.Dim(0) < r.Slot+n {
				t.Fatalf("slots %d..%d of %v for %d positions", r.Slot, r.Slot+r.N-1, r.K, n)
			}
			b.Copy(r.K, r.Slot, k)
			b.Copy(r.V, r.Slot, v)
		}
		viaWrite.Advance(n)
		viaSlots.Advance(n)
		for i := range viaWrite.NumLayers() {
			wk, wv, wp, ws := viaWrite.Layer(i).View(viaWrite.Len())
			sk, sv, sp, ss := viaSlots.Layer(i).View(viaSlots.Len())
			if !slices.Equal(b.ToF32(wk), b.ToF32(sk)) || !slices.Equal(b.ToF32(wv), b.ToF32(sv)) || !slices.Equal(wp, sp) || ws != ss {
				t.Fatalf("layer %d after %d positions: written in place differs from Write", i, viaWrite.Len())
			}
		}
	}
}
