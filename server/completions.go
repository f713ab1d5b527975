package server

import (
	"net/http"
	"strings"
	"time"

	"tandem/engine"
)

// Response shapes of POST /v1/completions.

type completion struct {
	ID      string             `json:"id"`
	Object  string             `json:"object"` // text_completion
	Created int64              `json:"created"`
	Model   string             `json:"model"`
	Choices []completionChoice `json:"choices"`
	Usage   *usage             `json:"usage,omitempty"`
}

type completionChoice struct {
	Index        int                 `json:"index"`
	Text         string              `json:"text"`
	Logprobs     *completionLogprobs `json:"logprobs"`
	FinishReason *string             `json:"finish_reason"`
}

// maxCompletionLogprobs bounds the legacy "logprobs" count (OpenAI allows 5; vLLM 20).
const maxCompletionLogprobs = engine.MaxTopLogprobs

func (s *Server) completions(w http.ResponseWriter, r *http.Request) error {
	arrived := time.Now()
	info := infoFrom(r.Context())
	var req completionRequest
	if err := s.readRequest(w, r, &req); err != nil {
		return err
	}
	p, err := s.commonParams(&req.commonRequest, req.MaxTokens, "max_tokens")
	if err != nil {
		return err
	}
	if req.Logprobs != nil {
		if *req.Logprobs < 0 || *req.Logprobs > maxCompletionLogprobs {
			return badRequest("logprobs", "logprobs must be in [0, %d], got %d", maxCompletionLogprobs, *req.Logprobs)
		}
		p.logprobs, p.topLogprobs = true, int(*req.Logprobs)
	}
	if req.BestOf != nil && *req.BestOf != 1 {
		return badRequest("best_of", "best_of = %d is not supported (only 1)", *req.BestOf)
	}
	if req.Suffix != nil && *req.Suffix != "" {
		return badRequest("suffix", "suffix is not supported")
	}
	if req.Echo && p.logprobs {
		return badRequest("echo", "echo with logprobs is not supported (prompt logprobs are not computed)")
	}
	release, err := s.prepSlot(r.Context())
	if err != nil {
		return err
	}
	prompt, promptText, err := s.completionPrompt(&req.Prompt, req.Echo)
	release()
	if err != nil {
		return err
	}
	s.clipMaxTokens(&p, len(prompt))
	info.stream, info.promptTokens = p.stream, len(prompt)

	skip := req.SkipSpecialTokens == nil || *req.SkipSpecialTokens
	show := func(id int32) bool { return !skip || !s.cfg.Tokenizer.IsSpecial(id) }
	stopIDs := append(append([]int32(nil), s.cfg.StopTokens...), p.stopIDs...)
	created := arrived.Unix()
	id := newID("cmpl-")
	info.id = id
	g := &generation{s: s, r: r, arrived: arrived, param: "prompt", id: id,
		req: s.engineRequest(prompt, p, stopIDs),
		ts:  newTextStream(s.cfg.Tokenizer, show, stopIDs, p.stops)}

	// Logprobs: text_offset counts characters of the completion before each token's text,
	// as the detokenizer released it (a token's display text may differ: a byte-fallback
	// token shows as U+FFFD, a hidden special token as its marker).
	logprobsOf := func(st step) *completionLogprobs {
		if !p.logprobs || len(st.logprobs) == 0 {
			return nil
		}
		lp := &completionLogprobs{}
		for i, x := range st.logprobs {
			appendCompletionLogprob(lp, s.cfg.Tokenizer, x, st.offsets[i])
		}
		return lp
	}

	if !p.stream {
		var text strings.Builder
		text.WriteString(promptText)
		all := &completionLogprobs{Tokens: []string{}, TokenLogprobs: []float64{}, TopLogprobs: []map[string]float64{}, TextOffset: []int{}}
		out, err := g.run(func() error { return nil }, func(st step) error {
			text.WriteString(st.text)
			if lp := logprobsOf(st); lp != nil {
				all.Tokens = append(all.Tokens, lp.Tokens...)
				all.TokenLogprobs = append(all.TokenLogprobs, lp.TokenLogprobs...)
				all.TopLogprobs = append(all.TopLogprobs, lp.TopLogprobs...)
				all.TextOffset = append(all.TextOffset, lp.TextOffset...)
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
		choice := completionChoice{Text: text.String(), FinishReason: &out.finish}
		if p.logprobs {
			choice.Logprobs = all
		}
		writeJSON(w, http.StatusOK, completion{ID: id, Object: "text_completion", Created: created, Model: s.cfg.ModelName,
			Choices: []completionChoice{choice}, Usage: s.usageOf(out, len(prompt))})
		return nil
	}

	sse := newSSE(w)
	chunk := func(text string, lp *completionLogprobs, finish *string) completion {
		return completion{ID: id, Object: "text_completion", Created: created, Model: s.cfg.ModelName,
			Choices: []completionChoice{{Text: text, Logprobs: lp, FinishReason: finish}}}
	}
	started := func() error {
		if err := sse.start(); err != nil {
			return err
		}
		if promptText != "" {
			return sse.send(chunk(promptText, nil, nil))
		}
		return nil
	}
	emit := func(st step) error {
		lp := logprobsOf(st)
		if st.text == "" && lp == nil {
			return nil
		}
		return sse.send(chunk(st.text, lp, nil))
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
	if sse.send(chunk("", nil, &out.finish)) != nil {
		return errClientGone
	}
	if p.includeUsage {
		if sse.send(completion{ID: id, Object: "text_completion", Created: created, Model: s.cfg.ModelName,
			Choices: []completionChoice{}, Usage: s.usageOf(out, len(prompt))}) != nil {
			return errClientGone
		}
	}
	if sse.done() != nil {
		return errClientGone
	}
	return nil
}

// completionPrompt tokenizes the prompt (text gets the tokenizer's BOS, as HF's encode does)
// or checks its token ids. echo returns the prompt's text to put before the completion.
func (s *Server) completionPrompt(p *promptField, echo bool) (ids []int32, echoText string, err error) {
	if !p.Set {
		return nil, "", badRequest("prompt", "prompt is required")
	}
	tok := s.cfg.Tokenizer
	if !p.IsID {
		ids = tok.Encode(p.Text, true)
		if len(ids) == 0 {
			return nil, "", badRequest("prompt", "prompt is empty")
		}
		if echo {
			echoText = p.Text
		}
		return ids, echoText, nil
	}
	if len(p.IDs) == 0 {
		return nil, "", badRequest("prompt", "prompt: the token id list is empty")
	}
	vocab := tok.VocabSize()
	ids = make([]int32, len(p.IDs))
	for i, id := range p.IDs {
		if id < 0 || id >= int64(vocab) {
			return nil, "", badRequest("prompt", "prompt: token id %d at index %d is outside the vocabulary [0, %d)", id, i, vocab)
		}
		ids[i] = int32(id)
	}
	if echo {
		echoText = tok.Decode(ids, false)
	}
	return ids, echoText, nil
}
