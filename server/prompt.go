package server

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"

	"tandem/chat"
)

// chatPrompt is a chat request turned into what the engine and the output parser need.
type chatPrompt struct {
	text    string // the rendered template
	ids     []int32
	markers chat.Markers // tool-call markers cleared when tool_choice is "none"
	parse   chat.ParseOptions
}

var validRoles = map[string]bool{"system": true, "developer": true, "user": true, "assistant": true, "tool": true}

var reasoningEfforts = map[string]bool{"none": true, "minimal": true, "low": true, "medium": true, "high": true, "xhigh": true}

// buildChatPrompt validates the messages and tools, renders them with the chat template and
// tokenizes the result.
func (s *Server) buildChatPrompt(req *chatRequest) (*chatPrompt, error) {
	if s.cfg.Template == nil {
		return nil, badRequest("messages", "this model has no chat template; use /v1/completions with a prompt")
	}
	msgs, err := normalizeMessages(req.Messages, s.cfg.ContextSize)
	if err != nil {
		return nil, err
	}
	tools, err := checkTools(req.Tools)
	if err != nil {
		return nil, err
	}
	p := &chatPrompt{markers: s.markers}
	switch req.ToolChoice.Mode {
	case "required", "function":
		return nil, badRequest("tool_choice", `tool_choice %q is not supported: the server cannot force a tool call; use "auto" or "none"`, req.ToolChoice.Mode)
	case "none":
		// The tools are not shown to the model and a call it writes anyway stays content.
		tools = nil
		p.markers.ToolCallStart, p.markers.ToolCallEnd = "", ""
	}
	if rf := req.ResponseFormat; rf != nil && rf.Type != "" && rf.Type != "text" {
		return nil, badRequest("response_format", "response_format %q is not supported (only \"text\")", rf.Type)
	}

	opt := chat.Options{AddGenerationPrompt: true, DecodeToolArguments: true, EnableThinking: s.cfg.EnableThinking}
	if tools != nil {
		opt.Tools = tools
		p.parse.Tools = tools
	}
	if e := req.ReasoningEffort; e != nil {
		if !reasoningEfforts[*e] {
			return nil, badRequest("reasoning_effort", "reasoning_effort must be one of none, minimal, low, medium, high, xhigh; got %q", *e)
		}
		on := *e != "none"
		opt.EnableThinking = &on
		opt.Extra = map[string]any{"reasoning_effort": *e}
	}
	for _, k := range slices.Sorted(maps.Keys(req.ChatTemplateKwargs)) { // the first bad key, in a stable order
		v := req.ChatTemplateKwargs[k]
		param := "chat_template_kwargs." + k
		if chat.Reserved(k) {
			return nil, badRequest(param, "%s: %q is set by the server and cannot be given in chat_template_kwargs", param, k)
		}
		if k == "enable_thinking" {
			var on bool
			if json.Unmarshal(v, &on) != nil {
				return nil, badRequest(param, "%s: want a boolean, got %s", param, jsonKind(v))
			}
			opt.EnableThinking = &on
			continue
		}
		if opt.Extra == nil {
			opt.Extra = map[string]any{}
		}
		opt.Extra[k] = v
	}

	text, err := renderSafely(s.cfg.Template, msgs, opt)
	if err != nil {
		return nil, badRequest("messages", "%v", err)
	}
	p.text = text
	// The template writes BOS itself.
	p.ids = s.cfg.Tokenizer.Encode(text, false)
	p.parse.StartInReasoning = p.markers.PromptOpensThinking(text)
	return p, nil
}

// renderSafely renders with the template; a panic inside the template engine on some odd
// input becomes an error instead of ending the request's goroutine.
func renderSafely(t *chat.Template, msgs json.RawMessage, opt chat.Options) (out string, err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("chat: rendering the chat template failed: %v", v)
		}
	}()
	return t.RenderJSON(msgs, nil, opt)
}

// normalizeMessages checks the messages and returns them as a JSON array the template reads:
// content given as an array of text parts is joined into one string (templates expect a
// string), null content becomes "" except on assistant messages (a tool-call turn has none).
// Everything else in a message is kept as sent, key order included.
func normalizeMessages(raw json.RawMessage, ctxSize int) (json.RawMessage, error) {
	if len(raw) == 0 || isNull(raw) {
		return nil, badRequest("messages", "messages is required")
	}
	var list []json.RawMessage
	if json.Unmarshal(raw, &list) != nil {
		return nil, badRequest("messages", "messages: want an array of message objects, got %s", jsonKind(raw))
	}
	if len(list) == 0 {
		return nil, badRequest("messages", "messages must not be empty")
	}
	if ctxSize > 0 && len(list) > ctxSize {
		// Every message takes a token at least, and a template may scan the messages once
		// for each: refused before rendering.
		return nil, &apiError{Status: http.StatusBadRequest, Type: "invalid_request_error", Param: "messages", Code: "context_length_exceeded",
			Message: fmt.Sprintf("%d messages cannot fit the context of %d tokens", len(list), ctxSize)}
	}
	out := make([]map[string]json.RawMessage, len(list))
	for i, m := range list {
		param := fmt.Sprintf("messages[%d]", i)
		var fields map[string]json.RawMessage
		if json.Unmarshal(m, &fields) != nil || fields == nil {
			return nil, badRequest(param, "%s: want a message object, got %s", param, jsonKind(m))
		}
		var role string
		if json.Unmarshal(fields["role"], &role) != nil {
			return nil, badRequest(param+".role", "%s.role: want a string (system, developer, user, assistant or tool)", param)
		}
		if !validRoles[role] {
			return nil, badRequest(param+".role", "%s.role: unknown role %q (want system, developer, user, assistant or tool)", param, role)
		}
		content, err := messageContent(fields["content"], param+".content")
		if err != nil {
			return nil, err
		}
		switch {
		case content != nil:
			fields["content"] = content
		case role == "assistant":
			fields["content"] = json.RawMessage("null")
		default:
			fields["content"] = json.RawMessage(`""`)
		}
		for _, k := range []string{"name", "tool_call_id", "reasoning_content"} {
			if v, ok := fields[k]; ok && !isNull(v) {
				var str string
				if json.Unmarshal(v, &str) != nil {
					return nil, badRequest(param+"."+k, "%s.%s: want a string, got %s", param, k, jsonKind(v))
				}
			}
		}
		if tc, ok := fields["tool_calls"]; ok && !isNull(tc) {
			if err := checkToolCalls(tc, param+".tool_calls"); err != nil {
				return nil, err
			}
		}
		out[i] = fields
	}
	b, err := json.Marshal(out)
	if err != nil {
		return nil, badRequest("messages", "messages: %v", err)
	}
	return b, nil
}

// messageContent returns a message's content as a JSON string, or nil when it is absent or
// null.
func messageContent(raw json.RawMessage, param string) (json.RawMessage, error) {
	if len(raw) == 0 || isNull(raw) {
		return nil, nil
	}
	var text string
	if json.Unmarshal(raw, &text) == nil {
		return raw, nil
	}
	var parts []json.RawMessage
	if json.Unmarshal(raw, &parts) != nil {
		return nil, badRequest(param, "%s: want a string or an array of content parts, got %s", param, jsonKind(raw))
	}
	texts := make([]string, 0, len(parts))
	for j, part := range parts {
		pp := fmt.Sprintf("%s[%d]", param, j)
		var p struct {
			Type string  `json:"type"`
			Text *string `json:"text"`
		}
		if json.Unmarshal(part, &p) != nil {
			return nil, badRequest(pp, "%s: want a content part object like {\"type\": \"text\", \"text\": …}", pp)
		}
		if p.Type != "text" {
			return nil, badRequest(pp+".type", "%s: content parts of type %q are not supported (only text)", pp, p.Type)
		}
		if p.Text == nil {
			return nil, badRequest(pp+".text", "%s.text: want a string", pp)
		}
		texts = append(texts, *p.Text)
	}
	b, _ := json.Marshal(strings.Join(texts, "\n"))
	return b, nil
}

// checkToolCalls checks an assistant message's tool_calls: an array of
// {"id", "type": "function", "function": {"name", "arguments"}}.
func checkToolCalls(raw json.RawMessage, param string) error {
	var calls []json.RawMessage
	if json.Unmarshal(raw, &calls) != nil {
		return badRequest(param, "%s: want an array of tool calls, got %s", param, jsonKind(raw))
	}
	for j, c := range calls {
		pp := fmt.Sprintf("%s[%d]", param, j)
		var call struct {
			Function *struct {
				Name      *string         `json:"name"`
				Arguments json.RawMessage `json:"arguments"`
			} `json:"function"`
		}
		if json.Unmarshal(c, &call) != nil || call.Function == nil || call.Function.Name == nil {
			return badRequest(pp, `%s: want {"id": …, "type": "function", "function": {"name": …, "arguments": …}}`, pp)
		}
		if a := call.Function.Arguments; len(a) > 0 && !isNull(a) {
			if k := jsonKind(a); k != "a string" && k != "an object" {
				return badRequest(pp+".function.arguments", "%s.function.arguments: want a JSON string or object, got %s", pp, k)
			}
		}
	}
	return nil
}

// checkTools checks the request's tools (an array of {"type": "function", "function":
// {"name", …}}) and returns them one raw value each; nil when there are none.
func checkTools(raw json.RawMessage) ([]json.RawMessage, error) {
	if len(raw) == 0 || isNull(raw) {
		return nil, nil
	}
	var tools []json.RawMessage
	if json.Unmarshal(raw, &tools) != nil {
		return nil, badRequest("tools", "tools: want an array of tool objects, got %s", jsonKind(raw))
	}
	if len(tools) == 0 {
		return nil, nil
	}
	for i, t := range tools {
		param := fmt.Sprintf("tools[%d]", i)
		var tool struct {
			Type     string `json:"type"`
			Function *struct {
				Name *string `json:"name"`
			} `json:"function"`
		}
		if json.Unmarshal(t, &tool) != nil || jsonKind(t) != "an object" {
			return nil, badRequest(param, `%s: want {"type": "function", "function": {"name": …, "parameters": …}}`, param)
		}
		if tool.Type != "function" {
			return nil, badRequest(param+".type", "%s.type: only \"function\" tools are supported, got %q", param, tool.Type)
		}
		if tool.Function == nil || tool.Function.Name == nil || *tool.Function.Name == "" {
			return nil, badRequest(param+".function.name", "%s.function.name: want the function's name", param)
		}
	}
	return tools, nil
}
