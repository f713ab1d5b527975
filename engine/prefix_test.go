package engine

import (
	"context"
	"slices"
	"testing"

	"tandem/sample"
)

func concat(parts ...[]int32) []int32 {
	var out []int32
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// TestPrefixCacheReusesSharedPrefixes runs a chat's turns and variations
// of its prompt through one engine. The prefill chunk is 8, so a sliding
// ring (window 16) holds 23 positions and a cache can roll back at most 8:
// some prefixes are reusable and some are not, and reuse must never change
// a token.
func TestPrefixCacheReusesSharedPrefixes(t *testing.T) {
	for _, tc := range []struct {
		name    string
		sample  sample.Params
		drafter bool
		bf16    bool // prompt passes at bf16: an entry serves only its prompt's positions
	}{
		{"greedy, speculative", sample.Params{}, true, false},
		{"sampling, speculative", sample.Params{Temperature: 50, Seed: 5}, true, false},
		{"greedy, plain", sample.Params{}, false, false},
		{"greedy, speculative, bf16 prompts", sample.Params{}, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.bf16 {
				bf16Prompts(t)
			}
			cfg := Config{PrefillSize: 8, CtxSize: 256, Parallel: 2}
			if tc.drafter {
				cfg.Drafter = helper
			}
			e := start(t, cfg)
			run := func(prompt []int32, maxTokens int) result {
				t.Helper()
				r := Request{Prompt: prompt, MaxTokens: maxTokens, Sample: tc.sample}
				g := collect(t, submit(t, e, context.Background(), r))
				d := assistantFor(t, r.Sample)
				if !tc.drafter {
					d = nil
				}
				if want, _, _ := alone(t, r, d, DefaultDraftTokens, 8); !slices.Equal(g.tokens, want) {
					t.Fatalf("prompt of %d tokens (%d cached): %v, alone %v", len(prompt), g.final.Usage.CachedTokens, g.tokens, want)
				}
				return g
			}
			p1 := promptOf(20, 1)
			turn1 := run(p1, 12)
			// The next turn: the last prompt, the answer, a new message.
			// The answer's last token was never fed, so it is recomputed.
			p2 := concat(p1, turn1.tokens, promptOf(7, 2)[1:])
			nextTurn := len(p1) + len(turn1.tokens) - 1
			if tc.bf16 { // the answer's positions were decoded: recomputed
				nextTurn = len(p1)
				// The end snapshot cannot roll back to its prompt's end, so
				// it serves nothing: only the prompt's copy is kept.
				if s := e.Stats(); s.PrefixTokens != len(p1) {
					t.Fatalf("the prefix cache holds %d tokens after the first turn, want the prompt's %d", s.PrefixTokens, len(p1))
				}
			}
			for _, c := range []struct {
				name      string
				prompt    []int32
				maxTokens int
				cached    int
			}{
				{"next turn", p2, 12, nextTurn},
				// The same prompt again, with a longer answer: served by the
				// copy kept at the prompt's end (the end snapshot is too far
				// past it), all but the last prompt token.
				{"same prompt", p1, 40, len(p1) - 1},
				{"same prompt again", p1, 5, len(p1) - 1},
				// Diverging within the last 8 prompt positions: reusable.
				{"diverging late", concat(p1[:15], promptOf(9, 3)[1:]), 6, 15},
				// Diverging earlier: the rings have moved on; nothing reused.
				{"diverging early", concat(p1[:5], promptOf(9, 4)[1:]), 6, 0},
				{"unrelated", promptOf(30, 5)[1:], 6, 0},
			} {
				g := run(c.prompt, c.maxTokens)
				if got := g.final.Usage.CachedTokens; got != c.cached {
					t.Errorf("%s: %d tokens cached, want %d", c.name, got, c.cached)
				}
			}
			if s := e.Stats(); s.PrefixTokens == 0 || s.PrefixTokens > cfg.CtxSize || s.CachedTokens == 0 {
				t.Errorf("stats %+v: want a non-empty prefix cache within its %d tokens, cached tokens counted", s, cfg.CtxSize)
			}
		})
	}
}

// TestPrefixCacheBounds: the cache keeps to PrefixCacheTokens, gives way
// to admissions that need the memory, and can be turned off.
func TestPrefixCacheBounds(t *testing.T) {
	p1 := promptOf(20, 1)
	for _, tc := range []struct {
		name                 string
		cfg                  Config
		after1, during2, end int // PrefixTokens after turn 1, while turn 2 runs, at the end (-1: not checked)
		cached               int // turn 2's cached tokens
	}{
		// Turn 1 leaves a copy of its prompt (20 tokens) and its end
		// snapshot (31). While turn 2 (38 + 12 reserved, 31 reused) runs,
		// its prompt copy (38) joins, and the least recently used entry
		// gives way to stay within the budget (128 - 50); its end snapshot
		// (49) joins at the end.
		{"room for both", Config{CtxSize: 128, Parallel: 1}, 51, 31 + 38, 31 + 38 + 49, 31},
		// Only the prompt copy fits the limit of 25; turn 2 reuses it whole.
		{"small limit", Config{CtxSize: 128, Parallel: 1, PrefixCacheTokens: 25}, 20, 20, 20, 20},
		// Turn 2 reserves 38+60 of a budget of 100: the cache gives way,
		// after turn 2 took its copy of the turn-1 snapshot.
		{"admission evicts", Config{CtxSize: 100, Parallel: 1}, 51, 0, -1, 31},
		{"off", Config{CtxSize: 128, Parallel: 1, PrefixCacheTokens: -1}, 0, 0, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.PrefillSize = 8
			gate := newStepGate()
			tc.cfg.beforeStep = gate.wait
			e := start(t, tc.cfg)
			t.Cleanup(func() { gate.hold(false) }) // before Close, which needs the scheduler
			g1 := collect(t, submit(t, e, context.Background(), Request{Prompt: p1, MaxTokens: 12}))
			if s := e.Stats(); s.PrefixTokens != tc.after1 {
				t.Fatalf("after turn 1: %d prefix tokens, want %d", s.PrefixTokens, tc.after1)
			}
			maxTokens := 12
			if tc.name == "admission evicts" {
				maxTokens = 60
			}
			p2 := concat(p1, g1.tokens, promptOf(7, 2)[1:])
			// Held between steps, so turn 2 cannot finish before the look.
			gate.hold(true)
			ch := submit(t, e, context.Background(), Request{Prompt: p2, MaxTokens: maxTokens})
			first := gate.until(t, ch)
			s := e.Stats()
			gate.hold(false)
			if s.PrefixTokens+s.KVUsedTokens > s.KVBudgetTokens || s.PrefixTokens != tc.during2 {
				t.Errorf("while turn 2 runs: %d prefix tokens, %d reserved, budget %d; want %d prefix tokens", s.PrefixTokens, s.KVUsedTokens, s.KVBudgetTokens, tc.during2)
			}
			g2 := collect(t, ch)
			if got := first.Usage.CachedTokens + g2.final.Usage.CachedTokens; got != tc.cached {
				t.Errorf("turn 2: %d cached tokens, want %d", got, tc.cached)
			}
			if s := e.Stats(); s.PrefixTokens != tc.end && tc.end >= 0 {
				t.Errorf("at the end: %d prefix tokens, want %d", s.PrefixTokens, tc.end)
			}
			if s := e.Stats(); s.PrefixTokens > max(tc.cfg.PrefixCacheTokens, 0) && tc.cfg.PrefixCacheTokens != 0 {
				t.Errorf("at the end: %d prefix tokens over the limit %d", s.PrefixTokens, tc.cfg.PrefixCacheTokens)
			}
		})
	}
}
