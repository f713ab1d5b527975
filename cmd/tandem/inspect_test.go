package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestInspectPrintsSummary(t *testing.T) {
	tests := []struct {
		preset string
		want   []string
	}{
		{"gemma4-tiny-e2b", []string{"model type:  gemma4 (target)", "layer types: SSSSFssssf", "parameters:", "dtype BF16", "per-layer embeddings", "problems:    none"}},
		{"gemma4-tiny-e2b-assistant", []string{"(assistant)", "drafter for a target", "problems:    none"}},
	}
	for _, tt := range tests {
		t.Run(tt.preset, func(t *testing.T) {
			dir := tinyModel(t, tt.preset)
			out, _ := mustExecute(t, "inspect", dir)
			if !strings.HasPrefix(out, dir+"\n") {
				t.Errorf("summary does not start with the directory:\n%s", out)
			}
			for _, w := range tt.want {
				if !strings.Contains(out, w) {
					t.Errorf("summary lacks %q:\n%s", w, out)
				}
			}
		})
	}
}

// inspectJSON is the documented shape of `inspect --json`.
type inspectJSON struct {
	Dir        string           `json:"dir"`
	ModelType  string           `json:"model_type"`
	Kind       string           `json:"kind"`
	Structure  []string         `json:"structure"`
	LayerTypes string           `json:"layer_types"`
	Params     int64            `json:"parameters"`
	Bytes      int64            `json:"tensor_bytes"`
	DTypes     map[string]int64 `json:"dtypes"`
	Files      []string         `json:"files"`
	FileBytes  int64            `json:"file_bytes"`
	Prefix     string           `json:"weight_prefix"`
	Problems   []string         `json:"problems"`
}

func decodeInspect(t *testing.T, out string) inspectJSON {
	t.Helper()
	var fields map[string]json.RawMessage
	if err := json.Unmarshal([]byte(out), &fields); err != nil {
		t.Fatalf("inspect --json is not JSON: %v\n%s", err, out)
	}
	for _, k := range []string{"dir", "model_type", "kind", "structure", "layer_types", "parameters", "tensor_bytes", "dtypes", "files", "file_bytes", "problems"} {
		if _, ok := fields[k]; !ok {
			t.Errorf("inspect --json lacks %q:\n%s", k, out)
		}
	}
	var s inspectJSON
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatal(err)
	}
	return s
}

func TestInspectJSON(t *testing.T) {
	dir := tinyModel(t, "gemma4-tiny-e2b", "--dtype", "f32")
	out, _ := mustExecute(t, "inspect", "--json", dir)
	s := decodeInspect(t, out)
	if s.Dir != dir || s.ModelType != "gemma4" || s.Kind != "target" || s.LayerTypes != "SSSSFssssf" {
		t.Errorf("dir %q, model_type %q, kind %q, layer_types %q", s.Dir, s.ModelType, s.Kind, s.LayerTypes)
	}
	if s.Params <= 0 || s.Bytes != 4*s.Params || s.DTypes["F32"] != s.Params {
		t.Errorf("parameters %d, tensor_bytes %d, dtypes %v: want F32 throughout", s.Params, s.Bytes, s.DTypes)
	}
	if len(s.Files) != 1 || s.FileBytes <= s.Bytes {
		t.Errorf("files %v (%d bytes) for %d tensor bytes", s.Files, s.FileBytes, s.Bytes)
	}
	if s.Prefix != "model.language_model." || len(s.Structure) == 0 {
		t.Errorf("weight_prefix %q, structure %v", s.Prefix, s.Structure)
	}
	// problems is an empty list, not null, so consumers can range over it.
	if s.Problems == nil || len(s.Problems) != 0 || !strings.Contains(out, `"problems": []`) {
		t.Errorf("problems = %#v, want []", s.Problems)
	}
}

func TestInspectReportsBrokenCheckpoints(t *testing.T) {
	editConfig := func(old, new string) func(t *testing.T, dir string) {
		return func(t *testing.T, dir string) {
			path := filepath.Join(dir, "config.json")
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(b), old) {
				t.Fatalf("config.json has no %q", old)
			}
			if err := os.WriteFile(path, []byte(strings.Replace(string(b), old, new, 1)), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	tests := []struct {
		name   string
		args   []string // gen-model flags
		damage func(t *testing.T, dir string)
		want   string // in the problems
	}{
		{"shard removed", []string{"--max-shard-size", "300KB"}, func(t *testing.T, dir string) {
			if err := os.Remove(filepath.Join(dir, "model-00002-of-00006.safetensors")); err != nil {
				t.Fatal(err)
			}
		}, "is missing"},
		{"weights removed", nil, func(t *testing.T, dir string) {
			if err := os.Remove(filepath.Join(dir, "model.safetensors")); err != nil {
				t.Fatal(err)
			}
		}, "no model.safetensors.index.json or model.safetensors"},
		{"truncated weights", nil, func(t *testing.T, dir string) {
			if err := os.Truncate(filepath.Join(dir, "model.safetensors"), 1000); err != nil {
				t.Fatal(err)
			}
		}, "model.safetensors"},
		{"vocabulary edited", nil, editConfig(`"vocab_size": 512`, `"vocab_size": 600`), "config.json implies [600 64]"},
		// Every layer's per-layer projections change shape: many problems.
		{"per-layer width edited", nil, editConfig(`"hidden_size_per_layer_input": 16`, `"hidden_size_per_layer_input": 8`), "has shape"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := tinyModel(t, "gemma4-tiny-e2b", tt.args...)
			tt.damage(t, dir)
			out, _, err := execute(t, "inspect", "--json", dir)
			s := decodeInspect(t, out)
			if len(s.Problems) == 0 {
				t.Fatalf("no problems reported for a broken checkpoint:\n%s", out)
			}
			wantError(t, err, fmt.Sprintf("%s: %d problem(s) found", dir, len(s.Problems)))
			if !strings.Contains(strings.Join(s.Problems, "\n"), tt.want) {
				t.Errorf("problems %q do not mention %q", s.Problems, tt.want)
			}
			// The text form lists the same problems and fails the same way.
			text, _, err := execute(t, "inspect", dir)
			wantError(t, err, fmt.Sprintf("%d problem(s) found", len(s.Problems)))
			if !strings.Contains(text, fmt.Sprintf("problems:    %d\n", len(s.Problems))) {
				t.Errorf("text summary does not count %d problems:\n%s", len(s.Problems), text)
			}
		})
	}
}

func TestInspectErrors(t *testing.T) {
	notJSON := t.TempDir()
	if err := os.WriteFile(filepath.Join(notJSON, "config.json"), []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no directory argument", []string{"inspect"}, "accepts 1 arg"},
		{"two arguments", []string{"inspect", "a", "b"}, "accepts 1 arg"},
		{"missing directory", []string{"inspect", filepath.Join(t.TempDir(), "nope")}, "does not exist"},
		{"directory without config", []string{"inspect", t.TempDir()}, "config.json"},
		{"config is not JSON", []string{"inspect", notJSON}, "config.json"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := execute(t, tt.args...)
			wantError(t, err, tt.want)
		})
	}
}
