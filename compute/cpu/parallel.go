package cpu

import (
	"sync"
	"sync/atomic"
)

// minGoroutineWork is roughly how many multiply-adds a goroutine must get
// before fanning out pays for its start-up and wake-up (a few microseconds).
const minGoroutineWork = 1 << 15

// chunksPerWorker over-splits the range so that a worker slowed down by the
// OS (or a noisy neighbour) does not hold up the whole op.
const chunksPerWorker = 4

// parallelFor calls fn on disjoint chunks [lo, hi) that together cover
// [0, n), from up to b.threads goroutines. cost is the approximate work of
// one item in multiply-adds; small jobs run inline on the caller. Callers
// only split along independent outputs, so the chunking never changes any
// element's arithmetic. fn must not panic: inputs are validated before.
func (b *Backend) parallelFor(n, cost int, fn func(lo, hi int)) {
	if n <= 0 {
		return
	}
	workers := b.threads
	if workers > n {
		workers = n
	}
	if cost < 1 {
		cost = 1
	}
	if w := n * cost / minGoroutineWork; w < workers {
		workers = w
	}
	if workers <= 1 {
		fn(0, n)
		return
	}
	chunks := workers * chunksPerWorker
	if chunks > n {
		chunks = n
	}
	var next atomic.Int64
	run := func() {
		for {
			c := int(next.Add(1) - 1)
			if c >= chunks {
				return
			}
			fn(c*n/chunks, (c+1)*n/chunks)
		}
	}
	var wg sync.WaitGroup
	wg.Add(workers - 1)
	for range workers - 1 {
		go func() {
			defer wg.Done()
			run()
		}()
	}
	run()
	wg.Wait()
}

// Scratch buffers are pooled so that ops called once per layer per token do
// not allocate a fresh work area in every chunk.
var (
	f32Pool sync.Pool
	f64Pool sync.Pool
)

func getF32(n int) *[]float32 {
	if p, ok := f32Pool.Get().(*[]float32); ok && cap(*p) >= n {
		*p = (*p)[:n]
		return p
	}
	s := make([]float32, n)
	return &s
}

func putF32(p *[]float32) { f32Pool.Put(p) }

func getF64(n int) *[]float64 {
	if p, ok := f64Pool.Get().(*[]float64); ok && cap(*p) >= n {
		*p = (*p)[:n]
		return p
	}
	s := make([]float64, n)
	return &s
}

func putF64(p *[]float64) { f64Pool.Put(p) }
