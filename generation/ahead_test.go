package generation

import (
	"context"
	"errors"
	"slices"
	"testing"

	"tandem/compute/computetest"
	"tandem/compute/cpu"
	"tandem/model/gemma4"
)

// Greedy decoding one step ahead (device-chosen tokens, the next step
// issued before the token is read) must give plain greedy decoding's
// tokens and stop reason: with stop tokens, budgets of one and more, and
// steps sent back to the host by a NaN (their step issued ahead is rolled
// back and redone).
func TestDecodeAheadMatchesGreedy(t *testing.T) {
	plain := loadTiny(t)
	dir := t.TempDir()
	p, err := gemma4.LookupPreset("gemma4-tiny-e2b")
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Generate(dir, gemma4.GenerateOptions{Seed: 7}); err != nil {
		t.Fatal(err)
	}
	ab := &computetest.Prefetching{Backend: cpu.New(0)}
	ahead, err := gemma4.Load(dir, ab)
	if err != nil {
		t.Fatal(err)
	}
	defer ahead.Close()
	if !ahead.DeviceTokens() {
		t.Fatal("the tiny E2B target cannot take device tokens")
	}
	ids := prompt(plain, 20, 9)
	free := generate(t, plain, ids, Options{MaxTokens: 30}).Tokens
	tests := []struct {
		name  string
		opt   Options
		nanAt []int
	}{
		{"budget of one", Options{MaxTokens: 1}, nil},
		{"budget of two", Options{MaxTokens: 2}, nil},
		{"long", Options{MaxTokens: 30}, nil},
		{"stop token mid-stream", Options{MaxTokens: 30, StopTokens: []int32{free[7]}}, nil},
		{"NaN on the first token", Options{MaxTokens: 10}, []int{0}},
		{"NaN on consecutive steps", Options{MaxTokens: 10}, []int{3, 4}},
		{"NaN on the last token", Options{MaxTokens: 10}, []int{9}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want := generate(t, plain, ids, tt.opt)
			ab.Reset(tt.nanAt...)
			var seen []int32
			got, err := Generate(context.Background(), ahead, ids, tt.opt, func(tok int32) { seen = append(seen, tok) })
			if err != nil {
				t.Fatal(err)
			}
			if ab.Calls == 0 {
				t.Fatal("Generate did not decode ahead")
			}
			if ab.Waiting != 0 {
				t.Fatalf("%d prefetches never waited for", ab.Waiting)
			}
			if !slices.Equal(got.Tokens, want.Tokens) || got.StopReason != want.StopReason {
				t.Fatalf("ahead: %v (%s), plain: %v (%s)", got.Tokens, got.StopReason, want.Tokens, want.StopReason)
			}
			if !slices.Equal(seen, got.Tokens) {
				t.Errorf("onToken saw %v, want %v", seen, got.Tokens)
			}
		})
	}
	t.Run("cancelled while decoding", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		n := 0
		res, err := Generate(ctx, ahead, ids, Options{MaxTokens: 20}, func(int32) {
			if n++; n == 3 {
				cancel()
			}
		})
		if !errors.Is(err, context.Canceled) || res == nil || !slices.Equal(res.Tokens, free[:3]) {
			t.Fatalf("err %v, result %+v: want context.Canceled after %v", err, res, free[:3])
		}
		if ab.Waiting != 0 {
			t.Fatalf("%d prefetches never waited for", ab.Waiting)
		}
	})
	t.Run("penalties keep the host path", func(t *testing.T) {
		ab.Reset()
		opt := Options{MaxTokens: 5}
		opt.Sample.RepetitionPenalty = 1.3
		got := generate(t, ahead, ids, opt)
		if want := generate(t, plain, ids, opt); !slices.Equal(got.Tokens, want.Tokens) {
			t.Fatalf("tokens %v, want %v", got.Tokens, want.Tokens)
		}
		if ab.Calls != 0 {
			t.Fatal("a penalised request was decoded ahead")
		}
	})
}
