package serve

import (
	"os"
	"path/filepath"
	"testing"

	"tandem/sample"
)

// TestDefaultSampling: generation_config.json's temperature, top_p, top_k and min_p are the
// defaults (the README's flag table says so for --min-p too), unless do_sample is false.
func TestDefaultSampling(t *testing.T) {
	for _, tc := range []struct {
		name, config string
		want         sample.Params
		wantErr      bool
	}{
		{"all four", `{"do_sample":true,"temperature":0.7,"top_p":0.9,"top_k":40,"min_p":0.05}`,
			sample.Params{Temperature: 0.7, TopP: 0.9, TopK: 40, MinP: 0.05}, false},
		{"no min_p", `{"temperature":1,"top_k":64}`, sample.Params{Temperature: 1, TopK: 64}, false},
		{"do_sample false", `{"do_sample":false,"temperature":0.7,"min_p":0.1}`, sample.Params{}, false},
		{"min_p out of range", `{"temperature":1,"min_p":1.5}`, sample.Params{}, true},
		{"no file", "", sample.Params{}, false},
	} {
		dir := t.TempDir()
		if tc.config != "" {
			if err := os.WriteFile(filepath.Join(dir, "generation_config.json"), []byte(tc.config), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		got, err := DefaultSampling(dir)
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("%s: %+v, err %v; want %+v (error %v)", tc.name, got, err, tc.want, tc.wantErr)
		}
	}
}
