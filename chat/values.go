package chat

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/ardanlabs/jinja"
)

// maxJSONDepth bounds the nesting of request JSON decoded for a template, so a hostile body of
// a million '[' cannot recurse without limit.
const maxJSONDepth = 512

// decodeJSON decodes one JSON document into a template value with a streaming decoder: every
// object becomes an ordered jinja.Dict whose keys keep the order they have in the text (a
// duplicate key keeps its first position and its last value, as Python's json.loads does), and
// numbers written without '.', 'e' or 'E' that fit in an int64 become integers, the others
// floats, as in Python.
func decodeJSON(data []byte) (jinja.Value, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := decodeValue(dec, 0)
	if err != nil {
		return jinja.Undefined(), err
	}
	if _, err := dec.Token(); err != io.EOF {
		if err == nil {
			return jinja.Undefined(), errors.New("unexpected data after the JSON value")
		}
		return jinja.Undefined(), err
	}
	return v, nil
}

func decodeValue(dec *json.Decoder, depth int) (jinja.Value, error) {
	tok, err := dec.Token()
	if err != nil {
		if err == io.EOF {
			return jinja.Undefined(), io.ErrUnexpectedEOF
		}
		return jinja.Undefined(), err
	}
	switch t := tok.(type) {
	case json.Delim:
		if depth >= maxJSONDepth {
			return jinja.Undefined(), fmt.Errorf("JSON nested deeper than %d levels", maxJSONDepth)
		}
		switch t {
		case '{':
			d := jinja.NewDict()
			dict := d.AsDict()
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return jinja.Undefined(), err
				}
				key, ok := kt.(string)
				if !ok {
					return jinja.Undefined(), fmt.Errorf("object key is %v, not a string", kt)
				}
				v, err := decodeValue(dec, depth+1)
				if err != nil {
					return jinja.Undefined(), err
				}
				dict.Set(key, v)
			}
			if _, err := dec.Token(); err != nil { // '}'
				return jinja.Undefined(), err
			}
			return d, nil
		case '[':
			items := []jinja.Value{}
			for dec.More() {
				v, err := decodeValue(dec, depth+1)
				if err != nil {
					return jinja.Undefined(), err
				}
				items = append(items, v)
			}
			if _, err := dec.Token(); err != nil { // ']'
				return jinja.Undefined(), err
			}
			return jinja.NewList(items), nil
		}
		return jinja.Undefined(), fmt.Errorf("unexpected %q", t)
	case string:
		return jinja.NewString(t), nil
	case json.Number:
		return numberValue(t), nil
	case bool:
		return jinja.NewBool(t), nil
	case nil:
		return jinja.None(), nil
	}
	return jinja.Undefined(), fmt.Errorf("unexpected JSON token %v", tok)
}

func numberValue(n json.Number) jinja.Value {
	s := string(n)
	if !strings.ContainsAny(s, ".eE") {
		if i, err := n.Int64(); err == nil {
			return jinja.NewInt(i)
		}
	}
	f, err := n.Float64()
	if err != nil {
		// Out of float64 range: the decoder accepted it as JSON, Python would give inf.
		return jinja.NewString(s)
	}
	return jinja.NewFloat(f)
}

// isJSONNull reports whether raw is empty or the literal null.
func isJSONNull(raw json.RawMessage) bool {
	s := bytes.TrimSpace(raw)
	return len(s) == 0 || string(s) == "null"
}

// goValue converts an Options.Extra value: json.RawMessage and jinja.Value are used as they
// are (raw JSON keeps its key order); anything else goes through encoding/json, so structs keep
// their field order and Go maps are sorted by key.
func goValue(v any) (jinja.Value, error) {
	switch x := v.(type) {
	case jinja.Value:
		return x, nil
	case json.RawMessage:
		if len(bytes.TrimSpace(x)) == 0 {
			return jinja.None(), nil
		}
		return decodeJSON(x)
	case nil:
		return jinja.None(), nil
	case bool:
		return jinja.NewBool(x), nil
	case string:
		return jinja.NewString(x), nil
	case int:
		return jinja.NewInt(int64(x)), nil
	case int64:
		return jinja.NewInt(x), nil
	case float64:
		return jinja.NewFloat(x), nil
	}
	data, err := json.Marshal(v)
	if err != nil {
		return jinja.Undefined(), err
	}
	return decodeJSON(data)
}

// messageValue builds the dict a template sees for m: role and content always (as in an
// OpenAI request), the other fields only when set, so that `is defined` tests see what a
// request without them would give.
func messageValue(m Message, decodeArgs bool) (jinja.Value, error) {
	v := jinja.NewDict()
	d := v.AsDict()
	d.Set("role", jinja.NewString(m.Role))
	d.Set("content", jinja.NewString(m.Content))
	if m.ReasoningContent != "" {
		d.Set("reasoning_content", jinja.NewString(m.ReasoningContent))
	}
	if m.Name != "" {
		d.Set("name", jinja.NewString(m.Name))
	}
	if len(m.ToolCalls) > 0 {
		calls := make([]jinja.Value, len(m.ToolCalls))
		for i, c := range m.ToolCalls {
			cv := jinja.NewDict()
			cd := cv.AsDict()
			if c.ID != "" {
				cd.Set("id", jinja.NewString(c.ID))
			}
			typ := c.Type
			if typ == "" {
				typ = "function"
			}
			cd.Set("type", jinja.NewString(typ))
			fv := jinja.NewDict()
			fd := fv.AsDict()
			fd.Set("name", jinja.NewString(c.Function.Name))
			args := jinja.NewDict()
			if !isJSONNull(c.Function.Arguments) {
				a, err := decodeJSON(c.Function.Arguments)
				if err != nil {
					return jinja.Undefined(), fmt.Errorf("tool call %d (%s) arguments: %w", i, c.Function.Name, err)
				}
				args = a
			}
			fd.Set("arguments", args)
			cd.Set("function", fv)
			calls[i] = cv
		}
		d.Set("tool_calls", jinja.NewList(calls))
		if decodeArgs {
			decodeToolArguments(v)
		}
	}
	if m.ToolCallID != "" {
		d.Set("tool_call_id", jinja.NewString(m.ToolCallID))
	}
	return v, nil
}

// decodeToolArguments replaces, in one message, every tool call's function.arguments that is a
// string holding a JSON object by that object (keys in order): OpenAI clients send arguments as
// a JSON string, while templates written for transformers expect a mapping.
func decodeToolArguments(msg jinja.Value) {
	if !msg.IsDict() {
		return
	}
	calls, ok := msg.AsDict().Get("tool_calls")
	if !ok || !calls.IsList() {
		return
	}
	for _, c := range calls.AsList().Items {
		if !c.IsDict() {
			continue
		}
		holder := c.AsDict()
		if f, ok := holder.Get("function"); ok && f.IsDict() {
			holder = f.AsDict()
		}
		a, ok := holder.Get("arguments")
		if !ok || !a.IsString() {
			continue
		}
		if obj, err := decodeJSON([]byte(a.AsString())); err == nil && obj.IsDict() {
			holder.Set("arguments", obj)
		}
	}
}
