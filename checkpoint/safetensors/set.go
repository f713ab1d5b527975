package safetensors

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"unicode/utf8"
)

// Names of the files OpenDir looks for and WriteSharded writes.
const (
	SingleFileName = "model.safetensors"
	IndexFileName  = "model.safetensors.index.json"
)

// Set is all the tensors of a checkpoint, possibly spread over several
// files. Its methods may be called concurrently, except Close.
type Set struct {
	label   string // directory or first file, for error text
	files   []*File
	tensors []TensorInfo // sorted by name
	owner   []*File      // owner[i] holds tensors[i]
	index   map[string]int
}

// OpenDir opens the checkpoint in dir: the shards named by
// model.safetensors.index.json if it exists, else model.safetensors.
// Every tensor the index lists must be in the shard it names, and no tensor
// may appear in two shards. Tensors found in a shard but missing from the
// index are included, as they are in the files.
func OpenDir(dir string) (*Set, error) {
	if st, err := os.Stat(dir); err != nil {
		return nil, errorf("", "%w", err)
	} else if !st.IsDir() {
		return nil, errorf(dir, "not a directory")
	}
	indexPath := filepath.Join(dir, IndexFileName)
	b, err := readIndex(indexPath)
	switch {
	case err == nil:
		return openIndexed(dir, indexPath, b)
	case !errors.Is(err, fs.ErrNotExist):
		return nil, err
	}
	single := filepath.Join(dir, SingleFileName)
	if _, err := os.Stat(single); err == nil {
		return OpenFiles(single)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, errorf("", "%w", err)
	}
	msg := "no " + IndexFileName + " or " + SingleFileName
	if found, _ := filepath.Glob(filepath.Join(dir, "*.safetensors")); len(found) > 0 {
		for i := range found {
			found[i] = filepath.Base(found[i])
		}
		msg += " (found " + strings.Join(found, ", ") + "; open them with OpenFiles)"
	}
	return nil, errorf(dir, "%s", msg)
}

// readIndex reads an index file, refusing absurd sizes.
func readIndex(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, errorf("", "%w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxHeaderSize+1))
	if err != nil {
		return nil, errorf(path, "%w", err)
	}
	if len(b) > MaxHeaderSize {
		return nil, errorf(path, "index larger than %d bytes", MaxHeaderSize)
	}
	return b, nil
}

// parseIndex returns the weight_map of an index file: tensor name → shard
// file name. Duplicate tensor names are rejected rather than letting the
// last one win.
func parseIndex(path string, b []byte) (map[string]string, error) {
	if !utf8.Valid(b) {
		return nil, errorf(path, "index is not valid UTF-8")
	}
	p := &headerParser{src: path, what: "index", dec: json.NewDecoder(bytes.NewReader(b))}
	p.dec.UseNumber()
	tok, err := p.dec.Token()
	if err != nil {
		return nil, p.jsonErr(err)
	}
	if tok != json.Delim('{') {
		return nil, errorf(path, "index is not a JSON object")
	}
	var weightMap map[string]string
	seen := make(map[string]bool)
	for p.dec.More() {
		key, err := p.key()
		if err != nil {
			return nil, err
		}
		if seen[key] {
			return nil, errorf(path, "index: duplicate key %q", key)
		}
		seen[key] = true
		if key != "weight_map" { // "metadata" and the like
			if err := p.skip(); err != nil {
				return nil, err
			}
			continue
		}
		tok, err := p.dec.Token()
		if err != nil {
			return nil, p.jsonErr(err)
		}
		if tok != json.Delim('{') {
			return nil, errorf(path, "index: weight_map is not a JSON object")
		}
		weightMap = make(map[string]string)
		for p.dec.More() {
			name, err := p.key()
			if err != nil {
				return nil, err
			}
			if _, dup := weightMap[name]; dup {
				return nil, errorf(path, "index: tensor %q listed twice in weight_map", name)
			}
			tok, err := p.token()
			if err != nil {
				return nil, err
			}
			file, ok := tok.(string)
			if !ok {
				return nil, errorf(path, "index: tensor %q: shard is %s, want a file name", name, tokText(tok))
			}
			// Shards live in the checkpoint directory; refuse paths that
			// would reach outside it.
			if !filepath.IsLocal(file) {
				return nil, errorf(path, "index: tensor %q: shard %q is not a file name inside the checkpoint directory", name, file)
			}
			weightMap[name] = file
		}
		if _, err := p.dec.Token(); err != nil {
			return nil, p.jsonErr(err)
		}
	}
	if _, err := p.dec.Token(); err != nil {
		return nil, p.jsonErr(err)
	}
	if tok, err := p.dec.Token(); err != io.EOF {
		if err == nil {
			return nil, errorf(path, "trailing data after the index JSON object (%s)", tokText(tok))
		}
		return nil, errorf(path, "trailing data after the index JSON object: %v", err)
	}
	if weightMap == nil {
		return nil, errorf(path, "index has no weight_map")
	}
	if len(weightMap) == 0 {
		return nil, errorf(path, "index: weight_map lists no tensors")
	}
	return weightMap, nil
}

func openIndexed(dir, indexPath string, b []byte) (*Set, error) {
	weightMap, err := parseIndex(indexPath, b)
	if err != nil {
		return nil, err
	}
	// One tensor per shard to name in a "missing shard" error.
	example := make(map[string]string)
	for name, file := range weightMap {
		if e, ok := example[file]; !ok || name < e {
			example[file] = name
		}
	}
	var paths []string
	for file := range example {
		paths = append(paths, file)
	}
	slices.Sort(paths)
	for i, file := range paths {
		paths[i] = filepath.Join(dir, file)
		if _, err := os.Stat(paths[i]); errors.Is(err, fs.ErrNotExist) {
			return nil, errorf(indexPath, "shard %s (holding tensor %q) is missing", paths[i], example[file])
		}
	}
	s, err := openFiles(dir, paths)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(weightMap))
	for name := range weightMap {
		names = append(names, name)
	}
	slices.Sort(names) // deterministic error
	for _, name := range names {
		want := filepath.Join(dir, weightMap[name])
		t, ok := s.Lookup(name)
		if !ok {
			s.Close()
			return nil, errorf(indexPath, "tensor %q: index maps it to %s but that shard has no such tensor", name, want)
		}
		if t.File != want {
			s.Close()
			return nil, errorf(indexPath, "tensor %q: index maps it to %s but it is in %s", name, want, t.File)
		}
	}
	return s, nil
}

// OpenFiles opens the given safetensors files as one set. A tensor name may
// appear in only one of them.
func OpenFiles(paths ...string) (*Set, error) {
	if len(paths) == 0 {
		return nil, errorf("", "OpenFiles: no files given")
	}
	return openFiles(paths[0], paths)
}

func openFiles(label string, paths []string) (s *Set, err error) {
	s = &Set{label: label, index: make(map[string]int)}
	defer func() {
		if err != nil {
			s.Close()
			s = nil
		}
	}()
	seen := make(map[string]bool, len(paths))
	for _, p := range paths {
		c := filepath.Clean(p)
		if seen[c] {
			return s, errorf(p, "file given twice")
		}
		seen[c] = true
		f, err := Open(p)
		if err != nil {
			return s, err
		}
		s.files = append(s.files, f)
		for _, t := range f.tensors {
			if i, dup := s.index[t.Name]; dup {
				return s, errorf(label, "tensor %q is in two shards: %s and %s", t.Name, s.tensors[i].File, p)
			}
			s.index[t.Name] = len(s.tensors)
			s.tensors = append(s.tensors, t)
			s.owner = append(s.owner, f)
		}
	}
	// Sort tensors and owners together, then rebuild the index.
	order := make([]int, len(s.tensors))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return strings.Compare(s.tensors[a].Name, s.tensors[b].Name) })
	tensors := make([]TensorInfo, len(order))
	owner := make([]*File, len(order))
	for i, j := range order {
		tensors[i], owner[i] = s.tensors[j], s.owner[j]
		s.index[tensors[i].Name] = i
	}
	s.tensors, s.owner = tensors, owner
	return s, nil
}

// Files returns the paths of the set's files, in the order they were opened
// (shard-name order for OpenDir).
func (s *Set) Files() []string {
	out := make([]string, len(s.files))
	for i, f := range s.files {
		out[i] = f.path
	}
	return out
}

// Tensors returns every tensor of the set sorted by name. The slice is a
// copy; the Shape slices are shared and must not be modified.
func (s *Set) Tensors() []TensorInfo { return slices.Clone(s.tensors) }

// Lookup returns the tensor called name; its File says which shard holds it.
func (s *Set) Lookup(name string) (TensorInfo, bool) {
	i, ok := s.index[name]
	if !ok {
		return TensorInfo{}, false
	}
	return s.tensors[i], true
}

// Data returns a read-only view of the tensor's bytes, as File.Data does.
func (s *Set) Data(name string) ([]byte, error) {
	i, ok := s.index[name]
	if !ok {
		return nil, errorf(s.label, "tensor %q not found", name)
	}
	return s.owner[i].Data(name)
}

// Close unmaps every file of the set.
func (s *Set) Close() error {
	var errs []error
	for _, f := range s.files {
		errs = append(errs, f.Close())
	}
	return errors.Join(errs...)
}
