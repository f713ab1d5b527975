package safetensors

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"tandem/compute"
)

// MaxHeaderSize is the largest JSON header accepted, in bytes. It matches the
// reference Rust implementation and keeps a hostile header length from
// driving a huge parse.
const MaxHeaderSize = 100_000_000

// prefixSize is the size of the little-endian header length.
const prefixSize = 8

// metadataKey is the reserved header key that holds string metadata.
const metadataKey = "__metadata__"

// supportedDTypes lists the dtypes Tandem reads and writes, for error text.
const supportedDTypes = "F32, BF16, F16, I32, I64"

// TensorInfo describes one tensor of a safetensors file.
type TensorInfo struct {
	Name   string
	DType  compute.DType
	Shape  []int  // nil or empty for a scalar; must not be modified
	Offset int64  // absolute byte offset of the data in File
	Size   int64  // bytes
	File   string // path of the file that holds the tensor
}

// NumElements returns the number of elements (1 for a scalar).
func (t TensorInfo) NumElements() int64 {
	if t.DType.Size() == 0 {
		return 0
	}
	return t.Size / int64(t.DType.Size())
}

// errorf formats an error with the package prefix and, when known, the file.
func errorf(src, format string, args ...any) error {
	if src == "" {
		return fmt.Errorf("safetensors: "+format, args...)
	}
	return fmt.Errorf("safetensors: %s: "+format, append([]any{src}, args...)...)
}

// ParseHeader validates a header (the JSON bytes between the length prefix
// and the data section) against dataSize, the size of the data section that
// follows it. Tensor offsets in the result are absolute file offsets,
// 8+len(header)+begin; File is left empty. Tensors are sorted by name.
func ParseHeader(header []byte, dataSize int64) (tensors []TensorInfo, metadata map[string]string, err error) {
	return parseHeader("", header, dataSize)
}

// parseFile validates a whole file's bytes (prefix, header, data section) and
// returns its tensors, attributed to path. It only slices data, so it
// allocates nothing proportional to the data section.
func parseFile(path string, data []byte) ([]TensorInfo, map[string]string, error) {
	if len(data) < prefixSize {
		return nil, nil, errorf(path, "truncated: file is %d bytes, too short for the %d-byte header length", len(data), prefixSize)
	}
	n := binary.LittleEndian.Uint64(data)
	if n > MaxHeaderSize {
		return nil, nil, errorf(path, "header length %d exceeds the limit of %d bytes (corrupt file or not safetensors)", n, MaxHeaderSize)
	}
	if n > uint64(len(data)-prefixSize) {
		return nil, nil, errorf(path, "header longer than the file: header length %d but only %d bytes follow the length prefix", n, len(data)-prefixSize)
	}
	end := prefixSize + int(n)
	tensors, metadata, err := parseHeader(path, data[prefixSize:end], int64(len(data)-end))
	if err != nil {
		return nil, nil, err
	}
	for i := range tensors {
		tensors[i].File = path
	}
	return tensors, metadata, nil
}

// headerParser walks the header JSON token by token. Decoding into a Go map
// would silently keep the last of duplicate keys; tokens let us reject them.
type headerParser struct {
	src  string
	what string // "header" or "index", for error text
	dec  *json.Decoder
}

func parseHeader(src string, header []byte, dataSize int64) ([]TensorInfo, map[string]string, error) {
	if dataSize < 0 {
		return nil, nil, errorf(src, "negative data section size %d", dataSize)
	}
	// Absolute offsets are 8+len(header)+begin; keep them representable.
	base := int64(prefixSize) + int64(len(header))
	if dataSize > math.MaxInt64-base {
		return nil, nil, errorf(src, "data section size %d too large", dataSize)
	}
	if len(header) > MaxHeaderSize {
		return nil, nil, errorf(src, "header length %d exceeds the limit of %d bytes", len(header), MaxHeaderSize)
	}
	if !utf8.Valid(header) {
		return nil, nil, errorf(src, "header is not valid UTF-8")
	}
	p := &headerParser{src: src, what: "header", dec: json.NewDecoder(bytes.NewReader(header))}
	p.dec.UseNumber()

	tok, err := p.dec.Token()
	if err != nil {
		return nil, nil, p.jsonErr(err)
	}
	if tok != json.Delim('{') {
		return nil, nil, errorf(src, "header is not a JSON object")
	}
	var (
		tensors  []TensorInfo
		metadata map[string]string
		seen     = make(map[string]bool)
	)
	for p.dec.More() {
		key, err := p.key()
		if err != nil {
			return nil, nil, err
		}
		if seen[key] {
			if key == metadataKey {
				return nil, nil, errorf(src, "duplicate %q in header", metadataKey)
			}
			return nil, nil, errorf(src, "tensor %q: duplicate name in header", key)
		}
		seen[key] = true
		if key == metadataKey {
			if metadata, err = p.metadata(); err != nil {
				return nil, nil, err
			}
			continue
		}
		t, err := p.tensor(key, dataSize)
		if err != nil {
			return nil, nil, err
		}
		tensors = append(tensors, t)
	}
	if _, err := p.dec.Token(); err != nil { // the closing '}'
		return nil, nil, p.jsonErr(err)
	}
	// HF pads the header with spaces, which the decoder skips; anything else
	// after the object is corruption.
	if tok, err := p.dec.Token(); err != io.EOF {
		if err == nil {
			return nil, nil, errorf(src, "trailing data after the header JSON object (%s)", tokText(tok))
		}
		return nil, nil, errorf(src, "trailing data after the header JSON object: %v", err)
	}
	// Overlap is checked on data-section offsets so the error matches the header.
	if err := checkOverlap(src, tensors); err != nil {
		return nil, nil, err
	}
	for i := range tensors {
		tensors[i].Offset += base
	}
	slices.SortFunc(tensors, func(a, b TensorInfo) int { return strings.Compare(a.Name, b.Name) })
	return tensors, metadata, nil
}

// jsonErr turns a decoder error into one that says where the JSON broke.
func (p *headerParser) jsonErr(err error) error {
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return errorf(p.src, "invalid JSON in %s at byte %d: %v", p.what, se.Offset, err)
	}
	return errorf(p.src, "invalid JSON in %s: %v", p.what, err)
}

// key reads an object key.
func (p *headerParser) key() (string, error) {
	tok, err := p.dec.Token()
	if err != nil {
		return "", p.jsonErr(err)
	}
	s, ok := tok.(string)
	if !ok { // the decoder only yields strings here, but do not trust it
		return "", errorf(p.src, "invalid JSON in %s: object key %v is not a string", p.what, tok)
	}
	return s, nil
}

// token reads the next token.
func (p *headerParser) token() (json.Token, error) {
	tok, err := p.dec.Token()
	if err != nil {
		return nil, p.jsonErr(err)
	}
	return tok, nil
}

// discard is a JSON value that is validated and dropped without being
// built, so an unknown field holding a huge array costs no memory beyond the
// header the decoder already buffers.
type discard struct{}

func (*discard) UnmarshalJSON([]byte) error { return nil }

// skip discards the next value.
func (p *headerParser) skip() error {
	if err := p.dec.Decode(new(discard)); err != nil {
		return p.jsonErr(err)
	}
	return nil
}

// intList says how to read and describe an array of non-negative integers.
type intList struct {
	field   string // "shape"
	elem    string // "dimension"
	want    string // what the whole value should be, for errors
	tooMany string // error when there are more than max elements
	max     int
	bitSize int
}

// ints reads an array of non-negative integers token by token, refusing to
// grow it past l.max.
func (p *headerParser) ints(l intList, fail func(string, ...any) error) ([]int64, error) {
	tok, err := p.token()
	if err != nil {
		return nil, err
	}
	if tok != json.Delim('[') {
		return nil, fail("%s is %s, want %s", l.field, tokText(tok), l.want)
	}
	out := []int64{}
	for p.dec.More() {
		if len(out) == l.max {
			return nil, fail("%s", l.tooMany)
		}
		tok, err := p.token()
		if err != nil {
			return nil, err
		}
		n, ok := nonNegInt(tok, l.bitSize)
		if !ok {
			return nil, fail("%s %s %d is %s, want a non-negative integer", l.field, l.elem, len(out), tokText(tok))
		}
		out = append(out, n)
	}
	if _, err := p.token(); err != nil { // the closing ']'
		return nil, err
	}
	return out, nil
}

// metadata reads the __metadata__ value: null or an object of strings.
func (p *headerParser) metadata() (map[string]string, error) {
	tok, err := p.token()
	if err != nil {
		return nil, err
	}
	if tok == nil {
		return nil, nil
	}
	if tok != json.Delim('{') {
		return nil, errorf(p.src, "%s is %s, want an object of strings", metadataKey, tokText(tok))
	}
	m := make(map[string]string)
	for p.dec.More() {
		k, err := p.key()
		if err != nil {
			return nil, err
		}
		if _, dup := m[k]; dup {
			return nil, errorf(p.src, "%s: duplicate key %q", metadataKey, k)
		}
		tok, err := p.token()
		if err != nil {
			return nil, err
		}
		v, ok := tok.(string)
		if !ok {
			return nil, errorf(p.src, "%s: value of %q is %s, want a string", metadataKey, k, tokText(tok))
		}
		m[k] = v
	}
	if _, err := p.token(); err != nil {
		return nil, err
	}
	return m, nil
}

// maxRank bounds the number of dimensions, so that a hostile shape cannot
// make us allocate in proportion to the header. Real tensors have a handful.
const maxRank = 64

// tensor reads one tensor entry and checks it against the data section.
// Offset in the result is relative to the data section.
func (p *headerParser) tensor(name string, dataSize int64) (TensorInfo, error) {
	t := TensorInfo{Name: name}
	fail := func(format string, args ...any) error {
		return errorf(p.src, "tensor %q: "+format, append([]any{name}, args...)...)
	}
	tok, err := p.token()
	if err != nil {
		return TensorInfo{}, err
	}
	if tok != json.Delim('{') {
		return TensorInfo{}, fail("entry is %s, want an object", tokText(tok))
	}
	var (
		seen       = make(map[string]bool, 3)
		begin, end int64
	)
	for p.dec.More() {
		k, err := p.key()
		if err != nil {
			return TensorInfo{}, err
		}
		if seen[k] {
			return TensorInfo{}, fail("duplicate field %q", k)
		}
		seen[k] = true
		switch k {
		case "dtype":
			tok, err := p.token()
			if err != nil {
				return TensorInfo{}, err
			}
			s, ok := tok.(string)
			if !ok {
				return TensorInfo{}, fail("dtype is %s, want a string", tokText(tok))
			}
			d, err := compute.ParseDType(s)
			// ParseDType also takes command-line spellings; files use exactly
			// the upper-case safetensors names.
			if err != nil || d.String() != s {
				return TensorInfo{}, fail("unsupported dtype %q (supported: %s)", s, supportedDTypes)
			}
			t.DType = d
		case "shape":
			dims, err := p.ints(intList{
				field: "shape", elem: "dimension", want: "an array of non-negative integers",
				tooMany: fmt.Sprintf("shape has more than %d dimensions", maxRank),
				max:     maxRank, bitSize: strconv.IntSize,
			}, fail)
			if err != nil {
				return TensorInfo{}, err
			}
			t.Shape = make([]int, len(dims))
			for i, d := range dims {
				t.Shape[i] = int(d)
			}
		case "data_offsets":
			offs, err := p.ints(intList{
				field: "data_offsets", elem: "element", want: "[begin, end]",
				tooMany: "data_offsets has more than 2 elements, want [begin, end]",
				max:     2, bitSize: 64,
			}, fail)
			if err != nil {
				return TensorInfo{}, err
			}
			switch len(offs) {
			case 0:
				return TensorInfo{}, fail("data_offsets is empty, want [begin, end]")
			case 1:
				return TensorInfo{}, fail("data_offsets has 1 element, want [begin, end]")
			}
			begin, end = offs[0], offs[1]
			if begin > end {
				return TensorInfo{}, fail("data_offsets [%d, %d] are not ascending", begin, end)
			}
		default: // unknown fields are ignored for forward compatibility
			if err := p.skip(); err != nil {
				return TensorInfo{}, err
			}
		}
	}
	if _, err := p.token(); err != nil {
		return TensorInfo{}, err
	}
	for _, k := range []string{"dtype", "shape", "data_offsets"} {
		if !seen[k] {
			return TensorInfo{}, fail("missing %q", k)
		}
	}
	if end > dataSize {
		return TensorInfo{}, fail("data_offsets [%d, %d] out of range of the %d-byte data section", begin, end, dataSize)
	}
	want, ok := byteSize(t.DType, t.Shape)
	if !ok {
		return TensorInfo{}, fail("shape %v overflows", t.Shape)
	}
	if want != uint64(end-begin) {
		return TensorInfo{}, fail("dtype/shape mismatch: %s %v needs %d bytes but data_offsets [%d, %d] hold %d", t.DType, t.Shape, want, begin, end, end-begin)
	}
	t.Offset, t.Size = begin, end-begin
	return t, nil
}

// byteSize returns the byte size of a tensor, reporting false on overflow.
// A zero dimension makes the size 0 whatever the other dimensions are.
func byteSize(d compute.DType, shape []int) (uint64, bool) {
	if slices.Contains(shape, 0) {
		return 0, true
	}
	n := uint64(d.Size())
	for _, dim := range shape {
		if dim < 0 {
			return 0, false
		}
		hi, lo := bits.Mul64(n, uint64(dim))
		if hi != 0 || lo > math.MaxInt64 {
			return 0, false
		}
		n = lo
	}
	return n, true
}

// nonNegInt accepts a JSON integer token (no fraction or exponent) in
// [0, 2^(bitSize-1)).
func nonNegInt(tok json.Token, bitSize int) (int64, bool) {
	num, ok := tok.(json.Number)
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(string(num), 10, bitSize)
	return n, err == nil && n >= 0
}

// tokText describes a token for error text: numbers as written, strings
// quoted (truncated, so a hostile header cannot make the error huge), the
// rest by kind.
func tokText(tok json.Token) string {
	switch v := tok.(type) {
	case nil:
		return "null"
	case bool:
		return strconv.FormatBool(v)
	case json.Number:
		return truncate(string(v))
	case string:
		return truncate(strconv.Quote(v))
	case json.Delim:
		if v == '[' {
			return "an array"
		}
		return "an object"
	}
	return fmt.Sprintf("%T", tok)
}

func truncate(s string) string {
	const max = 64
	if len(s) > max {
		return s[:max] + "..."
	}
	return s
}

// checkOverlap rejects tensors whose byte ranges overlap. Empty tensors
// occupy no bytes and may sit anywhere; gaps between tensors are allowed.
func checkOverlap(src string, tensors []TensorInfo) error {
	idx := make([]int, 0, len(tensors))
	for i, t := range tensors {
		if t.Size > 0 {
			idx = append(idx, i)
		}
	}
	slices.SortFunc(idx, func(a, b int) int {
		ta, tb := &tensors[a], &tensors[b]
		if ta.Offset != tb.Offset {
			return cmp.Compare(ta.Offset, tb.Offset)
		}
		if ta.Size != tb.Size {
			return cmp.Compare(ta.Size, tb.Size)
		}
		return strings.Compare(ta.Name, tb.Name)
	})
	last := -1 // index of the tensor reaching furthest so far
	for _, i := range idx {
		t := &tensors[i]
		if last >= 0 {
			prev := &tensors[last]
			if t.Offset < prev.Offset+prev.Size {
				a, b := prev, t
				if b.Name < a.Name {
					a, b = b, a
				}
				return errorf(src, "tensors %q and %q overlap (data_offsets [%d, %d] and [%d, %d])",
					a.Name, b.Name, a.Offset, a.Offset+a.Size, b.Offset, b.Offset+b.Size)
			}
		}
		if last < 0 || t.Offset+t.Size > tensors[last].Offset+tensors[last].Size {
			last = i
		}
	}
	return nil
}
