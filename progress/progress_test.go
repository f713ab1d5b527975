package progress

import (
	"bytes"
	"strings"
	"testing"
)

func TestBar(t *testing.T) {
	for _, tc := range []struct {
		name     string
		total    int64
		minBytes int64
		drawn    bool
	}{
		{"large job", 1 << 30, 1 << 20, true},
		{"small job", 1 << 10, 1 << 20, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			f := Bar(&out, "loading", tc.minBytes)
			f(tc.total/2, tc.total)
			f(tc.total, tc.total)
			if drawn := strings.Contains(out.String(), "loading"); drawn != tc.drawn {
				t.Fatalf("drawn = %v, want %v; output %q", drawn, tc.drawn, out.String())
			}
			if tc.drawn && !strings.Contains(out.String(), "100%") {
				t.Fatalf("the bar did not reach 100%%: %q", out.String())
			}
		})
	}
	Bar(nil, "x", 0)(1, 2) // no writer: nothing to draw, no panic
}
