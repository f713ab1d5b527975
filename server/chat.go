package server

import (
	"net/http"
	"strings"
	"time"

	"tandem/chat"
	"tandem/engine"
)

// Response shapes of POST /v1/chat/completions.

type chatCompletion struct {
	ID      string       `json:"id"`
	Object  string       `json:"object"` // chat.completion
	Created int64        `json:"created"`
	Model   string       `json:"model"`
	Choices []chatChoice `json:"choices"`
	Usage   *usage       `json:"usage"`
}

type chatChoice struct {
	Index        int           `json:"index"`
	Message      chatMessage   `json:"message"`
	Logprobs     *chatLogprobs `json:"logprobs"`
	FinishReason string        `json:"finish_reason"`
}

type chatMessage struct {
	Role             string     `json:"role"`
	Content          *string    `json:"content"` // null when the answer is only tool calls
	ReasoningContent string     `json:"reasoning_content,omitempty"`
	ToolCalls        []toolCall `json:"tool_calls,omitempty"`
}

type toolCall struct {
	Index    *int         `json:"index,omitempty"` // streaming only
	ID       string       `json:"id"`
	Type     string       `json:"type"`
	Function toolFunction `json:"function"`
}

type toolFunction struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"` // a JSON object, as a string
}

type chatChunk struct {
	ID      string        `json:"id"`
	Object  string        `json:"object"` // chat.completion.chunk
	Created int64         `json:"created"`
	Model   string        `json:"model"`
	Choices []chunkChoice `json:"choices"`
	Usage   *usage        `json:"usage,omitempty"`
}

type chunkChoice struct {
	Index        int           `json:"index"`
	Delta        chatDelta     `json:"delta"`
	Logprobs     *chatLogprobs `json:"logprobs"`
	FinishReason *string       `json:"finish_reason"`
}

type chatDelta struct {
	Role             string     `json:"role,omitempty"`
	Content          *string    `json:"content,omitempty"`
	ReasoningContent *string    `json:"reasoning_content,omitempty"`
	ToolCalls        []toolCall `json:"tool_calls,omitempty"`
}

// chatOutput collects a chat answer from the output parser's deltas.
type chatOutput struct {
	parser    *chat.OutputParser
	content   strings.Builder
	reasoning strings.Builder
	calls     []toolCall
}

// feed parses a step's text and returns the deltas it completes (all of them at the end).
func (o *chatOutput) feed(st step) []chat.Delta {
	d := o.parser.Feed(st.text)
	if st.final {
		d = append(d, o.parser.Finish()...)
	}
	for _, x := range d {
		switch x.Kind {
		case chat.ContentDelta:
			o.content.WriteString(x.Text)
		case chat.ReasoningDelta:
			o.reasoning.WriteString(x.Text)
		case chat.ToolCallDelta:
			o.calls = append(o.calls, newToolCall(x.ToolCall))
		}
	}
	return d
}

func newToolCall(c chat.FunctionCall) toolCall {
	args := string(c.Arguments)
	if args == "" {
		args = "{}"
	}
	return toolCall{ID: newID("call_"), Type: "function", Function: toolFunction{Name: c.Name, Arguments: args}}
}

// finishReason is "tool_calls" when the model stopped after calling tools.
func (o *chatOutput) finishReason(finish string) string {
	if finish == engine.FinishStop && len(o.calls) > 0 {
		return "tool_calls"
	}
	return finish
}

func (s *Server) chatCompletions(w http.ResponseWriter, r *http.Request) error {
	arrived := time.Now()
	info := infoFrom(r.Context())
	var req chatRequest
	if err := s.readRequest(w, r, &req); err != nil {
		return err
	}
	maxTokens, maxParam := req.MaxCompletionTokens, "max_completion_tokens"
	if maxTokens == nil {
		maxTokens, maxParam = req.MaxTokens, "max_tokens"
	}
	p, err := s.commonParams(&req.commonRequest, maxTokens, maxParam)
	if err != nil {
		return err
	}
	if req.TopLogprobs != nil {
		if *req.TopLogprobs < 0 || *req.TopLogprobs > maxTopLogprobs {
			return badRequest("top_logprobs", "top_logprobs must be in [0, %d], got %d", maxTopLogprobs, *req.TopLogprobs)
		}
		if req.Logprobs == nil || !*req.Logprobs {
			return badRequest("top_logprobs", "top_logprobs needs logprobs set to true")
		}
		p.topLogprobs = int(*req.TopLogprobs)
	}
	p.logprobs = req.Logprobs != nil && *req.Logprobs

	release, err := s.prepSlot(r.Context())
	if err != nil {
		return err
	}
	prompt, err := s.buildChatPrompt(&req)
	release()
	if err != nil {
		return err
	}
	s.clipMaxTokens(&p, len(prompt.ids))
	info.stream, info.promptTokens = p.stream, len(prompt.ids)

	show := func(id int32) bool { return !s.cfg.Tokenizer.IsSpecial(id) || s.keepSpecial[id] }
	stopIDs := append(append([]int32(nil), s.chatStopIDs...), p.stopIDs...)
	created := arrived.Unix()
	id := newID("chatcmpl-")
	info.id = id
	g := &generation{s: s, r: r, arrived: arrived, param: "messages", id: id,
		req: s.engineRequest(prompt.ids, p, stopIDs),
		ts:  newTextStream(s.cfg.Tokenizer, show, stopIDs, p.stops)}
	o := &chatOutput{parser: chat.NewOutputParser(prompt.markers, prompt.parse)}

	if !p.stream {
		var lps []chatTokenLogprob
		out, err := g.run(func() error { return nil }, func(st step) error {
			o.feed(st)
			for _, lp := range st.logprobs {
				lps = append(lps, chatLogprob(s.cfg.Tokenizer, lp))
			}
			return nil
		})
		if err != nil {
			return err
		}
		info.completionTokens, info.finish = out.completionTokens, out.finish
		if out.clientGone {
			return errClientGone
		}
		if out.err != nil {
			return out.err
		}
		msg := chatMessage{Role: "assistant", ReasoningContent: o.reasoning.String(), ToolCalls: o.calls}
		if c := o.content.String(); c != "" || len(o.calls) == 0 {
			msg.Content = &c
		}
		choice := chatChoice{Message: msg, FinishReason: o.finishReason(out.finish)}
		if p.logprobs {
			if lps == nil {
				lps = []chatTokenLogprob{}
			}
			choice.Logprobs = &chatLogprobs{Content: lps}
		}
		info.finish = choice.FinishReason
		writeJSON(w, http.StatusOK, chatCompletion{ID: id, Object: "chat.completion", Created: created, Model: s.cfg.ModelName,
			Choices: []chatChoice{choice}, Usage: s.usageOf(out, len(prompt.ids))})
		return nil
	}

	sse := newSSE(w)
	chunk := func(d chatDelta, lp *chatLogprobs, finish *string) chatChunk {
		return chatChunk{ID: id, Object: "chat.completion.chunk", Created: created, Model: s.cfg.ModelName,
			Choices: []chunkChoice{{Delta: d, Logprobs: lp, FinishReason: finish}}}
	}
	started := func() error {
		if err := sse.start(); err != nil {
			return err
		}
		empty := ""
		return sse.send(chunk(chatDelta{Role: "assistant", Content: &empty}, nil, nil))
	}
	emit := func(st step) error {
		var lp *chatLogprobs
		if p.logprobs && len(st.logprobs) > 0 {
			lp = &chatLogprobs{}
			for _, x := range st.logprobs {
				lp.Content = append(lp.Content, chatLogprob(s.cfg.Tokenizer, x))
			}
		}
		// One chunk per parser delta keeps content, reasoning and tool calls in output order;
		// the step's logprobs ride on the first.
		ncalls := len(o.calls)
		deltas := o.feed(st)
		for _, d := range deltas {
			var cd chatDelta
			switch d.Kind {
			case chat.ContentDelta:
				cd.Content = &d.Text
			case chat.ReasoningDelta:
				cd.ReasoningContent = &d.Text
			case chat.ToolCallDelta:
				tc := o.calls[ncalls]
				idx := ncalls
				tc.Index = &idx
				ncalls++
				cd.ToolCalls = []toolCall{tc}
			}
			if err := sse.send(chunk(cd, lp, nil)); err != nil {
				return err
			}
			lp = nil
		}
		if lp != nil { // logprobs of tokens whose text is still held back
			empty := ""
			return sse.send(chunk(chatDelta{Content: &empty}, lp, nil))
		}
		return nil
	}
	out, err := g.run(started, emit)
	if err != nil {
		return err
	}
	info.completionTokens, info.finish = out.completionTokens, out.finish
	if out.clientGone {
		return errClientGone
	}
	if out.err != nil {
		sse.fail(out.err)
		return nil
	}
	finish := o.finishReason(out.finish)
	info.finish = finish
	if sse.send(chunk(chatDelta{}, nil, &finish)) != nil {
		return errClientGone
	}
	if p.includeUsage {
		if sse.send(chatChunk{ID: id, Object: "chat.completion.chunk", Created: created, Model: s.cfg.ModelName,
			Choices: []chunkChoice{}, Usage: s.usageOf(out, len(prompt.ids))}) != nil {
			return errClientGone
		}
	}
	if sse.done() != nil {
		return errClientGone
	}
	return nil
}

// engineRequest builds the engine's request from validated settings.
func (s *Server) engineRequest(prompt []int32, p genParams, stopIDs []int32) engine.Request {
	r := engine.Request{Prompt: prompt, MaxTokens: p.maxTokens, Sample: p.sample, StopTokens: stopIDs, TopLogprobs: -1}
	if p.logprobs {
		r.Logprobs, r.TopLogprobs = true, p.topLogprobs
	}
	return r
}
