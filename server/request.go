package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"strings"
)

// The request bodies of the two completion routes. Optional numbers are pointers so "absent"
// (use the server's default) differs from zero. Fields OpenAI defines that Tandem cannot honour
// are decoded too, so a request using them is refused by name instead of silently ignored.
// Unknown fields are ignored, as OpenAI's own clients send fields servers do not know (user,
// metadata, store, parallel_tool_calls).

// commonRequest holds the fields chat and text completions share.
type commonRequest struct {
	Model         string         `json:"model"`
	Stream        bool           `json:"stream"`
	StreamOptions *streamOptions `json:"stream_options"`
	MaxTokens     *wholeInt      `json:"max_tokens"`

	Temperature       *float64  `json:"temperature"`
	TopP              *float64  `json:"top_p"`
	TopK              *wholeInt `json:"top_k"`
	MinP              *float64  `json:"min_p"`
	RepetitionPenalty *float64  `json:"repetition_penalty"`
	FrequencyPenalty  *float64  `json:"frequency_penalty"`
	PresencePenalty   *float64  `json:"presence_penalty"`
	Seed              *int64    `json:"seed"`

	Stop         stopField          `json:"stop"`
	StopTokenIDs []int64            `json:"stop_token_ids"` // vLLM's extension: extra stop token ids
	N            *wholeInt          `json:"n"`
	LogitBias    map[string]float64 `json:"logit_bias"`
}

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// chatRequest is POST /v1/chat/completions. Messages and tools stay raw JSON: they go to the
// chat template in their key order (tool schemas and arguments print in the order given).
type chatRequest struct {
	commonRequest
	Messages            json.RawMessage `json:"messages"`
	MaxCompletionTokens *wholeInt       `json:"max_completion_tokens"`
	Logprobs            *bool           `json:"logprobs"`
	TopLogprobs         *wholeInt       `json:"top_logprobs"`
	Tools               json.RawMessage `json:"tools"`
	ToolChoice          toolChoiceField `json:"tool_choice"`
	// ChatTemplateKwargs are extra template variables (vLLM's extension), e.g.
	// {"enable_thinking": true}.
	ChatTemplateKwargs map[string]json.RawMessage `json:"chat_template_kwargs"`
	ReasoningEffort    *string                    `json:"reasoning_effort"`
	ResponseFormat     *responseFormat            `json:"response_format"`
}

type responseFormat struct {
	Type string `json:"type"`
}

// completionRequest is POST /v1/completions.
type completionRequest struct {
	commonRequest
	Prompt   promptField `json:"prompt"`
	Logprobs *wholeInt   `json:"logprobs"` // the number of alternatives, 0 for the chosen token's only
	Echo     bool        `json:"echo"`
	BestOf   *wholeInt   `json:"best_of"`
	Suffix   *string     `json:"suffix"`
	// SkipSpecialTokens (vLLM's extension, default true) drops special tokens from the text.
	SkipSpecialTokens *bool `json:"skip_special_tokens"`
}

// wholeInt is an integer field that also takes a whole number written as a float (5.0,
// 1e3), as Python clients send and vLLM accepts; a fraction is still a 400.
type wholeInt int

func (w *wholeInt) UnmarshalJSON(b []byte) error {
	var n int32
	if err := json.Unmarshal(b, &n); err != nil { // its error names what came, for the 400
		var f float64
		if json.Unmarshal(b, &f) != nil || f != math.Trunc(f) || f < math.MinInt32 || f > math.MaxInt32 {
			return err
		}
		n = int32(f)
	}
	*w = wholeInt(n)
	return nil
}

// stopField is "stop": a string, a list of strings, or null.
type stopField []string

func (s *stopField) UnmarshalJSON(b []byte) error {
	if isNull(b) {
		*s = nil
		return nil
	}
	var one string
	if json.Unmarshal(b, &one) == nil {
		*s = stopField{one}
		return nil
	}
	var many []string
	if json.Unmarshal(b, &many) != nil {
		return badRequest("stop", "stop: want a string or an array of strings, got %s", jsonKind(b))
	}
	*s = many
	return nil
}

// promptField is "prompt": text, or token ids. OpenAI also allows a list of prompts (a list of
// strings or of id lists); a list of one is taken as that prompt, a longer one is refused.
type promptField struct {
	Set  bool
	Text string
	IDs  []int64 // nil for text
	IsID bool
}

func (p *promptField) UnmarshalJSON(b []byte) error {
	if isNull(b) {
		*p = promptField{}
		return nil
	}
	var text string
	if json.Unmarshal(b, &text) == nil {
		*p = promptField{Set: true, Text: text}
		return nil
	}
	var ids []int64
	if json.Unmarshal(b, &ids) == nil {
		*p = promptField{Set: true, IDs: ids, IsID: true}
		return nil
	}
	var list []json.RawMessage
	if json.Unmarshal(b, &list) != nil {
		return badRequest("prompt", "prompt: want a string, an array of token ids, or a list with one of those; got %s", jsonKind(b))
	}
	if len(list) != 1 {
		return badRequest("prompt", "prompt: a list of %d prompts is not supported; send one prompt per request", len(list))
	}
	var inner promptField
	if err := inner.UnmarshalJSON(list[0]); err != nil {
		return err
	}
	if bytes.HasPrefix(bytes.TrimSpace(list[0]), []byte("[")) && !inner.IsID {
		return badRequest("prompt", "prompt: want a string, an array of token ids, or a list with one of those")
	}
	*p = inner
	return nil
}

// toolChoiceField is "tool_choice": "none", "auto", "required", or {"type": "function",
// "function": {"name": …}}.
type toolChoiceField struct {
	Mode     string // none, auto, required, function; "" when absent
	Function string
}

func (t *toolChoiceField) UnmarshalJSON(b []byte) error {
	if isNull(b) {
		*t = toolChoiceField{}
		return nil
	}
	var mode string
	if json.Unmarshal(b, &mode) == nil {
		switch mode {
		case "none", "auto", "required":
			*t = toolChoiceField{Mode: mode}
			return nil
		}
		return badRequest("tool_choice", `tool_choice: want "none", "auto", "required" or {"type": "function", "function": {"name": …}}, got %q`, mode)
	}
	var named struct {
		Type     string `json:"type"`
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	}
	if json.Unmarshal(b, &named) != nil || named.Type != "function" || named.Function.Name == "" {
		return badRequest("tool_choice", `tool_choice: want "none", "auto", "required" or {"type": "function", "function": {"name": …}}`)
	}
	*t = toolChoiceField{Mode: "function", Function: named.Function.Name}
	return nil
}

func isNull(b []byte) bool { return string(bytes.TrimSpace(b)) == "null" }

// jsonKind names the kind of a JSON value for error messages.
func jsonKind(b []byte) string {
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return "nothing"
	}
	switch b[0] {
	case '"':
		return "a string"
	case '[':
		return "an array"
	case '{':
		return "an object"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	return "a number"
}

// decodeBody decodes a request body into v, turning decoding errors into 400s that name the
// field at fault.
func decodeBody(body []byte, v any) error {
	if len(bytes.TrimSpace(body)) == 0 {
		return badRequest("", "the request body is empty; send a JSON object")
	}
	if err := json.Unmarshal(body, v); err != nil {
		return jsonError(err)
	}
	return nil
}

func jsonError(err error) error {
	var (
		ae *apiError
		se *json.SyntaxError
		te *json.UnmarshalTypeError
	)
	switch {
	case errors.As(err, &ae):
		return ae
	case errors.As(err, &se):
		return badRequest("", "malformed JSON: %v (at byte %d)", se, se.Offset)
	case errors.As(err, &te):
		// The path names Go's embedded struct; the client knows only the JSON names.
		te.Field = strings.TrimPrefix(te.Field, "commonRequest.")
		if te.Field == "" || te.Field == "commonRequest" {
			return badRequest("", "the request body must be a JSON object, got %s", valueName(te.Value))
		}
		return badRequest(te.Field, "%s: want %s, got %s", te.Field, typeName(te.Type), valueName(te.Value))
	case errors.Is(err, io.ErrUnexpectedEOF):
		return badRequest("", "malformed JSON: unexpected end of input")
	}
	return badRequest("", "malformed JSON: %v", err)
}

// typeName names a Go type the way a JSON client thinks of it.
func typeName(t reflect.Type) string {
	if t == nil {
		return "another type"
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		if t.Elem().Kind() == reflect.Uint8 && t.Name() == "RawMessage" {
			return "a JSON value"
		}
		return "an array"
	case reflect.Map, reflect.Struct:
		return "an object"
	}
	return t.String()
}

// valueName turns UnmarshalTypeError.Value ("string", "number 1.5", "array") into words.
func valueName(v string) string {
	switch {
	case v == "string", v == "array", v == "object":
		if v == "array" || v == "object" {
			return "an " + v
		}
		return "a string"
	case v == "bool":
		return "a boolean"
	case strings.HasPrefix(v, "number"):
		if n := strings.TrimSpace(strings.TrimPrefix(v, "number")); n != "" {
			return fmt.Sprintf("the number %s", n)
		}
		return "a number"
	}
	return v
}
