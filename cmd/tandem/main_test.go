package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
)

// execute runs the CLI in-process with args, as main would, and returns
// what it wrote to stdout and stderr.
func execute(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	return executeContext(t, context.Background(), args...)
}

func executeContext(t *testing.T, ctx context.Context, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	root := newRoot()
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs(args)
	err = root.ExecuteContext(ctx)
	return out.String(), errOut.String(), err
}

// mustExecute is execute for calls that must succeed.
func mustExecute(t *testing.T, args ...string) (stdout, stderr string) {
	t.Helper()
	stdout, stderr, err := execute(t, args...)
	if err != nil {
		t.Fatalf("tandem %s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), err, stdout, stderr)
	}
	return stdout, stderr
}

// wantError checks that err is set and mentions every one of want.
func wantError(t *testing.T, err error, want ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want one mentioning %q", want)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not mention %q", err, w)
		}
	}
}

// tinyModel writes a tiny model with gen-model into a fresh temporary
// directory and returns its path.
func tinyModel(t *testing.T, preset string, extra ...string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), preset)
	mustExecute(t, append([]string{"gen-model", "--preset", preset, "--out", dir, "--seed", "3"}, extra...)...)
	return dir
}

func TestRootListsCommands(t *testing.T) {
	out, _ := mustExecute(t, "--help")
	for _, c := range []string{"demo", "gen-model", "inspect", "generate", "score"} {
		if !strings.Contains(out, c) {
			t.Errorf("tandem --help does not list %q:\n%s", c, out)
		}
	}
	_, _, err := execute(t, "no-such-command")
	wantError(t, err, "unknown command")
}
