package chat

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
)

var (
	gemma4Markers = markersFor("<|turn>", "<turn|>")
	qwenMarkers   = markersFor("<|im_start|><think><tool_call>", "<|im_end|>")
	xmlMarkers    = markersFor("<|im_start|><think><tool_call><function=", "<|im_end|>")
)

// S is Gemma 4's string delimiter, to keep the examples readable.
const S = `<|"|>`

// merged concatenates adjacent text deltas of one kind, so results of different splits compare.
func merged(ds []Delta) []Delta {
	var out []Delta
	for _, d := range ds {
		if d.Kind != ToolCallDelta && d.Text == "" {
			continue
		}
		if n := len(out); n > 0 && d.Kind != ToolCallDelta && out[n-1].Kind == d.Kind {
			out[n-1].Text += d.Text
			continue
		}
		out = append(out, d)
	}
	return out
}

// parseChunks feeds the chunks and finishes.
func parseChunks(m Markers, opt ParseOptions, chunks []string) []Delta {
	p := NewOutputParser(m, opt)
	var all []Delta
	for _, c := range chunks {
		all = append(all, p.Feed(c)...)
	}
	return merged(append(all, p.Finish()...))
}

func content(s string) Delta   { return Delta{Kind: ContentDelta, Text: s} }
func reasoning(s string) Delta { return Delta{Kind: ReasoningDelta, Text: s} }
func call(name, args string) Delta {
	return Delta{Kind: ToolCallDelta, ToolCall: FunctionCall{Name: name, Arguments: json.RawMessage(args)}}
}

func show(ds []Delta) string {
	var b strings.Builder
	for _, d := range ds {
		if d.Kind == ToolCallDelta {
			fmt.Fprintf(&b, "[call %s %s]", d.ToolCall.Name, d.ToolCall.Arguments)
		} else {
			fmt.Fprintf(&b, "[%s %q]", d.Kind, d.Text)
		}
	}
	return b.String()
}

func sameDeltas(a, b []Delta) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Kind != b[i].Kind || a[i].Text != b[i].Text || a[i].ToolCall.Name != b[i].ToolCall.Name ||
			string(a[i].ToolCall.Arguments) != string(b[i].ToolCall.Arguments) {
			return false
		}
	}
	return true
}

type parseCase struct {
	name string
	m    Markers
	opt  ParseOptions
	in   string
	want []Delta
}

var parseCases = []parseCase{
	{name: "plain content", m: gemma4Markers, in: "Hello, world.", want: []Delta{content("Hello, world.")}},
	{name: "empty", m: gemma4Markers, in: "", want: nil},
	{name: "thinking then content", m: gemma4Markers,
		in:   "<|channel>thought\nLet me think.<channel|>The answer is 4.",
		want: []Delta{reasoning("Let me think."), content("The answer is 4.")}},
	{name: "content, thinking, content", m: gemma4Markers,
		in:   "A<|channel>thought\nB<channel|>C",
		want: []Delta{content("A"), reasoning("B"), content("C")}},
	{name: "empty thought channel", m: gemma4Markers,
		in:   "<|channel>thought\n<channel|>Hi",
		want: []Delta{content("Hi")}},
	{name: "channel that is not thought stays content", m: gemma4Markers,
		in:   "<|channel>final\nHi",
		want: []Delta{content("<|channel>final\nHi")}},
	{name: "marker prefixes that never complete", m: gemma4Markers,
		in:   "a <|chan b <|tool_ c <|channel>though",
		want: []Delta{content("a <|chan b <|tool_ c <|channel>though")}},
	{name: "unterminated thinking is reasoning", m: gemma4Markers,
		in:   "<|channel>thought\nstill going <chan",
		want: []Delta{reasoning("still going <chan")}},
	{name: "prompt opened thinking", m: gemma4Markers, opt: ParseOptions{StartInReasoning: true},
		in:   "planning<channel|>done",
		want: []Delta{reasoning("planning"), content("done")}},
	{name: "no start marker and no option: all content", m: gemma4Markers,
		in:   "planning<channel|>done",
		want: []Delta{content("planning<channel|>done")}},
	{name: "gemma4 tool call", m: gemma4Markers,
		in:   "<|tool_call>call:get_weather{city:" + S + "Oslo" + S + ",days:3}<tool_call|>",
		want: []Delta{call("get_weather", `{"city":"Oslo","days":3}`)}},
	{name: "gemma4 nested values", m: gemma4Markers,
		in: "<|tool_call>call:book{who:{name:" + S + "Ada" + S + ",tags:[" + S + "a" + S + "," + S + "b" + S +
			"],age:36,vip:true,note:null},legs:[{from:" + S + "OSL" + S + ",to:" + S + "LHR" + S + "},{}],ratio:-1.5e3,empty:[]}<tool_call|>",
		want: []Delta{call("book", `{"who":{"name":"Ada","tags":["a","b"],"age":36,"vip":true,"note":null},"legs":[{"from":"OSL","to":"LHR"},{}],"ratio":-1.5e3,"empty":[]}`)}},
	{name: "gemma4 strings with JSON escapes and separators", m: gemma4Markers,
		in: "<|tool_call>call:run{cmd:" + S + "echo \"hi\" \\ {a:1,b:[2]}\n\ttab\u0001" + S + ",u:" + S + "snow ☃ \u2028" + S +
			",html:" + S + "<b>&</b>" + S + "}<tool_call|>",
		want: []Delta{call("run", `{"cmd":"echo \"hi\" \\ {a:1,b:[2]}\n\ttab\u0001","u":"snow ☃ \u2028","html":"<b>&</b>"}`)}},
	{name: "gemma4 end marker inside a string", m: gemma4Markers,
		in:   "<|tool_call>call:say{text:" + S + "write <tool_call|> literally" + S + "}<tool_call|>after",
		want: []Delta{call("say", `{"text":"write <tool_call|> literally"}`), content("after")}},
	{name: "gemma4 bare words, spaces, odd numbers", m: gemma4Markers,
		in:   "<|tool_call>call:f{ a : hello world , b: +1, c: .5, d:007, e:False, f:1.}<tool_call|>",
		want: []Delta{call("f", `{"a":"hello world","b":1,"c":0.5,"d":7,"e":"False","f":1}`)}},
	{name: "gemma4 no arguments and two calls", m: gemma4Markers,
		in:   "Checking.<|tool_call>call:now{}<tool_call|><|tool_call>call:get{id:" + S + "x" + S + "}<tool_call|>",
		want: []Delta{content("Checking."), call("now", `{}`), call("get", `{"id":"x"}`)}},
	{name: "gemma4 two calls in one block", m: gemma4Markers,
		in:   "<|tool_call>call:a{x:1}call:b{y:2}<tool_call|>",
		want: []Delta{call("a", `{"x":1}`), call("b", `{"y":2}`)}},
	{name: "gemma4 thinking, content and a tool call", m: gemma4Markers,
		in: "<|channel>thought\nNeed weather: use <|tool_call> soon.<channel|>Let me check.<|tool_call>call:w{q:" + S +
			"Oslo" + S + "}<tool_call|>",
		want: []Delta{reasoning("Need weather: use <|tool_call> soon."), content("Let me check."), call("w", `{"q":"Oslo"}`)}},
	{name: "gemma4 malformed call is content", m: gemma4Markers,
		in:   "x<|tool_call>call:f{a:}<tool_call|>y",
		want: []Delta{content("x<|tool_call>call:f{a:}<tool_call|>y")}},
	{name: "gemma4 call without call: prefix is content", m: gemma4Markers,
		in:   "<|tool_call>f{a:1}<tool_call|>",
		want: []Delta{content("<|tool_call>f{a:1}<tool_call|>")}},
	{name: "gemma4 trailing garbage after the object is content", m: gemma4Markers,
		in:   "<|tool_call>call:f{a:1} extra<tool_call|>",
		want: []Delta{content("<|tool_call>call:f{a:1} extra<tool_call|>")}},
	{name: "gemma4 unterminated call is content at finish", m: gemma4Markers,
		in:   "ok <|tool_call>call:f{a:" + S + "x",
		want: []Delta{content("ok <|tool_call>call:f{a:" + S + "x")}},
	{name: "gemma4 unterminated string swallows the end marker until finish", m: gemma4Markers,
		in:   "<|tool_call>call:f{a:" + S + "x}<tool_call|>more",
		want: []Delta{content("<|tool_call>call:f{a:" + S + "x}<tool_call|>more")}},
	{name: "gemma4 unclosed brace is malformed", m: gemma4Markers,
		in:   "<|tool_call>call:f{a:{b:1}<tool_call|>",
		want: []Delta{content("<|tool_call>call:f{a:{b:1}<tool_call|>")}},
	{name: "gemma4 quoted keys", m: gemma4Markers,
		in:   "<|tool_call>call:f{" + S + "odd key" + S + ":1,\"q\":2}<tool_call|>",
		want: []Delta{call("f", `{"odd key":1,"q":2}`)}},
	{name: "qwen thinking and json tool call", m: qwenMarkers,
		in:   "<think>\nhmm\n</think>\n\nSure.<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\", \"n\": [1, 2]}}\n</tool_call>",
		want: []Delta{reasoning("\nhmm\n"), content("\n\nSure."), call("get_weather", `{"city":"Oslo","n":[1,2]}`)}},
	{name: "qwen prompt opened thinking", m: qwenMarkers, opt: ParseOptions{StartInReasoning: true},
		in:   "reasons</think>answer",
		want: []Delta{reasoning("reasons"), content("answer")}},
	{name: "json arguments as a string", m: qwenMarkers,
		in:   `<tool_call>{"name":"f","arguments":"{\"a\": 1}"}</tool_call>`,
		want: []Delta{call("f", `{"a":1}`)}},
	{name: "json without arguments", m: qwenMarkers,
		in:   `<tool_call>{"name":"f"}</tool_call>`,
		want: []Delta{call("f", `{}`)}},
	{name: "json malformed is content", m: qwenMarkers,
		in:   `<tool_call>{"name":"f","arguments":{"a":}}</tool_call>`,
		want: []Delta{content(`<tool_call>{"name":"f","arguments":{"a":}}</tool_call>`)}},
	{name: "json arguments not an object is content", m: qwenMarkers,
		in:   `<tool_call>{"name":"f","arguments":[1]}</tool_call>`,
		want: []Delta{content(`<tool_call>{"name":"f","arguments":[1]}</tool_call>`)}},
	{name: "xml tool call", m: xmlMarkers,
		in: "<tool_call>\n<function=search>\n<parameter=query>\nGo generics\n</parameter>\n<parameter=limit>\n5\n</parameter>\n" +
			"<parameter=opts>\n{\"a\": true}\n</parameter>\n</function>\n</tool_call>",
		want: []Delta{call("search", `{"query":"Go generics","limit":5,"opts":{"a":true}}`)}},
	{name: "xml string-typed parameter stays a string", m: xmlMarkers,
		opt: ParseOptions{Tools: []json.RawMessage{json.RawMessage(
			`{"type":"function","function":{"name":"lookup","parameters":{"type":"object","properties":{"zip":{"type":"string"},"n":{"type":"integer"}}}}}`)}},
		in:   "<tool_call><function=lookup><parameter=zip>\n0042\n</parameter><parameter=n>7</parameter></function></tool_call>",
		want: []Delta{call("lookup", `{"zip":"0042","n":7}`)}},
	{name: "xml malformed is content", m: xmlMarkers,
		in:   "<tool_call><function=f><parameter=a>1</function></tool_call>",
		want: []Delta{content("<tool_call><function=f><parameter=a>1</function></tool_call>")}},
	{name: "no tool markers: tool text is content", m: markersFor("<start_of_turn>", "<end_of_turn>"),
		in:   "<|tool_call>call:f{}<tool_call|>",
		want: []Delta{content("<|tool_call>call:f{}<tool_call|>")}},
}

func TestOutputParser(t *testing.T) {
	for _, c := range parseCases {
		got := parseChunks(c.m, c.opt, []string{c.in})
		if !sameDeltas(got, c.want) {
			t.Errorf("%s:\n got %s\nwant %s", c.name, show(got), show(c.want))
		}
	}
}

// Every way of cutting the output into deltas gives the result of feeding it at once: every
// single cut, every pair of cuts, byte by byte, and random cuts.
func TestOutputParserSplitInvariance(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, c := range parseCases {
		want := parseChunks(c.m, c.opt, []string{c.in})
		check := func(chunks []string) {
			t.Helper()
			if got := parseChunks(c.m, c.opt, chunks); !sameDeltas(got, want) {
				t.Fatalf("%s: chunks %q:\n got %s\nwant %s", c.name, chunks, show(got), show(want))
			}
		}
		n := len(c.in)
		for i := 0; i <= n; i++ {
			for j := i; j <= n; j++ {
				check([]string{c.in[:i], c.in[i:j], c.in[j:]})
			}
		}
		bytes := make([]string, n)
		for i := range n {
			bytes[i] = c.in[i : i+1]
		}
		check(bytes)
		for range 200 {
			var chunks []string
			for s := c.in; s != ""; {
				k := min(len(s), rng.IntN(8))
				chunks = append(chunks, s[:k])
				s = s[k:]
			}
			check(chunks)
		}
	}
}

// Text that cannot start a marker is emitted at once; a possible marker start is held only
// until it is decided.
func TestOutputParserHoldsBackOnlyMarkerPrefixes(t *testing.T) {
	p := NewOutputParser(gemma4Markers, ParseOptions{})
	steps := []struct {
		in   string
		want []Delta
	}{
		{"Hello <|chan", []Delta{content("Hello ")}},
		{"nel>thou", nil},
		{"ght\nhm", []Delta{reasoning("hm")}},
		{"m<chan", []Delta{reasoning("m")}},
		{"nel|>ok <", []Delta{content("ok ")}},
		{"b>", []Delta{content("<b>")}},
		{"<|tool_call>call:f{a:1}", nil},
		{"<tool_call", nil},
		{"|>done", []Delta{call("f", `{"a":1}`), content("done")}},
	}
	for i, s := range steps {
		if got := p.Feed(s.in); !sameDeltas(got, s.want) {
			t.Fatalf("step %d Feed(%q) = %s, want %s", i, s.in, show(got), show(s.want))
		}
	}
	if got := p.Finish(); got != nil {
		t.Fatalf("Finish = %s, want nothing", show(got))
	}
	if got := p.Feed("late"); got != nil {
		t.Fatalf("Feed after Finish = %s", show(got))
	}
}

// Arguments are always valid JSON, whatever the strings hold.
func TestGemma4ArgumentsAreValidJSON(t *testing.T) {
	values := []string{"", "\"", "\\", "\\u0000", "\x00\x1f\x7f", "a\xffb", "☃\U0001F600", "}]{[,:", "<|tool_call>", "\u2029"}
	for _, v := range values {
		out := parseChunks(gemma4Markers, ParseOptions{}, []string{"<|tool_call>call:f{k:" + S + v + S + ",l:[" + S + v + S + "]}<tool_call|>"})
		if len(out) != 1 || out[0].Kind != ToolCallDelta {
			t.Fatalf("%q: %s", v, show(out))
		}
		var got struct {
			K string   `json:"k"`
			L []string `json:"l"`
		}
		if err := json.Unmarshal(out[0].ToolCall.Arguments, &got); err != nil {
			t.Fatalf("%q: %s is not JSON: %v", v, out[0].ToolCall.Arguments, err)
		}
		want := strings.ToValidUTF8(v, "\uFFFD")
		if got.K != want || len(got.L) != 1 || got.L[0] != want {
			t.Errorf("%q: decoded %+v", v, got)
		}
	}
}

// Deep nesting is refused, not a stack overflow.
func TestGemma4NestingLimit(t *testing.T) {
	deep := "<|tool_call>call:f{a:" + strings.Repeat("[", 10000) + strings.Repeat("]", 10000) + "}<tool_call|>"
	out := parseChunks(gemma4Markers, ParseOptions{}, []string{deep})
	if len(out) != 1 || out[0].Kind != ContentDelta || out[0].Text != deep {
		t.Fatalf("deep nesting: got %d deltas, first %v", len(out), out[0].Kind)
	}
}

// A tool call rendered by the Gemma 4 template from OpenAI-style arguments parses back to the
// same arguments.
func TestGemma4ToolCallRoundTrip(t *testing.T) {
	tmpl := mustParseGemma4(t)
	args := `{"location":"Oslo, Norway","unit":"celsius","days":[1,2,3],"opts":{"alerts":true,"lang":null,"q":"say \"hi\"\n"}}`
	msgs := []Message{
		{Role: "user", Content: "Weather?"},
		{Role: "assistant", ToolCalls: []ToolCall{{Function: FunctionCall{Name: "get_weather", Arguments: json.RawMessage(args)}}}},
	}
	text, err := tmpl.Render(msgs, Options{})
	if err != nil {
		t.Fatal(err)
	}
	start := strings.Index(text, "<|tool_call>")
	end := strings.Index(text, "<tool_call|>")
	if start < 0 || end < 0 {
		t.Fatalf("no tool call in %q", text)
	}
	out := parseChunks(MarkersFor(tmpl), ParseOptions{}, []string{text[start : end+len("<tool_call|>")]})
	if len(out) != 1 || out[0].Kind != ToolCallDelta || out[0].ToolCall.Name != "get_weather" {
		t.Fatalf("parsed %s", show(out))
	}
	var got, want any
	json.Unmarshal(out[0].ToolCall.Arguments, &got)
	json.Unmarshal([]byte(args), &want)
	if !reflect.DeepEqual(got, want) || string(out[0].ToolCall.Arguments) != args {
		t.Fatalf("arguments %s, want %s", out[0].ToolCall.Arguments, args)
	}
}

func mustParseGemma4(t *testing.T) *Template {
	t.Helper()
	tmpl, err := Parse(Gemma4Template, "<bos>", "<turn|>")
	if err != nil {
		t.Fatal(err)
	}
	return tmpl
}

type stopCase struct {
	name    string
	stops   []string
	in      string
	want    string
	stopped bool
}

var stopCases = []stopCase{
	{"no stops", nil, "abc", "abc", false},
	{"no match", []string{"xyz"}, "abc xy", "abc xy", false},
	{"match", []string{"STOP"}, "hello STOP world", "hello ", true},
	{"earliest of several", []string{"world", "lo"}, "hello world", "hel", true},
	{"overlapping prefix", []string{"aab"}, "aaab", "a", true},
	{"stop at start", []string{"x"}, "xyz", "", true},
	{"empty stop ignored", []string{""}, "abc", "abc", false},
	{"multibyte", []string{"☃☃"}, "snow ☃ ☃☃ after", "snow ☃ ", true},
	{"prefix at end is flushed", []string{"END!"}, "the EN", "the EN", false},
	{"newline stop", []string{"\n\n"}, "para one\npara\n\ntwo", "para one\npara", true},
}

func feedStops(stops []string, chunks []string) (string, bool) {
	m := NewStopMatcher(stops)
	var b strings.Builder
	for _, c := range chunks {
		out, stopped := m.Feed(c)
		b.WriteString(out)
		if stopped {
			return b.String(), true
		}
	}
	b.WriteString(m.Flush())
	return b.String(), false
}

func TestStopMatcher(t *testing.T) {
	for _, c := range stopCases {
		got, stopped := feedStops(c.stops, []string{c.in})
		if got != c.want || stopped != c.stopped {
			t.Errorf("%s: got %q, %v; want %q, %v", c.name, got, stopped, c.want, c.stopped)
		}
		n := len(c.in)
		for i := 0; i <= n; i++ {
			for j := i; j <= n; j++ {
				chunks := []string{c.in[:i], c.in[i:j], c.in[j:]}
				if got, stopped := feedStops(c.stops, chunks); got != c.want || stopped != c.stopped {
					t.Fatalf("%s: chunks %q: got %q, %v; want %q, %v", c.name, chunks, got, stopped, c.want, c.stopped)
				}
			}
		}
	}
}

// The matcher holds back only what could still become a stop string, and stays stopped.
func TestStopMatcherHoldsBack(t *testing.T) {
	m := NewStopMatcher([]string{"</answer>", "##"})
	steps := []struct {
		in, out string
		stopped bool
	}{
		{"one </ans", "one ", false},
		{"wer", "", false},
		{"x #", "</answerx ", false},
		{"x", "#x", false},
		{"tail #", "tail ", false},
		{"#more", "", true},
		{"after", "", true},
	}
	for i, s := range steps {
		if out, stopped := m.Feed(s.in); out != s.out || stopped != s.stopped {
			t.Fatalf("step %d Feed(%q) = %q, %v; want %q, %v", i, s.in, out, stopped, s.out, s.stopped)
		}
	}
	if out := m.Flush(); out != "" {
		t.Fatalf("Flush after a match = %q", out)
	}
}

func BenchmarkOutputParser(b *testing.B) {
	text := strings.Repeat("<|channel>thought\nsome reasoning here<channel|>Some content, then a call. ", 20) +
		"<|tool_call>call:f{a:" + S + "x" + S + ",b:[1,2,{c:true}]}<tool_call|>"
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		p := NewOutputParser(gemma4Markers, ParseOptions{})
		for i := 0; i < len(text); i += 4 {
			p.Feed(text[i:min(i+4, len(text))])
		}
		p.Finish()
	}
}
