package cuda

import (
	"runtime"
	"testing"
	"time"
)

// A recycled block goes back to its size class at once and only once, and
// its collector cleanup no longer runs (which would list it twice).
func TestPoolRecycle(t *testing.T) {
	p := newPool(nil)
	size := sizeClass(1000)
	b := p.track(0x1000, size)
	p.recycle(b)
	p.recycle(b)
	if got := p.free[size]; len(got) != 1 || got[0] != 0x1000 {
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
