package generation

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"tandem/compute/computetest"
	"tandem/compute/cpu"
	"tandem/model/gemma4"
	"tandem/model/gemma4/gemma4test"
	"tandem/sample"
)

// loadTiny writes a random-weight tiny E2B target (per-layer embeddings, KV
// sharing, sliding window 16) into a temporary directory and loads it.
func loadTiny(t *testing.T) *gemma4.Model {
	t.Helper()
	p, err := gemma4.LookupPreset("gemma4-tiny-e2b")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := p.Generate(dir, gemma4.GenerateOptions{Seed: 7}); err != nil {
		t.Fatal(err)
	}
	m, err := gemma4.Load(dir, cpu.New(0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// prompt returns n token ids starting with BOS; 40 tokens cross the tiny
// models' sliding window (16) more than twice.
func prompt(m *gemma4.Model, n int, seed uint64) []int32 {
	r := rand.New(rand.NewPCG(seed, 3))
	ids := make([]int32, n)
	for i := range ids {
		ids[i] = int32(3 + r.IntN(m.Config.Text.VocabSize-3))
	}
	ids[0] = 2
	return ids
}

func generate(t *testing.T, m *gemma4.Model, ids []int32, opt Options) *Result {
	t.Helper()
	res, err := Generate(context.Background(), m, ids, opt, nil)
	if err != nil {
		t.Fatalf("Generate(%+v): %v", opt, err)
	}
	return res
}

// lastLogits runs the whole sequence through a fresh cache in one pass and
// returns the last position's logits: decoding without any KV cache reuse.
func lastLogits(t *testing.T, m *gemma4.Model, seq []int32) []float32 {
	t.Helper()
	out, err := m.Forward([]gemma4.Row{{Tokens: seq, Cache: m.NewCache(len(seq))}}, gemma4.ForwardOptions{Logits: gemma4.LogitsAll})
	if err != nil {
		t.Fatal(err)
	}
	V := m.Config.Text.VocabSize
	all := m.Backend().ToF32(out.Logits)
	return all[len(all)-V:]
}

func TestGenerateStopsAtStopToken(t *testing.T) {
	m := loadTiny(t)
	ids := prompt(m, 12, 1)
	free := generate(t, m, ids, Options{MaxTokens: 24}).Tokens
	// firstAt finds a token whose first occurrence is at index i or later, so
	// stopping on it must cut the stream exactly there.
	firstAt := func(i int) (int32, int) {
		for j := i; j < len(free); j++ {
			if slices.Index(free, free[j]) == j {
				return free[j], j
			}
		}
		t.Fatalf("no token first occurs at or after %d in %v", i, free)
		return 0, 0
	}
	absent := int32(0)
	for slices.Contains(free, absent) {
		absent++
	}
	tests := []struct {
		name  string
		from  int // the stop token is the first token first seen at or after this index
		extra []int32
		last  bool // the budget ends on the stop token
	}{
		{"stop on the first token", 0, nil, false},
		{"stop mid-stream", 5, nil, false},
		{"stop among several stop ids", 9, []int32{absent}, false},
		{"stop on the last allowed token is a stop, not length", 6, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stop, at := firstAt(tt.from)
			maxTokens := len(free)
			if tt.last {
				maxTokens = at + 1
			}
			var seen []int32
			res, err := Generate(context.Background(), m, ids, Options{MaxTokens: maxTokens, StopTokens: append([]int32{stop}, tt.extra...)},
				func(tok int32) { seen = append(seen, tok) })
			if err != nil {
				t.Fatal(err)
			}
			if want := free[:at+1]; !slices.Equal(res.Tokens, want) {
				t.Fatalf("tokens = %v, want %v (stop token %d at %d)", res.Tokens, want, stop, at)
			}
			if res.StopReason != StopToken {
				t.Errorf("stop reason = %q, want %q", res.StopReason, StopToken)
			}
			if !slices.Equal(seen, res.Tokens) {
				t.Errorf("onToken saw %v, want %v", seen, res.Tokens)
			}
		})
	}
	t.Run("a stop token never generated", func(t *testing.T) {
		res := generate(t, m, ids, Options{MaxTokens: 24, StopTokens: []int32{absent}})
		if !slices.Equal(res.Tokens, free) || res.StopReason != StopLength {
			t.Fatalf("tokens %v (%s), want %v (%s)", res.Tokens, res.StopReason, free, StopLength)
		}
	})
}

func TestGenerateMaxTokensIsExact(t *testing.T) {
	m := loadTiny(t)
	ids := prompt(m, 9, 2)
	var longest []int32
	for _, n := range []int{20, 1, 2, 7} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			res := generate(t, m, ids, Options{MaxTokens: n})
			if len(res.Tokens) != n || res.StopReason != StopLength {
				t.Fatalf("%d tokens (%s), want %d (%s)", len(res.Tokens), res.StopReason, n, StopLength)
			}
			if res.PromptTokens != len(ids) {
				t.Errorf("PromptTokens = %d, want %d", res.PromptTokens, len(ids))
			}
			if res.Prefill < 0 || res.Decode < 0 {
				t.Errorf("negative timings: prefill %v, decode %v", res.Prefill, res.Decode)
			}
			// Greedy streams with a smaller budget are prefixes of larger ones.
			if longest == nil {
				longest = res.Tokens
			} else if !slices.Equal(res.Tokens, longest[:n]) {
				t.Errorf("tokens %v are not a prefix of %v", res.Tokens, longest)
			}
		})
	}
}

func TestGreedyOutputIndependentOfPrefillSize(t *testing.T) {
	// Batch invariance: chunking the prompt must not change a single token.
	// 1<<50 would make a cache with rings of 2^50 slots if the chunk were not
	// capped at the prompt length.
	m := loadTiny(t)
	ids := prompt(m, 40, 3)
	want := generate(t, m, ids, Options{MaxTokens: 16, PrefillSize: 1}).Tokens
	for _, size := range []int{7, 16, 17, 40, 512, 0, 1 << 50} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			if got := generate(t, m, ids, Options{MaxTokens: 16, PrefillSize: size}).Tokens; !slices.Equal(got, want) {
				t.Fatalf("prefill size %d: %v, want %v (prefill size 1)", size, got, want)
			}
		})
	}
}

func TestGenerateMatchesFullRecompute(t *testing.T) {
	// Each step of Generate must equal sampling from a from-scratch forward
	// over prompt + generated tokens, with the same sampler and the whole
	// sequence (prompt included) as the repetition penalty's history.
	m := loadTiny(t)
	// The prompt ends with the model's own greedy continuation, so the
	// tokens it favours next are in the prompt: a penalty that skipped the
	// prompt would pick differently.
	ids := prompt(m, 14, 4)
	ids = append(ids, generate(t, m, ids, Options{MaxTokens: 8}).Tokens...)
	tests := []struct {
		name string
		p    sample.Params
	}{
		{"greedy", sample.Params{}},
		{"greedy with repetition penalty", sample.Params{RepetitionPenalty: 1.5}},
		{"greedy with a strong repetition penalty", sample.Params{RepetitionPenalty: 4}},
		{"sampled", sample.Params{Temperature: 1, Seed: 3}},
		{"sampled with every filter", sample.Params{Temperature: 0.8, TopK: 40, TopP: 0.9, MinP: 0.02, RepetitionPenalty: 1.3, Seed: 8}},
	}
	const n = 12
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := generate(t, m, ids, Options{MaxTokens: n, Sample: tt.p, PrefillSize: 7})
			s := sample.New(tt.p)
			seq := slices.Clone(ids)
			for i := range n {
				tok := s.Next(lastLogits(t, m, seq), seq)
				if res.Tokens[i] != tok {
					t.Fatalf("token %d = %d, want %d (full recompute)\ngot %v", i, res.Tokens[i], tok, res.Tokens)
				}
				seq = append(seq, tok)
			}
		})
	}
}

func TestSampledGenerationIsSeeded(t *testing.T) {
	m := loadTiny(t)
	ids := prompt(m, 10, 5)
	run := func(seed uint64) []int32 {
		return generate(t, m, ids, Options{MaxTokens: 24, Sample: sample.Params{Temperature: 1, Seed: seed}}).Tokens
	}
	for _, seed := range []uint64{0, 1, 99} {
		a, b := run(seed), run(seed)
		if !slices.Equal(a, b) {
			t.Fatalf("seed %d: two runs differ:\n%v\n%v", seed, a, b)
		}
		if c := run(seed + 1000); slices.Equal(a, c) {
			t.Fatalf("seeds %d and %d gave the same tokens %v", seed, seed+1000, a)
		}
	}
}

func TestGenerateHonoursContext(t *testing.T) {
	m := loadTiny(t)
	ids := prompt(m, 10, 6)
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel2 := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel2()
	for _, tc := range []struct {
		name string
		ctx  context.Context
		want error
	}{
		{"cancelled before the call", cancelled, context.Canceled},
		{"deadline already passed", expired, context.DeadlineExceeded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, size := range []int{1, 512} { // between prefill chunks and before the first
				res, err := Generate(tc.ctx, m, ids, Options{MaxTokens: 5, PrefillSize: size}, nil)
				if !errors.Is(err, tc.want) {
					t.Fatalf("prefill size %d: err = %v, want %v", size, err, tc.want)
				}
				if res != nil && len(res.Tokens) > 0 {
					t.Errorf("prefill size %d: %d tokens generated after cancellation", size, len(res.Tokens))
				}
			}
		})
	}
	t.Run("cancelled while decoding", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		const after = 3
		n := 0
		res, err := Generate(ctx, m, ids, Options{MaxTokens: 50}, func(int32) {
			if n++; n == after {
				cancel()
			}
		})
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want context.Canceled", err)
		}
		if res == nil || len(res.Tokens) != after {
			t.Fatalf("result %+v, want the %d tokens made before cancelling", res, after)
		}
	})
}

func TestGenerateRejectsBadOptions(t *testing.T) {
	m := loadTiny(t)
	limit := m.Config.Text.MaxPositionEmbeddings
	ids := prompt(m, 10, 7)
	tests := []struct {
		name   string
		prompt []int32
		opt    Options
		want   string
	}{
		{"empty prompt", nil, Options{MaxTokens: 4}, "prompt is empty"},
		{"zero max tokens", ids, Options{}, "max tokens must be positive, got 0"},
		{"negative max tokens", ids, Options{MaxTokens: -3}, "max tokens must be positive, got -3"},
		{"negative prefill size", ids, Options{MaxTokens: 4, PrefillSize: -1}, "prefill size must be positive"},
		{"beyond the context", ids, Options{MaxTokens: limit - len(ids) + 1}, fmt.Sprintf("exceeds the model's context of %d", limit)},
		{"bad temperature", ids, Options{MaxTokens: 4, Sample: sample.Params{Temperature: -1}}, "temperature"},
		{"bad top_p", ids, Options{MaxTokens: 4, Sample: sample.Params{Temperature: 1, TopP: 2}}, "top_p"},
		{"prompt token outside the vocabulary", []int32{2, int32(m.Config.Text.VocabSize)}, Options{MaxTokens: 4}, "outside the vocabulary"},
		{"negative prompt token", []int32{2, -1}, Options{MaxTokens: 4}, "outside the vocabulary"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := Generate(context.Background(), m, tt.prompt, tt.opt, nil)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Generate = %v, %v; want an error containing %q", res, err, tt.want)
			}
		})
	}
	t.Run("exactly the context is accepted", func(t *testing.T) {
		// A cancelled context shows validation passed without decoding 4086 tokens.
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, err := Generate(ctx, m, ids, Options{MaxTokens: limit - len(ids)}, nil)
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want validation to pass and then context.Canceled", err)
		}
	})
}

func TestScoreTokens(t *testing.T) {
	m := loadTiny(t)
	V := m.Config.Text.VocabSize
	toks := prompt(m, 37, 8)
	base, err := ScoreTokens(context.Background(), m, toks, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(base.Positions) != len(toks)-1 {
		t.Fatalf("%d positions, want %d", len(base.Positions), len(toks)-1)
	}
	// Independent check: float64 log-softmax of one LogitsAll pass.
	out, err := m.Forward([]gemma4.Row{{Tokens: toks[:len(toks)-1], Cache: m.NewCache(len(toks))}}, gemma4.ForwardOptions{Logits: gemma4.LogitsAll})
	if err != nil {
		t.Fatal(err)
	}
	all := m.Backend().ToF32(out.Logits)
	var nll float64
	for i, p := range base.Positions {
		row := all[i*V : (i+1)*V]
		var z float64
		for _, v := range row {
			z += math.Exp(float64(v))
		}
		want := float64(row[toks[i+1]]) - math.Log(z)
		if p.Next != toks[i+1] {
			t.Errorf("position %d: next = %d, want %d", i, p.Next, toks[i+1])
		}
		if math.Abs(p.Logprob-want) > 1e-9 {
			t.Errorf("position %d: logprob %v, want %v", i, p.Logprob, want)
		}
		if p.Logprob > 0 || p.Top1Logprob > 0 {
			t.Errorf("position %d: logprobs %v, %v must be <= 0", i, p.Logprob, p.Top1Logprob)
		}
		if p.Top1Logprob < p.Logprob {
			t.Errorf("position %d: top-1 logprob %v < logprob %v", i, p.Top1Logprob, p.Logprob)
		}
		if top := sample.Argmax(row); p.Top1 != top {
			t.Errorf("position %d: top1 = %d, want %d", i, p.Top1, top)
		}
		nll -= p.Logprob
	}
	if math.Abs(base.NLL-nll) > 1e-9*nll {
		t.Errorf("NLL = %v, want -sum(logprobs) = %v", base.NLL, nll)
	}
	if want := math.Exp(nll / float64(len(base.Positions))); math.Abs(base.Perplexity-want) > 1e-9*want {
		t.Errorf("perplexity = %v, want exp(NLL/n) = %v", base.Perplexity, want)
	}
	// Chunking is invisible, bit for bit (1<<50: the cache must be capped).
	for _, chunk := range []int{5, 16, 36, 512, 0, 1 << 50} {
		t.Run(fmt.Sprintf("chunk %d", chunk), func(t *testing.T) {
			got, err := ScoreTokens(context.Background(), m, toks, chunk)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got.Positions, base.Positions) || got.NLL != base.NLL || got.Perplexity != base.Perplexity {
				t.Fatalf("chunk %d differs from chunk 1", chunk)
			}
		})
	}
}

func TestScoreAgreesWithGreedyGeneration(t *testing.T) {
	// Greedy tokens are the model's top-1 choices, so scoring them back must
	// give top1 == next and logprob == top1 logprob at every generated step.
	m := loadTiny(t)
	ids := prompt(m, 11, 9)
	res := generate(t, m, ids, Options{MaxTokens: 10})
	sc, err := ScoreTokens(context.Background(), m, append(slices.Clone(ids), res.Tokens...), 4)
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range sc.Positions[len(ids)-1:] {
		if p.Top1 != p.Next || p.Logprob != p.Top1Logprob {
			t.Errorf("generated token %d: next %d (%v), top1 %d (%v)", i, p.Next, p.Logprob, p.Top1, p.Top1Logprob)
		}
	}
}

func TestScoreTokensRejectsBadInput(t *testing.T) {
	m := loadTiny(t)
	V := int32(m.Config.Text.VocabSize)
	limit := m.Config.Text.MaxPositionEmbeddings
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	tests := []struct {
		name   string
		ctx    context.Context
		tokens []int32
		want   string
	}{
		{"no tokens", context.Background(), nil, "at least 2 tokens, got 0"},
		{"one token", context.Background(), []int32{2}, "at least 2 tokens, got 1"},
		// The last token is never fed to the model: it used to index past the
		// logits row and panic.
		{"last token outside the vocabulary", context.Background(), []int32{2, 5, V}, fmt.Sprintf("token 2 is %d, outside the vocabulary", V)},
		{"negative last token", context.Background(), []int32{2, 5, -1}, "token 2 is -1, outside the vocabulary"},
		{"first token outside the vocabulary", context.Background(), []int32{V + 5, 5}, "token 0"},
		{"longer than the context", context.Background(), make([]int32, limit+1), fmt.Sprintf("exceed the model's context of %d", limit)},
		{"cancelled", cancelled, []int32{2, 5, 6}, context.Canceled.Error()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sc, err := ScoreTokens(tt.ctx, m, tt.tokens, 4)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("ScoreTokens = %v, %v; want an error containing %q", sc, err, tt.want)
			}
		})
	}
}

func TestPrefillReturnsLastRowOfLogitsAll(t *testing.T) {
	m := loadTiny(t)
	ids := prompt(m, 40, 10)
	want := lastLogits(t, m, ids)
	for _, chunk := range []int{1, 7, 16, 40, 512} {
		t.Run(fmt.Sprint(chunk), func(t *testing.T) {
			cache := m.NewCache(chunk)
			logits, _, err := Prefill(context.Background(), m, cache, ids, chunk)
			if err != nil {
				t.Fatal(err)
			}
			if got := m.Backend().ToF32(logits); !slices.Equal(got, want) {
				t.Fatalf("chunk %d: logits differ (bitwise) from the last row of a LogitsAll pass", chunk)
			}
			if cache.Len() != len(ids) {
				t.Errorf("cache holds %d positions, want %d", cache.Len(), len(ids))
			}
		})
	}
	errs := []struct {
		name   string
		prompt []int32
		chunk  int
		want   string
	}{
		{"empty prompt", nil, 4, "prompt is empty"},
		{"zero chunk", ids, 0, "chunk size must be positive"},
		{"negative chunk", ids, -2, "chunk size must be positive"},
		{"chunk larger than the cache step", ids, 8, "per step"},
	}
	for _, tt := range errs {
		t.Run(tt.name, func(t *testing.T) {
			logits, _, err := Prefill(context.Background(), m, m.NewCache(4), tt.prompt, tt.chunk)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Prefill = %v, %v; want an error containing %q", logits, err, tt.want)
			}
		})
	}
}

// TestHostStepsCheckpoint protects the host loop's decode steps, which the
// host records after reading the last step's logits while the device
// waits: each is recorded in parts (gemma4.ForwardOptions.Checkpoint), like
// a prompt's pass. The tiny E2B preset's ten layers take one checkpoint a
// pass: the prompt's, then one a decode step.
func TestHostStepsCheckpoint(t *testing.T) {
	c := &computetest.Checkpointing{Backend: cpu.New(0)}
	m := gemma4test.Random(t, "gemma4-tiny-e2b", c)
	res := generate(t, m, prompt(m, 5, 1), Options{MaxTokens: 4, Sample: sample.Params{Temperature: 0.8, Seed: 3}})
	if want := 1 + len(res.Tokens) - 1; c.Calls() != want {
		t.Errorf("%d checkpoints for a prompt and %d decode steps, want %d", c.Calls(), len(res.Tokens)-1, want)
	}
}

// TestSampleAheadMatchesHostLoop protects sampled decoding on backends that
// upload a step's token late (the GPU): the token is sampled while the step
// that reads it is recorded, and the tokens, stop reasons and onToken calls
// must be the host loop's, at every budget and on stop tokens. The late
// path must also have run for every step it can take (all but the last).
func TestSampleAheadMatchesHostLoop(t *testing.T) {
	late := &computetest.Late{Backend: cpu.New(0)}
	host := &computetest.Checkpointing{Backend: cpu.New(0)} // hides the same backend interfaces
	models := map[string]*gemma4.Model{
		"late": gemma4test.Random(t, "gemma4-tiny-e2b", late),
		"host": gemma4test.Random(t, "gemma4-tiny-e2b", host),
	}
	ids := prompt(models["host"], 9, 4)
	hot := sample.Params{Temperature: 1.5, TopK: 40, TopP: 0.95, Seed: 5}
	free := generate(t, models["host"], ids, Options{MaxTokens: 16, Sample: hot}).Tokens
	tests := []struct {
		name string
		opt  Options
	}{
		{"temperature alone", Options{MaxTokens: 12, Sample: sample.Params{Temperature: 1, Seed: 1}}},
		{"top-k and top-p", Options{MaxTokens: 16, Sample: hot}},
		{"a stop token mid-stream", Options{MaxTokens: 16, Sample: hot, StopTokens: []int32{free[6]}}},
		{"one token", Options{MaxTokens: 1, Sample: hot}},
		{"two tokens", Options{MaxTokens: 2, Sample: hot}},
		{"tops that do not decide", Options{MaxTokens: 16, Sample: hot}}, // every third (late.SpoilTops)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if late.SpoilTops = 0; tt.name == "tops that do not decide" {
				late.SpoilTops = 3
			}
			run := func(m *gemma4.Model) (*Result, []int32) {
				var seen []int32
				res, err := Generate(context.Background(), m, ids, tt.opt, func(tok int32) { seen = append(seen, tok) })
				if err != nil {
					t.Fatal(err)
				}
				return res, seen
			}
			want, _ := run(models["host"])
			before := late.Calls()
			got, seen := run(models["late"])
			if !slices.Equal(got.Tokens, want.Tokens) || got.StopReason != want.StopReason {
				t.Fatalf("tokens %v (%s), want the host loop's %v (%s)", got.Tokens, got.StopReason, want.Tokens, want.StopReason)
			}
			if !slices.Equal(seen, got.Tokens) {
				t.Errorf("onToken saw %v, want %v", seen, got.Tokens)
			}
			if calls, wantCalls := late.Calls()-before, min(len(got.Tokens), tt.opt.MaxTokens-1); calls != wantCalls {
				t.Errorf("%d late uploads for %d tokens of %d, want %d", calls, len(got.Tokens), tt.opt.MaxTokens, wantCalls)
			}
		})
	}
}

// TestPrefillTimeWaitsForTheDevice protects Result.Prefill on an
// asynchronous backend: Generate waits for the prompt's work (Sync) after
// the prefill's last op and before the first decode step's, so the time
// is the device's, not how long issuing took.
func TestPrefillTimeWaitsForTheDevice(t *testing.T) {
	s := &computetest.Syncing{Backend: cpu.New(0)}
	m := gemma4test.Random(t, "gemma4-tiny-e2b", s)
	ids := prompt(m, 9, 1)
	s.MatMuls = 0
	_, _, err := Prefill(context.Background(), m, m.NewCache(len(ids)), ids, len(ids))
	if err != nil {
		t.Fatal(err)
	}
	prefillOps := s.MatMuls
	s.MatMuls, s.At = 0, nil
	generate(t, m, ids, Options{MaxTokens: 3})
	if len(s.At) == 0 || s.At[0] != prefillOps {
		t.Fatalf("Sync calls at %v matmuls, want the first right after the prefill's %d", s.At, prefillOps)
	}
}
