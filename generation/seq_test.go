package generation

import (
	"testing"
	"time"
)

// TestSeqStopTokens: Emit ends the sequence at any listed stop token, whatever the list's
// order or duplicates, and only there.
func TestSeqStopTokens(t *testing.T) {
	stops := []int32{106, 1, 50, 106, 7}
	for _, tok := range []int32{1, 7, 50, 106} {
		s := NewSeq([]int32{2, 3}, Options{MaxTokens: 10, StopTokens: stops})
		if s.Emit(9) || s.Emit(tok) != true || s.StopReason != StopToken {
			t.Errorf("stop token %d: done %v, reason %q", tok, s.Done, s.StopReason)
		}
	}
	s := NewSeq([]int32{2}, Options{MaxTokens: 3, StopTokens: stops})
	for i, tok := range []int32{0, 2, 51} {
		done := s.Emit(tok)
		if done != (i == 2) || (done && s.StopReason != StopLength) {
			t.Errorf("token %d: done %v, reason %q", tok, done, s.StopReason)
		}
	}
	if s := NewSeq([]int32{2}, Options{MaxTokens: 1}); !s.Emit(1) || s.StopReason != StopLength {
		t.Errorf("no stop tokens: %+v", s)
	}
	// The caller's slice is not reordered.
	if stops[0] != 106 || stops[3] != 106 {
		t.Errorf("NewSeq changed its options' stop tokens: %v", stops)
	}
}

// TestSeqManyStopTokens: a long stop list does not make every emitted token cost a scan of
// it (Emit runs on the engine's loop, once per token of every row).
func TestSeqManyStopTokens(t *testing.T) {
	const n, emits = 1 << 18, 4000
	stops := make([]int32, n)
	for i := range stops {
		stops[i] = int32(2 * (n - i)) // even ids, in descending order
	}
	s := NewSeq([]int32{1}, Options{MaxTokens: emits + 1, StopTokens: stops})
	start := time.Now()
	for i := range emits {
		if s.Emit(int32(2*i + 1)) {
			t.Fatalf("odd token %d ended the sequence", 2*i+1)
		}
	}
	// A scan per token is about 10^9 comparisons here (a second or more); a lookup takes
	// microseconds.
	if d := time.Since(start); d > 100*time.Millisecond {
		t.Errorf("%d tokens with %d stop ids took %s", emits, n, d)
	}
	if !s.Emit(2 * n) {
		t.Error("the largest stop id did not end the sequence")
	}
}
