package chat

import (
	"slices"
	"strings"
)

// Family is a chat-format family: the markers a model of that family writes around reasoning,
// tool calls and turn ends.
type Family string

const (
	FamilyUnknown Family = ""
	// FamilyGemma4: <|turn>role … <turn|>, thinking in <|channel>thought\n … <channel|>, tool
	// calls <|tool_call>call:NAME{…}<tool_call|>, results <|tool_response>…<tool_response|>.
	FamilyGemma4 Family = "gemma4"
	// FamilyGemma3: <start_of_turn>role … <end_of_turn>; no thinking or tool-call markers.
	FamilyGemma3 Family = "gemma3"
	// FamilyQwen3: ChatML (<|im_start|>role … <|im_end|>) with <think> … </think> and
	// <tool_call> … </tool_call> (Qwen3, Qwen3.5/3.6).
	FamilyQwen3 Family = "qwen3"
	// FamilyChatML: ChatML without thinking markers (Qwen2.5 and others); tool-call markers are
	// set when the template writes <tool_call>.
	FamilyChatML Family = "chatml"
)

// Tool-call formats: how a call is written between ToolCallStart and ToolCallEnd.
const (
	// ToolCallJSON: {"name": NAME, "arguments": {…}} (Qwen3, Hermes style).
	ToolCallJSON = "json"
	// ToolCallGemma4: call:NAME{key:value,…}, strings between Markers.StringDelim.
	ToolCallGemma4 = "gemma4"
	// ToolCallXML: <function=NAME><parameter=KEY>value</parameter>…</function> (Qwen3.5 and
	// Qwen3-Coder templates).
	ToolCallXML = "xml"
)

// Markers are the strings that separate reasoning, tool calls and tool results from content in
// a model's output, and that end its turn: what the server's output parser splits on. An empty
// field means the family has no such marker.
type Markers struct {
	Family            Family
	ThinkStart        string
	ThinkEnd          string
	ToolCallStart     string
	ToolCallEnd       string
	ToolCallFormat    string // ToolCallJSON, ToolCallGemma4 or ToolCallXML; "" without tool calls
	StringDelim       string // Gemma 4's string delimiter <|"|> inside calls and declarations
	ToolResponseStart string
	ToolResponseEnd   string
	TurnEnd           string
	// Stop are strings that end generation: the turn end, the tokenizer's eos_token and, for
	// Gemma 4, <|tool_response> (the model stops there for the caller to append the result).
	Stop []string
}

// MarkersFor detects a template's family from its text and special tokens.
func MarkersFor(t *Template) Markers {
	return markersFor(t.source, t.eos)
}

func markersFor(src, eos string) Markers {
	has := func(s string) bool { return strings.Contains(src, s) }
	var m Markers
	switch {
	case has("<|turn>") || eos == "<turn|>":
		m = Markers{
			Family:            FamilyGemma4,
			ThinkStart:        "<|channel>thought\n",
			ThinkEnd:          "<channel|>",
			ToolCallStart:     "<|tool_call>",
			ToolCallEnd:       "<tool_call|>",
			ToolCallFormat:    ToolCallGemma4,
			StringDelim:       `<|"|>`,
			ToolResponseStart: "<|tool_response>",
			ToolResponseEnd:   "<tool_response|>",
			TurnEnd:           "<turn|>",
			Stop:              []string{"<turn|>", "<|tool_response>"},
		}
	case has("<start_of_turn>") || eos == "<end_of_turn>":
		m = Markers{Family: FamilyGemma3, TurnEnd: "<end_of_turn>", Stop: []string{"<end_of_turn>"}}
	case has("<|im_start|>") || eos == "<|im_end|>":
		m = Markers{Family: FamilyChatML, TurnEnd: "<|im_end|>", Stop: []string{"<|im_end|>"}}
		if has("<think>") {
			m.Family = FamilyQwen3
			m.ThinkStart, m.ThinkEnd = "<think>", "</think>"
		}
		if has("<tool_call>") {
			m.ToolCallStart, m.ToolCallEnd = "<tool_call>", "</tool_call>"
			m.ToolCallFormat = ToolCallJSON
			if has("<function=") {
				m.ToolCallFormat = ToolCallXML
			}
		}
		if has("<tool_response>") {
			m.ToolResponseStart, m.ToolResponseEnd = "<tool_response>", "</tool_response>"
		}
	default:
		m = Markers{TurnEnd: eos}
	}
	if eos != "" && !slices.Contains(m.Stop, eos) {
		m.Stop = append(m.Stop, eos)
	}
	return m
}

// PromptOpensThinking reports whether a rendered prompt ends inside an open thinking block
// (templates of thinking-only models write ThinkStart into the generation prompt), so the
// output starts with reasoning and has no ThinkStart of its own.
func (m Markers) PromptOpensThinking(prompt string) bool {
	if m.ThinkStart == "" {
		return false
	}
	p := strings.TrimRight(prompt, " \t\r\n")
	return strings.HasSuffix(p, strings.TrimRight(m.ThinkStart, " \t\r\n"))
}
