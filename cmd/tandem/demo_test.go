package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestDemoGeneratesAndInspectsBothModels(t *testing.T) {
	// The default directory is a temporary one under $TMPDIR that demo must
	// remove; pointing TMPDIR at the test's directory keeps the test inside
	// it and lets it check the cleanup.
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	out, log := mustExecute(t, "demo", "--seed", "2")
	for _, w := range []string{"gemma4 (target)", "gemma4_assistant (assistant)", "problems:    none", "demo: speculative decoding reproduced plain greedy decoding bit for bit", "speculative, k = 4:  identical output"} {
		if !strings.Contains(out, w) {
			t.Errorf("demo output lacks %q:\n%s", w, out)
		}
	}
	if strings.Count(log, "wrote ") != 2 {
		t.Errorf("stderr %q: want two models written", log)
	}
	if left, _ := os.ReadDir(tmp); len(left) > 0 {
		t.Errorf("demo left %d entries in its temporary directory", len(left))
	}
}

func TestDemoKeepsModelsInDir(t *testing.T) {
	dir := t.TempDir()
	mustExecute(t, "demo", "--dir", dir)
	for _, name := range []string{"gemma4-tiny-e2b", "gemma4-tiny-e2b-assistant"} {
		mustExecute(t, "inspect", filepath.Join(dir, name))
	}
}
