package cpu

import (
	"runtime"
	"sync"
	"time"
)

// copyBytes is the buffer CopyBandwidth copies: far larger than any
// last-level cache, so it measures DRAM, as decoding does.
const copyBytes = 256 << 20

// CopyBandwidth measures, once per process, the bytes per second of a
// memory copy split across GOMAXPROCS goroutines (the backend's fan-out),
// best of five runs. It is the CPU decode roofline that benchmarks report
// against: decoding one token reads every weight once.
var CopyBandwidth = sync.OnceValue(func() float64 {
	src, dst := make([]byte, copyBytes), make([]byte, copyBytes)
	for i := range src {
		src[i] = byte(i)
	}
	copy(dst, src) // fault the pages in
	best := time.Duration(1 << 62)
	for range 5 {
		start := time.Now()
		parallelCopy(dst, src, runtime.GOMAXPROCS(0))
		best = min(best, time.Since(start))
	}
	return copyBytes / best.Seconds()
})

func parallelCopy(dst, src []byte, n int) {
	var wg sync.WaitGroup
	for i := range n {
		lo, hi := i*len(src)/n, (i+1)*len(src)/n
		wg.Go(func() { copy(dst[lo:hi], src[lo:hi]) })
	}
	wg.Wait()
}
