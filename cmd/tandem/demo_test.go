package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDemoCachesItsModels runs the demo with the default directory (the
// user cache directory, pointed at the test's) twice: the first run writes
// the models, the second reuses them; both answer the chat identically
// with and without the drafter.
func TestDemoCachesItsModels(t *testing.T) {
	home := t.TempDir()
	t.Setenv("XDG_CACHE_HOME", home)
	t.Setenv("HOME", home)
	for i, want := range []string{"(generated)", "(reused)"} {
		out, log := mustExecute(t, "demo", "--max-tokens", "12")
		for _, w := range []string{
			want, "gemma4 (target)", "gemma4_assistant (assistant)", "problems: none",
			"The weights are random, so the answers below are gibberish",
			"plain: 12 tokens in", "speculative (assistant drafter, 3 drafts per round): 12 tokens in", "tokens/s",
			"drafts accepted", "outputs: identical, token for token (12 tokens)",
			"tandem serve --model ./gemma-4-e2b-it --draft ./gemma-4-e2b-it-assistant",
		} {
			if !strings.Contains(out, w) {
				t.Errorf("run %d: output lacks %q:\n%s", i+1, w, out)
			}
		}
		if wrote := strings.Count(log, "wrote "); wrote != 2*(1-i) {
			t.Errorf("run %d: %d models written, want %d:\n%s", i+1, wrote, 2*(1-i), log)
		}
	}
	if _, err := os.Stat(filepath.Join(home, "tandem", "demo", demoStampFile)); err != nil {
		t.Errorf("no models in the user cache directory: %v", err)
	}
}

// TestDemoRegeneratesInvalidModels: a directory the demo cannot trust is
// written again, whatever is wrong with it.
func TestDemoRegeneratesInvalidModels(t *testing.T) {
	for _, tc := range []struct {
		name  string
		spoil func(dir string) error
		why   string
	}{
		{"interrupted run (no stamp)", func(dir string) error { return os.Remove(filepath.Join(dir, demoStampFile)) }, "not there yet"},
		{"another seed", func(dir string) error {
			return os.WriteFile(filepath.Join(dir, demoStampFile), []byte(`{"seed": 99}`), 0o644)
		}, "made with other settings"},
		{"unreadable stamp", func(dir string) error {
			return os.WriteFile(filepath.Join(dir, demoStampFile), []byte(`{`), 0o644)
		}, "made with other settings"},
		{"truncated weights", func(dir string) error {
			return os.Truncate(filepath.Join(dir, demoTarget, "model.safetensors"), 100)
		}, demoTarget + " is damaged"},
		{"missing drafter", func(dir string) error { return os.RemoveAll(filepath.Join(dir, demoAssistant)) }, demoAssistant + " is damaged"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "demo")
			mustExecute(t, "demo", "--dir", dir, "--max-tokens", "2")
			if err := tc.spoil(dir); err != nil {
				t.Fatal(err)
			}
			out, log := mustExecute(t, "demo", "--dir", dir, "--max-tokens", "2")
			if !strings.Contains(log, tc.why) || strings.Count(log, "wrote ") != 2 || !strings.Contains(out, "(generated)") {
				t.Fatalf("want the models written again because %q; stderr:\n%s\nstdout:\n%s", tc.why, log, out)
			}
			mustExecute(t, "inspect", filepath.Join(dir, demoTarget))
		})
	}
}

func TestDemoRejectsBadFlags(t *testing.T) {
	_, _, err := execute(t, "demo", "--dir", t.TempDir(), "--max-tokens", "0")
	wantError(t, err, "--max-tokens must be positive")
	_, _, err = execute(t, "demo", "--dir", t.TempDir(), "--max-tokens", "2", "--num-draft-tokens", "99")
	wantError(t, err, "draft tokens must be between 1 and 64")
}
