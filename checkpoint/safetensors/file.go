package safetensors

import (
	"maps"
	"math"
	"os"
	"slices"
)

// File is one memory-mapped safetensors file. Its methods may be called
// concurrently, except Close, which must not race with anything else.
type File struct {
	path     string
	data     []byte // the whole mapping; nil once closed
	closed   bool
	tensors  []TensorInfo // sorted by name
	index    map[string]int
	metadata map[string]string
}

// Open maps the file at path read-only and validates its header. Tensor data
// is not read: pages are faulted in from the page cache when Data's views
// are touched. The mapping lives until Close.
//
// As with any mapping, truncating the file while it is open makes later
// access to its data fault; checkpoints are not expected to change under a
// running engine.
func Open(path string) (*File, error) {
	fd, err := os.Open(path)
	if err != nil {
		return nil, errorf("", "%w", err) // the *PathError already names path
	}
	defer fd.Close() // the mapping stays valid after the descriptor closes
	st, err := fd.Stat()
	if err != nil {
		return nil, errorf("", "%w", err)
	}
	if !st.Mode().IsRegular() {
		return nil, errorf(path, "not a regular file")
	}
	size := st.Size()
	if size < prefixSize {
		// Also keeps an empty file away from mmap, which rejects length 0.
		return nil, errorf(path, "truncated: file is %d bytes, too short for the %d-byte header length", size, prefixSize)
	}
	if size > math.MaxInt {
		return nil, errorf(path, "file of %d bytes is too large to map", size)
	}
	data, err := mapFile(fd, int(size))
	if err != nil {
		return nil, errorf(path, "mmap: %w", err)
	}
	tensors, metadata, err := parseFile(path, data)
	if err != nil {
		unmapFile(data)
		return nil, err
	}
	f := &File{path: path, data: data, tensors: tensors, metadata: metadata}
	f.index = make(map[string]int, len(tensors))
	for i, t := range tensors {
		f.index[t.Name] = i
	}
	return f, nil
}

// Path returns the path the file was opened with.
func (f *File) Path() string { return f.path }

// Tensors returns the file's tensors sorted by name. The slice is a copy;
// the Shape slices are shared and must not be modified.
func (f *File) Tensors() []TensorInfo { return slices.Clone(f.tensors) }

// Metadata returns a copy of the header's __metadata__ (nil if absent).
func (f *File) Metadata() map[string]string { return maps.Clone(f.metadata) }

// Lookup returns the tensor called name.
func (f *File) Lookup(name string) (TensorInfo, bool) {
	i, ok := f.index[name]
	if !ok {
		return TensorInfo{}, false
	}
	return f.tensors[i], true
}

// Data returns the bytes of the tensor called name: a read-only view into
// the mapping (writing to it faults), valid until Close. Its capacity equals
// its length, so appending copies instead of touching neighbouring tensors.
func (f *File) Data(name string) ([]byte, error) {
	if f.closed {
		return nil, errorf(f.path, "tensor %q: %w", name, os.ErrClosed)
	}
	i, ok := f.index[name]
	if !ok {
		return nil, errorf(f.path, "tensor %q not found", name)
	}
	t := &f.tensors[i]
	return f.data[t.Offset : t.Offset+t.Size : t.Offset+t.Size], nil
}

// Close unmaps the file. Views returned by Data must not be used afterwards.
// Closing a closed File does nothing.
func (f *File) Close() error {
	if f.closed {
		return nil
	}
	f.closed = true
	data := f.data
	f.data = nil
	if err := unmapFile(data); err != nil {
		return errorf(f.path, "munmap: %w", err)
	}
	return nil
}
