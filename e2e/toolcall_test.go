package e2e

import (
	"context"
	"net/http/httptest"
	"reflect"
	"testing"

	"github.com/openai/openai-go/v3"

	"tandem/chat"
	"tandem/engine"
	"tandem/server"
	"tandem/tokenizer"
)

// scriptedEngine answers every request with the same tokens, one per event: a stand-in for a
// model that writes tool calls, which random weights never do. Everything after the engine —
// detokenizing, the output parser, the response and stream formats, the official client's
// decoding — is the real code.
type scriptedEngine struct{ tokens []int32 }

func (e *scriptedEngine) Submit(ctx context.Context, r engine.Request) (<-chan engine.Event, error) {
	ch := make(chan engine.Event)
	go func() {
		defer close(ch)
		for i, tok := range e.tokens {
			select {
			case ch <- engine.Event{Tokens: []int32{tok}}:
			case <-ctx.Done():
				ch <- engine.Event{Done: true, FinishReason: engine.FinishCancelled,
					Usage: engine.Usage{PromptTokens: len(r.Prompt), CompletionTokens: i}}
				return
			}
		}
		ch <- engine.Event{Done: true, FinishReason: engine.FinishStop,
			Usage: engine.Usage{PromptTokens: len(r.Prompt), CompletionTokens: len(e.tokens)}}
	}()
	return ch, nil
}

func (e *scriptedEngine) Stats() engine.Stats { return engine.Stats{} }

// Tool calls in Gemma 4's format, with thinking before them, come out of the real server as
// OpenAI tool_calls (name, arguments as a JSON string with nested values and escapes),
// reasoning_content and content, with finish_reason "tool_calls", streaming or not.
func TestToolCallParsing(t *testing.T) {
	tok, err := tokenizer.LoadDir(target)
	if err != nil {
		t.Fatal(err)
	}
	tmpl, err := chat.Load(target)
	if err != nil {
		t.Fatal(err)
	}
	const q = `<|"|>`
	script := "<|channel>thought\nThe user wants the weather.<channel|>Checking." +
		"<|tool_call>call:get_weather{city:" + q + `Oslo, "NO" \ ☃` + q + ",days:3,opts:{units:" + q + "metric" + q +
		",hours:[6,12],alerts:true,lang:null}}<tool_call|><|tool_call>call:now{}<tool_call|><|tool_response>"
	srv, err := server.New(server.Config{
		Engine: &scriptedEngine{tokens: tok.Encode(script, false)}, Tokenizer: tok, Template: tmpl,
		ModelName: "tiny", StopTokens: []int32{1, 106, 50},
	})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	defer func() {
		transport.CloseIdleConnections() // else Close waits for the client's idle connections
		hs.Close()
	}()
	c := (&testServer{URL: hs.URL}).newClient("")

	want := chatResult{
		Reasoning: "The user wants the weather.", Content: "Checking.", Finish: "tool_calls",
		ToolCalls: []toolCall{
			{Name: "get_weather", Arguments: `{"city":"Oslo, \"NO\" \\ ☃","days":3,"opts":{"units":"metric","hours":[6,12],"alerts":true,"lang":null}}`},
			{Name: "now", Arguments: `{}`},
		},
	}
	for _, stream := range []bool{false, true} {
		p := userChat("Weather in Oslo?", 256)
		p.Tools = []openai.ChatCompletionToolUnionParam{openai.ChatCompletionFunctionTool(weatherTool)}
		got, err := runChat(context.Background(), c, p, stream)
		if err != nil {
			t.Fatal(err)
		}
		if got.Content != want.Content || got.Reasoning != want.Reasoning || got.Finish != want.Finish || len(got.ToolCalls) != 2 {
			t.Fatalf("stream=%v: got content %q reasoning %q finish %q calls %+v", stream, got.Content, got.Reasoning, got.Finish, got.ToolCalls)
		}
		ids := map[string]bool{}
		for i, tc := range got.ToolCalls {
			if tc.ID == "" || ids[tc.ID] {
				t.Errorf("stream=%v: call %d has id %q (empty or repeated)", stream, i, tc.ID)
			}
			ids[tc.ID] = true
			tc.ID = ""
			if !reflect.DeepEqual(tc, want.ToolCalls[i]) {
				t.Errorf("stream=%v: call %d = %+v, want %+v", stream, i, tc, want.ToolCalls[i])
			}
		}
	}
}
