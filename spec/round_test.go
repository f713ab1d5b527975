package spec_test

import (
	"testing"

	"tandem/generation"
	"tandem/sample"
	"tandem/spec"
)

// Drafts accepted past a stop token (or past the budget) were never used:
// the statistics must not count them, or acceptance is overstated.
func TestRoundCountsOnlyEmittedDrafts(t *testing.T) {
	const V = 16
	drafts := []int32{5, 6, 7, 8}
	// The target agrees with every draft: row i's argmax is draft i+1,
	// and the bonus after the last is token 9.
	row := func(i int) []float32 {
		l := make([]float32, V)
		if i < len(drafts) {
			l[drafts[i]] = 1
		} else {
			l[9] = 1
		}
		return l
	}
	for _, tc := range []struct {
		name      string
		stop      []int32
		maxTokens int
		emitted   int
		kept      int
	}{
		{"all used", nil, 100, 5, 4},
		{"stop at draft 2", []int32{6}, 100, 2, 2},
		{"stop at the first draft", []int32{5}, 100, 1, 1},
		{"budget ends at draft 3", nil, 4, 3, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			seq := generation.NewSeq([]int32{1, 2, 3}, generation.Options{MaxTokens: tc.maxTokens, StopTokens: tc.stop})
			seq.Emit(4) // the round's pending token
			st := spec.NewStats(len(drafts))
			v := spec.Judge{}.Round(seq, &st, spec.Proposal{Tokens: drafts}, row)
			if v.Accepted != len(drafts) {
				t.Fatalf("accepted %d drafts, want all %d", v.Accepted, len(drafts))
			}
			if len(v.Emitted) != tc.emitted || v.Kept != tc.kept {
				t.Fatalf("emitted %v, kept %d; want %d emitted, %d kept", v.Emitted, v.Kept, tc.emitted, tc.kept)
			}
			if st.Accepted != tc.kept || st.Drafted != len(drafts) || st.Rounds != 1 {
				t.Fatalf("stats %+v: want %d accepted of %d drafted in 1 round", st, tc.kept, len(drafts))
			}
			for i, n := range st.AcceptedAt {
				if want := btoi(i < tc.kept); n != want {
					t.Fatalf("AcceptedAt = %v, want the first %d positions", st.AcceptedAt, tc.kept)
				}
			}
		})
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Rejection sampling's target distribution at verify row n is penalised
// over the history and drafts 1..n, as plain sampling would be after
// emitting them: a draft repeating an accepted one under a heavy frequency
// penalty is rejected, and the residual picks the runner-up.
func TestRejectionSamplingPenalisesTheDrafts(t *testing.T) {
	const V = 16
	seq := generation.NewSeq([]int32{1, 2, 3}, generation.Options{MaxTokens: 10,
		Sample: sample.Params{Temperature: 0.05, FrequencyPenalty: 50, Seed: 1}})
	seq.Emit(4) // the round's pending token
	certain := sample.Dist{Index: []int32{5}, Prob: []float64{1}}
	prop := spec.Proposal{Tokens: []int32{5, 5}, Probs: []sample.Dist{certain, certain}}
	row := func(i int) []float32 {
		l := make([]float32, V)
		switch i {
		case 0:
			l[5] = 10
		case 1:
			l[5], l[6] = 10, 9 // 5 first, unless the accepted draft 5 is penalised
		default:
			l[7] = 10
		}
		return l
	}
	st := spec.NewStats(2)
	v := spec.Judge{}.Round(seq, &st, prop, row)
	if v.Accepted != 1 || v.Next != 6 {
		t.Fatalf("accepted %d, next %d; want the first draft accepted and the penalised repeat replaced by 6", v.Accepted, v.Next)
	}
}
