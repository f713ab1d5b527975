package cuda

import (
	"errors"
	"math/bits"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// ErrOutOfMemory is wrapped by allocation failures, after the pool has
// returned every cached buffer to the driver and retried.
var ErrOutOfMemory = errors.New("cuda: out of device memory")

// pool is a caching allocator. Tensors are garbage-collected Go values, so
// device memory returns to the pool through a cleanup when the last view of
// an allocation becomes unreachable; freed blocks are reused by size class.
// All work runs on one stream in issue order, so a block freed on the host
// while kernels that use it are still queued is only reused by later work.
type pool struct {
	dev     *Device
	alloc   func(n int) (Buffer, error) // new device memory: dev.Alloc (tests replace it)
	gc      func()                      // a garbage collection: runtime.GC (tests replace it)
	mu      sync.Mutex
	free    map[int][]*block // size class → cached blocks
	cached  int64            // bytes in free
	sinceGC int64            // bytes newly allocated since the last forced GC
	newGC   int              // allocations newly made since the last forced GC
	gcEvery int64
	stats   PoolStats

	// bgEvery is how many hand-outs start a collection in the background
	// (TANDEM_CUDA_POOL_GC, 2,048 by default; 0 never): garbage tensors then
	// come back to the free lists before they run dry, instead of each
	// miss between two forced collections calling the driver (240-360 µs
	// calls in the E2B shape's decode steps on the H200).
	bgEvery   int
	sinceKick int
	bgRunning atomic.Bool
}

// PoolStats counts a backend's pooled allocations since it was made.
type PoolStats struct {
	Handouts     int64 // blocks handed out, from the free lists or new
	DriverAllocs int64 // of those, new device memory asked of the driver
	DriverBytes  int64
	Collections  int64 // garbage collections the pool started (forced or in the background)
}

// poolGCEvery is TANDEM_CUDA_POOL_GC: hand-outs between background
// collections (2,048 unset), 0 for none. Without them an E2B decode step
// asked the driver for 3-13 new blocks (240-360 µs each in a kernel
// profile's gaps) as garbage tensors waited for a collection; with them,
// none, at 0.4-0.8 collections a step and no measurable cost to the host.
var poolGCEvery int // TANDEM_CUDA_POOL_GC, read by liveSettings (settings.go)

// gcAllocs forces a collection after this many new device allocations even
// when they are small: a decode step makes a thousand or more small
// tensors, and until the collector runs none of them returns to the pool,
// so every op of every step would call the driver's allocator.
const gcAllocs = 8192

// block is one allocation; views share it and keep it alive.
//
// A pooled block's cleanup, registered once, returns its memory when the
// block becomes unreachable. A recycled block goes back to the free list
// as it is, cleanup and all: reachable from the pool, it cannot be
// collected, and the next get hands the same block out again without
// registering another cleanup (runtime.AddCleanup took about 30% of the
// host's time recording a 31B speculative round). A block the collector
// returned comes back as a new block object, its cleanup registered when
// it is next handed out.
type block struct {
	ptr     uintptr
	size    int
	cleanup runtime.Cleanup // returns a pooled block to the pool
	armed   bool            // cleanup is registered
	pooled  bool            // handed out by get (not exact) and not yet recycled
	fixed   bool            // from exact: a model weight, which no kernel writes
}

func newPool(dev *Device) *pool {
	p := &pool{dev: dev, free: map[int][]*block{}, gcEvery: 4 << 30, bgEvery: poolGCEvery, gc: runtime.GC}
	if dev != nil {
		p.alloc = dev.Alloc
	}
	return p
}

// snapshot returns the pool's counts.
func (p *pool) snapshot() PoolStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stats
}

// handedOut counts a hand-out and starts a background collection every
// bgEvery of them, unless one still runs. Called with p.mu held.
func (p *pool) handedOut() {
	p.stats.Handouts++
	if p.bgEvery <= 0 {
		return
	}
	if p.sinceKick++; p.sinceKick < p.bgEvery || p.bgRunning.Load() {
		return
	}
	p.sinceKick = 0
	p.stats.Collections++
	p.bgRunning.Store(true)
	go func() {
		defer p.bgRunning.Store(false)
		p.gc() // the cleanups of the garbage found return its blocks (put)
	}()
}

// sizeClass rounds n up to a multiple of 256 bytes below 64 KiB and to one
// of four steps per power of two above, bounding waste at 25%.
func sizeClass(n int) int {
	if n <= 0 {
		return 256
	}
	if n <= 64<<10 {
		return (n + 255) &^ 255
	}
	shift := bits.Len(uint(n-1)) - 3
	step := 1 << shift
	return (n + step - 1) &^ (step - 1)
}

// get returns a block of at least n bytes.
func (p *pool) get(n int) (*block, error) {
	size := sizeClass(n)
	p.mu.Lock()
	if l := p.free[size]; len(l) > 0 {
		b := l[len(l)-1]
		l[len(l)-1] = nil
		p.free[size] = l[:len(l)-1]
		p.cached -= int64(size)
		b.pooled = true
		p.handedOut()
		p.mu.Unlock()
		p.arm(b)
		return b, nil
	}
	p.sinceGC += int64(size)
	p.newGC++
	collect := p.sinceGC > p.gcEvery || p.newGC > gcAllocs
	if collect {
		p.sinceGC, p.newGC = 0, 0
		if p.bgEvery > 0 {
			// With background collections on, this one goes there too
			// (unless one runs already): the caller is recording a step,
			// and a blocking collection stalls the device behind it.
			p.sinceKick = p.bgEvery
			collect = false
		} else {
			p.sinceKick = 0
			p.stats.Collections++
		}
	}
	p.handedOut()
	p.mu.Unlock()
	if collect {
		// Garbage tensors hold device memory the Go heap does not see;
		// collect them now and then so the pool recycles instead of growing.
		p.gc()
	}
	buf, err := p.alloc(size)
	if err != nil {
		buf, err = p.retry(size)
		if err != nil {
			return nil, err
		}
	}
	p.mu.Lock()
	p.stats.DriverAllocs++
	p.stats.DriverBytes += int64(size)
	p.mu.Unlock()
	return p.track(buf.ptr, size), nil
}

// retry collects garbage tensors, gives cached blocks back to the driver,
// and allocates again.
func (p *pool) retry(size int) (Buffer, error) {
	p.mu.Lock()
	p.stats.Collections++
	p.mu.Unlock()
	p.gc()
	time.Sleep(10 * time.Millisecond) // cleanups run on their own goroutine
	p.release()
	buf, err := p.alloc(size)
	if err != nil {
		return buf, errors.Join(ErrOutOfMemory, err)
	}
	return buf, nil
}

// release frees every cached block. Recycled scratch may still be in use
// by queued work, so the device is drained first.
func (p *pool) release() {
	if p.dev != nil {
		p.dev.wait()
	}
	for _, b := range p.drain() {
		p.dev.Free(Buffer{ptr: b.ptr, Size: b.size})
	}
}

// drain empties the free list and stops its blocks' cleanups: memory about
// to be freed must not come back through a cleanup once its block is
// dropped.
func (p *pool) drain() []*block {
	p.mu.Lock()
	free := p.free
	p.free, p.cached = map[int][]*block{}, 0
	p.mu.Unlock()
	var bs []*block
	for _, l := range free {
		for _, b := range l {
			if b.armed {
				b.cleanup.Stop()
			}
			bs = append(bs, b)
		}
	}
	return bs
}

// track makes a pooled block of new device memory.
func (p *pool) track(ptr uintptr, size int) *block {
	b := &block{ptr: ptr, size: size, pooled: true}
	p.arm(b)
	return b
}

// arm registers b's cleanup unless it has one: only the goroutine that
// just took b from the pool calls it.
func (p *pool) arm(b *block) {
	if !b.armed {
		b.cleanup = runtime.AddCleanup(b, p.put, [2]int{int(b.ptr), b.size})
		b.armed = true
	}
}

// recycle returns a block to the pool now rather than when it is collected:
// its owner has queued its last use (work runs in issue order, so the pool
// hands it only to later work) and keeps no view of it. Recycling a block
// twice before it is handed out again is harmless; after that, the second
// call would give away another owner's memory.
func (p *pool) recycle(b *block) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !b.pooled {
		return
	}
	b.pooled = false
	p.free[b.size] = append(p.free[b.size], b)
	p.cached += int64(b.size)
}

// put is a collected block's cleanup: its memory comes back under a new
// block, which get arms when it hands it out.
func (p *pool) put(a [2]int) {
	p.mu.Lock()
	p.free[a[1]] = append(p.free[a[1]], &block{ptr: uintptr(a[0]), size: a[1]})
	p.cached += int64(a[1])
	p.mu.Unlock()
}

// exact allocates n bytes outside the size classes (weights, which live as
// long as the model); the block is freed to the driver when unreachable.
func (p *pool) exact(n int) (*block, error) {
	buf, err := p.alloc(max(n, 1))
	if err != nil {
		if buf, err = p.retry(max(n, 1)); err != nil {
			return nil, err
		}
	}
	b := &block{ptr: buf.ptr, size: buf.Size, fixed: true}
	runtime.AddCleanup(b, func(buf Buffer) { p.dev.Free(buf) }, buf)
	return b, nil
}
