package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"tandem/chat"
	"tandem/compute"
	"tandem/compute/cuda"
	"tandem/generation"
	"tandem/model/gemma4"
	"tandem/progress"
	"tandem/sample"
	"tandem/serve"
	"tandem/spec"
	"tandem/tokenizer"
)

// modelFlags are the flags every command that runs a model shares.
type modelFlags struct {
	model, device, promptIDs, prompt string
	precision                        string // --prefill-precision
	threads, prefill                 int
	asJSON, chatPrompt               bool
	tok                              *tokenizer.Tokenizer // set when the prompt was text
	cmd                              *cobra.Command       // for the progress bar's writer
}

func (f *modelFlags) register(cmd *cobra.Command) {
	f.cmd = cmd
	fl := cmd.Flags()
	fl.StringVar(&f.model, "model", "", "model directory (Hugging Face layout)")
	fl.StringVar(&f.device, "device", "auto", "compute device: auto, cpu or cuda")
	fl.IntVar(&f.threads, "threads", 0, "CPU threads (0: all cores)")
	fl.IntVar(&f.prefill, "prefill-size", 0, "prompt tokens per forward pass (0: 512, or for generate 2048 where prompt passes run at bf16 on CUDA)")
	precisionFlag(cmd, &f.precision)
	fl.StringVar(&f.promptIDs, "prompt-ids", "", "prompt token ids: 1,2,3 or @FILE (ids separated by commas or spaces, or a JSON array)")
	fl.BoolVar(&f.asJSON, "json", false, "print one JSON object")
}

// parseIDs reads "1,2,3", "1 2 3", "[1,2,3]" or "@FILE" holding any of those.
func parseIDs(s string) ([]int32, error) {
	if name, ok := strings.CutPrefix(s, "@"); ok {
		b, err := os.ReadFile(name)
		if err != nil {
			return nil, err
		}
		s = string(b)
	}
	fields := strings.FieldsFunc(s, func(r rune) bool {
		return r == ',' || r == '[' || r == ']' || r == ' ' || r == '\n' || r == '\t' || r == '\r'
	})
	ids := make([]int32, 0, len(fields))
	for i, f := range fields {
		v, err := strconv.ParseInt(f, 10, 32)
		if err != nil || v < 0 {
			return nil, fmt.Errorf("token id %d (%q) is not a non-negative integer", i, f)
		}
		ids = append(ids, int32(v))
	}
	if len(ids) == 0 {
		return nil, errors.New("no token ids given")
	}
	return ids, nil
}

// encodePrompt tokenizes --prompt with the model's tokenizer; with --chat
// the text is a user message rendered through the model's chat template
// (which writes its own BOS).
func (f *modelFlags) encodePrompt() ([]int32, error) {
	tok, err := tokenizer.LoadDir(f.model)
	if err != nil {
		return nil, fmt.Errorf("--prompt needs the model's tokenizer (or use --prompt-ids): %w", err)
	}
	f.tok = tok
	if !f.chatPrompt {
		return tok.Encode(f.prompt, true), nil
	}
	tmpl, err := chat.Load(f.model)
	if err != nil {
		return nil, fmt.Errorf("--chat: %w", err)
	}
	text, err := tmpl.Render([]chat.Message{{Role: "user", Content: f.prompt}}, chat.Options{AddGenerationPrompt: true})
	if err != nil {
		return nil, fmt.Errorf("--chat: %w", err)
	}
	return tok.Encode(text, false), nil
}

// load opens the model and its prompt, timing the load.
func (f *modelFlags) load() (*gemma4.Model, []int32, time.Duration, error) {
	if f.model == "" {
		return nil, nil, 0, errors.New("--model is required")
	}
	var prompt []int32
	switch {
	case f.prompt != "" && f.promptIDs != "":
		return nil, nil, 0, errors.New("give --prompt or --prompt-ids, not both")
	case f.prompt != "":
		ids, err := f.encodePrompt()
		if err != nil {
			return nil, nil, 0, err
		}
		prompt = ids
	case f.promptIDs != "":
		ids, err := parseIDs(f.promptIDs)
		if err != nil {
			return nil, nil, 0, fmt.Errorf("--prompt-ids: %w", err)
		}
		prompt = ids
	default:
		return nil, nil, 0, errors.New("give a prompt with --prompt or --prompt-ids")
	}
	precision, err := parsePrecision(f.precision)
	if err != nil {
		return nil, nil, 0, err
	}
	b, err := openBackend(f.device, f.threads)
	if err != nil {
		return nil, nil, 0, err
	}
	start := time.Now()
	m, err := gemma4.LoadWith(f.model, b, gemma4.LoadOptions{Progress: progress.Bar(f.cmd.ErrOrStderr(), "loading weights onto "+b.Name(), 256<<20)})
	if err != nil {
		return nil, nil, 0, err
	}
	if err := m.SetPromptPrecision(precision.on(b)); err != nil {
		m.Close()
		return nil, nil, 0, err
	}
	return m, prompt, time.Since(start), nil
}

// precisionFlag registers --prefill-precision.
func precisionFlag(cmd *cobra.Command, s *string) {
	cmd.Flags().StringVar(s, "prefill-precision", "auto", "prompt passes' products: exact (f32 activations, as decoding), bf16 (activations rounded to bf16, as vLLM and llama.cpp prefill: 7-11x faster on the GPU; greedy speculative output still equals plain), or auto: bf16 on CUDA, exact on the CPU (where bf16 gains nothing)")
}

// promptPrecision is --prefill-precision: a precision, or auto.
type promptPrecision struct {
	p    compute.Precision
	auto bool
}

// parsePrecision reads --prefill-precision, before a backend is open, so
// that a bad value is refused before anything loads.
func parsePrecision(s string) (promptPrecision, error) {
	if s == "auto" {
		return promptPrecision{auto: true}, nil
	}
	p, err := compute.ParsePrecision(s)
	if err != nil {
		return promptPrecision{}, fmt.Errorf("--prefill-precision: %w (or auto)", err)
	}
	return promptPrecision{p: p}, nil
}

// on is the precision prompt passes take on b: auto is bf16 on CUDA, whose
// bf16 prompt passes run on cuBLASLt and tensor-core attention (a 4k
// prompt 7-11x faster on the H200: docs/gpu.md), and exact on the CPU,
// whose products gain nothing from rounding their activations.
func (pp promptPrecision) on(b compute.Backend) compute.Precision {
	if !pp.auto {
		return pp.p
	}
	if _, gpu := b.(*cuda.Backend); gpu {
		return compute.PrecisionBF16
	}
	return compute.PrecisionExact
}

// promptChunk is generate's and bench's --prefill-size n, or its default
// for n = 0: 2,048 tokens a pass where prompt passes run at bf16 on CUDA,
// since every pass reads all the weights (a 4k prompt on the H200: 26B-A4B
// 449 -> 266 ms, 31B 572 -> 548 ms, against 512-token passes), and
// generation's 512 elsewhere (exact passes on CUDA run slower in larger
// chunks: the 31B shape's 4k prompt took 48% longer in one pass). serve
// keeps 512: a step holding a prompt chunk holds up every decoding
// request, and each request's sliding rings keep a chunk's slots more. So
// does score, whose passes keep every position's logits (2 GiB a
// 2,048-token chunk of a 262,144-token vocabulary).
func promptChunk(n int, b compute.Backend, p compute.Precision) int {
	if n != 0 {
		return n
	}
	if _, gpu := b.(*cuda.Backend); gpu && p == compute.PrecisionBF16 {
		return 2048
	}
	return generation.DefaultPrefillSize
}

// draftFlags select speculative decoding.
type draftFlags struct {
	dir      string
	k        int
	position string
	maxKV    int
}

func (d *draftFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&d.dir, "draft", "", "assistant drafter directory: decode speculatively (output is identical to plain decoding)")
	fl.StringVar(&d.dir, "mtp-assistant-model", "", "alias of --draft")
	fl.IntVar(&d.k, "num-draft-tokens", 3, "drafts per round (1–64); see docs/speculative-decoding.md for the default")
	fl.StringVar(&d.position, "draft-position", "T", "drafter query position: T (the pending token's position, as HF) or T-1 (as mlx-vlm, SGLang, ollama)")
	fl.IntVar(&d.maxKV, "max-shared-kv", 0, "drafter attends to at most the last N full-attention positions (0: all)")
}

// options turns the flags into drafting options, or an error naming the flag.
func (d *draftFlags) options(cmd *cobra.Command) (gemma4.DraftOptions, error) {
	if d.dir == "" {
		for _, name := range []string{"num-draft-tokens", "draft-position", "max-shared-kv"} {
			if cmd.Flags().Changed(name) {
				return gemma4.DraftOptions{}, fmt.Errorf("--%s needs --draft", name)
			}
		}
	}
	var opt gemma4.DraftOptions
	if d.dir != "" && (d.k < 1 || d.k > spec.MaxDraftTokens) {
		return opt, fmt.Errorf("--num-draft-tokens: the number of draft tokens must be between 1 and %d, got %d", spec.MaxDraftTokens, d.k)
	}
	switch d.position {
	case "T":
	case "T-1":
		opt.QueryAtLast = true
	default:
		return opt, fmt.Errorf("--draft-position %q: want T or T-1", d.position)
	}
	if d.maxKV < 0 {
		return opt, fmt.Errorf("--max-shared-kv must be >= 0, got %d", d.maxKV)
	}
	opt.MaxSharedKV = d.maxKV
	return opt, nil
}

func newGenerate() *cobra.Command {
	var f modelFlags
	var df draftFlags
	var sp sample.Params
	var maxTokens int
	cmd := &cobra.Command{
		Use:   "generate --model DIR --prompt-ids IDS",
		Short: "Generate tokens from a prompt (greedy by default)",
		Long: "generate prefills the prompt in chunks of --prefill-size and decodes up to --max-tokens tokens,\n" +
			"stopping at the model's stop tokens (generation_config.json eos_token_id; Gemma 4: 1, 106, 50).\n" +
			"Temperature 0 is greedy; otherwise sampling applies repetition penalty, temperature, top-k,\n" +
			"top-p and min-p, in that order, from a stream seeded by --seed.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := sp.Validate(); err != nil {
				return err
			}
			dopt, err := df.options(cmd)
			if err != nil {
				return err
			}
			m, prompt, loadTime, err := f.load()
			if err != nil {
				return err
			}
			defer m.Close()
			stops, err := serve.StopTokens(f.model)
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt)
			defer stop()
			opt := generation.Options{MaxTokens: maxTokens, Sample: sp, StopTokens: stops, PrefillSize: promptChunk(f.prefill, m.Backend(), m.PromptPrecision())}
			if df.dir == "" {
				res, err := generation.Generate(ctx, m, prompt, opt, nil)
				if err != nil {
					return err
				}
				return printGeneration(cmd, &f, res, nil, loadTime)
			}
			start := time.Now()
			a, err := gemma4.LoadAssistant(df.dir, m.Backend())
			if err != nil {
				return err
			}
			defer a.Close()
			if err := a.Bind(m); err != nil {
				return fmt.Errorf("--draft %s: %w", df.dir, err)
			}
			loadTime += time.Since(start)
			d, err := spec.NewAssistant(a, dopt, sp)
			if err != nil {
				return err
			}
			res, err := spec.Generate(ctx, m, d, prompt, spec.Options{Options: opt, DraftTokens: df.k, Draft: dopt}, nil)
			if err != nil {
				return err
			}
			return printGeneration(cmd, &f, &res.Result, &res.Stats, loadTime)
		},
	}
	f.register(cmd)
	df.register(cmd)
	fl := cmd.Flags()
	fl.StringVar(&f.prompt, "prompt", "", "prompt text, encoded with the model's tokenizer")
	fl.BoolVar(&f.chatPrompt, "chat", false, "treat --prompt as a user message and render it with the model's chat template")
	fl.IntVar(&maxTokens, "max-tokens", 128, "most tokens to generate")
	fl.Float64Var(&sp.Temperature, "temperature", 0, "sampling temperature (0: greedy)")
	fl.IntVar(&sp.TopK, "top-k", 0, "keep the k most likely tokens (0: off)")
	fl.Float64Var(&sp.TopP, "top-p", 1, "nucleus sampling mass (1: off)")
	fl.Float64Var(&sp.MinP, "min-p", 0, "drop tokens below min-p × the top probability (0: off)")
	fl.Float64Var(&sp.RepetitionPenalty, "repetition-penalty", 1, "penalty for tokens already in the sequence (1: off)")
	fl.Uint64Var(&sp.Seed, "seed", 0, "random seed for sampling")
	return cmd
}

// specStats is the speculative part of generate's JSON stats.
func specStats(s *spec.Stats) map[string]any {
	per := make([]float64, len(s.DraftedAt))
	for i := range per {
		if s.DraftedAt[i] > 0 {
			per[i] = float64(s.AcceptedAt[i]) / float64(s.DraftedAt[i])
		}
	}
	return map[string]any{
		"rounds": s.Rounds, "drafted": s.Drafted, "accepted": s.Accepted,
		"acceptance_rate": s.AcceptanceRate(), "mean_acceptance_length": s.MeanAcceptLength(),
		"per_position_acceptance": per, "draft_s": s.DraftTime.Seconds(), "verify_s": s.VerifyTime.Seconds(),
		"drafted_ahead": s.Ahead, "ahead_missed": s.AheadMissed,
	}
}

func printGeneration(cmd *cobra.Command, f *modelFlags, res *generation.Result, ss *spec.Stats, load time.Duration) error {
	rate := func(n int, d time.Duration) float64 {
		if d <= 0 {
			return 0
		}
		return float64(n) / d.Seconds()
	}
	stats := map[string]any{"prompt_tokens": res.PromptTokens, "generated_tokens": len(res.Tokens)}
	if ss != nil {
		for k, v := range specStats(ss) {
			stats[k] = v
		}
	}
	if f.asJSON {
		out := map[string]any{
			"tokens":      res.Tokens,
			"stop_reason": res.StopReason,
			"stats":       stats,
			"timings": map[string]any{
				"load_s": load.Seconds(), "prefill_s": res.Prefill.Seconds(), "decode_s": res.Decode.Seconds(),
				"prefill_tokens_per_s": rate(res.PromptTokens, res.Prefill),
				// The first token comes from the prefill; decode produced the rest.
				"decode_tokens_per_s": rate(len(res.Tokens)-1, res.Decode),
			},
		}
		if f.tok != nil {
			out["text"] = f.tok.Decode(res.Tokens, true)
		}
		enc := json.NewEncoder(cmd.OutOrStdout())
		return enc.Encode(out)
	}
	ids := make([]string, len(res.Tokens))
	for i, t := range res.Tokens {
		ids[i] = strconv.Itoa(int(t))
	}
	if f.tok != nil {
		fmt.Fprintln(cmd.OutOrStdout(), f.tok.Decode(res.Tokens, true))
	} else {
		fmt.Fprintln(cmd.OutOrStdout(), strings.Join(ids, " "))
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "%d tokens (%s); load %.2fs, prefill %d tokens %.2fs (%.1f tok/s), decode %.2fs (%.1f tok/s)\n",
		len(res.Tokens), res.StopReason, load.Seconds(), res.PromptTokens, res.Prefill.Seconds(), rate(res.PromptTokens, res.Prefill),
		res.Decode.Seconds(), rate(len(res.Tokens)-1, res.Decode))
	if ss != nil {
		fmt.Fprintf(cmd.ErrOrStderr(), "speculative: %d rounds, %d/%d drafts accepted (%.0f%%), %.2f tokens per target pass; draft %.2fs, verify %.2fs\n",
			ss.Rounds, ss.Accepted, ss.Drafted, 100*ss.AcceptanceRate(), ss.MeanAcceptLength(), ss.DraftTime.Seconds(), ss.VerifyTime.Seconds())
	}
	return nil
}

func newScore() *cobra.Command {
	var f modelFlags
	cmd := &cobra.Command{
		Use:   "score --model DIR --prompt-ids IDS",
		Short: "Teacher-forced scoring: per-position logprobs, top-1 and perplexity",
		Long: "score runs the token sequence through the model and reports, for every position, the next\n" +
			"token's id and logprob and the model's top-1 id and logprob, then the total negative\n" +
			"log-likelihood and the perplexity.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			m, tokens, _, err := f.load()
			if err != nil {
				return err
			}
			defer m.Close()
			sc, err := generation.ScoreTokens(cmd.Context(), m, tokens, f.prefill)
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			if f.asJSON {
				return json.NewEncoder(w).Encode(sc)
			}
			fmt.Fprintf(w, "%5s %8s %10s %8s %10s\n", "POS", "NEXT", "LOGPROB", "TOP1", "LOGPROB")
			for i, p := range sc.Positions {
				fmt.Fprintf(w, "%5d %8d %10.4f %8d %10.4f\n", i, p.Next, p.Logprob, p.Top1, p.Top1Logprob)
			}
			fmt.Fprintf(w, "nll %.4f over %d positions, perplexity %.4f\n", sc.NLL, len(sc.Positions), sc.Perplexity)
			return nil
		},
	}
	f.register(cmd)
	return cmd
}
