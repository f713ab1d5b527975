package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"tandem/compute"
	"tandem/compute/cpu"
	"tandem/compute/cuda"
	"tandem/generation"
	"tandem/model/gemma4"
	"tandem/sample"
	"tandem/serve"
)

// generateJSON is the documented shape of `generate --json`.
type generateJSON struct {
	Tokens     []int32 `json:"tokens"`
	StopReason string  `json:"stop_reason"`
	Stats      struct {
		PromptTokens    *int `json:"prompt_tokens"`
		GeneratedTokens *int `json:"generated_tokens"`
	} `json:"stats"`
	Timings map[string]float64 `json:"timings"`
}

func runGenerateJSON(t *testing.T, args ...string) generateJSON {
	t.Helper()
	out, _ := mustExecute(t, append([]string{"generate", "--json"}, args...)...)
	var g generateJSON
	if err := json.Unmarshal([]byte(out), &g); err != nil {
		t.Fatalf("generate --json is not JSON: %v\n%s", err, out)
	}
	return g
}

// library runs the same generation through the generation package.
func library(t *testing.T, dir string, prompt []int32, opt generation.Options) *generation.Result {
	t.Helper()
	m, err := gemma4.Load(dir, cpu.New(0))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	res, err := generation.Generate(context.Background(), m, prompt, opt, nil)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func TestGenerateJSON(t *testing.T) {
	dir := tinyModel(t, "gemma4-tiny-e2b")
	prompt := []int32{2, 40, 41, 300, 7}
	stops := []int32{1, 106, 50} // gen-model's generation_config.json
	tests := []struct {
		name string
		args []string
		opt  generation.Options
	}{
		{"greedy", nil, generation.Options{MaxTokens: 12}},
		{"greedy, one-token prefill", []string{"--prefill-size", "1"}, generation.Options{MaxTokens: 12}},
		{"one token", []string{"--max-tokens", "1"}, generation.Options{MaxTokens: 1}},
		{"sampled", []string{"--temperature", "0.9", "--top-k", "50", "--top-p", "0.9", "--min-p", "0.01", "--repetition-penalty", "1.2", "--seed", "5"},
			generation.Options{MaxTokens: 12, Sample: sample.Params{Temperature: 0.9, TopK: 50, TopP: 0.9, MinP: 0.01, RepetitionPenalty: 1.2, Seed: 5}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"--model", dir, "--prompt-ids", "2,40,41,300,7", "--max-tokens", "12"}, tt.args...)
			g := runGenerateJSON(t, args...)
			tt.opt.StopTokens = stops
			want := library(t, dir, prompt, tt.opt)
			if !slices.Equal(g.Tokens, want.Tokens) || g.StopReason != want.StopReason {
				t.Errorf("tokens %v (%s), want %v (%s) from generation.Generate", g.Tokens, g.StopReason, want.Tokens, want.StopReason)
			}
			if g.Stats.PromptTokens == nil || *g.Stats.PromptTokens != len(prompt) {
				t.Errorf("stats.prompt_tokens = %v, want %d", g.Stats.PromptTokens, len(prompt))
			}
			if g.Stats.GeneratedTokens == nil || *g.Stats.GeneratedTokens != len(g.Tokens) {
				t.Errorf("stats.generated_tokens = %v, want %d", g.Stats.GeneratedTokens, len(g.Tokens))
			}
			for _, k := range []string{"load_s", "prefill_s", "decode_s", "prefill_tokens_per_s", "decode_tokens_per_s"} {
				if v, ok := g.Timings[k]; !ok || v < 0 {
					t.Errorf("timings.%s = %v (present %v), want a number >= 0", k, v, ok)
				}
			}
		})
	}
}

func TestGenerateSampledIsSeeded(t *testing.T) {
	dir := tinyModel(t, "gemma4-tiny-e2b")
	run := func(seed string) []int32 {
		return runGenerateJSON(t, "--model", dir, "--prompt-ids", "2,9,8", "--max-tokens", "16", "--temperature", "1", "--seed", seed).Tokens
	}
	a, b, c := run("1"), run("1"), run("2")
	if !slices.Equal(a, b) {
		t.Errorf("--seed 1 twice: %v and %v", a, b)
	}
	if slices.Equal(a, c) {
		t.Errorf("--seed 1 and --seed 2 both gave %v", a)
	}
}

func TestGeneratePlainOutput(t *testing.T) {
	dir := tinyModel(t, "gemma4-tiny-e2b")
	out, log := mustExecute(t, "generate", "--model", dir, "--prompt-ids", "2,40,41", "--max-tokens", "6")
	want := runGenerateJSON(t, "--model", dir, "--prompt-ids", "2,40,41", "--max-tokens", "6").Tokens
	var got []int32
	for _, f := range strings.Fields(out) {
		v, err := strconv.Atoi(f)
		if err != nil {
			t.Fatalf("stdout %q is not space-separated ids", out)
		}
		got = append(got, int32(v))
	}
	if !slices.Equal(got, want) || strings.Count(out, "\n") != 1 {
		t.Errorf("stdout %q, want the ids %v on one line", out, want)
	}
	if !strings.Contains(log, strconv.Itoa(len(want))+" tokens (") || !strings.Contains(log, "prefill 3 tokens") {
		t.Errorf("stderr %q lacks the stats line", log)
	}
}

func TestGenerateStopsAtGenerationConfigEOS(t *testing.T) {
	dir := tinyModel(t, "gemma4-tiny-e2b")
	free := library(t, dir, []int32{2, 40, 41}, generation.Options{MaxTokens: 16}).Tokens
	at := 4
	for slices.Index(free, free[at]) != at {
		at++ // a token first seen at index at, so stopping there is unambiguous
	}
	cfg := `{"bos_token_id": 2, "eos_token_id": [` + strconv.Itoa(int(free[at])) + `]}`
	if err := os.WriteFile(filepath.Join(dir, "generation_config.json"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	g := runGenerateJSON(t, "--model", dir, "--prompt-ids", "2,40,41", "--max-tokens", "16")
	if !slices.Equal(g.Tokens, free[:at+1]) || g.StopReason != "stop" {
		t.Errorf("tokens %v (%s), want %v (stop)", g.Tokens, g.StopReason, free[:at+1])
	}
}

func TestStopTokens(t *testing.T) {
	tests := []struct {
		name    string
		config  string // generation_config.json; empty: none
		want    []int32
		wantErr string
	}{
		{"list", `{"eos_token_id": [1, 106, 7]}`, []int32{1, 106, 7}, ""},
		{"single id", `{"eos_token_id": 9}`, []int32{9}, ""},
		{"no eos falls back to Gemma 4's", `{"bos_token_id": 2}`, []int32{1, 106, 50}, ""},
		{"no file falls back to Gemma 4's", "", []int32{1, 106, 50}, ""},
		{"malformed", `{"eos_token_id": [1,`, nil, "generation_config.json"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if tt.config != "" {
				if err := os.WriteFile(filepath.Join(dir, "generation_config.json"), []byte(tt.config), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			got, err := serve.StopTokens(dir)
			if tt.wantErr != "" {
				wantError(t, err, tt.wantErr)
				return
			}
			if err != nil || !slices.Equal(got, tt.want) {
				t.Fatalf("stopTokens = %v, %v; want %v", got, err, tt.want)
			}
		})
	}
}

func TestPromptIDsFromFile(t *testing.T) {
	dir := tinyModel(t, "gemma4-tiny-e2b")
	want := runGenerateJSON(t, "--model", dir, "--prompt-ids", "2,40,41,300", "--max-tokens", "5").Tokens
	files := t.TempDir()
	for _, tt := range []struct{ name, content string }{
		{"commas", "2,40,41,300"},
		{"commas and spaces", "2, 40, 41, 300\n"},
		{"whitespace", "2 40\n41\t300\r\n"},
		{"JSON array", "[2, 40, 41, 300]\n"},
		{"JSON array over lines", "[\n  2,\n  40,\n  41,\n  300\n]\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(files, strings.ReplaceAll(tt.name, " ", "_"))
			if err := os.WriteFile(path, []byte(tt.content), 0o644); err != nil {
				t.Fatal(err)
			}
			if got := runGenerateJSON(t, "--model", dir, "--prompt-ids", "@"+path, "--max-tokens", "5").Tokens; !slices.Equal(got, want) {
				t.Errorf("@FILE holding %q: %v, want %v", tt.content, got, want)
			}
		})
	}
}

func TestParseIDs(t *testing.T) {
	file := filepath.Join(t.TempDir(), "ids")
	if err := os.WriteFile(file, []byte("[5,6]"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		in      string
		want    []int32
		wantErr string
	}{
		{"1,2,3", []int32{1, 2, 3}, ""},
		{"1 2 3", []int32{1, 2, 3}, ""},
		{"[1, 2, 3]", []int32{1, 2, 3}, ""},
		{" 1,\n2\t3 ", []int32{1, 2, 3}, ""},
		{"0", []int32{0}, ""},
		{"2147483647", []int32{2147483647}, ""},
		{"@" + file, []int32{5, 6}, ""},
		{"1,x", nil, `token id 1 ("x") is not a non-negative integer`},
		{"-1", nil, `token id 0 ("-1") is not a non-negative integer`},
		{"1.5", nil, `("1.5")`},
		{"2147483648", nil, "not a non-negative integer"}, // beyond int32
		{"", nil, "no token ids given"},
		{"[ ]", nil, "no token ids given"},
		{"@" + filepath.Join(t.TempDir(), "missing"), nil, "no such file"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := parseIDs(tt.in)
			if tt.wantErr != "" {
				wantError(t, err, tt.wantErr)
				return
			}
			if err != nil || !slices.Equal(got, tt.want) {
				t.Fatalf("parseIDs(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
			}
		})
	}
}

func TestGenerateErrors(t *testing.T) {
	dir := tinyModel(t, "gemma4-tiny-e2b")
	base := []string{"generate", "--model", dir}
	tests := []struct {
		name string
		args []string
		want []string
	}{
		{"no model", []string{"generate", "--prompt-ids", "2"}, []string{"--model is required"}},
		{"no prompt", base, []string{"give a prompt with --prompt or --prompt-ids"}},
		{"text prompt and ids", append(base, "--prompt", "hello", "--prompt-ids", "2"), []string{"give --prompt or --prompt-ids, not both"}},
		{"text prompt without a tokenizer", []string{"generate", "--model", noTokenizer(t, dir), "--prompt", "hello"}, []string{"--prompt needs the model's tokenizer", "--prompt-ids"}},
		{"bad prompt id", append(base, "--prompt-ids", "1,x"), []string{"--prompt-ids", `token id 1 ("x")`}},
		{"missing ids file", append(base, "--prompt-ids", "@"+filepath.Join(t.TempDir(), "none")), []string{"--prompt-ids", "no such file"}},
		{"prompt id outside the vocabulary", append(base, "--prompt-ids", "2,512"), []string{"outside the vocabulary"}},
		{"cuda", append(base, "--prompt-ids", "2", "--device", "cuda"), []string{"--device cuda", "CUDA driver", "--device cpu"}},
		{"bogus device", append(base, "--prompt-ids", "2", "--device", "bogus"), []string{`--device "bogus"`, "auto, cpu or cuda"}},
		{"missing model directory", []string{"generate", "--model", filepath.Join(t.TempDir(), "none"), "--prompt-ids", "2"}, []string{"none"}},
		{"zero max tokens", append(base, "--prompt-ids", "2", "--max-tokens", "0"), []string{"max tokens must be positive"}},
		{"beyond the context", append(base, "--prompt-ids", "2", "--max-tokens", "4096"), []string{"exceeds the model's context of 4096"}},
		{"negative prefill size", append(base, "--prompt-ids", "2", "--prefill-size", "-1"), []string{"prefill size must be positive"}},
		{"negative temperature", append(base, "--prompt-ids", "2", "--temperature", "-1"), []string{"temperature"}},
		{"top-p above one", append(base, "--prompt-ids", "2", "--top-p", "1.5"), []string{"top_p"}},
		{"negative top-k", append(base, "--prompt-ids", "2", "--top-k", "-1"), []string{"top_k"}},
		{"positional argument", append(base, "--prompt-ids", "2", "extra"), []string{"unknown command"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, _, err := execute(t, tt.args...)
			wantError(t, err, tt.want...)
			if out != "" {
				t.Errorf("a failed generate printed %q", out)
			}
		})
	}
}

func TestGenerateHonoursCommandContext(t *testing.T) {
	// generate must derive its context from the command's, so that callers
	// (and tests) can cancel it, not only an interrupt signal.
	dir := tinyModel(t, "gemma4-tiny-e2b")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, cmd := range []string{"generate", "score"} {
		_, _, err := executeContext(t, ctx, cmd, "--model", dir, "--prompt-ids", "2,3,4")
		if !errors.Is(err, context.Canceled) {
			t.Errorf("%s with a cancelled context: err = %v, want context.Canceled", cmd, err)
		}
	}
}

func TestOpenBackend(t *testing.T) {
	for _, tt := range []struct {
		device, wantErr string
	}{
		{"auto", ""},
		{"cpu", ""},
		{"cuda", "--device cpu"},
		{"CPU", "want auto, cpu or cuda"},
		{"", "want auto, cpu or cuda"},
	} {
		b, err := openBackend(tt.device, 1)
		if tt.wantErr == "" {
			if err != nil || b == nil {
				t.Errorf("openBackend(%q) = %v, %v", tt.device, b, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("openBackend(%q) error %v, want %q", tt.device, err, tt.wantErr)
		}
	}
}

func TestScoreJSON(t *testing.T) {
	dir := tinyModel(t, "gemma4-tiny-e2b")
	ids := []int32{2, 40, 41, 300, 7, 7, 9, 100, 511, 0}
	m, err := gemma4.Load(dir, cpu.New(0))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	want, err := generation.ScoreTokens(context.Background(), m, ids, 3)
	if err != nil {
		t.Fatal(err)
	}
	for _, chunk := range []string{"1", "4", "512"} {
		t.Run("prefill "+chunk, func(t *testing.T) {
			out, _ := mustExecute(t, "score", "--json", "--model", dir, "--prompt-ids", "2,40,41,300,7,7,9,100,511,0", "--prefill-size", chunk)
			var got generation.Score
			if err := json.Unmarshal([]byte(out), &got); err != nil {
				t.Fatalf("score --json is not JSON: %v\n%s", err, out)
			}
			// JSON round-trips float64 exactly: the CLI's numbers are the library's.
			if !slices.Equal(got.Positions, want.Positions) || got.NLL != want.NLL || got.Perplexity != want.Perplexity {
				t.Errorf("score --json = %+v, want %+v", got, want)
			}
			for _, k := range []string{`"positions"`, `"nll"`, `"perplexity"`, `"next"`, `"logprob"`, `"top1"`, `"top1_logprob"`} {
				if !strings.Contains(out, k) {
					t.Errorf("score --json lacks %s", k)
				}
			}
		})
	}
}

func TestScoreTable(t *testing.T) {
	dir := tinyModel(t, "gemma4-tiny-e2b")
	out, _ := mustExecute(t, "score", "--model", dir, "--prompt-ids", "2,40,41,300")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 5 || !strings.HasPrefix(strings.TrimSpace(lines[0]), "POS") ||
		!strings.HasPrefix(lines[4], "nll ") || !strings.Contains(lines[4], "over 3 positions, perplexity") {
		t.Errorf("want a header, 3 positions and a summary line:\n%s", out)
	}
}

func TestScoreErrors(t *testing.T) {
	dir := tinyModel(t, "gemma4-tiny-e2b")
	tests := []struct {
		name, ids string
		want      string
	}{
		{"one token", "2", "at least 2 tokens, got 1"},
		// The last token used to index past the logits and panic.
		{"last token outside the vocabulary", "2,40,512", "outside the vocabulary"},
		{"bad id", "2,x", `token id 1 ("x")`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := execute(t, "score", "--model", dir, "--prompt-ids", tt.ids)
			wantError(t, err, tt.want)
		})
	}
	_, _, err := execute(t, "score", "--model", dir, "--prompt", "hi")
	wantError(t, err, "unknown flag: --prompt")
}

// noTokenizer copies a model directory without its tokenizer files.
func noTokenizer(t *testing.T, dir string) string {
	t.Helper()
	out := t.TempDir()
	for _, f := range []string{"config.json", "generation_config.json", "model.safetensors"} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(out, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// TestGenerateFromText protects --prompt and --chat: text goes through the
// model's tokenizer (and chat template), and the JSON carries the text.
func TestGenerateFromText(t *testing.T) {
	dir := tinyModel(t, "gemma4-tiny-e2b")
	for _, args := range [][]string{{"--prompt", "Hello world"}, {"--prompt", "Hello world", "--chat"}} {
		out, _ := mustExecute(t, append([]string{"generate", "--model", dir, "--max-tokens", "5", "--json"}, args...)...)
		var v map[string]any
		if err := json.Unmarshal([]byte(out), &v); err != nil {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
		if _, ok := v["text"].(string); !ok {
			t.Fatalf("%v: no text in %s", args, out)
		}
		stats := v["stats"].(map[string]any)
		if n := stats["prompt_tokens"].(float64); n < 3 {
			t.Fatalf("%v: prompt of %v tokens", args, n)
		}
	}
	// The chat prompt is the rendered template: longer than the bare text.
	plain, _ := mustExecute(t, "tokenize", "--model", dir, "--text", "Hello world", "--json")
	var p struct{ IDs []int32 }
	if err := json.Unmarshal([]byte(plain), &p); err != nil || len(p.IDs) < 3 || p.IDs[0] != 2 {
		t.Fatalf("tokenize: %v %s", err, plain)
	}
	text, _ := mustExecute(t, "detokenize", "--model", dir, "--ids", "2,400,401", "--skip-special")
	if strings.Contains(text, "<bos>") {
		t.Fatalf("--skip-special kept <bos>: %q", text)
	}
}

// TestPrefillPrecisionFlag: --prefill-precision bf16 prefills with bf16
// products (the library's tokens under Model.SetPromptPrecision), auto (the
// default) is exact on the CPU, and anything else is refused before the
// model loads. (On CUDA auto is bf16: TestAutoPrecision.)
func TestPrefillPrecisionFlag(t *testing.T) {
	dir := tinyModel(t, "gemma4-tiny-e2b")
	prompt := []int32{2, 40, 41, 7, 9, 300, 12, 5}
	exact := library(t, dir, prompt, generation.Options{MaxTokens: 24}).Tokens
	m, err := gemma4.Load(dir, cpu.New(0))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if err := m.SetPromptPrecision(compute.PrecisionBF16); err != nil {
		t.Fatal(err)
	}
	res, err := generation.Generate(context.Background(), m, prompt, generation.Options{MaxTokens: 24}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if slices.Equal(res.Tokens, exact) {
		t.Fatal("bf16 prompts give the exact tokens here: the test cannot tell the flag's values apart")
	}
	ids := "2,40,41,7,9,300,12,5"
	for _, c := range []struct {
		args []string
		want []int32
	}{
		{nil, exact},
		{[]string{"--prefill-precision", "exact"}, exact},
		{[]string{"--prefill-precision", "auto"}, exact},
		{[]string{"--prefill-precision", "bf16"}, res.Tokens},
	} {
		g := runGenerateJSON(t, append([]string{"--model", dir, "--prompt-ids", ids, "--max-tokens", "24"}, c.args...)...)
		if !slices.Equal(g.Tokens, c.want) {
			t.Errorf("%v: tokens %v, want %v", c.args, g.Tokens, c.want)
		}
	}
	_, _, err = execute(t, "generate", "--model", dir, "--prompt-ids", ids, "--prefill-precision", "fp8")
	wantError(t, err, "--prefill-precision", `unknown precision "fp8"`)
}

// TestAutoPrecision protects --prefill-precision auto, every command's
// default: bf16 prompt passes on CUDA (7-11x faster prefill there), exact
// ones on the CPU; exact and bf16 are what they say on either. The choice
// goes by the backend's type, so an unopened CUDA backend stands for the
// GPU without one.
func TestAutoPrecision(t *testing.T) {
	for _, b := range []compute.Backend{cpu.New(1), new(cuda.Backend)} {
		_, gpu := b.(*cuda.Backend)
		for _, c := range []struct {
			flag string
			want compute.Precision
		}{
			{"auto", map[bool]compute.Precision{false: compute.PrecisionExact, true: compute.PrecisionBF16}[gpu]},
			{"exact", compute.PrecisionExact},
			{"bf16", compute.PrecisionBF16},
		} {
			pp, err := parsePrecision(c.flag)
			if err != nil {
				t.Fatalf("%s: %v", c.flag, err)
			}
			if got := pp.on(b); got != c.want {
				t.Errorf("%s on %s: %v, want %v", c.flag, b.Name(), got, c.want)
			}
		}
	}
	if _, err := parsePrecision("fp8"); err == nil || !strings.Contains(err.Error(), "or auto") {
		t.Errorf("fp8: %v, want an error naming auto", err)
	}
}

// TestPromptChunk protects --prefill-size's default: 2,048 tokens a pass
// for bf16 prompt passes on CUDA, generation's 512 elsewhere, and a size
// given is kept.
func TestPromptChunk(t *testing.T) {
	type chunkCase struct {
		b    compute.Backend
		n    int
		p    compute.Precision
		want int
	}
	cases := []chunkCase{
		{cpu.New(1), 0, compute.PrecisionExact, generation.DefaultPrefillSize},
		{cpu.New(1), 0, compute.PrecisionBF16, generation.DefaultPrefillSize},
		{cpu.New(1), 7, compute.PrecisionBF16, 7},
		// The choice goes by the backend's type: an unopened CUDA backend
		// stands for the GPU.
		{new(cuda.Backend), 0, compute.PrecisionBF16, 2048},
		{new(cuda.Backend), 0, compute.PrecisionExact, generation.DefaultPrefillSize},
		{new(cuda.Backend), 300, compute.PrecisionBF16, 300},
	}
	for _, c := range cases {
		if got := promptChunk(c.n, c.b, c.p); got != c.want {
			t.Errorf("%d at %v on %s: %d, want %d", c.n, c.p, c.b.Name(), got, c.want)
		}
	}
}
