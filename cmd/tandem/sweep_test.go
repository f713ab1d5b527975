package main

import (
	"os"
	"slices"
	"strings"
	"testing"
)

// TestParseSweep protects bench --sweep's syntax: groups by ";", pairs by
// ",", "none" for the process's own settings, empty groups skipped, and a
// clear error for anything a running process could not change (or a
// misspelt name).
func TestParseSweep(t *testing.T) {
	for _, tc := range []struct {
		in    string
		names []string
		env   [][][2]string
		err   string
	}{
		{"", []string{""}, [][][2]string{nil}, ""},
		{" ; ", []string{""}, [][][2]string{nil}, ""},
		{"none;TANDEM_CUDA_SPLIT=warps;;none;", []string{"none", "TANDEM_CUDA_SPLIT=warps", "none"},
			[][][2]string{nil, {{"TANDEM_CUDA_SPLIT", "warps"}}, nil}, ""},
		{"TANDEM_CUDA_ROWS=wide, TANDEM_CUDA_POOL_GC=0;TANDEM_SPEC_AHEAD=0", []string{"TANDEM_CUDA_ROWS=wide, TANDEM_CUDA_POOL_GC=0", "TANDEM_SPEC_AHEAD=0"},
			[][][2]string{{{"TANDEM_CUDA_ROWS", "wide"}, {"TANDEM_CUDA_POOL_GC", "0"}}, {{"TANDEM_SPEC_AHEAD", "0"}}}, ""},
		{"TANDEM_ENGINE_AHEAD=0", []string{"TANDEM_ENGINE_AHEAD=0"}, [][][2]string{{{"TANDEM_ENGINE_AHEAD", "0"}}}, ""},
		{"TANDEM_CUDA_PDL=1", nil, nil, "not a switch read at every call"},
		{"TANDEM_SPEC_AHEED=0", nil, nil, "not a switch read at every call"},
		{"TANDEM_CUDA_SPLIT", nil, nil, "not TANDEM_NAME=VALUE"},
		{"PATH=/bin", nil, nil, "not TANDEM_NAME=VALUE"},
	} {
		gs, err := parseSweep(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: error %v, want one saying %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%q: %v", tc.in, err)
		}
		var names []string
		for i, g := range gs {
			names = append(names, g.name)
			if !slices.Equal(g.env, tc.env[i]) {
				t.Errorf("%q: group %d sets %v, want %v", tc.in, i, g.env, tc.env[i])
			}
		}
		if !slices.Equal(names, tc.names) {
			t.Errorf("%q: groups %q, want %q", tc.in, names, tc.names)
		}
	}
}

// TestSweepApplyUndoes protects the environment around a sweep group: its
// variables are set while it runs, then a variable that was set gets its
// value back and one that was not is unset again.
func TestSweepApplyUndoes(t *testing.T) {
	t.Setenv("TANDEM_SPEC_AHEAD", "always")
	t.Setenv("TANDEM_SPEC_ROUNDS", "")
	os.Unsetenv("TANDEM_SPEC_ROUNDS")
	g := sweepGroup{env: [][2]string{{"TANDEM_SPEC_AHEAD", "0"}, {"TANDEM_SPEC_ROUNDS", "host"}}}
	undo := g.apply()
	if os.Getenv("TANDEM_SPEC_AHEAD") != "0" || os.Getenv("TANDEM_SPEC_ROUNDS") != "host" {
		t.Fatalf("while applied: %q, %q", os.Getenv("TANDEM_SPEC_AHEAD"), os.Getenv("TANDEM_SPEC_ROUNDS"))
	}
	undo()
	if v := os.Getenv("TANDEM_SPEC_AHEAD"); v != "always" {
		t.Errorf("TANDEM_SPEC_AHEAD after undo: %q, want its old value", v)
	}
	if _, set := os.LookupEnv("TANDEM_SPEC_ROUNDS"); set {
		t.Error("TANDEM_SPEC_ROUNDS still set after undo")
	}
}
