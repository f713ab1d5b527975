package safetensors

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"unicode/utf8"

	"tandem/compute"
)

// writeBufferSize is the write buffer: large enough to make syscalls cheap,
// small next to a checkpoint.
const writeBufferSize = 4 << 20

// Spec describes a tensor to write.
type Spec struct {
	Name  string
	DType compute.DType
	Shape []int // nil or empty for a scalar
}

// Size returns the tensor's size in bytes, or an error for an unsupported
// dtype, a negative dimension or a size that overflows int64.
func (s Spec) Size() (int64, error) {
	if s.DType.Size() == 0 {
		return 0, fmt.Errorf("unsupported dtype %v (supported: %s)", s.DType, supportedDTypes)
	}
	for _, d := range s.Shape {
		if d < 0 {
			return 0, fmt.Errorf("negative dimension in shape %v", s.Shape)
		}
	}
	n, ok := byteSize(s.DType, s.Shape)
	if !ok {
		return 0, fmt.Errorf("shape %v overflows", s.Shape)
	}
	return int64(n), nil
}

// specSizes validates specs and returns their byte sizes.
func specSizes(src string, specs []Spec) ([]int64, error) {
	sizes := make([]int64, len(specs))
	seen := make(map[string]bool, len(specs))
	var total int64
	for i, s := range specs {
		switch {
		case s.Name == metadataKey:
			return nil, errorf(src, "tensor name %q is reserved", s.Name)
		case !utf8.ValidString(s.Name):
			return nil, errorf(src, "tensor %q: name is not valid UTF-8", s.Name)
		case seen[s.Name]:
			return nil, errorf(src, "tensor %q: duplicate name", s.Name)
		}
		seen[s.Name] = true
		n, err := s.Size()
		if err != nil {
			return nil, errorf(src, "tensor %q: %v", s.Name, err)
		}
		if n > math.MaxInt64-total {
			return nil, errorf(src, "tensor %q: total size overflows", s.Name)
		}
		total += n
		sizes[i] = n
	}
	return sizes, nil
}

// buildHeader returns the JSON header for tensors laid out back to back in
// the order given, padded with spaces so the data section starts 8-aligned
// (8+len is a multiple of 8), as HF does.
func buildHeader(src string, specs []Spec, sizes []int64, metadata map[string]string) ([]byte, error) {
	var b []byte
	str := func(s string) {
		// json.Marshal of a string cannot fail; it escapes as JSON requires.
		q, _ := json.Marshal(s)
		b = append(b, q...)
	}
	b = append(b, '{')
	if len(metadata) > 0 {
		keys := make([]string, 0, len(metadata))
		for k, v := range metadata {
			if !utf8.ValidString(k) || !utf8.ValidString(v) {
				return nil, errorf(src, "metadata %q: not valid UTF-8", k)
			}
			keys = append(keys, k)
		}
		slices.Sort(keys)
		str(metadataKey)
		b = append(b, ":{"...)
		for i, k := range keys {
			if i > 0 {
				b = append(b, ',')
			}
			str(k)
			b = append(b, ':')
			str(metadata[k])
		}
		b = append(b, '}')
	}
	var off int64
	for i, s := range specs {
		if i > 0 || len(metadata) > 0 {
			b = append(b, ',')
		}
		str(s.Name)
		b = append(b, `:{"dtype":`...)
		str(s.DType.String())
		b = append(b, `,"shape":[`...)
		for j, d := range s.Shape {
			if j > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendInt(b, int64(d), 10)
		}
		b = append(b, `],"data_offsets":[`...)
		b = strconv.AppendInt(b, off, 10)
		b = append(b, ',')
		off += sizes[i]
		b = strconv.AppendInt(b, off, 10)
		b = append(b, "]}"...)
	}
	b = append(b, '}')
	for (prefixSize+len(b))%8 != 0 {
		b = append(b, ' ')
	}
	if len(b) > MaxHeaderSize {
		return nil, errorf(src, "header of %d bytes exceeds the %d-byte limit readers accept", len(b), MaxHeaderSize)
	}
	return b, nil
}

// errTooMuch is what a fill sees when it writes past the tensor's size.
var errTooMuch = errors.New("write past the end of the tensor")

// tensorWriter passes a fill's writes through, refusing bytes beyond the
// tensor's size so a buggy fill cannot corrupt the next tensor.
type tensorWriter struct {
	w         *bufio.Writer
	remaining int64
	over      bool
}

func (t *tensorWriter) Write(p []byte) (int, error) {
	if int64(len(p)) <= t.remaining {
		n, err := t.w.Write(p)
		t.remaining -= int64(n)
		return n, err
	}
	t.over = true
	n, err := t.w.Write(p[:t.remaining])
	t.remaining -= int64(n)
	if err != nil {
		return n, err
	}
	return n, errTooMuch
}

// ReadFrom keeps io.Copy from a file on bufio's fast path (copy_file_range
// or sendfile once the buffer is empty) while still enforcing the size.
func (t *tensorWriter) ReadFrom(r io.Reader) (int64, error) {
	n, err := t.w.ReadFrom(io.LimitReader(r, t.remaining))
	t.remaining -= n
	if err != nil || t.remaining > 0 {
		return n, err
	}
	// Full: any further byte from r is one too many.
	var probe [1]byte
	if m, _ := io.ReadFull(r, probe[:]); m > 0 {
		t.over = true
		return n, errTooMuch
	}
	return n, nil
}

// WriteFile streams a safetensors file to path: the header for specs, with
// the data laid out in the given order, then the bytes of each tensor, which
// fill(i, w) must write to w for specs[i] — exactly the tensor's size, which
// is checked. The file is written under a temporary name in the same
// directory and renamed into place only when complete, so on error no file
// is left under path.
func WriteFile(path string, specs []Spec, metadata map[string]string, fill func(i int, w io.Writer) error) (err error) {
	if fill == nil {
		return errorf(path, "nil fill function")
	}
	sizes, err := specSizes(path, specs)
	if err != nil {
		return err
	}
	header, err := buildHeader(path, specs, sizes, metadata)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return errorf(path, "%w", err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	w := bufio.NewWriterSize(tmp, writeBufferSize)
	var prefix [prefixSize]byte
	binary.LittleEndian.PutUint64(prefix[:], uint64(len(header)))
	w.Write(prefix[:])
	w.Write(header) // bufio keeps the first error; Flush reports it
	for i, s := range specs {
		tw := &tensorWriter{w: w, remaining: sizes[i]}
		ferr := fill(i, tw)
		switch {
		case tw.over:
			return errorf(path, "tensor %q: fill wrote more than the tensor's %d bytes", s.Name, sizes[i])
		case ferr != nil:
			return errorf(path, "tensor %q: fill: %w", s.Name, ferr)
		case tw.remaining > 0:
			return errorf(path, "tensor %q: fill wrote %d of the tensor's %d bytes", s.Name, sizes[i]-tw.remaining, sizes[i])
		}
	}
	if err := w.Flush(); err != nil {
		return errorf(path, "write: %w", err)
	}
	// Sync before rename so a crash cannot leave a complete-looking name
	// over incomplete data.
	if err := tmp.Sync(); err != nil {
		return errorf(path, "sync: %w", err)
	}
	if err := tmp.Chmod(0o644); err != nil { // CreateTemp makes files 0600
		return errorf(path, "%w", err)
	}
	if err := tmp.Close(); err != nil {
		return errorf(path, "close: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return errorf("", "%w", err)
	}
	return nil
}

// WriteSharded writes a checkpoint to dir (created if needed) with the same
// fill contract as WriteFile, where i indexes specs. If the tensors total at
// most maxShardBytes, or maxShardBytes <= 0, it writes dir/model.safetensors
// and removes any model.safetensors.index.json left from an earlier sharded
// write (OpenDir would otherwise prefer it). Otherwise it splits the tensors,
// in order and between tensors, into shards of at most maxShardBytes each
// (a tensor larger than the limit gets a shard of its own), named
// model-00001-of-0000N.safetensors and so on, and writes
// model.safetensors.index.json mapping each tensor to its shard. The index
// is written last, so a failed write never leaves an index naming missing
// shards; shards written by a failed call are removed.
func WriteSharded(dir string, specs []Spec, metadata map[string]string, maxShardBytes int64, fill func(i int, w io.Writer) error) error {
	if fill == nil {
		return errorf(dir, "nil fill function")
	}
	sizes, err := specSizes(dir, specs)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return errorf("", "%w", err)
	}
	var total int64
	for _, n := range sizes {
		total += n // specSizes checked that this cannot overflow
	}
	indexPath := filepath.Join(dir, IndexFileName)
	if maxShardBytes <= 0 || total <= maxShardBytes {
		if err := WriteFile(filepath.Join(dir, SingleFileName), specs, metadata, fill); err != nil {
			return err
		}
		if err := os.Remove(indexPath); err != nil && !errors.Is(err, os.ErrNotExist) {
			return errorf("", "removing stale index: %w", err)
		}
		return nil
	}

	// starts[k] is the first spec of shard k; starts[len] = len(specs).
	starts := []int{0}
	var cur int64
	for i, n := range sizes {
		// Empty tensors never start a shard: they fit anywhere.
		if i > starts[len(starts)-1] && n > 0 && cur+n > maxShardBytes {
			starts = append(starts, i)
			cur = 0
		}
		cur += n
	}
	starts = append(starts, len(specs))
	nShards := len(starts) - 1

	weightMap := make(map[string]string, len(specs))
	var written []string
	for k := range nShards {
		name := fmt.Sprintf("model-%05d-of-%05d.safetensors", k+1, nShards)
		lo, hi := starts[k], starts[k+1]
		path := filepath.Join(dir, name)
		err := WriteFile(path, specs[lo:hi], metadata, func(i int, w io.Writer) error { return fill(lo+i, w) })
		if err != nil {
			for _, p := range written {
				os.Remove(p)
			}
			return err
		}
		written = append(written, path)
		for _, s := range specs[lo:hi] {
			weightMap[s.Name] = name
		}
	}

	index := struct {
		Metadata  map[string]int64  `json:"metadata"`
		WeightMap map[string]string `json:"weight_map"`
	}{map[string]int64{"total_size": total}, weightMap}
	b, err := json.MarshalIndent(index, "", "  ") // map keys come out sorted
	if err != nil {
		return errorf(indexPath, "%w", err)
	}
	if err := writeSmallFile(indexPath, append(b, '\n')); err != nil {
		for _, p := range written {
			os.Remove(p)
		}
		return err
	}
	return nil
}

// writeSmallFile writes b to path through a temporary file and a rename.
func writeSmallFile(path string, b []byte) (err error) {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return errorf(path, "%w", err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if _, err := tmp.Write(b); err != nil {
		return errorf(path, "write: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		return errorf(path, "sync: %w", err)
	}
	if err := tmp.Chmod(0o644); err != nil {
		return errorf(path, "%w", err)
	}
	if err := tmp.Close(); err != nil {
		return errorf(path, "close: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return errorf("", "%w", err)
	}
	return nil
}
