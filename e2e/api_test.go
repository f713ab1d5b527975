package e2e

import (
	"context"
	"encoding/json"
	"math"
	"reflect"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/shared"

	"tandem/chat"
	"tandem/serve"
)

var chatPrompts = []string{"Why is the sky blue?", "Write a haiku about Go.", "Count to five.", "Hello!"}

// Chat completions, streaming and not, on a speculative server and a plain one: the four
// results of each prompt are the same text, finish reason and token counts; usage counts the
// rendered prompt exactly; the speculative server reports its drafting in usage.
func TestChatCompletions(t *testing.T) {
	spec := start(t, serve.Options{Draft: drafter})
	plain := start(t, serve.Options{})
	ctx := context.Background()
	for _, prompt := range chatPrompts {
		p := userChat(prompt, 24)
		want, err := runChat(ctx, plain.client, p, false)
		if err != nil {
			t.Fatalf("%q: %v", prompt, err)
		}
		if want.Finish != "stop" && want.Finish != "length" {
			t.Errorf("%q: finish_reason %q", prompt, want.Finish)
		}
		if n := promptTokens(t, []chat.Message{{Role: "user", Content: prompt}}, chat.Options{}); want.Usage.PromptTokens != int64(n) {
			t.Errorf("%q: prompt_tokens %d, the rendered prompt has %d", prompt, want.Usage.PromptTokens, n)
		}
		u := want.Usage
		if u.CompletionTokens < 1 || u.CompletionTokens > 24 || u.TotalTokens != u.PromptTokens+u.CompletionTokens {
			t.Errorf("%q: usage %+v", prompt, u)
		}
		if (want.Finish == "length") != (u.CompletionTokens == 24) {
			t.Errorf("%q: finish_reason %q with %d tokens of 24", prompt, want.Finish, u.CompletionTokens)
		}
		if want.Speculative != nil {
			t.Errorf("%q: a plain server reported speculative usage %+v", prompt, want.Speculative)
		}
		for _, c := range []struct {
			name   string
			s      *testServer
			stream bool
		}{{"plain stream", plain, true}, {"speculative", spec, false}, {"speculative stream", spec, true}} {
			got, err := runChat(ctx, c.s.client, p, c.stream)
			if err != nil {
				t.Fatalf("%q %s: %v", prompt, c.name, err)
			}
			if got.Content != want.Content || got.Reasoning != want.Reasoning || got.Finish != want.Finish ||
				got.Usage.PromptTokens != u.PromptTokens || got.Usage.CompletionTokens != u.CompletionTokens {
				t.Errorf("%q %s: got %q/%q %s %d+%d, want %q/%q %s %d+%d", prompt, c.name,
					got.Content, got.Reasoning, got.Finish, got.Usage.PromptTokens, got.Usage.CompletionTokens,
					want.Content, want.Reasoning, want.Finish, u.PromptTokens, u.CompletionTokens)
			}
			if c.s == spec {
				sp := got.Speculative
				// Every round verifies up to 3 drafts and yields accepted+1 tokens; the first
				// token comes from the prefill.
				if sp == nil || sp.Rounds < 1 || sp.Drafted < sp.Accepted || sp.Drafted > 3*sp.Rounds ||
					sp.Accepted+sp.Rounds > int(u.CompletionTokens) {
					t.Errorf("%q %s: speculative usage %+v for %d tokens", prompt, c.name, sp, u.CompletionTokens)
				}
			}
		}
	}
}

// Text completions, streaming and not, with and without the drafter, agree.
func TestCompletions(t *testing.T) {
	spec := start(t, serve.Options{Draft: drafter})
	plain := start(t, serve.Options{})
	ctx := context.Background()
	for _, prompt := range []string{"The quick brown fox", "Once upon a time", "1, 2, 3,"} {
		p := textCompletion(prompt, 32)
		want, err := runCompletion(ctx, plain.client, p, false)
		if err != nil {
			t.Fatal(err)
		}
		if want.Usage.CompletionTokens < 1 || want.Usage.CompletionTokens > 32 {
			t.Errorf("%q: usage %+v", prompt, want.Usage)
		}
		for _, c := range []struct {
			name   string
			s      *testServer
			stream bool
		}{{"plain stream", plain, true}, {"speculative", spec, false}, {"speculative stream", spec, true}} {
			got, err := runCompletion(ctx, c.s.client, p, c.stream)
			if err != nil {
				t.Fatal(err)
			}
			if got.Text != want.Text || got.Finish != want.Finish || got.Usage.CompletionTokens != want.Usage.CompletionTokens ||
				got.Usage.PromptTokens != want.Usage.PromptTokens {
				t.Errorf("%q %s: got %q %s %+v, want %q %s %+v", prompt, c.name, got.Text, got.Finish, got.Usage, want.Text, want.Finish, want.Usage)
			}
			if (c.s == spec) != (got.Speculative != nil) {
				t.Errorf("%q %s: speculative usage %+v", prompt, c.name, got.Speculative)
			}
		}
	}
}

// A stop string cuts the text just before its first occurrence, wherever the token
// boundaries fall, streaming or not, and ends with finish_reason "stop".
func TestStopStrings(t *testing.T) {
	s := start(t, serve.Options{Draft: drafter})
	ctx := context.Background()
	tested := 0
	for _, prompt := range []string{"The quick brown fox", "Once upon a time", "1, 2, 3,", "Dear diary", "Hello"} {
		full, err := runCompletion(ctx, s.client, textCompletion(prompt, 48), false)
		if err != nil {
			t.Fatal(err)
		}
		// Stop strings are cut from runs of plain characters: random weights also write byte
		// pieces that decode to U+FFFD, which no client would name.
		runes := []rune(full.Text)
		var starts []int
		for at := 0; at+3 <= len(runes); at++ {
			if plain(runes[at : at+3]) {
				starts = append(starts, at)
			}
		}
		if len(starts) < 3 {
			continue
		}
		tested++
		for _, at := range []int{starts[0], starts[len(starts)/2], starts[len(starts)-1]} {
			stop := string(runes[at : at+3])
			want := full.Text[:strings.Index(full.Text, stop)]
			for _, stream := range []bool{false, true} {
				p := textCompletion(prompt, 48)
				p.Stop = openai.CompletionNewParamsStopUnion{OfStringArray: []string{"never in the output \x01", stop}}
				got, err := runCompletion(ctx, s.client, p, stream)
				if err != nil {
					t.Fatal(err)
				}
				if got.Text != want || got.Finish != "stop" {
					t.Errorf("%q stop %q stream=%v: got %q (%s), want %q (stop)", prompt, stop, stream, got.Text, got.Finish, want)
				}
			}
		}
	}
	if tested < 2 {
		t.Fatalf("only %d prompts gave text long enough to cut", tested)
	}
}

// Chat logprobs: one entry per generated token, top_logprobs sorted and of the asked size,
// and under greedy decoding the chosen token is the most likely. Completion logprobs (the
// legacy format) agree with the chat ones for the same tokens.
func TestLogprobs(t *testing.T) {
	s := start(t, serve.Options{Draft: drafter})
	ctx := context.Background()
	for _, stream := range []bool{false, true} {
		p := userChat("Why is the sky blue?", 16)
		p.Logprobs, p.TopLogprobs = openai.Bool(true), openai.Int(3)
		r, err := runChat(ctx, s.client, p, stream)
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Logprobs) != int(r.Usage.CompletionTokens) {
			t.Fatalf("stream=%v: %d logprobs for %d tokens", stream, len(r.Logprobs), r.Usage.CompletionTokens)
		}
		for i, lp := range r.Logprobs {
			if lp.Logprob > 0 || math.IsNaN(lp.Logprob) || len(lp.TopLogprobs) != 3 {
				t.Fatalf("stream=%v token %d: %+v", stream, i, lp)
			}
			for j := 1; j < 3; j++ {
				if lp.TopLogprobs[j].Logprob > lp.TopLogprobs[j-1].Logprob {
					t.Fatalf("stream=%v token %d: top_logprobs not sorted: %+v", stream, i, lp.TopLogprobs)
				}
			}
			if lp.TopLogprobs[0].Token != lp.Token || lp.TopLogprobs[0].Logprob != lp.Logprob {
				t.Fatalf("stream=%v token %d: greedy chose %q (%v), the most likely is %q (%v)", stream, i,
					lp.Token, lp.Logprob, lp.TopLogprobs[0].Token, lp.TopLogprobs[0].Logprob)
			}
		}
	}
	for _, stream := range []bool{false, true} {
		p := textCompletion("The quick brown fox", 16)
		p.Logprobs = openai.Int(2)
		r, err := runCompletion(ctx, s.client, p, stream)
		if err != nil {
			t.Fatal(err)
		}
		lp := r.Logprobs
		n := int(r.Usage.CompletionTokens)
		if len(lp.Tokens) != n || len(lp.TokenLogprobs) != n || len(lp.TopLogprobs) != n {
			t.Fatalf("stream=%v: %d tokens, logprobs %d/%d/%d", stream, n, len(lp.Tokens), len(lp.TokenLogprobs), len(lp.TopLogprobs))
		}
		if !strings.ContainsRune(r.Text, utf8.RuneError) && strings.Join(lp.Tokens, "") != r.Text {
			t.Errorf("stream=%v: tokens %q do not make up the text %q", stream, lp.Tokens, r.Text)
		}
		for i := range n {
			best := math.Inf(-1)
			for _, v := range lp.TopLogprobs[i] {
				best = math.Max(best, v)
			}
			if len(lp.TopLogprobs[i]) < 1 || len(lp.TopLogprobs[i]) > 2 || lp.TokenLogprobs[i] != best || best > 0 {
				t.Fatalf("stream=%v token %d %q: logprob %v, top %v", stream, i, lp.Tokens[i], lp.TokenLogprobs[i], lp.TopLogprobs[i])
			}
		}
	}
}

var weatherTool = shared.FunctionDefinitionParam{
	Name:        "get_weather",
	Description: openai.String("Current weather for a city."),
	Parameters: shared.FunctionParameters{
		"type":       "object",
		"properties": map[string]any{"city": map[string]any{"type": "string"}, "days": map[string]any{"type": "integer"}},
		"required":   []string{"city"},
	},
}

// Tools are accepted and rendered into the prompt by the model's template: the prompt the
// server counts is the template's rendering with the tool declared, token for token. (Random
// weights never write a tool call; TestToolCallParsing drives the parser through the server.)
func TestToolsRendered(t *testing.T) {
	s := start(t, serve.Options{})
	ctx := context.Background()
	p := userChat("What is the weather in Oslo?", 4)
	p.Tools = []openai.ChatCompletionToolUnionParam{openai.ChatCompletionFunctionTool(weatherTool)}
	r, err := runChat(ctx, s.client, p, false)
	if err != nil {
		t.Fatal(err)
	}
	params, _ := json.Marshal(weatherTool.Parameters)
	tool, _ := json.Marshal(map[string]any{"type": "function", "function": map[string]any{
		"name": weatherTool.Name, "description": "Current weather for a city.", "parameters": json.RawMessage(params)}})
	msgs := []chat.Message{{Role: "user", Content: "What is the weather in Oslo?"}}
	with := promptTokens(t, msgs, chat.Options{Tools: []json.RawMessage{tool}})
	without := promptTokens(t, msgs, chat.Options{})
	if with <= without {
		t.Fatalf("the template did not declare the tool: %d tokens with it, %d without", with, without)
	}
	if r.Usage.PromptTokens != int64(with) {
		t.Errorf("prompt_tokens %d; the template renders %d with the tool, %d without", r.Usage.PromptTokens, with, without)
	}
}

// /v1/models lists the served model; /health reports it ready.
func TestModelsAndHealth(t *testing.T) {
	s := start(t, serve.Options{Draft: drafter, ModelName: "gemma-tiny"})
	page, err := s.client.Models.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range page.Data {
		ids = append(ids, m.ID)
	}
	if !reflect.DeepEqual(ids, []string{"gemma-tiny"}) {
		t.Errorf("models %v", ids)
	}
	if h := s.health(t); h.Status != "ok" || h.Queue.Running != 0 || h.Memory.KVBudgetTokens <= 0 {
		t.Errorf("health %+v", h)
	}
}

// plain reports whether rs are printable characters other than U+FFFD.
func plain(rs []rune) bool {
	for _, r := range rs {
		if r == utf8.RuneError || !unicode.IsPrint(r) {
			return false
		}
	}
	return true
}
