package chat

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

func mustParse(t *testing.T, src string) *Template {
	t.Helper()
	tmpl, err := Parse(src, "<s>", "</s>")
	if err != nil {
		t.Fatal(err)
	}
	return tmpl
}

func render(t *testing.T, tmpl *Template, msgs []Message, opt Options) string {
	t.Helper()
	out, err := tmpl.Render(msgs, opt)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

var hello = []Message{{Role: "user", Content: "Hi"}}

func TestParseSyntaxErrors(t *testing.T) {
	for src, want := range map[string]string{
		"{% if messages %}no end":                 "unclosed if",
		"{{ messages[0].content ":                 "unclosed expression tag",
		"{{ 'abc }}":                              "unterminated string in expression tag",
		"{# no end":                               "unclosed comment",
		"{% raw %}x":                              "without {% endraw %}",
		"{% for %}{% endfor %}":                   "for loop missing 'in'",
		"{% endif %}":                             `unknown statement "endif"`,
		"{{ x y }}":                               `"y"`,
		"{% for m in messages %}{{ m.content }}":  "unclosed for",
		"{% macro f(x) %}{{ x }}{% endmacro %}{{": "unclosed expression",
	} {
		_, err := Parse(src, "", "")
		if err == nil {
			t.Errorf("%q parsed", src)
			continue
		}
		if !strings.Contains(err.Error(), "chat template does not parse") || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: error %q, want it to say the template does not parse and %q", src, err, want)
		}
	}
}

// Parse errors name the line of the original template, whatever the rewriting did.
func TestParseErrorLine(t *testing.T) {
	src := "{#- a comment\nover two lines -#}\n{% if messages %}\n  text   \n{%- endif %}\n{{ 'a\\\nb' }}\n\n{{ x y }}\n"
	_, err := Parse(src, "", "")
	if err == nil || !strings.Contains(err.Error(), "line 9:") {
		t.Errorf("error %v, want it at line 9", err)
	}
}

// A template that parses but fails on an ordinary conversation is refused at load.
func TestRenderErrorsCaughtAtParse(t *testing.T) {
	for src, want := range map[string]string{
		"{{ messages[0].content }}{{ undefined_helper() }}":                             "undefined_helper is not callable",
		"{{ messages | no_such_filter }}":                                               `unknown filter "no_such_filter"`,
		"{% if messages is no_such_test %}x{% endif %}":                                 `unknown test "no_such_test"`,
		"{{ raise_exception('this template is broken') }}":                              "this template is broken",
		"{% for m in messages %}{% if tools %}{{ tools | foo }}{% endif %}{% endfor %}": `unknown filter "foo"`,
		"{% for m in messages %}{% if m.tool_calls %}{{ m.tool_calls[0].function.arguments | tojson(indent=[1]) }}{% endif %}{% endfor %}": "tojson",
	} {
		_, err := Parse(src, "", "")
		if err == nil {
			t.Errorf("%q loaded", src)
			continue
		}
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q: error %q, want %q", src, err, want)
		}
	}
	// A deliberate raise_exception in a branch the basic conversation does not take (here:
	// tools) is the template's choice, not a defect: it loads.
	if _, err := Parse("{% if tools %}{{ raise_exception('no tools') }}{% endif %}{{ messages[0].content }}", "", ""); err != nil {
		t.Errorf("template refusing tools did not load: %v", err)
	}
}

func TestRaiseException(t *testing.T) {
	tmpl := mustParse(t, `{% for m in messages %}{% if m.role not in ['user', 'assistant'] %}`+
		`{{ raise_exception('Unsupported role: ' ~ m.role ~ ' (message ' ~ loop.index0 ~ ')') }}{% endif %}`+
		`{{ m.role }}: {{ m.content }}
{% endfor %}`)
	_, err := tmpl.Render([]Message{{Role: "user", Content: "a"}, {Role: "robot", Content: "b"}}, Options{})
	var te *TemplateError
	if !errors.As(err, &te) {
		t.Fatalf("error %v is not a *TemplateError", err)
	}
	if te.Message != "Unsupported role: robot (message 1)" {
		t.Errorf("message %q", te.Message)
	}
	if !strings.Contains(err.Error(), "refused the conversation: Unsupported role: robot") {
		t.Errorf("error text %q", err)
	}
	if got := render(t, tmpl, []Message{{Role: "user", Content: "a"}}, Options{}); got != "user: a\n" {
		t.Errorf("got %q", got)
	}
}

func TestContextVariables(t *testing.T) {
	tmpl := mustParse(t, `[{{ bos_token }}|{{ eos_token }}|{{ add_generation_prompt }}|`+
		`{{ 'thinking=' ~ enable_thinking if enable_thinking is defined else 'no-thinking' }}|`+
		`{{ 'tools=none' if tools is none else tools | length }}|{{ custom | default('-') }}]`)
	yes := true
	cases := []struct {
		opt  Options
		want string
	}{
		{Options{}, "[<s>|</s>|False|no-thinking|tools=none|-]"},
		{Options{AddGenerationPrompt: true, EnableThinking: &yes}, "[<s>|</s>|True|thinking=True|tools=none|-]"},
		{Options{Tools: []json.RawMessage{}}, "[<s>|</s>|False|no-thinking|0|-]"},
		{Options{Extra: map[string]any{"custom": "x", "bos_token": "<B>"}}, "[<B>|</s>|False|no-thinking|tools=none|x]"},
	}
	for _, c := range cases {
		if got := render(t, tmpl, hello, c.opt); got != c.want {
			t.Errorf("got %q, want %q", got, c.want)
		}
	}
	// A template without special tokens leaves them undefined, as transformers does.
	bare, err := Parse("{{ bos_token is defined }}", "", "")
	if err != nil {
		t.Fatal(err)
	}
	if got := render(t, bare, hello, Options{}); got != "False" {
		t.Errorf("bos_token defined without a BOS: %q", got)
	}
	for _, k := range []string{"messages", "tools", "add_generation_prompt", "raise_exception"} {
		if _, err := tmpl.Render(hello, Options{Extra: map[string]any{k: 1}}); err == nil {
			t.Errorf("Extra %q accepted", k)
		}
	}
	if _, err := tmpl.Render(hello, Options{EnableThinking: &yes, Extra: map[string]any{"enable_thinking": false}}); err == nil {
		t.Error("enable_thinking given twice accepted")
	}
}

func TestExtraValues(t *testing.T) {
	tmpl := mustParse(t, `{{ a | tojson }} {{ b | tojson }} {{ c | tojson }}`)
	type S struct {
		Z int    `json:"z"`
		A string `json:"a"`
	}
	got := render(t, tmpl, hello, Options{Extra: map[string]any{
		"a": json.RawMessage(`{"z": 1, "a": [true, null]}`),
		"b": S{Z: 2, A: "x"},
		"c": map[string]any{"z": 1, "a": 2},
	}})
	if want := `{"z": 1, "a": [true, null]} {"z": 2, "a": "x"} {"a": 2, "z": 1}`; got != want {
		t.Errorf("got %s\nwant %s", got, want)
	}
}

func TestTojson(t *testing.T) {
	tools := []json.RawMessage{json.RawMessage(`{"zeta": "é\u2028\u0001\"\\/", "alpha": {"b": [1, -2.5, 1.0, 1e-7, 1e16, 1234567.5, 12345678901234567890], "a": null}, "mid": false}`)}
	cases := map[string]string{
		`{{ tools[0] | tojson }}`:                 `{"zeta": "é` + "\u2028" + `\u0001\"\\/", "alpha": {"b": [1, -2.5, 1.0, 1e-07, 1e+16, 1234567.5, 1.2345678901234567e+19], "a": null}, "mid": false}`,
		`{{ tools[0].alpha | tojson(indent=2) }}`: "{\n  \"b\": [\n    1,\n    -2.5,\n    1.0,\n    1e-07,\n    1e+16,\n    1234567.5,\n    1.2345678901234567e+19\n  ],\n  \"a\": null\n}",
		`{{ tools[0].alpha.a | tojson(indent=0) }}|{{ [] | tojson(indent=4) }}|{{ {} | tojson(indent=4) }}`: "null|[]|{}",
		`{{ [1, [2]] | tojson(indent=0) }}`:                                           "[\n1,\n[\n2\n]\n]",
		`{{ tools[0].alpha | tojson(separators=(',', ':')) }}`:                        `{"b":[1,-2.5,1.0,1e-07,1e+16,1234567.5,1.2345678901234567e+19],"a":null}`,
		`{{ tools[0].zeta | tojson(ensure_ascii=true) }}`:                             `"\u00e9\u2028\u0001\"\\/"`,
		`{{ '😀' | tojson(ensure_ascii=true) }}`:                                       `"\ud83d\ude00"`,
		`{{ tools[0] | tojson(sort_keys=true, separators=(',', ':')) | length > 0 }}`: "True",
		`{{ {'b': 1, 'a': {'d': 1, 'c': 2}} | tojson(sort_keys=true) }}`:              `{"a": {"c": 2, "d": 1}, "b": 1}`,
		`{{ "tojson" }} {{ 'x | tojson' }} {{ [1] | tojson }}`:                        `tojson x | tojson [1]`,
	}
	for src, want := range cases {
		tmpl := mustParse(t, src)
		if got := render(t, tmpl, hello, Options{Tools: tools}); got != want {
			t.Errorf("%s\n got %q\nwant %q", src, got, want)
		}
	}
}

func TestPyFloat(t *testing.T) {
	for f, want := range map[float64]string{
		1: "1.0", -0.5: "-0.5", 0.30000000000000004: "0.30000000000000004", 1e-4: "0.0001", 1e-5: "1e-05",
		123456789012345.6: "123456789012345.6", 1e16: "1e+16", 1.5e300: "1.5e+300", 2.5e-300: "2.5e-300",
	} {
		if got := pyFloat(f); got != want {
			t.Errorf("pyFloat(%v) = %q, want %q", f, got, want)
		}
	}
}

// Python's Jinja normalizes newlines, drops one trailing newline and decodes Python string
// escapes; the engine alone would do none of these.
func TestSourceNormalization(t *testing.T) {
	cases := map[string]string{
		"{{ messages[0].content }}\n":                                "Hi",
		"{{ messages[0].content }}\n\n":                              "Hi\n",
		"a\r\nb\rc{{ '' }}":                                          "a\nb\nc",
		`{{ 'x\u00e9\x41\101\U0001F600\r|\ud83d\ude00|\q|\\n|\'' }}`: "xéAA😀\r|😀|\\q|\\n|'",
		`{{ "say \"hi\"\x27" }}`:                                     `say "hi"'`,
		`{{ '\x5c' ~ "\x22" }}`:                                      `\"`,
		"{% raw %}{{ 'x' | tojson }}{% endraw %}":                    "{{ 'x' | tojson }}",
	}
	for src, want := range cases {
		tmpl := mustParse(t, src)
		if got := render(t, tmpl, hello, Options{}); got != want {
			t.Errorf("%q: got %q, want %q", src, got, want)
		}
	}
}

func TestStrftimeNow(t *testing.T) {
	tmpl := mustParse(t, `{{ strftime_now('%d %b %Y') }}|{{ strftime_now('%-d %B %y, %A %H:%M:%S %p %I %j %%') }}`)
	now := time.Date(2026, time.March, 5, 14, 7, 9, 0, time.UTC)
	got := render(t, tmpl, hello, Options{Now: func() time.Time { return now }})
	if want := "05 Mar 2026|5 March 26, Thursday 14:07:09 PM 02 064 %"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

// Key order of tool schemas and tool-call arguments must survive from the request JSON to
// tojson, through RenderJSON and through Render.
func TestKeyOrderEndToEnd(t *testing.T) {
	tmpl := mustParse(t, `{% for t in tools %}{{ t | tojson }}
{% endfor %}{% for m in messages %}{% for c in m.tool_calls or [] %}{{ c.function.arguments | tojson }}
{% endfor %}{% endfor %}`)
	tools := `[{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {"zz": {"type": "string"}, "aa": {"type": "integer"}, "mm": {"type": "object", "properties": {"y": {}, "b": {}}}}, "required": ["zz"]}}}]`
	msgs := `[{"role": "user", "content": "x"}, {"role": "assistant", "content": "", "tool_calls": [{"id": "1", "type": "function", "function": {"name": "f", "arguments": {"zz": "s", "aa": 3, "mm": {"y": 1, "b": [2, {"q": 1, "c": 2}]}}}}]}]`
	want := `{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {"zz": {"type": "string"}, "aa": {"type": "integer"}, "mm": {"type": "object", "properties": {"y": {}, "b": {}}}}, "required": ["zz"]}}}
{"zz": "s", "aa": 3, "mm": {"y": 1, "b": [2, {"q": 1, "c": 2}]}}
`
	got, err := tmpl.RenderJSON(json.RawMessage(msgs), json.RawMessage(tools), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Errorf("RenderJSON:\n got %s\nwant %s", got, want)
	}
	var typed []Message
	if err := json.Unmarshal([]byte(msgs), &typed); err != nil {
		t.Fatal(err)
	}
	var toolList []json.RawMessage
	if err := json.Unmarshal([]byte(tools), &toolList); err != nil {
		t.Fatal(err)
	}
	if got := render(t, tmpl, typed, Options{Tools: toolList}); got != want {
		t.Errorf("Render:\n got %s\nwant %s", got, want)
	}
}

func TestDecodeToolArguments(t *testing.T) {
	tmpl := mustParse(t, `{% for m in messages %}{% for c in m.tool_calls or [] %}`+
		`{{ 'object ' ~ (c.function.arguments | tojson) if c.function.arguments is mapping else 'string ' ~ c.function.arguments }}`+
		`{% endfor %}{% endfor %}`)
	msgs := []Message{hello[0], {Role: "assistant", ToolCalls: []ToolCall{{ID: "1",
		Function: FunctionCall{Name: "f", Arguments: json.RawMessage(`"{\"b\":1,\"a\":2}"`)}}}}}
	if got := render(t, tmpl, msgs, Options{}); got != `string {"b":1,"a":2}` {
		t.Errorf("arguments string: %q", got)
	}
	if got := render(t, tmpl, msgs, Options{DecodeToolArguments: true}); got != `object {"b": 1, "a": 2}` {
		t.Errorf("decoded arguments: %q", got)
	}
	raw := `[{"role": "assistant", "content": null, "tool_calls": [{"function": {"name": "f", "arguments": "{\"b\":1,\"a\":2}"}}]}]`
	got, err := tmpl.RenderJSON(json.RawMessage(raw), nil, Options{DecodeToolArguments: true})
	if err != nil || got != `object {"b": 1, "a": 2}` {
		t.Errorf("RenderJSON decoded arguments: %q, %v", got, err)
	}
}

func TestRenderJSONErrors(t *testing.T) {
	tmpl := mustParse(t, "{{ messages | length }}")
	for _, c := range []struct{ msgs, tools string }{
		{``, ``},
		{`null`, ``},
		{`{"role": "user"}`, ``},
		{`[1]`, ``},
		{`[{"role": "user",}]`, ``},
		{`[{"role": "user"}] x`, ``},
		{`[{"role": "user"}]`, `{"a": 1}`},
		{`[{"role": "user"}]`, `[`},
		{`[{"role": "user", "content": ` + strings.Repeat("[", 100000) + strings.Repeat("]", 100000) + `}]`, ``},
	} {
		if _, err := tmpl.RenderJSON(json.RawMessage(c.msgs), json.RawMessage(c.tools), Options{}); err == nil {
			t.Errorf("messages %.40q tools %q accepted", c.msgs, c.tools)
		}
	}
	if _, err := tmpl.Render([]Message{{Role: "assistant", ToolCalls: []ToolCall{{Function: FunctionCall{Name: "f", Arguments: json.RawMessage(`{bad`)}}}}}, Options{}); err == nil {
		t.Error("bad tool-call arguments accepted")
	}
	if _, err := tmpl.Render(hello, Options{Tools: []json.RawMessage{json.RawMessage(`{`)}}); err == nil {
		t.Error("bad tool schema accepted")
	}
	got, err := tmpl.RenderJSON(json.RawMessage(`[{"role": "user", "content": [{"type": "text", "text": "x"}], "unknown": {"k": 1}}]`), json.RawMessage(`null`), Options{})
	if err != nil || got != "1" {
		t.Errorf("content parts: %q, %v", got, err)
	}
}

func TestLoadPrecedenceAndSources(t *testing.T) {
	cfg := func(extra string) string {
		return `{"bos_token": {"content": "<B>", "lstrip": false}, "eos_token": "<E>"` + extra + `}`
	}
	t.Run("jinja file wins over tokenizer_config", func(t *testing.T) {
		dir := t.TempDir()
		writeFile(t, filepath.Join(dir, "chat_template.jinja"), "jinja:{{ bos_token }}{{ messages[0].content }}{{ eos_token }}\n")
		writeFile(t, filepath.Join(dir, "tokenizer_config.json"), cfg(`, "chat_template": "config"`))
		tmpl, err := Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		if got := render(t, tmpl, hello, Options{}); got != "jinja:<B>Hi<E>" {
			t.Errorf("got %q", got)
		}
	})
	t.Run("tokenizer_config string", func(t *testing.T) {
		dir := t.TempDir()
		writeFile(t, filepath.Join(dir, "tokenizer_config.json"), cfg(`, "chat_template": "config:{{ messages[0].content }}"`))
		writeFile(t, filepath.Join(dir, "chat_template.json"), `{"chat_template": "processor"}`)
		tmpl, err := Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		if got := render(t, tmpl, hello, Options{}); got != "config:Hi" {
			t.Errorf("got %q", got)
		}
	})
	t.Run("tokenizer_config list", func(t *testing.T) {
		dir := t.TempDir()
		writeFile(t, filepath.Join(dir, "tokenizer_config.json"), cfg(`, "chat_template": [
			{"name": "tool_use", "template": "tool_use:{{ tools | length }}"},
			{"name": "default", "template": "default:{{ messages[0].content }}"},
			{"name": "rag", "template": "rag"}]`))
		tmpl, err := Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		if got := render(t, tmpl, hello, Options{}); got != "default:Hi" {
			t.Errorf("without tools: %q", got)
		}
		if got := render(t, tmpl, hello, Options{Tools: []json.RawMessage{json.RawMessage(`{"name": "f"}`)}}); got != "tool_use:1" {
			t.Errorf("with tools: %q", got)
		}
		got, err := tmpl.RenderJSON(json.RawMessage(`[{"role":"user","content":"Hi"}]`), json.RawMessage(`[]`), Options{})
		if err != nil || got != "tool_use:0" {
			t.Errorf("RenderJSON with tools []: %q, %v", got, err)
		}
		if rag, ok := tmpl.Named("rag"); !ok || rag.Source() != "rag" {
			t.Errorf("Named(rag) = %v, %v", rag, ok)
		}
		if _, ok := tmpl.Named("nope"); ok {
			t.Error("Named(nope) found")
		}
	})
	t.Run("list without default", func(t *testing.T) {
		dir := t.TempDir()
		writeFile(t, filepath.Join(dir, "tokenizer_config.json"), cfg(`, "chat_template": [{"name": "tool_use", "template": "x"}]`))
		if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), `no "default"`) {
			t.Errorf("error %v", err)
		}
	})
	t.Run("broken template in list", func(t *testing.T) {
		dir := t.TempDir()
		writeFile(t, filepath.Join(dir, "tokenizer_config.json"), cfg(`, "chat_template": [{"name": "default", "template": "x"}, {"name": "tool_use", "template": "{% if %}"}]`))
		_, err := Load(dir)
		if err == nil || !strings.Contains(err.Error(), `chat template "tool_use" does not parse`) || !strings.Contains(err.Error(), "tokenizer_config.json") {
			t.Errorf("error %v", err)
		}
	})
	t.Run("chat_template.json and special_tokens_map.json", func(t *testing.T) {
		dir := t.TempDir()
		writeFile(t, filepath.Join(dir, "chat_template.json"), `{"chat_template": "p:{{ bos_token }}{{ eos_token }}"}`)
		writeFile(t, filepath.Join(dir, "special_tokens_map.json"), `{"bos_token": {"content": "<sb>"}, "eos_token": "<se>"}`)
		tmpl, err := Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		if got := render(t, tmpl, hello, Options{}); got != "p:<sb><se>" {
			t.Errorf("got %q", got)
		}
	})
	t.Run("null bos", func(t *testing.T) {
		dir := t.TempDir()
		writeFile(t, filepath.Join(dir, "tokenizer_config.json"), `{"bos_token": null, "eos_token": "<E>", "chat_template": "{{ bos_token is defined }}"}`)
		writeFile(t, filepath.Join(dir, "special_tokens_map.json"), `{"bos_token": "<wrong>"}`)
		tmpl, err := Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		if got := render(t, tmpl, hello, Options{}); got != "False" {
			t.Errorf("got %q", got)
		}
	})
	t.Run("no template", func(t *testing.T) {
		dir := t.TempDir()
		writeFile(t, filepath.Join(dir, "tokenizer_config.json"), cfg(""))
		if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), "no chat template") {
			t.Errorf("error %v", err)
		}
	})
	t.Run("syntax error names the file", func(t *testing.T) {
		dir := t.TempDir()
		writeFile(t, filepath.Join(dir, "chat_template.jinja"), "{% for m in messages %}")
		_, err := Load(dir)
		if err == nil || !strings.Contains(err.Error(), "does not parse") || !strings.Contains(err.Error(), "chat_template.jinja") {
			t.Errorf("error %v", err)
		}
	})
	t.Run("bad tokenizer_config", func(t *testing.T) {
		dir := t.TempDir()
		writeFile(t, filepath.Join(dir, "tokenizer_config.json"), `{"chat_template": `)
		if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), "tokenizer_config.json") {
			t.Errorf("error %v", err)
		}
	})
}

func TestMarkers(t *testing.T) {
	gemma4, err := Load(gemma4Dir(t))
	if err != nil {
		t.Fatal(err)
	}
	m := MarkersFor(gemma4)
	if m.Family != FamilyGemma4 || m.ThinkStart != "<|channel>thought\n" || m.ThinkEnd != "<channel|>" ||
		m.ToolCallStart != "<|tool_call>" || m.ToolCallEnd != "<tool_call|>" || m.ToolCallFormat != ToolCallGemma4 ||
		m.StringDelim != `<|"|>` || m.ToolResponseStart != "<|tool_response>" || m.ToolResponseEnd != "<tool_response|>" ||
		m.TurnEnd != "<turn|>" || strings.Join(m.Stop, " ") != "<turn|> <|tool_response> <eos>" {
		t.Errorf("gemma4 markers %+v", m)
	}
	yes := true
	prompt := render(t, gemma4, hello, Options{AddGenerationPrompt: true, EnableThinking: &yes})
	if m.PromptOpensThinking(prompt) {
		t.Error("gemma4 prompt opens thinking")
	}
	if !m.PromptOpensThinking(prompt + "<|channel>thought\n") {
		t.Error("prompt ending in ThinkStart not detected")
	}

	chatml := markersFor("{{ '<|im_start|>' + m.role }}", "<|im_end|>")
	if chatml.Family != FamilyChatML || chatml.ThinkStart != "" || chatml.ToolCallStart != "" || chatml.TurnEnd != "<|im_end|>" {
		t.Errorf("chatml markers %+v", chatml)
	}
	xml := markersFor("<|im_start|><think></think><tool_call>\n<function=name>\n<tool_response>", "<|endoftext|>")
	if xml.Family != FamilyQwen3 || xml.ToolCallFormat != ToolCallXML || strings.Join(xml.Stop, " ") != "<|im_end|> <|endoftext|>" {
		t.Errorf("qwen3.5 markers %+v", xml)
	}
	unknown := markersFor("{{ messages }}", "</s>")
	if unknown.Family != FamilyUnknown || unknown.TurnEnd != "</s>" || strings.Join(unknown.Stop, " ") != "</s>" {
		t.Errorf("unknown markers %+v", unknown)
	}
}

func TestMarkersRealTemplates(t *testing.T) {
	for name, check := range map[string]func(Markers) bool{
		"gemma3": func(m Markers) bool {
			return m.Family == FamilyGemma3 && m.TurnEnd == "<end_of_turn>" && m.ThinkStart == "" && m.ToolCallStart == "" &&
				strings.Join(m.Stop, " ") == "<end_of_turn>"
		},
		"qwen3": func(m Markers) bool {
			return m.Family == FamilyQwen3 && m.ThinkStart == "<think>" && m.ThinkEnd == "</think>" &&
				m.ToolCallStart == "<tool_call>" && m.ToolCallEnd == "</tool_call>" && m.ToolCallFormat == ToolCallJSON &&
				m.ToolResponseStart == "<tool_response>" && m.TurnEnd == "<|im_end|>" && strings.Join(m.Stop, " ") == "<|im_end|>"
		},
	} {
		t.Run(name, func(t *testing.T) {
			tmpl, err := Load(fixtureDir(t, name))
			if err != nil {
				t.Fatal(err)
			}
			if m := MarkersFor(tmpl); !check(m) {
				t.Errorf("markers %+v", m)
			}
		})
	}
}

func TestConcurrentRenders(t *testing.T) {
	src, err := os.ReadFile("templates/gemma4.jinja")
	if err != nil {
		t.Fatal(err)
	}
	tmpl, err := Parse(string(src), "<bos>", "<eos>")
	if err != nil {
		t.Fatal(err)
	}
	msgs := []Message{{Role: "system", Content: "S"}, {Role: "user", Content: "U"}}
	want := render(t, tmpl, msgs, Options{AddGenerationPrompt: true})
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 50 {
				if got, err := tmpl.Render(msgs, Options{AddGenerationPrompt: true}); err != nil || got != want {
					t.Errorf("concurrent render %q, %v", got, err)
					return
				}
			}
		})
	}
	wg.Wait()
}
