package gemma4_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"tandem/compute/computetest"
	"tandem/kvcache"
	"tandem/model/gemma4"
)

// These tests protect the property speculative decoding stands on: a
// position's logits are bit-identical however the tokens were grouped into
// forward passes (chunk sizes, verify widths, rollbacks, batch rows).

var tinyTargets = []string{"gemma4-tiny-e2b", "gemma4-tiny-e4b", "gemma4-tiny-26b-a4b", "gemma4-tiny-31b"}

func loadTiny(t *testing.T, preset string) *gemma4.Model {
	t.Helper()
	p, err := gemma4.LookupPreset(preset)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := p.Generate(dir, gemma4.GenerateOptions{Seed: 11}); err != nil {
		t.Fatal(err)
	}
	m, err := gemma4.Load(dir, computetest.Backend(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

func randomTokens(n, vocab int, seed uint64) []int32 {
	r := rand.New(rand.NewPCG(seed, 1))
	ids := make([]int32, n)
	for i := range ids {
		ids[i] = int32(3 + r.IntN(vocab-3))
	}
	ids[0] = 2
	return ids
}

// feed runs ids through cache in passes of the given widths (cycled) and
// returns every position's logits, row by row.
func feed(t *testing.T, m *gemma4.Model, cache *kvcache.Cache, ids []int32, widths ...int) [][]float32 {
	t.Helper()
	return feedWith(t, m, cache, ids, gemma4.ForwardOptions{}, widths...)
}

// feedWith is feed with the passes' options (their Logits made LogitsAll).
func feedWith(t *testing.T, m *gemma4.Model, cache *kvcache.Cache, ids []int32, opt gemma4.ForwardOptions, widths ...int) [][]float32 {
	t.Helper()
	opt.Logits = gemma4.LogitsAll
	b := m.Backend()
	V := m.Config.Text.VocabSize
	var rows [][]float32
	for s, w := 0, 0; s < len(ids); w++ {
		e := min(s+widths[w%len(widths)], len(ids))
		out, err := m.Forward([]gemma4.Row{{Tokens: ids[s:e], Cache: cache}}, opt)
		if err != nil {
			t.Fatal(err)
		}
		all := b.ToF32(out.Logits)
		for i := range e - s {
			rows = append(rows, all[i*V:(i+1)*V])
		}
		s = e
	}
	return rows
}

func sameBits(t *testing.T, what string, want, got [][]float32) {
	t.Helper()
	if len(want) != len(got) {
		t.Fatalf("%s: %d positions, want %d", what, len(got), len(want))
	}
	for p := range want {
		if !slices.Equal(want[p], got[p]) {
			t.Fatalf("%s: position %d differs (bitwise)", what, p)
		}
	}
}

func TestChunkingIsBitIdentical(t *testing.T) {
	for _, preset := range tinyTargets {
		t.Run(preset, func(t *testing.T) {
			m := loadTiny(t, preset)
			// 70 tokens: past the tiny window (16) several times over.
			ids := randomTokens(70, m.Config.Text.VocabSize, 1)
			whole := feed(t, m, m.NewCache(len(ids)), ids, len(ids))
			for _, widths := range [][]int{{1}, {3}, {16}, {17}, {5, 1, 9}} {
				got := feed(t, m, m.NewCache(max(widths[0], 17)), ids, widths...)
				sameBits(t, fmt.Sprintf("chunks %v", widths), whole, got)
			}
		})
	}
}

func TestRollbackThenContinueIsBitIdentical(t *testing.T) {
	// A speculative round writes k+1 tokens, keeps n+1 of them and carries
	// on. The kept positions and everything after must equal plain decoding,
	// including when the rejected writes wrapped the sliding rings.
	for _, preset := range tinyTargets {
		t.Run(preset, func(t *testing.T) {
			m := loadTiny(t, preset)
			V := m.Config.Text.VocabSize
			ids := randomTokens(60, V, 2)
			plain := feed(t, m, m.NewCache(1), ids, 1)

			const k = 6
			cache := m.NewCache(k + 1)
			var got [][]float32
			r := rand.New(rand.NewPCG(3, 4))
			for T := 0; T < len(ids); {
				// Verify [real token, k wrong drafts], keep n+1 of them.
				n := r.IntN(k + 1)
				block := []int32{ids[T]}
				for j := 1; j <= k; j++ {
					if T+j < len(ids) && j <= n {
						block = append(block, ids[T+j])
					} else {
						block = append(block, int32(3+r.IntN(V-3)))
					}
				}
				rows := feed(t, m, cache, block, len(block))
				keep := min(n+1, len(ids)-T)
				got = append(got, rows[:keep]...)
				if err := cache.Truncate(T + keep); err != nil {
					t.Fatal(err)
				}
				T += keep
			}
			sameBits(t, "verify + rollback", plain, got)
		})
	}
}

func TestBatchRowsAreBitIdentical(t *testing.T) {
	// Rows at different positions in one pass equal the same rows alone.
	for _, preset := range tinyTargets {
		t.Run(preset, func(t *testing.T) {
			m := loadTiny(t, preset)
			b := m.Backend()
			V := m.Config.Text.VocabSize
			a, c := randomTokens(40, V, 5), randomTokens(23, V, 6)
			ca, cc := m.NewCache(40), m.NewCache(40)
			feed(t, m, ca, a[:30], 30)
			feed(t, m, cc, c[:20], 20)
			out, err := m.Forward([]gemma4.Row{{Tokens: a[30:], Cache: ca}, {Tokens: c[20:], Cache: cc}}, gemma4.ForwardOptions{Logits: gemma4.LogitsAll})
			if err != nil {
				t.Fatal(err)
			}
			all := b.ToF32(out.Logits)
			alone := append(feed(t, m, m.NewCache(40), a, 30, 10)[30:], feed(t, m, m.NewCache(40), c, 20, 3)[20:]...)
			var batched [][]float32
			for i := range len(all) / V {
				batched = append(batched, all[i*V:(i+1)*V])
			}
			sameBits(t, "two rows in one pass", alone, batched)
			if ca.Len() != 40 || cc.Len() != 23 {
				t.Fatalf("cache lengths %d, %d", ca.Len(), cc.Len())
			}
		})
	}
}

// TestEqualRowsAreBitIdentical protects a serving step's rows of one
// length, which attend together (compute.AttendRows; on the GPU one pass
// over a table of their caches) and write their keys straight into their
// caches: each row's logits equal the row's alone, in a step where one
// row's sliding ring wraps (every row then writes by copy) and in the next,
// where every row writes in place.
func TestEqualRowsAreBitIdentical(t *testing.T) {
	const step = 4 // the caches' most tokens a pass: rings of the window (16) + 3 slots
	for _, preset := range tinyTargets {
		t.Run(preset, func(t *testing.T) {
			m := loadTiny(t, preset)
			b := m.Backend()
			V := m.Config.Text.VocabSize
			// Prompts of 10, 17 and 25 tokens: the second row's three new
			// positions 17..19 take ring slots 17, 18 and 0.
			prompts := []int{10, 17, 25}
			var ids [][]int32
			var caches []*kvcache.Cache
			var alone [][][]float32
			for i, p := range prompts {
				ids = append(ids, randomTokens(p+4, V, uint64(20+i)))
				c := m.NewCache(step)
				feed(t, m, c, ids[i][:p], step)
				caches = append(caches, c)
				solo := m.NewCache(step)
				feed(t, m, solo, ids[i][:p], step)
				alone = append(alone, append(feed(t, m, solo, ids[i][p:p+3], 3), feed(t, m, solo, ids[i][p+3:], 1)...))
			}
			for _, s := range []struct{ from, n int }{{0, 3}, {3, 1}} {
				var rows []gemma4.Row
				for i, p := range prompts {
					rows = append(rows, gemma4.Row{Tokens: ids[i][p+s.from : p+s.from+s.n], Cache: caches[i]})
				}
				out, err := m.Forward(rows, gemma4.ForwardOptions{Logits: gemma4.LogitsAll})
				if err != nil {
					t.Fatal(err)
				}
				all := b.ToF32(out.Logits)
				var want, got [][]float32
				for i := range prompts {
					want = append(want, alone[i][s.from:s.from+s.n]...)
					for j := range s.n {
						k := i*s.n + j
						got = append(got, all[k*V:(k+1)*V])
					}
				}
				sameBits(t, fmt.Sprintf("three rows of %d tokens in one pass", s.n), want, got)
			}
		})
	}
}

func TestForwardRejectsBadInput(t *testing.T) {
	m := loadTiny(t, "gemma4-tiny-e2b")
	c := m.NewCache(4)
	for _, tc := range []struct {
		name string
		rows []gemma4.Row
		want string
	}{
		{"empty row", []gemma4.Row{{Cache: c}}, "has no tokens"},
		{"token outside vocab", []gemma4.Row{{Tokens: []int32{2, 512}, Cache: c}}, "outside the vocabulary"},
		{"negative token", []gemma4.Row{{Tokens: []int32{-1}, Cache: c}}, "outside the vocabulary"},
		{"wider than the cache step", []gemma4.Row{{Tokens: make([]int32, 5), Cache: c}}, "allows 4 per step"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := m.Forward(tc.rows, gemma4.ForwardOptions{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
			if c.Len() != 0 {
				t.Fatalf("a rejected forward changed the cache (len %d)", c.Len())
			}
		})
	}
}

// Device tokens (Row.Next) for every row of a pass give the logits host
// tokens give, one row of two tokens included; a pass that mixes rows of
// host and device tokens, in either order, is refused before any cache
// moves.
func TestDeviceTokensForEveryRow(t *testing.T) {
	m := loadTiny(t, "gemma4-tiny-e2b")
	b := m.Backend()
	V := m.Config.Text.VocabSize
	prompts := [][]int32{randomTokens(9, V, 1), randomTokens(5, V, 2), randomTokens(13, V, 3)}
	news := [][]int32{{7}, {11, 12}, {13}}
	run := func(device bool) ([]float32, []int) {
		var rows []gemma4.Row
		for i, p := range prompts {
			c := m.NewCache(16)
			feed(t, m, c, p, 16)
			r := gemma4.Row{Tokens: news[i], Cache: c}
			if device {
				r = gemma4.Row{Next: b.FromI32(news[i], len(news[i])), Cache: c}
			}
			rows = append(rows, r)
		}
		out, err := m.Forward(rows, gemma4.ForwardOptions{Logits: gemma4.LogitsAll})
		if err != nil {
			t.Fatal(err)
		}
		return b.ToF32(out.Logits), out.Offsets
	}
	want, wantOff := run(false)
	got, gotOff := run(true)
	if !slices.Equal(gotOff, wantOff) || !slices.Equal(got, want) {
		t.Fatalf("device tokens: offsets %v, logits equal %v; host tokens: offsets %v", gotOff, slices.Equal(got, want), wantOff)
	}
	for _, order := range []string{"hd", "dh", "ddh", "hdd", "dhd"} {
		var rows []gemma4.Row
		var caches []*kvcache.Cache
		for i, k := range order {
			c := m.NewCache(16)
			feed(t, m, c, prompts[i%len(prompts)], 16)
			caches = append(caches, c)
			r := gemma4.Row{Tokens: []int32{5}, Cache: c}
			if k == 'd' {
				r = gemma4.Row{Next: b.FromI32([]int32{5}, 1), Cache: c}
			}
			rows = append(rows, r)
		}
		if _, err := m.Forward(rows, gemma4.ForwardOptions{}); err == nil || !strings.Contains(err.Error(), "device tokens") {
			t.Errorf("rows %s: error %v, want one about device tokens", order, err)
		}
		for i, c := range caches {
			if n := len(prompts[i%len(prompts)]); c.Len() != n {
				t.Errorf("rows %s: cache %d holds %d positions after the refusal, want %d", order, i, c.Len(), n)
			}
		}
	}
}
