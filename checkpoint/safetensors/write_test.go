package safetensors

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"tandem/compute"
)

func TestWriteFileFillErrors(t *testing.T) {
	specs := []Spec{{"first", compute.F32, []int{2}}, {"second", compute.BF16, []int{3}}}
	boom := errors.New("boom")
	tests := []struct {
		name  string
		fill  func(i int, w io.Writer) error
		parts []string
	}{
		{"fill fails", func(i int, w io.Writer) error {
			if i == 1 {
				return boom
			}
			_, err := w.Write(make([]byte, 8))
			return err
		}, []string{`tensor "second": fill: boom`}},
		{"too few bytes", func(i int, w io.Writer) error {
			_, err := w.Write(make([]byte, 5-i)) // 5 of 8, then 4 of 6
			return err
		}, []string{`tensor "first": fill wrote 5 of the tensor's 8 bytes`}},
		{"too few on second", func(i int, w io.Writer) error {
			_, err := w.Write(make([]byte, 8-3*i)) // 8 of 8, then 5 of 6
			return err
		}, []string{`tensor "second": fill wrote 5 of the tensor's 6 bytes`}},
		{"too many bytes", func(i int, w io.Writer) error {
			_, err := w.Write(make([]byte, 9))
			return err
		}, []string{`tensor "first": fill wrote more than the tensor's 8 bytes`}},
		{"too many, error ignored", func(i int, w io.Writer) error {
			w.Write(make([]byte, 8))
			w.Write([]byte{1}) // a fill that drops the error is still caught
			return nil
		}, []string{`tensor "first": fill wrote more than`}},
		{"too many via io.Copy", func(i int, w io.Writer) error {
			_, err := io.Copy(w, bytes.NewReader(make([]byte, 100)))
			return err
		}, []string{`tensor "first": fill wrote more than`}},
		{"too few via io.Copy", func(i int, w io.Writer) error {
			_, err := io.Copy(w, bytes.NewReader(make([]byte, 3)))
			return err
		}, []string{`tensor "first": fill wrote 3 of the tensor's 8 bytes`}},
		{"nil fill", nil, []string{"nil fill function"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "out.safetensors")
			err := WriteFile(path, specs, nil, tt.fill)
			wantErr(t, err, append([]string{path}, tt.parts...)...)
			if names := dirNames(t, dir); len(names) != 0 {
				t.Errorf("failed write left files behind: %v", names)
			}
		})
	}
}

// TestWriteFileKeepsOldOnFailure checks that a failed write does not touch
// an existing file under the final name.
func TestWriteFileKeepsOldOnFailure(t *testing.T) {
	path := writeTemp(t, "out.safetensors", []byte("old contents"))
	err := WriteFile(path, []Spec{{"w", compute.F32, []int{1}}}, nil, func(int, io.Writer) error { return errors.New("fail") })
	wantErr(t, err, "fail")
	if b, _ := os.ReadFile(path); string(b) != "old contents" {
		t.Errorf("old file was replaced: %q", b)
	}
	if names := dirNames(t, filepath.Dir(path)); !slices.Equal(names, []string{"out.safetensors"}) {
		t.Errorf("dir holds %v", names)
	}
}

func TestWriteFileCopyFromFile(t *testing.T) {
	// io.Copy from an *os.File takes the ReadFrom fast path.
	src := writeTemp(t, "src.bin", testData(7, 40000))
	dir := t.TempDir()
	path := filepath.Join(dir, "out.safetensors")
	specs := []Spec{{"a", compute.F32, []int{10000}}}
	err := WriteFile(path, specs, nil, func(i int, w io.Writer) error {
		in, err := os.Open(src)
		if err != nil {
			return err
		}
		defer in.Close()
		_, err = io.Copy(w, in)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if b, _ := f.Data("a"); !bytes.Equal(b, testData(7, 40000)) {
		t.Errorf("data differs")
	}
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o644 {
		t.Errorf("mode %v, want 0644", st.Mode().Perm())
	}
}

func TestWriteSpecErrors(t *testing.T) {
	tests := []struct {
		name     string
		specs    []Spec
		metadata map[string]string
		parts    []string
	}{
		{"duplicate name", []Spec{{"w", compute.F32, nil}, {"w", compute.F32, nil}}, nil, []string{`tensor "w": duplicate name`}},
		{"reserved name", []Spec{{"__metadata__", compute.F32, nil}}, nil, []string{`"__metadata__" is reserved`}},
		{"invalid dtype", []Spec{{"w", compute.Invalid, []int{1}}}, nil, []string{`tensor "w": unsupported dtype invalid`}},
		{"negative dim", []Spec{{"w", compute.F32, []int{2, -3}}}, nil, []string{`tensor "w": negative dimension`}},
		{"overflow", []Spec{{"w", compute.F32, []int{1 << 40, 1 << 40}}}, nil, []string{`tensor "w": shape`, "overflows"}},
		{"total overflow", []Spec{{"a", compute.I64, []int{1 << 59}}, {"b", compute.I64, []int{1 << 59}}}, nil, []string{`tensor "b": total size overflows`}},
		{"bad UTF-8 name", []Spec{{"w\xff", compute.F32, nil}}, nil, []string{"not valid UTF-8"}},
		{"bad UTF-8 metadata", nil, map[string]string{"k": "\xff"}, []string{`metadata "k": not valid UTF-8`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "out.safetensors")
			called := false
			err := WriteFile(path, tt.specs, tt.metadata, func(int, io.Writer) error { called = true; return nil })
			wantErr(t, err, append([]string{path}, tt.parts...)...)
			if called {
				t.Errorf("fill called despite invalid specs")
			}
			if names := dirNames(t, dir); len(names) != 0 {
				t.Errorf("left files behind: %v", names)
			}
			err = WriteSharded(dir, tt.specs, tt.metadata, 1, func(int, io.Writer) error { return nil })
			wantErr(t, err, tt.parts...)
		})
	}
}

// shardSpecs are tensors of 16, 8, 40, 0, 8, 8 and 4 bytes (84 in all).
var shardSpecs = []Spec{
	{"embed", compute.F32, []int{2, 2}},
	{"l0.w", compute.BF16, []int{4}},
	{"l0.big", compute.I64, []int{5}},
	{"l0.empty", compute.F16, []int{0, 3}},
	{"l1.w", compute.I32, []int{2}},
	{"l1.v", compute.F16, []int{2, 2}},
	{"norm", compute.F32, nil},
}

func TestWriteSharded(t *testing.T) {
	data := make([][]byte, len(shardSpecs))
	for i, s := range shardSpecs {
		n, _ := s.Size()
		data[i] = testData(i, n)
	}
	md := map[string]string{"format": "pt"}
	tests := []struct {
		name   string
		limit  int64
		shards [][]string // tensor names per shard; nil means one model.safetensors
	}{
		{"no limit", 0, nil},
		{"negative limit", -1, nil},
		{"fits exactly", 84, nil},
		{"limit 24", 24, [][]string{{"embed", "l0.w"}, {"l0.big", "l0.empty"}, {"l1.w", "l1.v", "norm"}}},
		{"limit 16", 16, [][]string{{"embed"}, {"l0.w"}, {"l0.big", "l0.empty"}, {"l1.w", "l1.v"}, {"norm"}}},
		{"limit 1", 1, [][]string{{"embed"}, {"l0.w"}, {"l0.big", "l0.empty"}, {"l1.w"}, {"l1.v"}, {"norm"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "ckpt") // WriteSharded creates it
			var order []int
			fill := func(i int, w io.Writer) error {
				order = append(order, i)
				return fillFrom(data)(i, w)
			}
			if err := WriteSharded(dir, shardSpecs, md, tt.limit, fill); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(order, []int{0, 1, 2, 3, 4, 5, 6}) {
				t.Errorf("fill called for %v, want each spec once in order", order)
			}
			names := dirNames(t, dir)
			if tt.shards == nil {
				if !slices.Equal(names, []string{SingleFileName}) {
					t.Fatalf("dir holds %v, want only %s", names, SingleFileName)
				}
			} else {
				checkIndex(t, dir, tt.shards, 84)
			}

			s, err := OpenDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			wantFiles := len(tt.shards)
			if tt.shards == nil {
				wantFiles = 1
			}
			if len(s.Files()) != wantFiles {
				t.Errorf("Files() = %v, want %d files", s.Files(), wantFiles)
			}
			if got := s.Tensors(); len(got) != len(shardSpecs) ||
				!slices.IsSortedFunc(got, func(a, b TensorInfo) int { return strings.Compare(a.Name, b.Name) }) {
				t.Errorf("Tensors() = %v", got)
			}
			for i, sp := range shardSpecs {
				b, err := s.Data(sp.Name)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(b, data[i]) {
					t.Errorf("Data(%q) differs", sp.Name)
				}
				info, ok := s.Lookup(sp.Name)
				if !ok || info.DType != sp.DType || !slices.Equal(info.Shape, sp.Shape) {
					t.Errorf("Lookup(%q) = %+v, %v", sp.Name, info, ok)
				}
			}
			for _, path := range s.Files() {
				f, err := Open(path)
				if err != nil {
					t.Fatal(err)
				}
				if f.Metadata()["format"] != "pt" {
					t.Errorf("%s: metadata %v", path, f.Metadata())
				}
				f.Close()
			}
			_, err = s.Data("nope")
			wantErr(t, err, dir, `tensor "nope" not found`)
		})
	}
}

// checkIndex verifies the shard files and index WriteSharded produced.
func checkIndex(t *testing.T, dir string, shards [][]string, total int64) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, IndexFileName))
	if err != nil {
		t.Fatal(err)
	}
	var index struct {
		Metadata  map[string]int64  `json:"metadata"`
		WeightMap map[string]string `json:"weight_map"`
	}
	if err := json.Unmarshal(b, &index); err != nil {
		t.Fatal(err)
	}
	if index.Metadata["total_size"] != total {
		t.Errorf("total_size = %d, want %d", index.Metadata["total_size"], total)
	}
	want := []string{IndexFileName}
	n := 0
	for k, names := range shards {
		file := shardName(k+1, len(shards))
		want = append(want, file)
		for _, name := range names {
			if index.WeightMap[name] != file {
				t.Errorf("weight_map[%q] = %q, want %q", name, index.WeightMap[name], file)
			}
			n++
		}
	}
	if len(index.WeightMap) != n {
		t.Errorf("weight_map has %d entries, want %d", len(index.WeightMap), n)
	}
	slices.Sort(want)
	if got := dirNames(t, dir); !slices.Equal(got, want) {
		t.Errorf("dir holds %v, want %v", got, want)
	}
}

func shardName(k, n int) string {
	return "model-" + pad5(k) + "-of-" + pad5(n) + ".safetensors"
}

func pad5(n int) string {
	s := "0000" + string(rune('0'+n))
	return s[len(s)-5:]
}

func TestWriteShardedFailureCleansUp(t *testing.T) {
	dir := t.TempDir()
	err := WriteSharded(dir, shardSpecs, nil, 16, func(i int, w io.Writer) error {
		if i == 4 { // in the fourth shard
			return errors.New("disk on fire")
		}
		n, _ := shardSpecs[i].Size()
		_, err := w.Write(make([]byte, n))
		return err
	})
	wantErr(t, err, `tensor "l1.w": fill: disk on fire`, "model-00004-of-00005.safetensors")
	if names := dirNames(t, dir); len(names) != 0 {
		t.Errorf("failed sharded write left %v", names)
	}
}

// TestWriteShardedReplacesLayout checks that a single-file write removes a
// stale index that OpenDir would otherwise prefer.
func TestWriteShardedReplacesLayout(t *testing.T) {
	dir := t.TempDir()
	zeros := func(i int, w io.Writer) error {
		n, _ := shardSpecs[i].Size()
		_, err := w.Write(make([]byte, n))
		return err
	}
	if err := WriteSharded(dir, shardSpecs, nil, 16, zeros); err != nil {
		t.Fatal(err)
	}
	specs := []Spec{{"only", compute.F32, []int{1}}}
	if err := WriteSharded(dir, specs, nil, 0, func(i int, w io.Writer) error { _, err := w.Write(make([]byte, 4)); return err }); err != nil {
		t.Fatal(err)
	}
	s, err := OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if ts := s.Tensors(); len(ts) != 1 || ts[0].Name != "only" {
		t.Errorf("OpenDir after rewrite sees %v", ts)
	}
}
