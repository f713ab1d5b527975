// Package chat renders a model's own chat template (the Jinja template shipped with its
// tokenizer) exactly as Hugging Face does, and names the markers that separate reasoning, tool
// calls and turn ends in each model family's output.
//
// Templates run on github.com/ardanlabs/jinja with the context transformers'
// apply_chat_template builds: messages, tools (None when absent), add_generation_prompt, the
// tokenizer's bos_token and eos_token, enable_thinking and any other chat_template_kwargs when
// given, and the functions raise_exception, strftime_now and tojson. Request JSON is decoded
// into ordered values, so the key order of tool schemas and tool-call arguments survives to
// what a template prints with tojson.
//
// The reference is transformers' environment: Python Jinja2 with trim_blocks and
// lstrip_blocks. Where the engine differs, the template text is rewritten before compiling
// (see prepareSource): Jinja2's whitespace control, raw blocks, newline normalization and
// trailing-newline removal, tag ends inside brackets and Python string escapes are applied
// here, tojson is HF's (key order kept with indent, ensure_ascii, separators, sort_keys,
// Python float formats, no U+2028 escaping), and {{ … }} and the string filter print values as
// Python's str() does (None, 1.0, Python reprs of lists and dicts).
//
// Known differences that remain, all outside what chat templates normally do: the `~`
// operator and the join filter print floats and None the engine's way (1.0 as 1); `**` always
// gives a float; `%` string formatting, str.startswith with a tuple and split's maxsplit are
// not supported; `'abc' is sequence` is false; a variable set inside a for loop keeps its
// value into the next iteration (Jinja2 resets it); `1/0` gives 0 instead of an error.
package chat

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/ardanlabs/jinja"
)

// Message is one chat message in OpenAI's shape, with the fields chat templates read.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
	// ReasoningContent is the assistant's reasoning (thinking) text, when kept apart from
	// Content; templates decide whether history shows it (most strip it).
	ReasoningContent string     `json:"reasoning_content,omitempty"`
	Name             string     `json:"name,omitempty"`
	ToolCalls        []ToolCall `json:"tool_calls,omitempty"`
	ToolCallID       string     `json:"tool_call_id,omitempty"`
}

// ToolCall is one tool call of an assistant message.
type ToolCall struct {
	ID       string       `json:"id,omitempty"`
	Type     string       `json:"type,omitempty"` // "function" when empty
	Function FunctionCall `json:"function"`
}

// FunctionCall names the function and its arguments.
type FunctionCall struct {
	Name string `json:"name"`
	// Arguments is a JSON object (kept in its key order) or a JSON string (passed to the
	// template as a string, as transformers does; see Options.DecodeToolArguments).
	Arguments json.RawMessage `json:"arguments,omitempty"`
}

// Options are the other inputs of a render.
type Options struct {
	// AddGenerationPrompt appends the tokens that open the assistant's turn.
	AddGenerationPrompt bool
	// Tools are the tool schemas (OpenAI {"type":"function","function":{…}} objects), each
	// kept in its key order. nil gives the template tools=None; a non-nil slice, even empty,
	// selects a "tool_use" template when the model has one, as transformers does.
	Tools []json.RawMessage
	// EnableThinking, when set, defines enable_thinking for templates that read it (Qwen3,
	// Gemma 4); nil leaves it undefined.
	EnableThinking *bool
	// Extra are further template variables (a request's chat_template_kwargs). A value may be
	// a json.RawMessage (decoded in key order), a jinja.Value, or any Go value encoding/json
	// can marshal. They may override bos_token and eos_token, not the other variables.
	Extra map[string]any
	// DecodeToolArguments turns tool-call arguments sent as a JSON string (OpenAI's wire
	// format) into the object they hold before rendering, as vLLM does; templates written for
	// transformers expect a mapping there. Off by default: transformers passes what it is given.
	DecodeToolArguments bool
	// Now is the clock of strftime_now; nil means time.Now.
	Now func() time.Time
}

// Template is a compiled chat template. It is safe for concurrent use.
type Template struct {
	name     string // "default", or the template's name in a list
	source   string
	bos, eos string
	compiled *jinja.Template
	toolUse  *Template            // a "tool_use" template, used when tools are given
	named    map[string]*Template // every named template of a list (Load), default included
}

// Source is the template text as loaded.
func (t *Template) Source() string { return t.source }

// BOS and EOS are the tokenizer's bos_token and eos_token ("" when it has none).
func (t *Template) BOS() string { return t.bos }
func (t *Template) EOS() string { return t.eos }

// Named returns the template of that name when the model ships a list of templates
// ("default", "tool_use", "rag", …).
func (t *Template) Named(name string) (*Template, bool) {
	if name == t.name {
		return t, true
	}
	n, ok := t.named[name]
	return n, ok
}

// Parse compiles a chat template and renders probe conversations with it, so a template that
// does not parse, or fails on an ordinary conversation (an unknown filter or test, a call of
// something undefined), is reported now rather than at the first request. bos and eos are the
// tokenizer's special tokens ("" leaves bos_token or eos_token undefined).
func Parse(source, bos, eos string) (*Template, error) {
	return parseNamed("default", source, bos, eos)
}

func parseNamed(name, source, bos, eos string) (*Template, error) {
	what := "the chat template"
	if name != "default" {
		what = fmt.Sprintf("the chat template %q", name)
	}
	prepared, err := prepareSource(source)
	if err != nil {
		return nil, fmt.Errorf("chat: %s does not parse: %w", what, err)
	}
	compiled, err := jinja.Compile(prepared)
	if err != nil {
		return nil, fmt.Errorf("chat: %s does not parse: %w", what, err)
	}
	t := &Template{name: name, source: source, bos: bos, eos: eos, compiled: compiled}
	if err := t.probe(); err != nil {
		return nil, fmt.Errorf("chat: %s %w", what, err)
	}
	return t, nil
}

// probe renders a one-message conversation, which must succeed, and two richer ones (system
// prompt, tools, a tool call and its result, thinking on and off), which may be refused by the
// template's own raise_exception (it may not support tools or system prompts) but must not hit
// an engine error.
func (t *Template) probe() error {
	yes, no := true, false
	if _, err := t.renderMessages([]Message{{Role: "user", Content: "Hello."}}, Options{AddGenerationPrompt: true}); err != nil {
		return fmt.Errorf("fails on a one-message conversation: %w", err)
	}
	tool := json.RawMessage(`{"type": "function", "function": {"name": "get_time", "description": "Current time.", ` +
		`"parameters": {"type": "object", "properties": {"zone": {"type": "string"}}, "required": ["zone"]}}}`)
	rich := []Message{
		{Role: "system", Content: "Be brief."},
		{Role: "user", Content: "What time is it in Oslo?"},
		{Role: "assistant", Content: "", ToolCalls: []ToolCall{{ID: "call_0", Type: "function",
			Function: FunctionCall{Name: "get_time", Arguments: json.RawMessage(`{"zone": "Europe/Oslo"}`)}}}},
		{Role: "tool", ToolCallID: "call_0", Name: "get_time", Content: "12:00"},
		{Role: "assistant", Content: "It is noon."},
		{Role: "user", Content: "Thanks."},
	}
	probes := []struct {
		what string
		msgs []Message
		opt  Options
	}{
		{"a conversation with tools, a tool call and thinking on", rich,
			Options{AddGenerationPrompt: true, Tools: []json.RawMessage{tool}, EnableThinking: &yes}},
		{"a multi-turn conversation with a system prompt and thinking off", []Message{rich[0], rich[1], rich[4], rich[5]},
			Options{AddGenerationPrompt: true, EnableThinking: &no}},
	}
	for _, p := range probes {
		if _, err := t.renderMessages(p.msgs, p.opt); err != nil {
			var te *TemplateError
			if !errors.As(err, &te) {
				return fmt.Errorf("fails on %s: %w", p.what, err)
			}
		}
	}
	return nil
}

// Load finds and parses the chat template of a model directory: chat_template.jinja when
// present, else tokenizer_config.json's "chat_template" (a string, or a list of {name,
// template} whose "default" is used and whose "tool_use" is used when tools are given), else
// chat_template.json's "chat_template". bos_token and eos_token come from
// tokenizer_config.json (or special_tokens_map.json). Every template found is parsed and
// probed (see Parse).
func Load(dir string) (*Template, error) {
	cfg, err := readJSONObject(filepath.Join(dir, "tokenizer_config.json"))
	if err != nil {
		return nil, err
	}
	bos, bosOK := specialToken(cfg, "bos_token")
	eos, eosOK := specialToken(cfg, "eos_token")
	if !bosOK || !eosOK {
		stm, err := readJSONObject(filepath.Join(dir, "special_tokens_map.json"))
		if err != nil {
			return nil, err
		}
		if !bosOK {
			bos, _ = specialToken(stm, "bos_token")
		}
		if !eosOK {
			eos, _ = specialToken(stm, "eos_token")
		}
	}

	jinjaPath := filepath.Join(dir, "chat_template.jinja")
	if src, err := os.ReadFile(jinjaPath); err == nil {
		t, err := Parse(string(src), bos, eos)
		if err != nil {
			return nil, fmt.Errorf("%w (from %s)", err, jinjaPath)
		}
		return t, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("chat: %w", err)
	}

	file := filepath.Join(dir, "tokenizer_config.json")
	raw, ok := cfg["chat_template"]
	if !ok || isJSONNull(raw) {
		file = filepath.Join(dir, "chat_template.json")
		ct, err := readJSONObject(file)
		if err != nil {
			return nil, err
		}
		raw, ok = ct["chat_template"]
		if !ok || isJSONNull(raw) {
			return nil, fmt.Errorf("chat: no chat template in %s (looked for chat_template.jinja, "+
				"tokenizer_config.json's chat_template and chat_template.json)", dir)
		}
	}
	t, err := fromConfigValue(raw, bos, eos)
	if err != nil {
		return nil, fmt.Errorf("%w (from %s)", err, file)
	}
	return t, nil
}

// fromConfigValue parses a "chat_template" value: a string, or a list of {name, template}.
func fromConfigValue(raw json.RawMessage, bos, eos string) (*Template, error) {
	var src string
	if err := json.Unmarshal(raw, &src); err == nil {
		return Parse(src, bos, eos)
	}
	var list []struct {
		Name     string `json:"name"`
		Template string `json:"template"`
	}
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, errors.New(`chat: "chat_template" is neither a string nor a list of {name, template}`)
	}
	named := map[string]*Template{}
	var names []string
	for _, e := range list {
		t, err := parseNamed(e.Name, e.Template, bos, eos)
		if err != nil {
			return nil, err
		}
		named[e.Name] = t
		names = append(names, e.Name)
	}
	def, ok := named["default"]
	if !ok {
		return nil, fmt.Errorf("chat: the chat templates %q include no \"default\"", names)
	}
	def.toolUse = named["tool_use"]
	def.named = named
	return def, nil
}

// readJSONObject reads a JSON object's top-level fields; a missing file gives an empty map.
func readJSONObject(path string) (map[string]json.RawMessage, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return map[string]json.RawMessage{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("chat: %w", err)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("chat: %s: %w", path, err)
	}
	return m, nil
}

// specialToken reads a special token that is a string or an AddedToken object {"content": …};
// ok reports whether the key is present (null counts: the tokenizer has no such token).
func specialToken(m map[string]json.RawMessage, key string) (tok string, ok bool) {
	raw, ok := m[key]
	if !ok {
		return "", false
	}
	if json.Unmarshal(raw, &tok) == nil {
		return tok, true
	}
	var added struct {
		Content string `json:"content"`
	}
	if json.Unmarshal(raw, &added) == nil {
		return added.Content, true
	}
	return "", true
}

// Render renders messages with the template.
func (t *Template) Render(messages []Message, opt Options) (string, error) {
	out, err := t.renderMessages(messages, opt)
	if err != nil {
		return "", fmt.Errorf("chat: %w", err)
	}
	return out, nil
}

func (t *Template) renderMessages(messages []Message, opt Options) (string, error) {
	msgs := make([]jinja.Value, len(messages))
	for i, m := range messages {
		v, err := messageValue(m, opt.DecodeToolArguments)
		if err != nil {
			return "", fmt.Errorf("message %d: %w", i, err)
		}
		msgs[i] = v
	}
	tools, err := toolsValue(opt.Tools)
	if err != nil {
		return "", err
	}
	return t.render(jinja.NewList(msgs), tools, opt)
}

// RenderJSON renders an OpenAI-style request's raw "messages" array and "tools" array (empty
// or null for none; when absent, opt.Tools is used). The JSON is decoded into ordered values,
// so every object keeps its key order through to tojson, and messages keep every field they
// carry (content parts, unknown fields) for the template to read.
func (t *Template) RenderJSON(messages json.RawMessage, tools json.RawMessage, opt Options) (string, error) {
	if isJSONNull(messages) {
		return "", errors.New("chat: no messages")
	}
	mv, err := decodeJSON(messages)
	if err != nil {
		return "", fmt.Errorf("chat: messages: %w", err)
	}
	if !mv.IsList() {
		return "", errors.New("chat: messages is not a JSON array")
	}
	for i, m := range mv.AsList().Items {
		if !m.IsDict() {
			return "", fmt.Errorf("chat: message %d is not a JSON object", i)
		}
		if opt.DecodeToolArguments {
			decodeToolArguments(m)
		}
	}
	var tv jinja.Value
	if isJSONNull(tools) {
		if tv, err = toolsValue(opt.Tools); err != nil {
			return "", fmt.Errorf("chat: %w", err)
		}
	} else {
		if tv, err = decodeJSON(tools); err != nil {
			return "", fmt.Errorf("chat: tools: %w", err)
		}
		if !tv.IsList() {
			return "", errors.New("chat: tools is not a JSON array")
		}
	}
	out, err := t.render(mv, tv, opt)
	if err != nil {
		return "", fmt.Errorf("chat: %w", err)
	}
	return out, nil
}

func toolsValue(tools []json.RawMessage) (jinja.Value, error) {
	if tools == nil {
		return jinja.None(), nil
	}
	items := make([]jinja.Value, len(tools))
	for i, raw := range tools {
		v, err := decodeJSON(raw)
		if err != nil {
			return jinja.Undefined(), fmt.Errorf("tool %d: %w", i, err)
		}
		items[i] = v
	}
	return jinja.NewList(items), nil
}

// reserved are the variables Options.Extra may not set.
var reserved = []string{"messages", "tools", "add_generation_prompt", "raise_exception", "strftime_now", tojsonName, strName}

// Reserved reports whether name is a template variable Options.Extra may not set: the
// renderer defines it (messages, tools, add_generation_prompt, raise_exception, …).
func Reserved(name string) bool { return slices.Contains(reserved, name) }

func (t *Template) render(messages, tools jinja.Value, opt Options) (string, error) {
	tmpl := t
	if !tools.IsNone() && t.toolUse != nil {
		tmpl = t.toolUse
	}
	ctx := make(map[string]jinja.Value, 8+len(opt.Extra))
	if t.bos != "" {
		ctx["bos_token"] = jinja.NewString(t.bos)
	}
	if t.eos != "" {
		ctx["eos_token"] = jinja.NewString(t.eos)
	}
	for k, v := range opt.Extra {
		if slices.Contains(reserved, k) {
			return "", fmt.Errorf("template variable %q cannot be set through Options.Extra", k)
		}
		if k == "enable_thinking" && opt.EnableThinking != nil {
			return "", errors.New("enable_thinking is given both in Options.EnableThinking and Options.Extra")
		}
		jv, err := goValue(v)
		if err != nil {
			return "", fmt.Errorf("template variable %q: %w", k, err)
		}
		ctx[k] = jv
	}
	ctx["messages"] = messages
	ctx["tools"] = tools
	ctx["add_generation_prompt"] = jinja.NewBool(opt.AddGenerationPrompt)
	if opt.EnableThinking != nil {
		ctx["enable_thinking"] = jinja.NewBool(*opt.EnableThinking)
	}
	ctx["raise_exception"] = jinja.NewCallable("raise_exception", raiseException)
	ctx["strftime_now"] = jinja.NewCallable("strftime_now", strftimeNow(opt.Now))
	ctx[tojsonName] = jinja.NewCallable("tojson", tojson)
	ctx[strName] = jinja.NewCallable("str", pyStrCallable)

	out, err := tmpl.compiled.RenderValues(ctx)
	if err != nil {
		var te *TemplateError
		if errors.As(err, &te) {
			return "", fmt.Errorf("the chat template refused the conversation: %w", err)
		}
		msg := strings.ReplaceAll(err.Error(), tojsonName, "tojson")
		return "", fmt.Errorf("rendering the chat template: %s", msg)
	}
	return out, nil
}
