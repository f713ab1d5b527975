package sample

import (
	"runtime"
	"sync"
)

// chunk is the share of a vocabulary one goroutine takes at a time. A sum
// over a vocabulary adds each chunk's values in order, then the chunks' sums
// in order, so it depends on the chunk size and never on how many
// goroutines run. A sampled token's host work would otherwise run on one
// core, between the device's steps.
const chunk = 1 << 13

// chunks is how many chunks n values make.
func chunks(n int) int { return (n + chunk - 1) / chunk }

// parallel runs f on every chunk of [0, n), spread over GOMAXPROCS
// goroutines; c is the chunk's number.
func parallel(n int, f func(c, lo, hi int)) {
	nc := chunks(n)
	run := func(c int) { f(c, c*chunk, min(n, (c+1)*chunk)) }
	workers := min(runtime.GOMAXPROCS(0), nc)
	if workers < 2 {
		for c := range nc {
			run(c)
		}
		return
	}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for c := w; c < nc; c += workers {
				run(c)
			}
		})
	}
	wg.Wait()
}
