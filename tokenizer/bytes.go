package tokenizer

import (
	"unicode/utf8"
)

// The GPT-2 byte-to-unicode map of the ByteLevel pre-tokenizer and decoder: printable bytes
// ('!'..'~', '¡'..'¬', '®'..'ÿ') map to themselves, the other 68 bytes to U+0100, U+0101, … in
// byte order.
var (
	byteToRune [256]rune
	runeToByte = map[rune]byte{}
	// byteToString[b] is string(byteToRune[b]).
	byteToString [256]string
)

func init() {
	n := rune(0)
	for b := 0; b < 256; b++ {
		if (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF) {
			byteToRune[b] = rune(b)
		} else {
			byteToRune[b] = 0x100 + n
			n++
		}
		runeToByte[byteToRune[b]] = byte(b)
		byteToString[b] = string(byteToRune[b])
	}
}

// byteLevelEncode maps every byte of s to its byte-level character.
func byteLevelEncode(s string) string {
	ascii := true
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < '!' || c > '~' {
			ascii = false
			break
		}
	}
	if ascii {
		return s
	}
	buf := make([]byte, 0, len(s)*2)
	for i := 0; i < len(s); i++ {
		buf = utf8.AppendRune(buf, byteToRune[s[i]])
	}
	return string(buf)
}

// byteLevelBytes appends the bytes a byte-level token stands for. As in HF's ByteLevel decoder, a
// token with any character outside the byte map stands for its own UTF-8 bytes.
func byteLevelBytes(dst []byte, tok string) []byte {
	n := len(dst)
	for _, r := range tok {
		b, ok := runeToByte[r]
		if !ok {
			return append(dst[:n], tok...)
		}
		dst = append(dst, b)
	}
	return dst
}

const replacementChar = "\uFFFD"

// utf8Step decodes the sequence at the start of b the way a lossy UTF-8 decoder that replaces
// each maximal ill-formed subpart with one U+FFFD does (Unicode §3.9, WHATWG; Rust's
// String::from_utf8_lossy and JavaScript's TextDecoder). It returns the number of bytes
// consumed and whether they form a valid character; n is 0 only when b is empty. incomplete is
// true when the bytes are a valid but unfinished prefix that runs to the end of b (more bytes
// could still complete it).
func utf8Step(b []byte) (n int, valid, incomplete bool) {
	if len(b) == 0 {
		return 0, false, false
	}
	c := b[0]
	var need int
	lo, hi := byte(0x80), byte(0xBF)
	switch {
	case c < 0x80:
		return 1, true, false
	case c >= 0xC2 && c <= 0xDF:
		need = 1
	case c == 0xE0:
		need, lo = 2, 0xA0
	case c >= 0xE1 && c <= 0xEC, c == 0xEE, c == 0xEF:
		need = 2
	case c == 0xED:
		need, hi = 2, 0x9F
	case c == 0xF0:
		need, lo = 3, 0x90
	case c >= 0xF1 && c <= 0xF3:
		need = 3
	case c == 0xF4:
		need, hi = 3, 0x8F
	default:
		return 1, false, false
	}
	i := 1
	for ; i <= need; i++ {
		if i >= len(b) {
			return i, false, true
		}
		if b[i] < lo || b[i] > hi {
			return i, false, false
		}
		lo, hi = 0x80, 0xBF
	}
	return i, true, false
}

// lossyUTF8 converts b to a string, replacing each maximal ill-formed subpart with U+FFFD.
func lossyUTF8(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	out := make([]byte, 0, len(b)+8)
	for len(b) > 0 {
		n, valid, _ := utf8Step(b)
		if valid {
			out = append(out, b[:n]...)
		} else {
			out = append(out, replacementChar...)
		}
		b = b[n:]
	}
	return string(out)
}

// validString returns s with each maximal ill-formed UTF-8 subpart replaced by U+FFFD.
func validString(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return lossyUTF8([]byte(s))
}

// byteToken reports whether tok is a byte-fallback token "<0xHH>" (either hex case, as HF
// accepts) and its value.
func byteToken(tok string) (byte, bool) {
	if len(tok) != 6 || tok[0] != '<' || tok[1] != '0' || tok[2] != 'x' || tok[5] != '>' {
		return 0, false
	}
	h, ok1 := hexVal(tok[3])
	l, ok2 := hexVal(tok[4])
	if !ok1 || !ok2 {
		return 0, false
	}
	return h<<4 | l, true
}

func hexVal(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

const hexDigits = "0123456789ABCDEF"

// byteTokenName is the byte-fallback token of b, "<0xHH>" with upper-case hex.
func byteTokenName(b byte) string {
	return string([]byte{'<', '0', 'x', hexDigits[b>>4], hexDigits[b&15], '>'})
}
