package gemma4

import (
	"slices"
	"testing"
)

// TestCheckpointAfter pins where a recorded pass is cut into parts: after
// its first part's layers, then every checkpointLayers (six), the first
// part six layers long where none is asked.
func TestCheckpointAfter(t *testing.T) {
	for _, tc := range []struct {
		first int
		at    []int // the layer counts in 1…20 after which it checkpoints
	}{
		{0, []int{6, 12, 18}},
		{-1, []int{6, 12, 18}},
		{6, []int{6, 12, 18}},
		{1, []int{1, 7, 13, 19}},
		{2, []int{2, 8, 14, 20}},
		{9, []int{9, 15}},
	} {
		var at []int
		for n := 1; n <= 20; n++ {
			if checkpointAfter(n, tc.first) {
				at = append(at, n)
			}
		}
		if !slices.Equal(at, tc.at) {
			t.Errorf("first %d: after %v, want %v", tc.first, at, tc.at)
		}
	}
}
