package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"tandem/compute/cpu"
	"tandem/model/gemma4"
)

func TestGenModelListShowsEveryPreset(t *testing.T) {
	out, _ := mustExecute(t, "gen-model", "--list")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if !strings.HasPrefix(lines[0], "PRESET") {
		t.Errorf("first line %q is not the header", lines[0])
	}
	names := gemma4.PresetNames()
	if len(lines) != len(names)+1 {
		t.Errorf("%d lines, want a header and %d presets:\n%s", len(lines), len(names), out)
	}
	for _, name := range names {
		found := false
		for _, l := range lines[1:] {
			if f := strings.Fields(l); len(f) > 0 && f[0] == name {
				found = true
			}
		}
		if !found {
			t.Errorf("preset %q missing from --list:\n%s", name, out)
		}
	}
}

func TestGenModelWritesLoadableModel(t *testing.T) {
	tests := []struct {
		name      string
		preset    string
		args      []string
		wantDType string
		sharded   bool
	}{
		{"bf16 default", "gemma4-tiny-e2b", nil, "BF16", false},
		{"f32", "gemma4-tiny-e2b", []string{"--dtype", "f32"}, "F32", false},
		{"f16 long name", "gemma4-tiny-e2b", []string{"--dtype", "float16"}, "F16", false},
		{"sharded", "gemma4-tiny-e2b", []string{"--max-shard-size", "300KB"}, "BF16", true},
		{"never split", "gemma4-tiny-e2b", []string{"--max-shard-size", "0"}, "BF16", false},
		{"assistant drafter", "gemma4-tiny-e2b-assistant", nil, "BF16", false},
		{"moe target", "gemma4-tiny-26b-a4b", nil, "BF16", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "m")
			_, log := mustExecute(t, append([]string{"gen-model", "--preset", tt.preset, "--out", dir}, tt.args...)...)
			if !strings.Contains(log, "wrote "+tt.preset) {
				t.Errorf("stderr %q does not report the write", log)
			}
			s, err := gemma4.Inspect(dir)
			if err != nil {
				t.Fatal(err)
			}
			if len(s.Problems) > 0 {
				t.Fatalf("generated model has problems: %v", s.Problems)
			}
			if len(s.DTypes) == 0 || s.DTypes[tt.wantDType] == 0 {
				t.Errorf("dtypes %v, want %s weights", s.DTypes, tt.wantDType)
			}
			_, err = os.Stat(filepath.Join(dir, "model.safetensors.index.json"))
			if gotSharded := err == nil && len(s.Files) > 1; gotSharded != tt.sharded {
				t.Errorf("sharded = %v (files %v), want %v", gotSharded, s.Files, tt.sharded)
			}
			if s.Kind == "target" {
				m, err := gemma4.Load(dir, cpu.New(1))
				if err != nil {
					t.Fatalf("Load: %v", err)
				}
				m.Close()
			}
		})
	}
}

func TestGenModelRefusesToOverwrite(t *testing.T) {
	dir := tinyModel(t, "gemma4-tiny-e2b")
	weights := filepath.Join(dir, "model.safetensors")
	before, err := os.ReadFile(weights)
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = execute(t, "gen-model", "--preset", "gemma4-tiny-e2b", "--out", dir, "--seed", "4")
	wantError(t, err, "already holds a model", "--force")
	if after, _ := os.ReadFile(weights); !bytes.Equal(before, after) {
		t.Fatal("a refused gen-model changed the weights")
	}

	// --force rewrites, and a rewrite with another shard layout leaves no
	// stale weight files behind in either direction.
	mustExecute(t, "gen-model", "--preset", "gemma4-tiny-e2b", "--out", dir, "--seed", "4", "--force", "--max-shard-size", "300KB")
	if _, err := os.Stat(weights); err == nil {
		t.Error("model.safetensors left next to the new shards")
	}
	shards, _ := filepath.Glob(filepath.Join(dir, "model-*-of-*.safetensors"))
	if len(shards) < 2 {
		t.Fatalf("want shards after --max-shard-size 300KB, got %v", shards)
	}
	mustExecute(t, "gen-model", "--preset", "gemma4-tiny-e2b", "--out", dir, "--seed", "4", "--force")
	if left, _ := filepath.Glob(filepath.Join(dir, "model-*")); len(left) > 0 {
		t.Errorf("stale shards left behind: %v", left)
	}
	if _, err := os.Stat(filepath.Join(dir, "model.safetensors.index.json")); err == nil {
		t.Error("stale index left behind")
	}
	after, err := os.ReadFile(weights)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(before, after) {
		t.Error("--force with another seed wrote the same weights")
	}
	mustExecute(t, "inspect", dir)
}

func TestGenModelRejectsBadFlags(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want []string
	}{
		{"no flags", nil, []string{"needs --preset and --out"}},
		{"no out", []string{"--preset", "gemma4-tiny-e2b"}, []string{"needs --preset and --out"}},
		{"no preset", []string{"--out", "OUT"}, []string{"needs --preset and --out"}},
		{"unknown preset lists the presets", []string{"--preset", "gemma5", "--out", "OUT"},
			append([]string{`unknown preset "gemma5"`}, gemma4.PresetNames()...)},
		{"integer dtype", []string{"--preset", "gemma4-tiny-e2b", "--out", "OUT", "--dtype", "i64"}, []string{`--dtype "i64"`, "bf16, f16 or f32"}},
		{"unknown dtype", []string{"--preset", "gemma4-tiny-e2b", "--out", "OUT", "--dtype", "fp8"}, []string{`--dtype "fp8"`}},
		{"empty dtype", []string{"--preset", "gemma4-tiny-e2b", "--out", "OUT", "--dtype", ""}, []string{`--dtype ""`}},
		{"bad shard size", []string{"--preset", "gemma4-tiny-e2b", "--out", "OUT", "--max-shard-size", "lots"}, []string{"--max-shard-size", `"lots"`}},
		{"NaN shard size", []string{"--preset", "gemma4-tiny-e2b", "--out", "OUT", "--max-shard-size", "nan"}, []string{"--max-shard-size"}},
		{"positional argument", []string{"gemma4-tiny-e2b"}, []string{"unknown command"}},
		{"unknown flag", []string{"--preset", "gemma4-tiny-e2b", "--out", "OUT", "--colour"}, []string{"unknown flag"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "out")
			args := []string{"gen-model"}
			for _, a := range tt.args {
				args = append(args, strings.ReplaceAll(a, "OUT", out))
			}
			_, _, err := execute(t, args...)
			wantError(t, err, tt.want...)
			if _, err := os.Stat(out); err == nil {
				t.Errorf("a rejected gen-model created %s", out)
			}
		})
	}
}

func TestParseBytes(t *testing.T) {
	tests := []struct {
		in      string
		want    int64
		wantErr string
	}{
		{"5GB", 5_000_000_000, ""},
		{"500MB", 500_000_000, ""},
		{"64KB", 64_000, ""},
		{"2GiB", 2 << 30, ""},
		{"500MiB", 500 << 20, ""},
		{"64KiB", 64 << 10, ""},
		{"1.5GB", 1_500_000_000, ""},
		{"5gb", 5_000_000_000, ""}, // case-insensitive
		{" 5 GB ", 5_000_000_000, ""},
		{"123", 123, ""},
		{"123B", 123, ""},
		{"0", -1, ""}, // never split
		{"0GB", -1, ""},
		{"", 0, "bad size"},
		{"GB", 0, "bad size"},
		{"lots", 0, `bad size "lots"`},
		{"-5GB", 0, "bad size"},
		{"5TB", 0, "bad size"},
		{"5 G B", 0, "bad size"},
		// ParseFloat accepts these; they are no sizes (NaN and Inf used to
		// become a negative shard size, which means never split).
		{"NaN", 0, "bad size"},
		{"inf", 0, "bad size"},
		{"+InfGB", 0, "bad size"},
		// Below one byte used to truncate to 0, which means the 5 GiB default.
		{"0.5", 0, "less than one byte"},
		{"0.0000001KB", 0, "less than one byte"},
		{"1e30GB", 0, "too large"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := parseBytes(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("parseBytes(%q) = %d, %v; want an error containing %q", tt.in, got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("parseBytes(%q) = %d, %v; want %d", tt.in, got, err, tt.want)
			}
		})
	}
}

func TestHumanBytesAndGroupDigits(t *testing.T) {
	for _, tt := range []struct {
		n           int64
		human, comm string
	}{
		{0, "0 B", "0"},
		{1023, "1023 B", "1,023"},
		{1024, "1.0 KiB", "1,024"},
		{1536, "1.5 KiB", "1,536"},
		{5 << 30, "5.0 GiB", "5,368,709,120"},
		{123456789, "117.7 MiB", "123,456,789"},
	} {
		if got := humanBytes(tt.n); got != tt.human {
			t.Errorf("humanBytes(%d) = %q, want %q", tt.n, got, tt.human)
		}
		if got := groupDigits(tt.n); got != tt.comm {
			t.Errorf("groupDigits(%d) = %q, want %q", tt.n, got, tt.comm)
		}
	}
}
