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

	"tandem/checkpoint"
	"tandem/compute"
	"tandem/compute/cpu"
	"tandem/generation"
	"tandem/model/gemma4"
	"tandem/sample"
)

// modelFlags are the flags every command that runs a model shares.
type modelFlags struct {
	model, device, promptIDs, prompt string
	threads, prefill                 int
	asJSON                           bool
}

func (f *modelFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.model, "model", "", "model directory (Hugging Face layout)")
	fl.StringVar(&f.device, "device", "auto", "compute device: auto, cpu or cuda")
	fl.IntVar(&f.threads, "threads", 0, "CPU threads (0: all cores)")
	fl.IntVar(&f.prefill, "prefill-size", generation.DefaultPrefillSize, "prompt tokens per forward pass")
	fl.StringVar(&f.promptIDs, "prompt-ids", "", "prompt token ids: 1,2,3 or @FILE (ids separated by commas or spaces, or a JSON array)")
	fl.BoolVar(&f.asJSON, "json", false, "print one JSON object")
}

// openBackend selects the compute backend.
func openBackend(device string, threads int) (compute.Backend, error) {
	switch device {
	case "auto", "cpu":
		return cpu.New(threads), nil
	case "cuda":
		return nil, errors.New("--device cuda: the CUDA backend is not available in this build yet; use --device cpu")
	}
	return nil, fmt.Errorf("--device %q: want auto, cpu or cuda", device)
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

// load opens the model and its prompt, timing the load.
func (f *modelFlags) load() (*gemma4.Model, []int32, time.Duration, error) {
	if f.model == "" {
		return nil, nil, 0, errors.New("--model is required")
	}
	var prompt []int32
	switch {
	case f.prompt != "":
		return nil, nil, 0, errors.New("--prompt needs a tokenizer, which is not supported yet; pass --prompt-ids")
	case f.promptIDs != "":
		ids, err := parseIDs(f.promptIDs)
		if err != nil {
			return nil, nil, 0, fmt.Errorf("--prompt-ids: %w", err)
		}
		prompt = ids
	default:
		return nil, nil, 0, errors.New("give a prompt with --prompt-ids")
	}
	b, err := openBackend(f.device, f.threads)
	if err != nil {
		return nil, nil, 0, err
	}
	start := time.Now()
	m, err := gemma4.Load(f.model, b)
	if err != nil {
		return nil, nil, 0, err
	}
	return m, prompt, time.Since(start), nil
}

func newGenerate() *cobra.Command {
	var f modelFlags
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
			m, prompt, loadTime, err := f.load()
			if err != nil {
				return err
			}
			defer m.Close()
			stops, err := stopTokens(f.model)
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt)
			defer stop()
			res, err := generation.Generate(ctx, m, prompt, generation.Options{
				MaxTokens: maxTokens, Sample: sp, StopTokens: stops, PrefillSize: f.prefill,
			}, nil)
			if err != nil {
				return err
			}
			return printGeneration(cmd, &f, res, loadTime)
		},
	}
	f.register(cmd)
	fl := cmd.Flags()
	fl.StringVar(&f.prompt, "prompt", "", "prompt text (needs a tokenizer; not supported yet)")
	fl.IntVar(&maxTokens, "max-tokens", 128, "most tokens to generate")
	fl.Float64Var(&sp.Temperature, "temperature", 0, "sampling temperature (0: greedy)")
	fl.IntVar(&sp.TopK, "top-k", 0, "keep the k most likely tokens (0: off)")
	fl.Float64Var(&sp.TopP, "top-p", 1, "nucleus sampling mass (1: off)")
	fl.Float64Var(&sp.MinP, "min-p", 0, "drop tokens below min-p × the top probability (0: off)")
	fl.Float64Var(&sp.RepetitionPenalty, "repetition-penalty", 1, "penalty for tokens already in the sequence (1: off)")
	fl.Uint64Var(&sp.Seed, "seed", 0, "random seed for sampling")
	return cmd
}

// stopTokens reads eos_token_id from generation_config.json, or falls back
// to Gemma 4's stop set.
func stopTokens(dir string) ([]int32, error) {
	g, err := checkpoint.ReadGenerationConfig(dir)
	if err != nil {
		return nil, err
	}
	ids := gemma4.StopTokens
	if g != nil && len(g.EOSTokenIDs) > 0 {
		ids = g.EOSTokenIDs
	}
	out := make([]int32, len(ids))
	for i, id := range ids {
		out[i] = int32(id)
	}
	return out, nil
}

func printGeneration(cmd *cobra.Command, f *modelFlags, res *generation.Result, load time.Duration) error {
	rate := func(n int, d time.Duration) float64 {
		if d <= 0 {
			return 0
		}
		return float64(n) / d.Seconds()
	}
	if f.asJSON {
		out := map[string]any{
			"tokens":      res.Tokens,
			"stop_reason": res.StopReason,
			"stats":       map[string]any{"prompt_tokens": res.PromptTokens, "generated_tokens": len(res.Tokens)},
			"timings": map[string]any{
				"load_s": load.Seconds(), "prefill_s": res.Prefill.Seconds(), "decode_s": res.Decode.Seconds(),
				"prefill_tokens_per_s": rate(res.PromptTokens, res.Prefill),
				// The first token comes from the prefill; decode produced the rest.
				"decode_tokens_per_s": rate(len(res.Tokens)-1, res.Decode),
			},
		}
		enc := json.NewEncoder(cmd.OutOrStdout())
		return enc.Encode(out)
	}
	ids := make([]string, len(res.Tokens))
	for i, t := range res.Tokens {
		ids[i] = strconv.Itoa(int(t))
	}
	fmt.Fprintln(cmd.OutOrStdout(), strings.Join(ids, " "))
	fmt.Fprintf(cmd.ErrOrStderr(), "%d tokens (%s); load %.2fs, prefill %d tokens %.2fs (%.1f tok/s), decode %.2fs (%.1f tok/s)\n",
		len(res.Tokens), res.StopReason, load.Seconds(), res.PromptTokens, res.Prefill.Seconds(), rate(res.PromptTokens, res.Prefill),
		res.Decode.Seconds(), rate(len(res.Tokens)-1, res.Decode))
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
