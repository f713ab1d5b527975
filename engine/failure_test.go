package engine

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"tandem/compute"
	"tandem/model/gemma4"
)

// flaky fails allocations while armed, as a GPU out of memory does (the
// CUDA backend panics with an error wrapping its ErrOutOfMemory).
type flaky struct {
	compute.Backend
	armed atomic.Bool
}

var errNoMemory = errors.New("test: out of device memory")

func (f *flaky) Zeros(dt compute.DType, shape ...int) *compute.Tensor {
	if f.armed.Load() {
		panic(errNoMemory)
	}
	return f.Backend.Zeros(dt, shape...)
}

// A request whose cache cannot be allocated fails on its own: it gets a
// final event with the error, its reservation is released, and the engine
// serves the next request. (Before, the panic ended the process.)
func TestAllocationFailureFailsOnlyThatRequest(t *testing.T) {
	b, err := testBackend()
	if err != nil {
		t.Fatal(err)
	}
	fb := &flaky{Backend: b}
	m, err := gemma4.Load(filepath.Join(filepath.Dir(draftDir), "gemma4-tiny-e2b"), fb)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	e := start(t, Config{Model: m, PrefixCacheTokens: -1})
	req := Request{Prompt: promptOf(20, 1), MaxTokens: 5}

	fb.armed.Store(true)
	res := collect(t, submit(t, e, context.Background(), req))
	fb.armed.Store(false)
	if res.final.FinishReason != FinishError || res.final.Err == nil || len(res.tokens) != 0 {
		t.Fatalf("final event %+v with %d tokens, want %q with an error", res.final, len(res.tokens), FinishError)
	}
	if s := e.Stats(); s.KVUsedTokens != 0 || s.Running != 0 {
		t.Fatalf("after the failure: %d KV tokens reserved, %d running", s.KVUsedTokens, s.Running)
	}
	res = collect(t, submit(t, e, context.Background(), req))
	if res.final.FinishReason != FinishLength || len(res.tokens) != 5 {
		t.Fatalf("next request: %q with %d tokens, want %q with 5", res.final.FinishReason, len(res.tokens), FinishLength)
	}
}

// withMemory gives a backend a fixed amount of free memory, like a GPU.
type withMemory struct {
	compute.Backend
	free uint64
}

func (w withMemory) MemInfo() (free, total uint64, err error) { return w.free, 2 * w.free, nil }

// A KV budget the device cannot hold is refused at start-up, with the
// numbers, instead of failing requests once caches fill.
func TestNewChecksDeviceMemory(t *testing.T) {
	b, err := testBackend()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(filepath.Dir(draftDir), "gemma4-tiny-e2b")
	per := target.CacheBytes(4096, 512)
	for _, tc := range []struct {
		name string
		free uint64
		ok   bool
	}{
		{"room for five caches and headroom", uint64(6 * per), true},
		{"room for three", uint64(3 * per), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := gemma4.Load(dir, withMemory{b, tc.free})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			e, err := New(Config{Model: m, CtxSize: 4096, Parallel: 4, PrefillSize: 512})
			if tc.ok {
				if err != nil {
					t.Fatal(err)
				}
				closeEngine(t, e)
				return
			}
			if err == nil {
				closeEngine(t, e)
				t.Fatal("New accepted a KV budget larger than the free memory")
			}
			for _, want := range []string{"4 parallel requests of 4096 tokens", "GiB", "free"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %q", err, want)
				}
			}
		})
	}
}
