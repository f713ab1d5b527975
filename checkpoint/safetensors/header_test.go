package safetensors

import (
	"maps"
	"strings"
	"testing"
)

// entry formats one tensor entry for hand-written headers.
func entry(name, dtype, shape, offsets string) string {
	return `"` + name + `":{"dtype":"` + dtype + `","shape":` + shape + `,"data_offsets":` + offsets + `}`
}

func TestParseHeaderErrors(t *testing.T) {
	tests := []struct {
		name     string
		header   string
		dataSize int64
		parts    []string
	}{
		{"empty header", ``, 0, []string{"invalid JSON in header", "unexpected EOF"}},
		{"invalid JSON", `{"a":{"dtype":"F32",}}`, 0, []string{"invalid JSON in header at byte", "invalid character"}},
		{"truncated JSON", `{"a":{"dtype":"F32"`, 0, []string{"invalid JSON in header"}},
		{"not UTF-8", "{\"\xff\":1}", 0, []string{"not valid UTF-8"}},
		{"not an object", `[1,2]`, 0, []string{"header is not a JSON object"}},
		{"string header", `"x"`, 0, []string{"header is not a JSON object"}},
		{"trailing data", `{} x`, 0, []string{"trailing data after the header"}},
		{"two objects", `{}{}`, 0, []string{"trailing data after the header"}},
		{"entry not object (number)", `{"w":5}`, 0, []string{`tensor "w": entry is 5, want an object`}},
		{"entry not object (array)", `{"w":[0,4]}`, 0, []string{`tensor "w": entry is an array, want an object`}},
		{"entry not object (string)", `{"w":"F32"}`, 0, []string{`tensor "w": entry is "F32", want an object`}},
		{"entry null", `{"w":null}`, 0, []string{`tensor "w": entry is null, want an object`}},
		{"unknown dtype", `{` + entry("w", "F64", `[1]`, `[0,8]`) + `}`, 8,
			[]string{`tensor "w": unsupported dtype "F64" (supported: F32, BF16, F16, I32, I64)`}},
		{"lower-case dtype", `{` + entry("w", "bf16", `[1]`, `[0,2]`) + `}`, 2, []string{`unsupported dtype "bf16"`}},
		{"float8 dtype", `{` + entry("w", "F8_E4M3", `[1]`, `[0,1]`) + `}`, 1, []string{`unsupported dtype "F8_E4M3"`}},
		{"dtype not a string", `{"w":{"dtype":7,"shape":[1],"data_offsets":[0,4]}}`, 4, []string{`tensor "w": dtype is 7, want a string`}},
		{"missing dtype", `{"w":{"shape":[1],"data_offsets":[0,4]}}`, 4, []string{`tensor "w": missing "dtype"`}},
		{"missing shape", `{"w":{"dtype":"F32","data_offsets":[0,4]}}`, 4, []string{`tensor "w": missing "shape"`}},
		{"missing offsets", `{"w":{"dtype":"F32","shape":[1]}}`, 4, []string{`tensor "w": missing "data_offsets"`}},
		{"duplicate field", `{"w":{"dtype":"F32","dtype":"F16","shape":[1],"data_offsets":[0,4]}}`, 4, []string{`tensor "w": duplicate field "dtype"`}},
		{"negative dim", `{` + entry("w", "F32", `[2,-1]`, `[0,4]`) + `}`, 4,
			[]string{`tensor "w": shape dimension 1 is -1, want a non-negative integer`}},
		{"fractional dim", `{` + entry("w", "F32", `[1.5]`, `[0,4]`) + `}`, 4, []string{`tensor "w": shape dimension 0 is 1.5`}},
		{"exponent dim", `{` + entry("w", "F32", `[1e2]`, `[0,400]`) + `}`, 400, []string{`shape dimension 0`}},
		{"string dim", `{` + entry("w", "F32", `["2"]`, `[0,8]`) + `}`, 8, []string{`shape dimension 0 is "2"`}},
		{"huge dim", `{` + entry("w", "F32", `[99999999999999999999]`, `[0,4]`) + `}`, 4, []string{`shape dimension 0`}},
		{"shape rank too high", `{` + entry("w", "F32", `[`+strings.Repeat("1,", 64)+`1]`, `[0,4]`) + `}`, 4, []string{`tensor "w": shape has more than 64 dimensions`}},
		{"empty offsets", `{` + entry("w", "F32", `[0]`, `[]`) + `}`, 0, []string{`data_offsets is empty, want [begin, end]`}},
		{"nested offsets", `{` + entry("w", "F32", `[1]`, `[[0],4]`) + `}`, 4, []string{`data_offsets element 0 is an array`}},
		{"shape not array", `{` + entry("w", "F32", `4`, `[0,16]`) + `}`, 16, []string{`tensor "w": shape is 4, want an array of non-negative integers`}},
		{"shape overflow", `{` + entry("w", "F32", `[4294967296,4294967296]`, `[0,4]`) + `}`, 4, []string{`tensor "w": shape [4294967296 4294967296] overflows`}},
		{"shape overflow by dtype", `{` + entry("w", "I64", `[2305843009213693952]`, `[0,4]`) + `}`, 4, []string{`overflows`}},
		{"offsets one number", `{` + entry("w", "F32", `[1]`, `[4]`) + `}`, 4, []string{`tensor "w": data_offsets has 1 element, want [begin, end]`}},
		{"offsets three numbers", `{` + entry("w", "F32", `[1]`, `[0,4,8]`) + `}`, 8, []string{`data_offsets has more than 2 elements, want [begin, end]`}},
		{"offsets not array", `{` + entry("w", "F32", `[1]`, `"0-4"`) + `}`, 4, []string{`data_offsets is "0-4", want [begin, end]`}},
		{"offsets negative", `{` + entry("w", "F32", `[1]`, `[-4,0]`) + `}`, 4, []string{`tensor "w": data_offsets element 0 is -4, want a non-negative integer`}},
		{"offsets fractional", `{` + entry("w", "F32", `[1]`, `[0,4.0]`) + `}`, 4, []string{`data_offsets element 1 is 4.0, want a non-negative integer`}},
		{"offsets descending", `{` + entry("w", "F32", `[1]`, `[4,0]`) + `}`, 4, []string{`tensor "w": data_offsets [4, 0] are not ascending`}},
		{"offsets out of range", `{` + entry("w", "F32", `[2]`, `[0,8]`) + `}`, 7,
			[]string{`tensor "w": data_offsets [0, 8] out of range of the 7-byte data section`}},
		{"offsets far out of range", `{` + entry("w", "F32", `[1]`, `[9223372036854775800,9223372036854775804]`) + `}`, 4, []string{`out of range`}},
		{"size mismatch", `{` + entry("w", "BF16", `[2,3]`, `[0,10]`) + `}`, 10,
			[]string{`tensor "w": dtype/shape mismatch: BF16 [2 3] needs 12 bytes but data_offsets [0, 10] hold 10`}},
		{"scalar mismatch", `{` + entry("w", "I64", `[]`, `[0,4]`) + `}`, 4, []string{`dtype/shape mismatch: I64 [] needs 8 bytes`}},
		{"zero-size mismatch", `{` + entry("w", "F32", `[0,5]`, `[0,4]`) + `}`, 4, []string{`needs 0 bytes`}},
		{"overlap", `{` + entry("b", "F32", `[2]`, `[4,12]`) + `,` + entry("a", "F32", `[2]`, `[0,8]`) + `}`, 12,
			[]string{`tensors "a" and "b" overlap (data_offsets [0, 8] and [4, 12])`}},
		{"overlap identical", `{` + entry("x", "I32", `[1]`, `[0,4]`) + `,` + entry("y", "F32", `[1]`, `[0,4]`) + `}`, 4,
			[]string{`tensors "x" and "y" overlap`}},
		{"overlap contained", `{` + entry("big", "F32", `[4]`, `[0,16]`) + `,` + entry("s1", "F32", `[1]`, `[0,4]`) + `,` + entry("s2", "F32", `[1]`, `[8,12]`) + `}`, 16,
			[]string{`overlap`, `"big"`}},
		{"overlap after gap", `{` + entry("a", "F32", `[1]`, `[0,4]`) + `,` + entry("b", "F32", `[4]`, `[8,24]`) + `,` + entry("c", "F32", `[1]`, `[20,24]`) + `}`, 24,
			[]string{`tensors "b" and "c" overlap`}},
		{"duplicate tensor", `{` + entry("w", "F32", `[1]`, `[0,4]`) + `,` + entry("w", "F32", `[1]`, `[4,8]`) + `}`, 8,
			[]string{`tensor "w": duplicate name in header`}},
		{"duplicate metadata", `{"__metadata__":{},"__metadata__":{}}`, 0, []string{`duplicate "__metadata__"`}},
		{"metadata not object", `{"__metadata__":[]}`, 0, []string{`__metadata__ is an array, want an object of strings`}},
		{"metadata number value", `{"__metadata__":{"n":3}}`, 0, []string{`__metadata__: value of "n" is 3, want a string`}},
		{"metadata nested", `{"__metadata__":{"n":{"a":"b"}}}`, 0, []string{`value of "n" is an object, want a string`}},
		{"metadata duplicate key", `{"__metadata__":{"k":"a","k":"b"}}`, 0, []string{`__metadata__: duplicate key "k"`}},
		{"negative data size", `{}`, -1, []string{"negative data section size"}},
		{"huge data size", `{}`, 1<<63 - 1, []string{"data section size"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tensors, _, err := ParseHeader([]byte(tt.header), tt.dataSize)
			if err == nil {
				t.Fatalf("no error; tensors %+v", tensors)
			}
			wantErr(t, err, append([]string{"safetensors: "}, tt.parts...)...)
		})
	}
}

func TestParseHeaderAccepts(t *testing.T) {
	tests := []struct {
		name     string
		header   string
		dataSize int64
		tensors  int
		metadata map[string]string
	}{
		{"empty object", `{}`, 0, 0, nil},
		{"padded", `{}      `, 0, 0, nil},
		{"leading space", ` {}`, 0, 0, nil},
		{"metadata null", `{"__metadata__":null}`, 0, 0, nil},
		{"metadata", `{"__metadata__":{"format":"pt","":""}}`, 0, 0, map[string]string{"format": "pt", "": ""}},
		{"unknown entry field", `{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"extra":[1,{"x":[2,{}]}],"more":"x"}}`, 4, 1, nil},
		{"rank 64", `{` + entry("w", "F32", `[`+strings.Repeat("1,", 63)+`1]`, `[0,4]`) + `}`, 4, 1, nil},
		{"gap and trailing data", `{` + entry("a", "F32", `[1]`, `[0,4]`) + `,` + entry("b", "F32", `[1]`, `[8,12]`) + `}`, 100, 2, nil},
		{"zero-size inside another", `{` + entry("a", "F32", `[2]`, `[0,8]`) + `,` + entry("z", "F32", `[0]`, `[4,4]`) + `}`, 8, 2, nil},
		{"zero-size at end", `{` + entry("z", "BF16", `[7,0]`, `[0,0]`) + `}`, 0, 1, nil},
		{"zero dim beside huge dim", `{` + entry("z", "F32", `[0,9223372036854775807]`, `[0,0]`) + `}`, 0, 1, nil},
		{"empty name", `{` + entry("", "I32", `[]`, `[0,4]`) + `}`, 4, 1, nil},
		{"escaped name", `{"a\"b\u00e9":{"dtype":"I32","shape":[],"data_offsets":[0,4]}}`, 4, 1, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tensors, md, err := ParseHeader([]byte(tt.header), tt.dataSize)
			if err != nil {
				t.Fatal(err)
			}
			if len(tensors) != tt.tensors || !maps.Equal(md, tt.metadata) {
				t.Errorf("got %d tensors, metadata %v; want %d, %v", len(tensors), md, tt.tensors, tt.metadata)
			}
			checkInvariants(t, []byte(tt.header), tt.dataSize, tensors)
		})
	}
}

// checkInvariants verifies what ParseHeader promises when it succeeds.
func checkInvariants(t *testing.T, header []byte, dataSize int64, tensors []TensorInfo) {
	t.Helper()
	start := 8 + int64(len(header))
	end := start + dataSize
	for i, ti := range tensors {
		if ti.Offset < start || ti.Size < 0 || ti.Offset > end || ti.Size > end-ti.Offset {
			t.Fatalf("tensor %q: [%d, +%d) outside the data section [%d, %d)", ti.Name, ti.Offset, ti.Size, start, end)
		}
		want, ok := byteSize(ti.DType, ti.Shape)
		if !ok || int64(want) != ti.Size {
			t.Fatalf("tensor %q: size %d does not match %v %v", ti.Name, ti.Size, ti.DType, ti.Shape)
		}
		if i > 0 && strings.Compare(tensors[i-1].Name, ti.Name) >= 0 {
			t.Fatalf("tensors not sorted by unique name: %q then %q", tensors[i-1].Name, ti.Name)
		}
		for _, o := range tensors[:i] {
			if ti.Size > 0 && o.Size > 0 && ti.Offset < o.Offset+o.Size && o.Offset < ti.Offset+ti.Size {
				t.Fatalf("tensors %q and %q overlap", o.Name, ti.Name)
			}
		}
	}
}
