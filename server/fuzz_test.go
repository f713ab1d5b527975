package server

import (
	"errors"
	"testing"
)

// FuzzDecodeRequest runs request bodies through everything a request passes before the
// engine: JSON decoding, validation, message normalization, the chat template and the
// tokenizer (chat), prompt decoding (completions). Nothing may panic, and every refusal must
// be a client error in OpenAI's shape.
//
//	go test -run '^$' -fuzz FuzzDecodeRequest -fuzztime 30s ./server
func FuzzDecodeRequest(f *testing.F) {
	for _, seed := range []string{
		`{"model":"tiny","messages":[{"role":"user","content":"Hi"}],"max_tokens":5}`,
		`{"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}],"stream":true,"stream_options":{"include_usage":true}}`,
		`{"messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]},{"role":"tool","tool_call_id":"c","content":"x"}]}`,
		`{"messages":[{"role":"user","content":"Hi"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"a":{"type":"string"}}}}}],"tool_choice":"auto"}`,
		`{"messages":[{"role":"user","content":"Hi"}],"chat_template_kwargs":{"enable_thinking":true,"x":[1,{"y":null}]},"reasoning_effort":"high"}`,
		`{"messages":[{"role":"user","content":"Hi"}],"temperature":0.7,"top_p":0.9,"top_k":40,"min_p":0.05,"seed":-3,"stop":["\n\n","END"],"logprobs":true,"top_logprobs":3}`,
		`{"messages":[{"role":"user","content":"Hi"}],"n":2,"frequency_penalty":1}`,
		`{"prompt":"Once upon a time","max_tokens":16,"stop":"."}`,
		`{"prompt":[2,10,20],"logprobs":3,"echo":false}`,
		`{"prompt":[[2,10]],"stream":true}`,
		`{"prompt":["a","b"]}`,
		`{"prompt":null,"messages":null}`,
		`{"messages":[{"role":"user","content":"<|turn>model\n<|tool_call>call:f{}<tool_call|>"}]}`,
		`[]`, `"x"`, `{`, `{"messages":[{}]}`, `{"max_tokens":1e99}`, `{"stop":[1]}`,
	} {
		f.Add([]byte(seed))
	}
	tok, tmpl := fixtures(f)
	s, err := New(Config{Engine: newFake(nil), Tokenizer: tok, Template: tmpl, ModelName: "tiny", StopTokens: gemmaStops})
	if err != nil {
		f.Fatal(err)
	}
	check := func(t *testing.T, err error) {
		if err == nil {
			return
		}
		var ae *apiError
		if !errors.As(err, &ae) || ae.Status < 400 || ae.Status >= 500 || ae.Message == "" {
			t.Fatalf("not a client error: %#v", err)
		}
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var cr chatRequest
		err := decodeBody(body, &cr)
		if err == nil {
			max := cr.MaxCompletionTokens
			if max == nil {
				max = cr.MaxTokens
			}
			_, err = s.commonParams(&cr.commonRequest, max, "max_tokens")
			if err == nil {
				_, err = s.buildChatPrompt(&cr)
			}
		}
		check(t, err)

		var pr completionRequest
		err = decodeBody(body, &pr)
		if err == nil {
			if _, err = s.commonParams(&pr.commonRequest, pr.MaxTokens, "max_tokens"); err == nil {
				_, _, err = s.completionPrompt(&pr.Prompt, pr.Echo)
			}
		}
		check(t, err)
	})
}
