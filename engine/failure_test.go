package engine

import (
	"context"
	"errors"
	"path/filepath"
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
