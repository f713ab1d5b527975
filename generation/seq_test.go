package generation

import (
	"testing"
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

// TestSeqManyStopTokens: a long, unsorted stop list with duplicates still
// ends the sequence exactly at its ids and nowhere else.
func TestSeqManyStopTokens(t *testing.T) {
	const n = 1 << 12
	stops := make([]int32, 0, n+1)
	for i := range n {
		stops = append(stops, int32(2*(n-i))) // even ids, in descending order
	}
	stops = append(stops, 2*n) // a duplicate
	s := NewSeq([]int32{1}, Options{MaxTokens: 2 * n, StopTokens: stops})
	for i := range n {
		if s.Emit(int32(2*i + 1)) {
			t.Fatalf("odd token %d ended the sequence", 2*i+1)
		}
	}
	if !s.Emit(2 * n) {
		t.Error("the largest stop id did not end the sequence")
	}
}

// BenchmarkSeqEmitManyStops: Emit runs on the engine's loop once per token
// of every row, so a long stop list must not cost a scan per token (a
// scan of 2^18 ids per emit took about 330 ms per 4,000 tokens).
func BenchmarkSeqEmitManyStops(b *testing.B) {
	const n = 1 << 18
	stops := make([]int32, n)
	for i := range stops {
		stops[i] = int32(2 * (n - i))
	}
	s := NewSeq([]int32{1}, Options{MaxTokens: b.N + 1, StopTokens: stops})
	for i := range b.N {
		s.Emit(int32(2*i + 1))
	}
}
