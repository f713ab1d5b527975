package safetensors

import (
	"encoding/binary"
	"testing"
)

// fuzzSeeds are headers for both fuzz targets: valid ones and one of each
// kind of bad input the parser rejects.
var fuzzSeeds = []struct {
	header   string
	dataSize int64
}{
	{`{}`, 0},
	{`{"__metadata__":{"format":"pt"}}      `, 0},
	{`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"BF16","shape":[],"data_offsets":[8,10]}}`, 10},
	{`{"z":{"dtype":"I64","shape":[0,3],"data_offsets":[4,4]},"x":{"dtype":"I32","shape":[1],"data_offsets":[8,12]}}`, 16},
	{`{"h":{"dtype":"F16","shape":[1,1,2],"data_offsets":[0,4]}}`, 4},
	{`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}`, 12},
	{`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, 8},
	{`{"a":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}}`, 8},
	{`{"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}}`, 4},
	{`{"a":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}}`, 4},
	{`{"a":{"dtype":"F32","shape":[1],"data_offsets":[4,0]}}`, 4},
	{`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`, 7},
	{`{"a":{"dtype":"BF16","shape":[2,3],"data_offsets":[0,10]}}`, 10},
	{`{"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}}`, 4},
	{`{"a":{"dtype":"F32","shape":[0,9223372036854775807],"data_offsets":[0,0]}}`, 0},
	{`{"a":5}`, 0},
	{`{"__metadata__":{"k":1}}`, 0},
	{`{"a": `, 0},
	{`[]`, 0},
}

// FuzzParseHeader checks that ParseHeader never panics and that whatever it
// accepts is sound: every tensor inside the data section, sized by its shape
// and dtype, sorted, uniquely named and not overlapping another.
func FuzzParseHeader(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s.header), s.dataSize)
	}
	f.Fuzz(func(t *testing.T, header []byte, dataSize int64) {
		tensors, _, err := ParseHeader(header, dataSize)
		if err != nil {
			return
		}
		checkInvariants(t, header, dataSize, tensors)
	})
}

// FuzzParseFile does the same for whole-file bytes, covering the length
// prefix, through the parser Open uses on the mapping.
func FuzzParseFile(f *testing.F) {
	for _, s := range fuzzSeeds {
		if s.dataSize < 64 {
			f.Add(rawFile(s.header, make([]byte, s.dataSize)))
		}
	}
	f.Add([]byte{})
	f.Add([]byte{2, 0, 0, 0, 0, 0, 0, 0, '{'})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, '{', '}'})
	f.Fuzz(func(t *testing.T, data []byte) {
		tensors, _, err := parseFile("f", data)
		if err != nil {
			return
		}
		n := int(binary.LittleEndian.Uint64(data))
		checkInvariants(t, data[8:8+n], int64(len(data)-8-n), tensors)
		for _, ti := range tensors {
			if ti.File != "f" {
				t.Fatalf("tensor %q: File %q", ti.Name, ti.File)
			}
			_ = data[ti.Offset : ti.Offset+ti.Size] // what Data slices
		}
	})
}
