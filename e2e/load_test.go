package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"tandem/serve"
)

// TestLoad measures requests/s and time to first token at 1, 8 and 32 concurrent streaming
// clients on the tiny model with its drafter, over loopback, with a bounded number of
// requests per level. The numbers go to the test log (run with -v); docs/benchmarks.md keeps
// a copy.
func TestLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("load test: skipped with -short")
	}
	const maxTokens = 32
	s := start(t, serve.Options{Draft: drafter, Parallel: 32, MaxQueue: 256, CtxSize: 512})
	ctx := context.Background()
	if _, err := runChat(ctx, s.client, userChat("warm up", 4), true); err != nil {
		t.Fatal(err)
	}
	var report strings.Builder
	fmt.Fprintf(&report, "| clients | requests | requests/s | output tok/s | TTFT p50 | TTFT p99 |\n|---|---|---|---|---|---|\n")
	for _, clients := range []int{1, 8, 32} {
		total := max(32, 2*clients)
		var next atomic.Int64
		var mu sync.Mutex
		var ttfts []time.Duration
		var tokens int64
		var wg sync.WaitGroup
		begin := time.Now()
		for range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					i := int(next.Add(1)) - 1
					if i >= total {
						return
					}
					p := userChat(fmt.Sprintf("%s (load %d/%d)", chatPrompts[i%len(chatPrompts)], clients, i), maxTokens)
					r, err := runChat(ctx, s.client, p, true)
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					ttfts = append(ttfts, r.TTFT)
					tokens += r.Usage.CompletionTokens
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		elapsed := time.Since(begin)
		if len(ttfts) != total {
			t.Fatalf("%d clients: %d of %d requests finished", clients, len(ttfts), total)
		}
		slices.Sort(ttfts)
		pct := func(p float64) time.Duration { return ttfts[min(len(ttfts)-1, int(p*float64(len(ttfts))))] }
		fmt.Fprintf(&report, "| %d | %d | %.1f | %.0f | %s | %s |\n", clients, total, float64(total)/elapsed.Seconds(),
			float64(tokens)/elapsed.Seconds(), pct(0.5).Round(100*time.Microsecond), pct(0.99).Round(100*time.Microsecond))
	}
	t.Logf("load (tiny E2B + drafter, %d max tokens, greedy, streaming chat):\n%s", maxTokens, report.String())
}
