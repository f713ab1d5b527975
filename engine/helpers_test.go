package engine

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"tandem/compute"
	"tandem/compute/computetest"
	"tandem/compute/cpu"
	"tandem/compute/cuda"
	"tandem/generation"
	"tandem/model/gemma4"
	"tandem/sample"
	"tandem/spec"
)

// The tests share one tiny E2B target and its assistant (random weights,
// every structural feature: sliding rings of 16, KV sharing, PLE), written
// once per test binary.
var (
	target *gemma4.Model
	helper *gemma4.Assistant
	vocab  int
	// draftDir holds a second copy of the assistant (left unbound), and
	// targetDir the target's checkpoint.
	draftDir, targetDir string
)

func TestMain(m *testing.M) {
	os.Exit(func() int {
		dir, err := os.MkdirTemp("", "tandem-engine-test-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		if err := loadPair(dir); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer target.Close()
		defer helper.Close()
		return m.Run()
	}())
}

// testBackend is the CPU, or the GPU with TANDEM_TEST_BACKEND=cuda (as
// compute/computetest picks it; TestMain has no testing.TB to give it).
func testBackend() (compute.Backend, error) {
	switch v := os.Getenv(computetest.Env); v {
	case "", "cpu":
		return cpu.New(0), nil
	case "cpu-async":
		return &computetest.Prefetching{Backend: cpu.New(0)}, nil
	case "cuda":
		return cuda.New(0)
	default:
		return nil, fmt.Errorf("%s=%q: want cpu, cpu-async or cuda", computetest.Env, v)
	}
}

func loadPair(dir string) error {
	b, err := testBackend()
	if err != nil {
		return err
	}
	for _, name := range []string{"gemma4-tiny-e2b", "gemma4-tiny-e2b-assistant"} {
		p, err := gemma4.LookupPreset(name)
		if err != nil {
			return err
		}
		if err := p.Generate(filepath.Join(dir, name), gemma4.GenerateOptions{Seed: 21}); err != nil {
			return err
		}
	}
	targetDir = filepath.Join(dir, "gemma4-tiny-e2b")
	if target, err = gemma4.Load(targetDir, b); err != nil {
		return err
	}
	draftDir = filepath.Join(dir, "gemma4-tiny-e2b-assistant")
	if helper, err = gemma4.LoadAssistant(draftDir, b); err != nil {
		return err
	}
	vocab = target.Config.Text.VocabSize
	return helper.Bind(target)
}

// stopIDs are kept out of prompts so stop tokens only come from output.
var stopIDs = []int32{1, 50, 106}

func promptOf(n int, seed uint64) []int32 {
	r := rand.New(rand.NewPCG(seed, 9))
	ids := make([]int32, n)
	for i := range ids {
		for ids[i] = int32(3 + r.IntN(vocab-3)); slices.Contains(stopIDs, ids[i]); {
			ids[i] = int32(3 + r.IntN(vocab-3))
		}
	}
	ids[0] = 2
	return ids
}

// start makes an engine and closes it (checking that nothing is left
// running) when the test ends.
func start(t testing.TB, cfg Config) *Engine {
	t.Helper()
	if cfg.Model == nil {
		cfg.Model = target
	}
	e, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeEngine(t, e) })
	return e
}

func closeEngine(t testing.TB, e *Engine) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := e.Close(ctx); err != nil {
		t.Errorf("Close: %v", err)
	}
}

// result is what a request's channel delivered.
type result struct {
	tokens   []int32
	logprobs []Logprob
	events   int
	final    Event
}

// collect reads ch until it is closed and checks the event contract: token
// events, then exactly one final event, last.
func collect(t testing.TB, ch <-chan Event) result {
	t.Helper()
	var res result
	timeout := time.After(60 * time.Second)
	for {
		select {
		case ev, ok := <-ch:
			if !ok {
				if !res.final.Done {
					t.Errorf("channel closed without a final event")
				}
				return res
			}
			if res.final.Done {
				t.Errorf("event after the final event: %+v", ev)
			}
			res.events++
			res.tokens = append(res.tokens, ev.Tokens...)
			res.logprobs = append(res.logprobs, ev.Logprobs...)
			if ev.Done {
				res.final = ev
			}
		case <-timeout:
			t.Fatalf("no event for 60 s (%d tokens so far)", len(res.tokens))
		}
	}
}

func submit(t testing.TB, e *Engine, ctx context.Context, r Request) <-chan Event {
	t.Helper()
	ch, err := e.Submit(ctx, r)
	if err != nil {
		t.Fatalf("Submit: %v", err)
	}
	return ch
}

// alone runs r by itself, as the command line would: plain decoding
// without a drafter, spec.Generate with one.
func alone(t testing.TB, r Request, d spec.Drafter, k, prefill int) (tokens []int32, reason string, st spec.Stats) {
	t.Helper()
	opt := generation.Options{MaxTokens: r.MaxTokens, Sample: r.Sample, StopTokens: r.StopTokens, PrefillSize: prefill}
	if d == nil {
		res, err := generation.Generate(context.Background(), target, r.Prompt, opt, nil)
		if err != nil {
			t.Fatal(err)
		}
		return res.Tokens, res.StopReason, st
	}
	res, err := spec.Generate(context.Background(), target, d, r.Prompt, spec.Options{Options: opt, DraftTokens: k}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return res.Tokens, res.StopReason, res.Stats
}

// assistantFor is the drafter a request would use alone.
func assistantFor(t testing.TB, p sample.Params) spec.Drafter {
	t.Helper()
	d, err := spec.NewAssistant(helper, gemma4.DraftOptions{}, p)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// waitFor polls cond for up to 10 s.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// loadUnbound loads another copy of the assistant, not bound to anything.
func loadUnbound() (*gemma4.Assistant, error) {
	return gemma4.LoadAssistant(draftDir, target.Backend())
}

// A position's device pick is used as is; a position without one (its
// logits hold a NaN) is decided by sample.Argmax of its logits, which
// never picks the NaN.
func TestPickAtFallsBackOnNaN(t *testing.T) {
	nan := float32(math.NaN())
	w := &row{picks: []int32{-1, 7}}
	read := 0
	logits := func(j int) []float32 {
		read++
		if j != 0 {
			t.Fatalf("logits of position %d read, which has a pick", j)
		}
		return []float32{1, 5, nan, 5}
	}
	if got := w.pickAt(0, logits); got != 1 {
		t.Errorf("position 0 (NaN): got %d, want 1", got)
	}
	if got := w.pickAt(1, logits); got != 7 {
		t.Errorf("position 1: got %d, want its pick 7", got)
	}
	if read != 1 {
		t.Errorf("logits read %d times, want once", read)
	}
}

// stepGate holds an engine between steps (Config.beforeStep = gate.wait):
// while held, the scheduler waits at the gate before each step until the
// test lets one through.
type stepGate struct {
	mu      sync.Mutex
	cond    *sync.Cond
	held    bool
	grants  int
	arrived int // times the scheduler reached the gate
	passed  int // times it went through
}

func newStepGate() *stepGate {
	g := &stepGate{}
	g.cond = sync.NewCond(&g.mu)
	return g
}

func (g *stepGate) wait() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.arrived++
	for g.held && g.grants == 0 {
		g.cond.Wait()
	}
	if g.held {
		g.grants--
	}
	g.passed++
}

func (g *stepGate) hold(on bool) {
	g.mu.Lock()
	g.held, g.grants = on, 0
	g.cond.Broadcast()
	g.mu.Unlock()
}

// until lets the held engine run one step at a time until ch delivers an
// event, and returns it with the engine waiting before its next step.
func (g *stepGate) until(t *testing.T, ch <-chan Event) Event {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		// Parked at the gate with no step granted: whatever the scheduler
		// was doing (admitting, a granted step) is done.
		g.poll(t, deadline, "the engine never came back to the gate", func() bool { return g.arrived > g.passed && g.grants == 0 })
		select {
		case ev := <-ch:
			return ev
		default:
		}
		g.mu.Lock()
		g.grants++
		g.cond.Broadcast()
		g.mu.Unlock()
		// The step let through must start before parking again counts.
		g.poll(t, deadline, "the engine never took the step let through", func() bool { return g.grants == 0 })
	}
}

// poll waits until cond (read under the gate's lock) holds.
func (g *stepGate) poll(t *testing.T, deadline time.Time, failure string, cond func() bool) {
	t.Helper()
	for {
		g.mu.Lock()
		ok := cond()
		g.mu.Unlock()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal(failure)
		}
		time.Sleep(time.Millisecond)
	}
}
