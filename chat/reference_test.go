package chat

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// The golden files are made by scripts/chat/reference.mjs with @huggingface/jinja, HF's own
// Jinja implementation; every conversation must render byte-identically, and a conversation
// HF refuses must be refused here with the same raise_exception message.

type conversation struct {
	Name                string          `json:"name"`
	Messages            json.RawMessage `json:"messages"`
	Tools               json.RawMessage `json:"tools"`
	AddGenerationPrompt bool            `json:"add_generation_prompt"`
	EnableThinking      *bool           `json:"enable_thinking"`
}

type reference struct {
	Generator      string  `json:"generator"`
	TemplateSHA256 string  `json:"template_sha256"`
	BOS            *string `json:"bos_token"`
	EOS            *string `json:"eos_token"`
	Results        map[string]struct {
		Output *string `json:"output"`
		Raise  *string `json:"raise"`
		Error  *string `json:"error"`
	} `json:"results"`
}

func readConversations(t *testing.T) []conversation {
	t.Helper()
	data, err := os.ReadFile("../testdata/chat/conversations.json")
	if err != nil {
		t.Fatal(err)
	}
	var convs []conversation
	if err := json.Unmarshal(data, &convs); err != nil {
		t.Fatal(err)
	}
	if len(convs) < 10 {
		t.Fatalf("only %d conversations", len(convs))
	}
	return convs
}

func readReference(t *testing.T, name string) reference {
	t.Helper()
	data, err := os.ReadFile("../testdata/chat/reference-" + name + ".json")
	if err != nil {
		t.Fatal(err)
	}
	var ref reference
	if err := json.Unmarshal(data, &ref); err != nil {
		t.Fatal(err)
	}
	return ref
}

// gemma4Dir is a model directory with chat/templates/gemma4.jinja as its chat_template.jinja
// and a tokenizer_config.json whose own (broken) chat_template must be ignored.
func gemma4Dir(t *testing.T) string {
	t.Helper()
	src, err := os.ReadFile("templates/gemma4.jinja")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "chat_template.jinja"), string(src))
	writeFile(t, filepath.Join(dir, "tokenizer_config.json"),
		`{"bos_token": "<bos>", "eos_token": {"content": "<eos>", "special": true}, "chat_template": "{% if %}"}`)
	return dir
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestReferenceRenders(t *testing.T) {
	convs := readConversations(t)
	for _, name := range []string{"gemma3", "qwen3", "gemma4"} {
		t.Run(name, func(t *testing.T) {
			var dir string
			if name == "gemma4" {
				dir = gemma4Dir(t)
			} else {
				dir = fixtureDir(t, name)
			}
			tmpl, err := Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			ref := readReference(t, name)
			sum := sha256.Sum256([]byte(tmpl.Source()))
			if got := hex.EncodeToString(sum[:]); got != ref.TemplateSHA256 {
				t.Fatalf("template sha256 %s, reference made from %s: rerun scripts/chat/reference.mjs", got, ref.TemplateSHA256)
			}
			if ref.BOS != nil && *ref.BOS != tmpl.BOS() || ref.BOS == nil && tmpl.BOS() != "" {
				t.Errorf("bos_token %q, reference %v", tmpl.BOS(), ref.BOS)
			}
			if ref.EOS != nil && *ref.EOS != tmpl.EOS() {
				t.Errorf("eos_token %q, reference %q", tmpl.EOS(), *ref.EOS)
			}
			if len(ref.Results) != len(convs) {
				t.Fatalf("reference has %d results for %d conversations: rerun scripts/chat/reference.mjs", len(ref.Results), len(convs))
			}
			var identical, refused int
			for _, c := range convs {
				want, ok := ref.Results[c.Name]
				if !ok {
					t.Errorf("%s: no reference result", c.Name)
					continue
				}
				opt := Options{AddGenerationPrompt: c.AddGenerationPrompt, EnableThinking: c.EnableThinking}
				got, err := tmpl.RenderJSON(c.Messages, c.Tools, opt)
				if !checkResult(t, c.Name+" (RenderJSON)", got, err, want.Output, want.Raise, want.Error) {
					continue
				}
				// The same conversation through the typed API.
				var msgs []Message
				if err := json.Unmarshal(c.Messages, &msgs); err != nil {
					t.Fatalf("%s: %v", c.Name, err)
				}
				var tools []json.RawMessage
				if !isJSONNull(c.Tools) {
					if err := json.Unmarshal(c.Tools, &tools); err != nil {
						t.Fatalf("%s: %v", c.Name, err)
					}
				}
				opt.Tools = tools
				got, err = tmpl.Render(msgs, opt)
				if !checkResult(t, c.Name+" (Render)", got, err, want.Output, want.Raise, want.Error) {
					continue
				}
				if want.Output != nil {
					identical++
				} else {
					refused++
				}
			}
			t.Logf("%s: %d/%d conversations byte-identical to %s, %d refused with the reference's error",
				name, identical, len(convs), ref.Generator, refused)
		})
	}
}

func checkResult(t *testing.T, what, got string, err error, output, raise, engineErr *string) bool {
	t.Helper()
	switch {
	case output != nil:
		if err != nil {
			t.Errorf("%s: error %v, want output", what, err)
			return false
		}
		if got != *output {
			t.Errorf("%s: output differs from HF's at byte %d\n got: %q\nwant: %q", what, firstDiff(got, *output), got, *output)
			return false
		}
	case raise != nil:
		var te *TemplateError
		if !errors.As(err, &te) {
			t.Errorf("%s: got %q, %v; want raise_exception(%q)", what, got, err, *raise)
			return false
		}
		if te.Message != *raise {
			t.Errorf("%s: raise_exception(%q), want %q", what, te.Message, *raise)
			return false
		}
	case engineErr != nil:
		if err == nil {
			t.Errorf("%s: rendered %q; HF failed with %q", what, got, *engineErr)
			return false
		}
	}
	return true
}

func firstDiff(a, b string) int {
	n := min(len(a), len(b))
	for i := range n {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}

// snippets.json holds small templates rendered by Python Jinja2 in transformers' environment
// (scripts/chat/reference_py.py): whitespace control, raw blocks, string escapes, brackets in
// tags, tojson's options and number formats, raise_exception — the places where the engine
// alone differs from Jinja2 and this package corrects it.
func TestSnippetsMatchJinja2(t *testing.T) {
	data, err := os.ReadFile("../testdata/chat/snippets.json")
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Generator string `json:"generator"`
		Snippets  []struct {
			Template string                     `json:"template"`
			Context  map[string]json.RawMessage `json:"context"`
			Output   *string                    `json:"output"`
			Raise    *string                    `json:"raise"`
			Error    *string                    `json:"error"`
		} `json:"snippets"`
	}
	if err := json.Unmarshal(data, &file); err != nil {
		t.Fatal(err)
	}
	for i, s := range file.Snippets {
		tmpl, err := Parse(s.Template, "", "")
		if err != nil {
			t.Errorf("snippet %d %q: %v", i, s.Template, err)
			continue
		}
		extra := map[string]any{}
		for k, v := range s.Context {
			extra[k] = v
		}
		got, err := tmpl.Render(hello, Options{Extra: extra})
		checkResult(t, fmt.Sprintf("snippet %d %q", i, s.Template), got, err, s.Output, s.Raise, s.Error)
	}
	t.Logf("%d snippets checked against %s", len(file.Snippets), file.Generator)
}
