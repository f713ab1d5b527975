package cuda

import (
	"runtime"
	"testing"
	"time"

	"tandem/compute"
)

// A recycled block goes back to its size class at once and only once, and
// its collector cleanup no longer runs (which would list it twice).
func TestPoolRecycle(t *testing.T) {
	p := newPool(nil)
	size := sizeClass(1000)
	b := p.track(0x1000, size)
	p.recycle(b)
	p.recycle(b)
	if got := p.free[size]; len(got) != 1 || got[0].ptr != 0x1000 {
		t.Fatalf("free list after recycling twice: %v", got)
	}
	b = nil
	for range 3 {
		runtime.GC()
		time.Sleep(10 * time.Millisecond) // cleanups run on their own goroutine
	}
	p.mu.Lock()
	n, cached := len(p.free[size]), p.cached
	p.mu.Unlock()
	if n != 1 || cached != int64(size) {
		t.Fatalf("after collection: %d free blocks, %d bytes cached; want 1 and %d", n, cached, size)
	}
	// Exact allocations (weights) are not the pool's to recycle.
	w := &block{ptr: 0x2000, size: 4096}
	p.recycle(w)
	if len(p.free[4096]) != 0 {
		t.Fatalf("an exact allocation was recycled")
	}
}

// collect runs the collector until cleanups have had time to run.
func collect() {
	for range 3 {
		runtime.GC()
		time.Sleep(10 * time.Millisecond) // cleanups run on their own goroutine
	}
}

// freeBlocks is the pool's count of cached blocks of a size class.
func freeBlocks(p *pool, size int) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.free[size])
}

// A recycled block is handed out again as the same block, its cleanup
// registered once; a block the collector returned is re-armed when handed
// out, so dropping it returns its memory again; and blocks drained for
// freeing never come back.
func TestPoolReuse(t *testing.T) {
	p := newPool(nil)
	size := sizeClass(1000)
	b := p.track(0x1000, size)
	cleanup := b.cleanup
	p.recycle(b)
	got, err := p.get(1000)
	if err != nil || got != b || !got.pooled || got.cleanup != cleanup {
		t.Fatalf("get after recycle: %p (pooled %v, same cleanup %v), want the recycled block %p", got, got.pooled, got.cleanup == cleanup, b)
	}
	b, got = nil, nil
	collect() // dropped without recycling: the cleanup returns it
	if n := freeBlocks(p, size); n != 1 {
		t.Fatalf("after dropping a reused block: %d free blocks, want 1", n)
	}
	got, _ = p.get(1000) // a new block object for the collected memory
	if !got.armed || got.ptr != 0x1000 {
		t.Fatalf("a collected block handed out again: armed %v, ptr %#x", got.armed, got.ptr)
	}
	got = nil
	collect()
	if n := freeBlocks(p, size); n != 1 {
		t.Fatalf("after dropping it again: %d free blocks, want 1", n)
	}
	b = p.track(0x2000, size)
	p.recycle(b)
	b = nil
	if n := len(p.drain()); n != 2 {
		t.Fatalf("drained %d blocks, want 2", n)
	}
	collect()
	if n := freeBlocks(p, size); n != 0 || p.cached != 0 {
		t.Fatalf("after draining: %d free blocks came back (%d bytes cached)", n, p.cached)
	}
}

// fakePool is a pool without a device: new memory comes from made-up
// addresses, each a fresh megabyte apart.
func fakePool(bgEvery int) *pool {
	p := newPool(nil)
	p.bgEvery = bgEvery
	next := uintptr(0)
	p.alloc = func(n int) (Buffer, error) {
		next += 1 << 20
		return Buffer{ptr: next, Size: n}, nil
	}
	return p
}

// TestPoolStatsAndBackgroundCollection protects the pool's counts (every
// hand-out, which of them asked the driver and for how many bytes) and
// TANDEM_CUDA_POOL_GC: every bgEvery hand-outs the pool starts a collection
// by itself, so a dropped tensor's block comes back to the free list
// without anyone calling runtime.GC; with bgEvery 0 it never does.
func TestPoolStatsAndBackgroundCollection(t *testing.T) {
	for _, tc := range []struct {
		name        string
		bgEvery     int
		collections int64
		comesBack   bool
	}{
		{"off", 0, 0, false},
		{"every three hand-outs", 3, 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := fakePool(tc.bgEvery)
			size := sizeClass(1000)
			dropped, err := p.get(1000) // two misses: new memory
			if err != nil {
				t.Fatal(err)
			}
			kept, err := p.get(1000)
			if err != nil {
				t.Fatal(err)
			}
			p.recycle(kept)
			dropped = nil         // garbage before the hand-out that starts a collection
			b, err := p.get(1000) // a hit: the third hand-out
			if err != nil || b != kept {
				t.Fatalf("get after recycle: %p, %v; want the recycled block", b, err)
			}
			want := PoolStats{Handouts: 3, DriverAllocs: 2, DriverBytes: 2 * int64(size), Collections: tc.collections}
			if got := p.snapshot(); got != want {
				t.Fatalf("stats %+v, want %+v", got, want)
			}
			wait := 300 * time.Millisecond // long enough for a collection started, short for one by the runtime
			if tc.comesBack {
				wait = 5 * time.Second
			}
			back := false
			for deadline := time.Now().Add(wait); time.Now().Before(deadline) && !back; {
				time.Sleep(5 * time.Millisecond)
				back = freeBlocks(p, size) > 0
			}
			if back != tc.comesBack {
				t.Fatalf("the dropped block back in the free list without a collection by the test: %v, want %v", back, tc.comesBack)
			}
			runtime.KeepAlive(b)
			runtime.KeepAlive(dropped)
		})
	}
}

// The collection forced after gcAllocs new allocations blocks the caller,
// unless background collections are on (TANDEM_CUDA_POOL_GC): then it goes
// to the background too, rather than stalling the goroutine that records a
// step, and it is started (and counted) even when the hand-out count alone
// would not start one.
func TestForcedCollection(t *testing.T) {
	for _, tc := range []struct {
		name       string
		bgEvery    int
		background bool
	}{
		{"background collections off: on the caller", 0, false},
		{"background collections on: in the background", 1 << 30, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := fakePool(tc.bgEvery)
			release := make(chan struct{})
			collecting := make(chan struct{}, 1)
			p.gc = func() { // a collection that lasts until the test ends it
				collecting <- struct{}{}
				<-release
			}
			done := make(chan struct{})
			var kept []*block // alive: a block the runtime collected would be reused, not allocated
			go func() {
				defer close(done)
				for range gcAllocs + 1 {
					b, err := p.get(256)
					if err != nil {
						t.Error(err)
						return
					}
					kept = append(kept, b)
				}
			}()
			select {
			case <-collecting:
			case <-time.After(5 * time.Second):
				t.Fatal("no collection started")
			}
			wait := 300 * time.Millisecond // the blocking case never finishes before the release
			if tc.background {
				wait = 10 * time.Second
			}
			select {
			case <-done:
				if !tc.background {
					t.Fatal("the allocations finished while their collection still ran")
				}
			case <-time.After(wait):
				if tc.background {
					t.Fatal("the allocations waited for a collection in the background")
				}
			}
			close(release)
			<-done
			runtime.KeepAlive(kept)
			if got := p.snapshot(); got.Collections != 1 || got.DriverAllocs != gcAllocs+1 {
				t.Fatalf("after %d new allocations: %+v, want one collection", gcAllocs+1, got)
			}
		})
	}
}

// The split memo keeps at most maxSplits entries and maxSplitBytes of
// parts, evicting the oldest, and forgets exactly the tensors whose memory
// a write touches (views of the same allocation included).
func TestSplitMemoBounds(t *testing.T) {
	b := &Backend{}
	tensor := func(blk *block, n int) *compute.Tensor {
		return compute.NewTensor(compute.F32, []int{n}, &mem{ptr: blk.ptr, blk: blk})
	}
	var ts []*compute.Tensor
	for i := range maxSplits + 2 {
		blk := &block{ptr: uintptr(0x1000 * (i + 1)), size: 4096}
		ts = append(ts, tensor(blk, 16))
		b.remember(ts[i], tensor(blk, 48))
	}
	if len(b.splits) != maxSplits || b.splits[0].x != memOf(ts[2]) {
		t.Fatalf("%d entries, oldest %p; want %d, the third tensor's", len(b.splits), b.splits[0].x, maxSplits)
	}
	// A write through another view of ts[5]'s allocation forgets it, and
	// only it.
	view := tensor(memOf(ts[5]).blk, 4)
	b.forgetWrites(view)
	for _, e := range b.splits {
		if e.x == memOf(ts[5]) {
			t.Fatal("the written tensor's split survived")
		}
	}
	if len(b.splits) != maxSplits-1 {
		t.Fatalf("%d entries after one write, want %d", len(b.splits), maxSplits-1)
	}
	// A split over the byte budget evicts everything older.
	big := &block{ptr: 0x100000, size: 1}
	b.remember(tensor(big, maxSplitBytes/6), tensor(big, 1))
	if len(b.splits) != 1 {
		t.Fatalf("%d entries after a split of the whole budget, want 1", len(b.splits))
	}
}
