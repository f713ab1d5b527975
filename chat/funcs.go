package chat

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/ardanlabs/jinja"
)

// TemplateError is the error a template raises on purpose with raise_exception (HF's
// jinja2.exceptions.TemplateError): the conversation is not valid for this model's template,
// for example roles that do not alternate. A server answers it with a 400 and Message.
type TemplateError struct {
	Message string
}

func (e *TemplateError) Error() string { return e.Message }

// raiseException is HF's raise_exception(message).
func raiseException(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	if len(args) == 0 {
		return jinja.Undefined(), &TemplateError{Message: "raise_exception called without a message"}
	}
	return jinja.Undefined(), &TemplateError{Message: plain(args[0])}
}

// plain is the text a value prints as in a template.
func plain(v jinja.Value) string {
	switch {
	case v.IsString():
		return v.AsString()
	case v.IsUndefined(), v.IsNone():
		return ""
	}
	return v.String()
}

// ---------------------------------------------------------------------------------------------
// tojson

// tojsonName is what every `tojson` in a template is renamed to before compiling (see
// renameIdent): the engine's own tojson cannot be replaced (builtin filters are looked up
// before the render data), and it differs from HF's: it drops key order with indent=, escapes
// U+2028/U+2029, ignores ensure_ascii and sort_keys, formats floats with %g and turns errors
// into an empty string.
const tojsonName = "__tandem_tojson"

// tojson is transformers' tojson filter: json.dumps(x, ensure_ascii=False, indent=None,
// separators=None, sort_keys=False) with Python's output, keyword arguments included. Object
// keys keep their order.
func tojson(args []jinja.Value, kwargs map[string]jinja.Value) (jinja.Value, error) {
	if len(args) == 0 {
		return jinja.Undefined(), errors.New("tojson: no value")
	}
	enc := jsonEncoder{itemSep: ", ", keySep: ": "}
	if v, ok := kwargs["indent"]; ok && !v.IsNone() && !v.IsUndefined() {
		switch {
		case v.IsInt():
			enc.indent = strings.Repeat(" ", max(int(v.AsInt()), 0))
		case v.IsString():
			enc.indent = v.AsString()
		default:
			return jinja.Undefined(), fmt.Errorf("tojson: indent must be an integer or a string, not %s", v.String())
		}
		enc.indented = true
		enc.itemSep = ","
	}
	if v, ok := kwargs["separators"]; ok && !v.IsNone() && !v.IsUndefined() {
		if !v.IsList() || v.AsList().Len() != 2 || !v.AsList().Get(0).IsString() || !v.AsList().Get(1).IsString() {
			return jinja.Undefined(), errors.New("tojson: separators must be a pair of strings")
		}
		enc.itemSep = v.AsList().Get(0).AsString()
		enc.keySep = v.AsList().Get(1).AsString()
	}
	if v, ok := kwargs["ensure_ascii"]; ok {
		enc.ascii = v.IsTruthy()
	}
	if v, ok := kwargs["sort_keys"]; ok {
		enc.sortKeys = v.IsTruthy()
	}
	var b strings.Builder
	if err := enc.encode(&b, args[0], 0); err != nil {
		return jinja.Undefined(), fmt.Errorf("tojson: %w", err)
	}
	return jinja.NewString(b.String()), nil
}

type jsonEncoder struct {
	itemSep, keySep string
	indent          string
	indented        bool
	ascii           bool
	sortKeys        bool
}

func (e *jsonEncoder) newline(b *strings.Builder, depth int) {
	if !e.indented {
		return
	}
	b.WriteByte('\n')
	for range depth {
		b.WriteString(e.indent)
	}
}

func (e *jsonEncoder) encode(b *strings.Builder, v jinja.Value, depth int) error {
	switch {
	case v.IsUndefined(), v.IsNone():
		b.WriteString("null")
	case v.IsBool():
		if v.AsBool() {
			b.WriteString("true")
		} else {
			b.WriteString("false")
		}
	case v.IsInt():
		b.WriteString(strconv.FormatInt(v.AsInt(), 10))
	case v.IsFloat():
		b.WriteString(pyFloat(v.AsFloat()))
	case v.IsString():
		e.str(b, v.AsString())
	case v.IsList():
		items := v.AsList().Items
		if len(items) == 0 {
			b.WriteString("[]")
			return nil
		}
		b.WriteByte('[')
		for i, item := range items {
			if i > 0 {
				b.WriteString(e.itemSep)
			}
			e.newline(b, depth+1)
			if err := e.encode(b, item, depth+1); err != nil {
				return err
			}
		}
		e.newline(b, depth)
		b.WriteByte(']')
	case v.IsDict():
		d := v.AsDict()
		if d.Len() == 0 {
			b.WriteString("{}")
			return nil
		}
		keys := d.OrderedKeys()
		if e.sortKeys {
			sort.Strings(keys) // Python sorts str keys by code point, as Go compares UTF-8
		}
		b.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				b.WriteString(e.itemSep)
			}
			e.newline(b, depth+1)
			e.str(b, k)
			b.WriteString(e.keySep)
			val, _ := d.Get(k)
			if err := e.encode(b, val, depth+1); err != nil {
				return err
			}
		}
		e.newline(b, depth)
		b.WriteByte('}')
	case v.IsCallable():
		return fmt.Errorf("%s is not JSON serializable", v.String())
	default:
		b.WriteString("null")
	}
	return nil
}

// str writes s as Python's json.dumps does: \" \\ \n \r \t \b \f, other control characters as
// \u00XX; with ensure_ascii every non-ASCII character (and DEL) as \uXXXX, astral ones as a
// surrogate pair. Invalid UTF-8 (which a Python str cannot hold) becomes U+FFFD.
func (e *jsonEncoder) str(b *strings.Builder, s string) {
	const hex = "0123456789abcdef"
	u4 := func(r rune) {
		b.WriteString(`\u`)
		b.WriteByte(hex[r>>12&0xf])
		b.WriteByte(hex[r>>8&0xf])
		b.WriteByte(hex[r>>4&0xf])
		b.WriteByte(hex[r&0xf])
	}
	b.WriteByte('"')
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		i += size
		switch {
		case r == '"':
			b.WriteString(`\"`)
		case r == '\\':
			b.WriteString(`\\`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\b':
			b.WriteString(`\b`)
		case r == '\f':
			b.WriteString(`\f`)
		case r < 0x20:
			u4(r)
		case e.ascii && r >= 0x7f:
			if r > 0xffff {
				r -= 0x10000
				u4(0xd800 + r>>10)
				u4(0xdc00 + r&0x3ff)
			} else {
				u4(r)
			}
		default:
			b.WriteRune(r) // utf8.RuneError for invalid bytes, written as U+FFFD
		}
	}
	b.WriteByte('"')
}

// pyFloat formats f as Python's float repr (and so json.dumps) does: the shortest digits that
// round-trip, fixed notation with at least one decimal for exponents in [-4, 16), scientific
// with a two-digit exponent otherwise: 1.0, 0.0001, 1e-05, 1234567.5, 1e+16.
func pyFloat(f float64) string {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	}
	sci := strconv.FormatFloat(f, 'e', -1, 64) // d.ddde±XX
	exp, _ := strconv.Atoi(sci[strings.IndexByte(sci, 'e')+1:])
	if exp < -4 || exp >= 16 {
		return sci
	}
	s := strconv.FormatFloat(f, 'f', -1, 64)
	if !strings.ContainsRune(s, '.') {
		s += ".0"
	}
	return s
}

// ---------------------------------------------------------------------------------------------
// strftime_now

// strftimeNow returns HF's strftime_now(format): datetime.now().strftime(format), local time.
func strftimeNow(now func() time.Time) func([]jinja.Value, map[string]jinja.Value) (jinja.Value, error) {
	return func(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
		if len(args) == 0 || !args[0].IsString() {
			return jinja.Undefined(), errors.New("strftime_now: the format must be a string")
		}
		t := time.Now()
		if now != nil {
			t = now()
		}
		return jinja.NewString(strftime(t, args[0].AsString())), nil
	}
}

// strftime formats t with C/Python strftime directives (C locale), including glibc's %-d style
// no-padding flag that chat templates use. Unknown directives are written as they are.
func strftime(t time.Time, format string) string {
	var b strings.Builder
	for i := 0; i < len(format); i++ {
		c := format[i]
		if c != '%' || i+1 == len(format) {
			b.WriteByte(c)
			continue
		}
		i++
		pad := true
		if format[i] == '-' && i+1 < len(format) {
			pad = false
			i++
		}
		num := func(n, width int) {
			s := strconv.Itoa(n)
			if pad {
				for len(s) < width {
					s = "0" + s
				}
			}
			b.WriteString(s)
		}
		hour12 := t.Hour() % 12
		if hour12 == 0 {
			hour12 = 12
		}
		switch format[i] {
		case 'Y':
			b.WriteString(strconv.Itoa(t.Year()))
		case 'y':
			num(t.Year()%100, 2)
		case 'm':
			num(int(t.Month()), 2)
		case 'd':
			num(t.Day(), 2)
		case 'e':
			s := strconv.Itoa(t.Day())
			if pad && len(s) < 2 {
				s = " " + s
			}
			b.WriteString(s)
		case 'j':
			num(t.YearDay(), 3)
		case 'H':
			num(t.Hour(), 2)
		case 'I':
			num(hour12, 2)
		case 'M':
			num(t.Minute(), 2)
		case 'S':
			num(t.Second(), 2)
		case 'f':
			num(t.Nanosecond()/1000, 6)
		case 'p':
			if t.Hour() < 12 {
				b.WriteString("AM")
			} else {
				b.WriteString("PM")
			}
		case 'a':
			b.WriteString(t.Weekday().String()[:3])
		case 'A':
			b.WriteString(t.Weekday().String())
		case 'w':
			b.WriteString(strconv.Itoa(int(t.Weekday())))
		case 'u':
			wd := int(t.Weekday())
			if wd == 0 {
				wd = 7
			}
			b.WriteString(strconv.Itoa(wd))
		case 'b', 'h':
			b.WriteString(t.Month().String()[:3])
		case 'B':
			b.WriteString(t.Month().String())
		case 'Z':
			name, _ := t.Zone()
			b.WriteString(name)
		case 'z':
			b.WriteString(t.Format("-0700"))
		case 'F':
			b.WriteString(t.Format("2006-01-02"))
		case 'T':
			b.WriteString(t.Format("15:04:05"))
		case 'D':
			b.WriteString(t.Format("01/02/06"))
		case 'R':
			b.WriteString(t.Format("15:04"))
		case 'c':
			b.WriteString(t.Format("Mon Jan _2 15:04:05 2006"))
		case 'x':
			b.WriteString(t.Format("01/02/06"))
		case 'X':
			b.WriteString(t.Format("15:04:05"))
		case 'n':
			b.WriteByte('\n')
		case 't':
			b.WriteByte('\t')
		case '%':
			b.WriteByte('%')
		default:
			b.WriteByte('%')
			if !pad {
				b.WriteByte('-')
			}
			b.WriteByte(format[i])
		}
	}
	return b.String()
}

// ---------------------------------------------------------------------------------------------
// Printing

// strName wraps every {{ … }} expression (see rewriteTag), so that values print as Python's
// str() prints them, as in Jinja2: None as None, floats as repr (1.0, 1234567.5), lists and
// dicts as Python reprs. The engine alone prints None as "", 1.0 as 1, 1234567.5 as
// 1.2345675e+06.
const strName = "__tandem_str"

func pyStrCallable(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	if len(args) != 1 {
		return jinja.Undefined(), fmt.Errorf("internal print wrapper called with %d values", len(args))
	}
	v := args[0]
	if v.IsString() {
		return v, nil
	}
	return jinja.NewString(pyStr(v)), nil
}

// pyStr is Python's str() of a template value; undefined prints as "" (Jinja2's Undefined).
func pyStr(v jinja.Value) string {
	switch {
	case v.IsUndefined(), v.IsCallable():
		return ""
	case v.IsString():
		return v.AsString()
	}
	var b strings.Builder
	pyRepr(&b, v)
	return b.String()
}

// pyRepr writes Python's repr() of v.
func pyRepr(b *strings.Builder, v jinja.Value) {
	switch {
	case v.IsUndefined(), v.IsCallable():
		b.WriteString("Undefined")
	case v.IsNone():
		b.WriteString("None")
	case v.IsBool():
		if v.AsBool() {
			b.WriteString("True")
		} else {
			b.WriteString("False")
		}
	case v.IsInt():
		b.WriteString(strconv.FormatInt(v.AsInt(), 10))
	case v.IsFloat():
		f := v.AsFloat()
		switch {
		case math.IsNaN(f):
			b.WriteString("nan")
		case math.IsInf(f, 1):
			b.WriteString("inf")
		case math.IsInf(f, -1):
			b.WriteString("-inf")
		default:
			b.WriteString(pyFloat(f))
		}
	case v.IsString():
		pyStrRepr(b, v.AsString())
	case v.IsList():
		b.WriteByte('[')
		for i, item := range v.AsList().Items {
			if i > 0 {
				b.WriteString(", ")
			}
			pyRepr(b, item)
		}
		b.WriteByte(']')
	case v.IsDict():
		d := v.AsDict()
		b.WriteByte('{')
		for i, k := range d.OrderedKeys() {
			if i > 0 {
				b.WriteString(", ")
			}
			pyStrRepr(b, k)
			b.WriteString(": ")
			val, _ := d.Get(k)
			pyRepr(b, val)
		}
		b.WriteByte('}')
	}
}

// pyStrRepr writes Python's repr() of a string: single quotes unless the string holds a single
// quote and no double quote; \\, the quote, \n, \r, \t escaped; other unprintable characters
// as \xhh, \uhhhh or \Uhhhhhhhh.
func pyStrRepr(b *strings.Builder, s string) {
	q := byte('\'')
	if strings.IndexByte(s, '\'') >= 0 && strings.IndexByte(s, '"') < 0 {
		q = '"'
	}
	b.WriteByte(q)
	for _, r := range s {
		switch {
		case r == '\\':
			b.WriteString(`\\`)
		case r == rune(q):
			b.WriteByte('\\')
			b.WriteByte(q)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == ' ' || unicode.IsPrint(r):
			b.WriteRune(r)
		case r < 0x100:
			fmt.Fprintf(b, `\x%02x`, r)
		case r < 0x10000:
			fmt.Fprintf(b, `\u%04x`, r)
		default:
			fmt.Fprintf(b, `\U%08x`, r)
		}
	}
	b.WriteByte(q)
}
