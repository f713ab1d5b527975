package safetensors

import (
	"bytes"
	"encoding/binary"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"tandem/compute"
)

func TestRoundTrip(t *testing.T) {
	tests := []struct {
		name     string
		specs    []Spec
		metadata map[string]string
	}{
		{"empty", nil, nil},
		{"empty with metadata", nil, map[string]string{"format": "pt"}},
		{"F32", []Spec{{"w", compute.F32, []int{3, 5}}}, nil},
		{"BF16", []Spec{{"w", compute.BF16, []int{2, 3, 7}}}, nil},
		{"F16", []Spec{{"w", compute.F16, []int{9}}}, nil},
		{"I32", []Spec{{"w", compute.I32, []int{4, 1}}}, nil},
		{"I64", []Spec{{"w", compute.I64, []int{3}}}, nil},
		{"scalars", []Spec{
			{"a", compute.F32, nil}, {"b", compute.BF16, []int{}}, {"c", compute.F16, nil},
			{"d", compute.I32, nil}, {"e", compute.I64, nil},
		}, nil},
		{"zero-size", []Spec{
			{"z0", compute.F32, []int{0}}, {"z1", compute.BF16, []int{3, 0, 5}},
			{"x", compute.I64, []int{2}}, {"z2", compute.I32, []int{0, 1 << 40}},
		}, nil},
		{"only zero-size", []Spec{{"z", compute.F16, []int{0}}}, nil},
		{"mixed with metadata", []Spec{
			{"model.layers.0.w", compute.BF16, []int{4, 3}},
			{"emb", compute.F32, []int{5}}, // not in name order: layout follows specs
			{"pos", compute.I64, []int{2, 2}},
			{`odd "name" <&>`, compute.F16, []int{1}},
			{"ünï", compute.I32, nil},
		}, map[string]string{"format": "pt", "note": "a \"quoted\" value\n", "": "empty key"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data := make([][]byte, len(tt.specs))
			for i, s := range tt.specs {
				n, err := s.Size()
				if err != nil {
					t.Fatal(err)
				}
				data[i] = testData(i, n)
			}
			path := filepath.Join(t.TempDir(), "x.safetensors")
			if err := WriteFile(path, tt.specs, tt.metadata, fillFrom(data)); err != nil {
				t.Fatal(err)
			}
			raw, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			n := binary.LittleEndian.Uint64(raw)
			if (8+n)%8 != 0 {
				t.Errorf("8+header length = %d, not a multiple of 8", 8+n)
			}
			if len(raw) != 8+int(n)+int(sumSizes(data)) {
				t.Errorf("file is %d bytes, want %d", len(raw), 8+int(n)+int(sumSizes(data)))
			}

			f, err := Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if f.Path() != path {
				t.Errorf("Path() = %q, want %q", f.Path(), path)
			}
			if md := f.Metadata(); !maps.Equal(md, tt.metadata) {
				t.Errorf("Metadata() = %v, want %v", md, tt.metadata)
			}
			got := f.Tensors()
			if len(got) != len(tt.specs) {
				t.Fatalf("got %d tensors, want %d", len(got), len(tt.specs))
			}
			if !slices.IsSortedFunc(got, func(a, b TensorInfo) int { return strings.Compare(a.Name, b.Name) }) {
				t.Errorf("Tensors() not sorted by name")
			}
			for i, s := range tt.specs {
				info, ok := f.Lookup(s.Name)
				if !ok {
					t.Fatalf("Lookup(%q) failed", s.Name)
				}
				if info.DType != s.DType || !slices.Equal(info.Shape, s.Shape) || info.Size != int64(len(data[i])) || info.File != path {
					t.Errorf("Lookup(%q) = %+v, want %v %v size %d", s.Name, info, s.DType, s.Shape, len(data[i]))
				}
				if info.NumElements()*int64(s.DType.Size()) != info.Size {
					t.Errorf("%q: NumElements() = %d", s.Name, info.NumElements())
				}
				b, err := f.Data(s.Name)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(b, data[i]) {
					t.Errorf("Data(%q) differs from what was written", s.Name)
				}
				// Offset is absolute: the bytes sit there in the file.
				if !bytes.Equal(raw[info.Offset:info.Offset+info.Size], data[i]) {
					t.Errorf("%q: bytes at Offset %d differ", s.Name, info.Offset)
				}
			}
			// The header must parse the same through the public entry point.
			pt, pm, err := ParseHeader(raw[8:8+n], int64(len(raw))-8-int64(n))
			if err != nil {
				t.Fatal(err)
			}
			if len(pt) != len(got) || !maps.Equal(pm, tt.metadata) {
				t.Errorf("ParseHeader disagrees with Open")
			}
			if _, ok := f.Lookup("missing"); ok {
				t.Errorf("Lookup of a missing tensor succeeded")
			}
			_, err = f.Data("missing")
			wantErr(t, err, path, `tensor "missing" not found`)
		})
	}
}

func sumSizes(data [][]byte) int64 {
	var n int64
	for _, b := range data {
		n += int64(len(b))
	}
	return n
}

func TestDataAliasesMapping(t *testing.T) {
	specs := []Spec{{"a", compute.F32, []int{4}}, {"b", compute.BF16, []int{3}}, {"z", compute.F32, []int{0}}}
	data := [][]byte{testData(0, 16), testData(1, 6), nil}
	path := filepath.Join(t.TempDir(), "m.safetensors")
	if err := WriteFile(path, specs, nil, fillFrom(data)); err != nil {
		t.Fatal(err)
	}
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	lo := uintptr(unsafe.Pointer(unsafe.SliceData(f.data)))
	hi := lo + uintptr(len(f.data))
	for _, name := range []string{"a", "b"} {
		b1, _ := f.Data(name)
		b2, _ := f.Data(name)
		info, _ := f.Lookup(name)
		if int64(len(b1)) != info.Size || cap(b1) != len(b1) {
			t.Errorf("Data(%q): len %d cap %d, want both %d", name, len(b1), cap(b1), info.Size)
		}
		p := uintptr(unsafe.Pointer(&b1[0]))
		if p != uintptr(unsafe.Pointer(&b2[0])) {
			t.Errorf("Data(%q) copies: two calls return different memory", name)
		}
		if p != lo+uintptr(info.Offset) || p+uintptr(len(b1)) > hi {
			t.Errorf("Data(%q) does not alias the mapping at its offset", name)
		}
	}
	if b, err := f.Data("z"); err != nil || len(b) != 0 {
		t.Errorf("Data of a zero-size tensor = %v, %v", b, err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	_, err = f.Data("a")
	wantErr(t, err, path, `tensor "a"`, "closed")
	if !errors.Is(err, os.ErrClosed) {
		t.Errorf("Data after Close: %v is not os.ErrClosed", err)
	}
	if err := f.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// TestOpenDoesNotReadData opens a ~200 MB sparse file and checks that
// neither Open nor Data allocates anything near the tensor's size.
func TestOpenDoesNotReadData(t *testing.T) {
	const rows, cols = 10240, 10240 // BF16: 200 MiB
	specs := []Spec{{"big", compute.BF16, []int{rows, cols}}, {"small", compute.F32, []int{2}}}
	sizes, err := specSizes("", specs)
	if err != nil {
		t.Fatal(err)
	}
	header, err := buildHeader("", specs, sizes, nil)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "big.safetensors")
	fd, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	fd.Write(rawFile(string(header), nil))
	total := 8 + int64(len(header)) + sizes[0] + sizes[1]
	if err := fd.Truncate(total); err != nil { // sparse: costs no disk
		t.Fatal(err)
	}
	fd.Close()

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b, err := f.Data("big")
	if err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 1<<20 {
		t.Errorf("Open+Data allocated %d bytes for a %d-byte file", alloc, total)
	}
	if int64(len(b)) != sizes[0] || b[0] != 0 || b[len(b)-1] != 0 {
		t.Errorf("Data(big): len %d, want %d of zeros", len(b), sizes[0])
	}
}

func TestOpenErrors(t *testing.T) {
	huge := make([]byte, 8)
	binary.LittleEndian.PutUint64(huge, MaxHeaderSize+1)
	maxU64 := bytes.Repeat([]byte{0xff}, 8)
	tests := []struct {
		name  string
		file  []byte
		parts []string
	}{
		{"empty file", nil, []string{"truncated", "0 bytes"}},
		{"short file", []byte{1, 0, 0}, []string{"truncated", "3 bytes"}},
		{"header longer than file", rawFile(`{}`, nil)[:9], []string{"header longer than the file", "length 2"}},
		{"header length above cap", append(huge, "{}"...), []string{"header length 100000001 exceeds the limit of 100000000"}},
		{"header length max u64", append(maxU64, "{}"...), []string{"exceeds the limit"}},
		{"invalid JSON", rawFile(`{"a": `, nil), []string{"invalid JSON in header"}},
		{"tensor error names file", rawFile(`{"w":{"dtype":"F64","shape":[],"data_offsets":[0,8]}}`, make([]byte, 8)),
			[]string{`tensor "w"`, `unsupported dtype "F64"`}},
		{"data section too short", rawFile(`{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`, make([]byte, 7)),
			[]string{`tensor "w"`, "out of range of the 7-byte data section"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := writeTemp(t, "bad.safetensors", tt.file)
			f, err := Open(path)
			if err == nil {
				f.Close()
			}
			wantErr(t, err, append([]string{"safetensors: " + path + ": "}, tt.parts...)...)
		})
	}
}

func TestOpenMissing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "nope.safetensors")
	_, err := Open(path)
	wantErr(t, err, path)
	if !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%v is not os.ErrNotExist", err)
	}
	_, err = Open(t.TempDir())
	wantErr(t, err, "not a regular file")
}

// TestParseFileUnpadded checks that an unpadded header (as other writers
// may produce) and gaps and trailing bytes in the data section are accepted.
func TestParseFileUnpadded(t *testing.T) {
	header := `{"b":{"dtype":"I32","shape":[1],"data_offsets":[6,10]},"a":{"dtype":"F16","shape":[1],"data_offsets":[0,2]}}`
	data := []byte{1, 2, 0xaa, 0xaa, 0xaa, 0xaa, 3, 4, 5, 6, 0xbb}
	b := rawFile(header, data)
	tensors, _, err := parseFile("p", b)
	if err != nil {
		t.Fatal(err)
	}
	base := int64(8 + len(header))
	want := []TensorInfo{
		{Name: "a", DType: compute.F16, Shape: []int{1}, Offset: base, Size: 2, File: "p"},
		{Name: "b", DType: compute.I32, Shape: []int{1}, Offset: base + 6, Size: 4, File: "p"},
	}
	if len(tensors) != 2 {
		t.Fatalf("got %+v", tensors)
	}
	for i := range want {
		g, w := tensors[i], want[i]
		if g.Name != w.Name || g.DType != w.DType || !slices.Equal(g.Shape, w.Shape) || g.Offset != w.Offset || g.Size != w.Size || g.File != w.File {
			t.Errorf("tensor %d = %+v, want %+v", i, g, w)
		}
	}
}
