package e2e

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/packages/respjson"

	"tandem/chat"
	"tandem/tokenizer"
)

// chatResult is what a chat completion produced, gathered the same way from a response or a
// stream so the two can be compared.
type chatResult struct {
	Content, Reasoning string
	Finish             string
	ToolCalls          []toolCall
	Usage              openai.CompletionUsage
	Speculative        *specUsage // usage.speculative, when the server sent it
	Logprobs           []openai.ChatCompletionTokenLogprob
	TTFT               time.Duration // streaming: time to the first chunk with a token
	Chunks             int
}

type toolCall struct{ ID, Name, Arguments string }

// specUsage is Tandem's extension of usage: the request's speculative statistics.
type specUsage struct {
	Rounds         int     `json:"rounds"`
	Drafted        int     `json:"drafted"`
	Accepted       int     `json:"accepted"`
	AcceptanceRate float64 `json:"acceptance_rate"`
	MeanLength     float64 `json:"mean_acceptance_length"`
}

func extraString(fields map[string]respjson.Field, key string) string {
	f, ok := fields[key]
	if !ok {
		return ""
	}
	var s string
	json.Unmarshal([]byte(f.Raw()), &s)
	return s
}

func speculative(u openai.CompletionUsage) *specUsage {
	f, ok := u.JSON.ExtraFields["speculative"]
	if !ok || f.Raw() == "null" {
		return nil
	}
	var s specUsage
	if err := json.Unmarshal([]byte(f.Raw()), &s); err != nil {
		return nil
	}
	return &s
}

// runChat sends p, streaming or not, and gathers the result.
func runChat(ctx context.Context, c openai.Client, p openai.ChatCompletionNewParams, stream bool) (chatResult, error) {
	var r chatResult
	if !stream {
		resp, err := c.Chat.Completions.New(ctx, p)
		if err != nil {
			return r, err
		}
		ch := resp.Choices[0]
		r.Content, r.Finish = ch.Message.Content, ch.FinishReason
		r.Reasoning = extraString(ch.Message.JSON.ExtraFields, "reasoning_content")
		for _, tc := range ch.Message.ToolCalls {
			r.ToolCalls = append(r.ToolCalls, toolCall{tc.ID, tc.Function.Name, tc.Function.Arguments})
		}
		r.Usage, r.Speculative = resp.Usage, speculative(resp.Usage)
		r.Logprobs = ch.Logprobs.Content
		return r, nil
	}
	p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	start := time.Now()
	s := c.Chat.Completions.NewStreaming(ctx, p)
	defer s.Close()
	calls := map[int64]*toolCall{}
	var order []int64
	for s.Next() {
		chunk := s.Current()
		r.Chunks++
		if chunk.Usage.TotalTokens > 0 {
			r.Usage, r.Speculative = chunk.Usage, speculative(chunk.Usage)
		}
		if len(chunk.Choices) == 0 {
			continue
		}
		ch := chunk.Choices[0]
		reasoning := extraString(ch.Delta.JSON.ExtraFields, "reasoning_content")
		if r.TTFT == 0 && (ch.Delta.Content != "" || reasoning != "" || len(ch.Delta.ToolCalls) > 0 || ch.FinishReason != "") {
			r.TTFT = time.Since(start)
		}
		r.Content += ch.Delta.Content
		r.Reasoning += reasoning
		for _, tc := range ch.Delta.ToolCalls {
			c, ok := calls[tc.Index]
			if !ok {
				c = &toolCall{}
				calls[tc.Index] = c
				order = append(order, tc.Index)
			}
			if tc.ID != "" {
				c.ID = tc.ID
			}
			c.Name += tc.Function.Name
			c.Arguments += tc.Function.Arguments
		}
		r.Logprobs = append(r.Logprobs, ch.Logprobs.Content...)
		if ch.FinishReason != "" {
			r.Finish = ch.FinishReason
		}
	}
	for _, i := range order {
		r.ToolCalls = append(r.ToolCalls, *calls[i])
	}
	return r, s.Err()
}

// completionResult is the same for text completions.
type completionResult struct {
	Text, Finish string
	Usage        openai.CompletionUsage
	Speculative  *specUsage
	Logprobs     openai.CompletionChoiceLogprobs
	TTFT         time.Duration
}

func runCompletion(ctx context.Context, c openai.Client, p openai.CompletionNewParams, stream bool) (completionResult, error) {
	var r completionResult
	if !stream {
		resp, err := c.Completions.New(ctx, p)
		if err != nil {
			return r, err
		}
		r.Text, r.Finish = resp.Choices[0].Text, string(resp.Choices[0].FinishReason)
		r.Usage, r.Speculative, r.Logprobs = resp.Usage, speculative(resp.Usage), resp.Choices[0].Logprobs
		return r, nil
	}
	p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	start := time.Now()
	s := c.Completions.NewStreaming(ctx, p)
	defer s.Close()
	for s.Next() {
		chunk := s.Current()
		if chunk.Usage.TotalTokens > 0 {
			r.Usage, r.Speculative = chunk.Usage, speculative(chunk.Usage)
		}
		for _, ch := range chunk.Choices {
			if r.TTFT == 0 && (ch.Text != "" || ch.FinishReason != "") {
				r.TTFT = time.Since(start)
			}
			r.Text += ch.Text
			if ch.FinishReason != "" {
				r.Finish = string(ch.FinishReason)
			}
			lp := ch.Logprobs
			r.Logprobs.Tokens = append(r.Logprobs.Tokens, lp.Tokens...)
			r.Logprobs.TokenLogprobs = append(r.Logprobs.TokenLogprobs, lp.TokenLogprobs...)
			r.Logprobs.TopLogprobs = append(r.Logprobs.TopLogprobs, lp.TopLogprobs...)
		}
	}
	return r, s.Err()
}

func userChat(text string, maxTokens int64) openai.ChatCompletionNewParams {
	return openai.ChatCompletionNewParams{
		Model:     "tiny",
		Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage(text)},
		MaxTokens: openai.Int(maxTokens),
	}
}

func textCompletion(prompt string, maxTokens int64) openai.CompletionNewParams {
	return openai.CompletionNewParams{
		Model:     "tiny",
		Prompt:    openai.CompletionNewParamsPromptUnion{OfString: openai.String(prompt)},
		MaxTokens: openai.Int(maxTokens),
	}
}

// promptTokens renders messages with the model's own template and tokenizer, as the server
// must, and counts the tokens.
func promptTokens(t testing.TB, msgs []chat.Message, opt chat.Options) int {
	t.Helper()
	tok, err := tokenizer.LoadDir(target)
	if err != nil {
		t.Fatal(err)
	}
	tmpl, err := chat.Load(target)
	if err != nil {
		t.Fatal(err)
	}
	opt.AddGenerationPrompt = true
	text, err := tmpl.Render(msgs, opt)
	if err != nil {
		t.Fatal(err)
	}
	return len(tok.Encode(text, false))
}
