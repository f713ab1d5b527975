package safetensors

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"tandem/compute"
)

// writeShards writes a two-shard checkpoint: a.safetensors holds "x" and
// "y", b.safetensors holds "z".
func writeShards(t *testing.T, dir string) {
	t.Helper()
	zeros := func(specs []Spec) func(int, io.Writer) error {
		return func(i int, w io.Writer) error {
			n, _ := specs[i].Size()
			_, err := w.Write(make([]byte, n))
			return err
		}
	}
	a := []Spec{{"x", compute.F32, []int{2}}, {"y", compute.BF16, nil}}
	b := []Spec{{"z", compute.I64, []int{1}}}
	if err := WriteFile(filepath.Join(dir, "a.safetensors"), a, nil, zeros(a)); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(filepath.Join(dir, "b.safetensors"), b, nil, zeros(b)); err != nil {
		t.Fatal(err)
	}
}

func writeIndex(t *testing.T, dir, index string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, IndexFileName), []byte(index), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestOpenDirIndex(t *testing.T) {
	dir := t.TempDir()
	writeShards(t, dir)
	// Index metadata holds numbers, as HF writes it; weight_map may omit
	// nothing and list shards in any order.
	writeIndex(t, dir, `{"metadata":{"total_size":18,"total_parameters":4},"weight_map":{"z":"b.safetensors","x":"a.safetensors","y":"a.safetensors"}}`)
	s, err := OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	want := []string{filepath.Join(dir, "a.safetensors"), filepath.Join(dir, "b.safetensors")}
	if !slices.Equal(s.Files(), want) {
		t.Errorf("Files() = %v, want %v", s.Files(), want)
	}
	var names []string
	for _, ti := range s.Tensors() {
		names = append(names, ti.Name)
	}
	if !slices.Equal(names, []string{"x", "y", "z"}) {
		t.Errorf("tensors %v", names)
	}
	if ti, _ := s.Lookup("z"); ti.File != want[1] {
		t.Errorf("z in %q, want %q", ti.File, want[1])
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	_, err = s.Data("x")
	wantErr(t, err, "a.safetensors", `tensor "x"`, "closed")
}

func TestOpenDirErrors(t *testing.T) {
	tests := []struct {
		name  string
		index string // "" writes no index
		setup func(t *testing.T, dir string)
		parts []string
	}{
		{name: "neither file", setup: func(*testing.T, string) {},
			parts: []string{"no model.safetensors.index.json or model.safetensors"}},
		{name: "neither file, others present",
			parts: []string{"no model.safetensors.index.json or model.safetensors", "found a.safetensors, b.safetensors"}},
		{name: "index invalid JSON", index: `{"weight_map": {"x": "a.safetensors",}}`,
			parts: []string{IndexFileName, "invalid JSON in index at byte"}},
		{name: "index with metadata", index: `{"metadata":{"total_size":1,"x":[1,{"a":[]}]},"weight_map":{"x":"nope.safetensors"}}`,
			parts: []string{"nope.safetensors", "missing"}},
		{name: "index not an object", index: `[]`, parts: []string{IndexFileName, "index is not a JSON object"}},
		{name: "index without weight_map", index: `{"metadata":{}}`, parts: []string{IndexFileName, "index has no weight_map"}},
		{name: "index empty weight_map", index: `{"weight_map":{}}`, parts: []string{"weight_map lists no tensors"}},
		{name: "index weight_map not object", index: `{"weight_map":["a.safetensors"]}`, parts: []string{"weight_map is not a JSON object"}},
		{name: "index shard not string", index: `{"weight_map":{"x":1}}`, parts: []string{`tensor "x": shard is 1, want a file name`}},
		{name: "index duplicate tensor", index: `{"weight_map":{"x":"a.safetensors","x":"b.safetensors"}}`,
			parts: []string{`tensor "x" listed twice in weight_map`}},
		{name: "index escaping path", index: `{"weight_map":{"x":"../a.safetensors"}}`,
			parts: []string{`tensor "x": shard "../a.safetensors" is not a file name inside the checkpoint directory`}},
		{name: "index absolute path", index: `{"weight_map":{"x":"/etc/passwd"}}`, parts: []string{"not a file name inside"}},
		{name: "index trailing data", index: `{"weight_map":{"x":"a.safetensors"}} {}`, parts: []string{"trailing data after the index"}},
		{name: "shard missing", index: `{"weight_map":{"x":"a.safetensors","y":"a.safetensors","z":"b.safetensors","w":"c.safetensors"}}`,
			parts: []string{"shard", "c.safetensors", `(holding tensor "w") is missing`}},
		{name: "tensor not in its shard", index: `{"weight_map":{"x":"a.safetensors","y":"a.safetensors","z":"b.safetensors","q":"b.safetensors"}}`,
			parts: []string{`tensor "q": index maps it to`, "b.safetensors but that shard has no such tensor"}},
		{name: "tensor in another shard", index: `{"weight_map":{"x":"b.safetensors","y":"a.safetensors","z":"b.safetensors"}}`,
			parts: []string{`tensor "x": index maps it to`, "b.safetensors but it is in", "a.safetensors"}},
		{name: "tensor in two shards", index: `{"weight_map":{"x":"a.safetensors","y":"a.safetensors","z":"c.safetensors"}}`,
			setup: func(t *testing.T, dir string) {
				writeShards(t, dir)
				specs := []Spec{{"x", compute.F32, []int{2}}, {"z", compute.I64, []int{1}}}
				err := WriteFile(filepath.Join(dir, "c.safetensors"), specs, nil, func(i int, w io.Writer) error {
					_, err := w.Write(make([]byte, []int{8, 8}[i]))
					return err
				})
				if err != nil {
					t.Fatal(err)
				}
			},
			parts: []string{`tensor "x" is in two shards:`, "a.safetensors and", "c.safetensors"}},
		{name: "corrupt shard", index: `{"weight_map":{"x":"a.safetensors","z":"b.safetensors"}}`,
			setup: func(t *testing.T, dir string) {
				writeShards(t, dir)
				os.WriteFile(filepath.Join(dir, "b.safetensors"), []byte{1, 2}, 0o644)
			},
			parts: []string{"b.safetensors: truncated"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if tt.setup != nil {
				tt.setup(t, dir)
			} else {
				writeShards(t, dir)
			}
			if tt.index != "" {
				writeIndex(t, dir, tt.index)
			}
			s, err := OpenDir(dir)
			if err == nil {
				s.Close()
			}
			wantErr(t, err, append([]string{"safetensors: " + dir}, tt.parts...)...)
		})
	}
}

func TestOpenDirSingleAndMissing(t *testing.T) {
	dir := t.TempDir()
	specs := []Spec{{"w", compute.I32, []int{3}}}
	if err := WriteFile(filepath.Join(dir, SingleFileName), specs, nil, func(i int, w io.Writer) error {
		_, err := w.Write(make([]byte, 12))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	s, err := OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(s.Files(), []string{filepath.Join(dir, SingleFileName)}) {
		t.Errorf("Files() = %v", s.Files())
	}
	s.Close()

	missing := filepath.Join(dir, "nope")
	_, err = OpenDir(missing)
	wantErr(t, err, missing)
	if !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%v is not os.ErrNotExist", err)
	}
	_, err = OpenDir(filepath.Join(dir, SingleFileName))
	wantErr(t, err, "not a directory")
}

func TestOpenFiles(t *testing.T) {
	dir := t.TempDir()
	writeShards(t, dir)
	a, b := filepath.Join(dir, "a.safetensors"), filepath.Join(dir, "b.safetensors")
	s, err := OpenFiles(b, a)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(s.Files(), []string{b, a}) {
		t.Errorf("Files() = %v", s.Files())
	}
	if ti, ok := s.Lookup("x"); !ok || ti.File != a {
		t.Errorf("Lookup(x) = %+v, %v", ti, ok)
	}
	if d, err := s.Data("z"); err != nil || len(d) != 8 {
		t.Errorf("Data(z) = %v, %v", d, err)
	}
	s.Close()

	_, err = OpenFiles()
	wantErr(t, err, "no files given")
	_, err = OpenFiles(a, b, dir+"/./a.safetensors")
	wantErr(t, err, "a.safetensors: file given twice")
	_, err = OpenFiles(a, filepath.Join(dir, "c.safetensors"))
	wantErr(t, err, "c.safetensors")
}
