// Package gemma4test builds the random-weight Gemma 4 models other
// packages' tests run on. (compute/computetest cannot: gemma4's own tests
// import it.)
package gemma4test

import (
	"testing"

	"tandem/compute"
	"tandem/model/gemma4"
)

// Random is the preset name with random bf16 weights (seed 7) on b; a
// failure fails t.
func Random(t testing.TB, name string, b compute.Backend) *gemma4.Model {
	t.Helper()
	p, err := gemma4.LookupPreset(name)
	if err != nil {
		t.Fatal(err)
	}
	m, err := p.Random(b, compute.BF16, 7, gemma4.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return m
}
