package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/spf13/cobra"

	"tandem/chat"
	"tandem/compute"
	"tandem/compute/cpu"
	"tandem/engine"
	"tandem/model/gemma4"
	"tandem/serve"
	"tandem/spec"
	"tandem/tokenizer"
)

// The demo's pair: the smallest target with a drafter, every structural
// feature of Gemma 4 E2B at CI-sized dims.
const (
	demoTarget    = "gemma4-tiny-e2b"
	demoAssistant = "gemma4-tiny-e2b-assistant"
	demoStampFile = "demo.json"
)

func newDemo() *cobra.Command {
	var dir string
	var seed uint64
	var maxTokens, k int
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Chat with a tiny generated Gemma 4 through the engine, with and without the drafter (CPU)",
		Long: "demo is the embedded default job. It writes a tiny Gemma 4 target and its assistant drafter\n" +
			"(random weights, every structural feature of E2B) into a cache directory, or reuses them,\n" +
			"renders one chat with the model's tokenizer and chat template, and answers it through the\n" +
			"serving engine twice: plain, and speculatively with the drafter. The two answers must be\n" +
			"identical token for token (the command fails otherwise). It needs no download and no GPU.\n" +
			"With random weights the answer is gibberish and the drafter rarely guesses right: the point\n" +
			"is that the output never changes.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if maxTokens < 1 {
				return fmt.Errorf("--max-tokens must be positive, got %d", maxTokens)
			}
			if k < 1 || k > spec.MaxDraftTokens {
				return fmt.Errorf("--num-draft-tokens: %w (got %d)", spec.ErrInvalidDraftDepth, k)
			}
			if dir == "" {
				cache, err := os.UserCacheDir()
				if err != nil {
					return fmt.Errorf("demo: no user cache directory (%w); pass --dir", err)
				}
				dir = filepath.Join(cache, "tandem", "demo")
			}
			out := cmd.OutOrStdout()
			if err := demoModels(out, cmd.ErrOrStderr(), dir, seed); err != nil {
				return err
			}
			return chatDemo(cmd.Context(), out, filepath.Join(dir, demoTarget), filepath.Join(dir, demoAssistant), maxTokens, k)
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "", "where the demo models live (default: the user cache directory's tandem/demo)")
	cmd.Flags().Uint64Var(&seed, "seed", 0, "random seed of the generated weights")
	cmd.Flags().IntVar(&maxTokens, "max-tokens", 48, "tokens to generate")
	cmd.Flags().IntVar(&k, "num-draft-tokens", engine.DefaultDraftTokens, "drafts per speculative round")
	return cmd
}

// demoStamp records what the models in a demo directory were generated
// from. It is written last, so a directory without it (an interrupted
// run) or with another one (another seed, a changed preset) is generated
// again.
type demoStamp struct {
	Seed    uint64            `json:"seed"`
	DType   string            `json:"dtype"`
	Presets map[string]string `json:"presets"` // name → hash of its config
}

func wantStamp(seed uint64) (demoStamp, error) {
	s := demoStamp{Seed: seed, DType: compute.BF16.String(), Presets: map[string]string{}}
	for _, name := range []string{demoTarget, demoAssistant} {
		p, err := gemma4.LookupPreset(name)
		if err != nil {
			return s, err
		}
		cfg, err := json.Marshal(struct {
			T *gemma4.TextConfig
			A *gemma4.AssistantConfig
		}{p.Target, p.Assistant})
		if err != nil {
			return s, err
		}
		h := sha256.Sum256(cfg)
		s.Presets[name] = hex.EncodeToString(h[:8])
	}
	return s, nil
}

// demoModels makes sure dir holds valid demo models for seed: reused when
// the stamp matches and both checkpoints inspect clean, written otherwise.
func demoModels(out, log io.Writer, dir string, seed uint64) error {
	want, err := wantStamp(seed)
	if err != nil {
		return err
	}
	if why := demoModelsInvalid(dir, want); why == "" {
		fmt.Fprintf(out, "models: %s (reused)\n", dir)
	} else {
		fmt.Fprintf(log, "demo: writing the models into %s (%s)\n", dir, why)
		if err := writeDemoModels(log, dir, want); err != nil {
			return fmt.Errorf("demo: %w", err)
		}
		fmt.Fprintf(out, "models: %s (generated)\n", dir)
	}
	for _, name := range []string{demoTarget, demoAssistant} {
		s, err := gemma4.Inspect(filepath.Join(dir, name))
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "  %-26s %s (%s), %s parameters, %s, layers %s, problems: none\n", name, s.ModelType, s.Kind, groupDigits(s.Params), humanBytes(s.FileBytes), s.LayerTypes)
	}
	return nil
}

// demoModelsInvalid says why dir's models cannot be reused ("" if they can).
func demoModelsInvalid(dir string, want demoStamp) string {
	raw, err := os.ReadFile(filepath.Join(dir, demoStampFile))
	if err != nil {
		return "not there yet"
	}
	var got demoStamp
	if err := json.Unmarshal(raw, &got); err != nil || got.Seed != want.Seed || got.DType != want.DType || !mapsEqual(got.Presets, want.Presets) {
		return "made with other settings"
	}
	for _, name := range []string{demoTarget, demoAssistant} {
		s, err := gemma4.Inspect(filepath.Join(dir, name))
		if err != nil || len(s.Problems) > 0 {
			return name + " is damaged"
		}
	}
	return ""
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func writeDemoModels(log io.Writer, dir string, stamp demoStamp) error {
	// Remove the stamp first: a run interrupted from here on leaves a
	// directory the next run regenerates.
	if err := os.Remove(filepath.Join(dir, demoStampFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	for _, name := range []string{demoTarget, demoAssistant} {
		p, err := gemma4.LookupPreset(name)
		if err != nil {
			return err
		}
		d := filepath.Join(dir, name)
		if err := os.RemoveAll(d); err != nil {
			return err
		}
		if err := generate(log, p, d, gemma4.GenerateOptions{Seed: stamp.Seed, DType: compute.BF16}); err != nil {
			return err
		}
		s, err := gemma4.Inspect(d)
		if err != nil {
			return err
		}
		if len(s.Problems) > 0 {
			return fmt.Errorf("%s: the generated checkpoint has problems: %v", name, s.Problems)
		}
	}
	raw, err := json.MarshalIndent(stamp, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, demoStampFile), append(raw, '\n'), 0o644)
}

// demoRun is one answer through the engine.
type demoRun struct {
	tokens  []int32
	usage   engine.Usage
	elapsed time.Duration
	stats   engine.Stats
}

// chatDemo answers one chat through the engine plainly and speculatively,
// prints both, and fails unless they are identical.
func chatDemo(ctx context.Context, out io.Writer, targetDir, assistantDir string, maxTokens, k int) error {
	b := cpu.New(0)
	m, err := gemma4.Load(targetDir, b)
	if err != nil {
		return err
	}
	defer m.Close()
	a, err := gemma4.LoadAssistant(assistantDir, b)
	if err != nil {
		return err
	}
	defer a.Close()
	if err := a.Bind(m); err != nil {
		return err
	}
	tok, err := tokenizer.LoadDir(targetDir)
	if err != nil {
		return err
	}
	tmpl, err := chat.Load(targetDir)
	if err != nil {
		return err
	}
	stops, err := serve.StopTokens(targetDir)
	if err != nil {
		return err
	}
	text, err := tmpl.Render([]chat.Message{
		{Role: "system", Content: "You are a concise assistant."},
		{Role: "user", Content: "Why is speculative decoding lossless?"},
	}, chat.Options{AddGenerationPrompt: true})
	if err != nil {
		return err
	}
	prompt := tok.Encode(text, false)
	fmt.Fprintf(out, "\nchat, rendered with the model's template (%d tokens):\n  %q\n", len(prompt), text)
	fmt.Fprintln(out, "\nThe weights are random, so the answers below are gibberish. What counts is that the two are identical.")

	req := engine.Request{Prompt: prompt, MaxTokens: maxTokens, StopTokens: stops}
	// Warm up first (the weights are memory-mapped and not read yet), so
	// the two timings compare decoding, not page faults.
	if _, err := demoAnswer(ctx, engine.Config{Model: m, Drafter: a, DraftTokens: k}, engine.Request{Prompt: prompt, MaxTokens: 2}); err != nil {
		return err
	}
	plain, err := demoAnswer(ctx, engine.Config{Model: m}, req)
	if err != nil {
		return err
	}
	sp, err := demoAnswer(ctx, engine.Config{Model: m, Drafter: a, DraftTokens: k}, req)
	if err != nil {
		return err
	}
	for _, r := range []struct {
		name string
		run  demoRun
	}{{"plain", plain}, {fmt.Sprintf("speculative (assistant drafter, %d drafts per round)", k), sp}} {
		fmt.Fprintf(out, "\n%s: %d tokens in %s, %.0f tokens/s\n  %q\n", r.name, len(r.run.tokens), r.run.elapsed.Round(time.Microsecond),
			float64(len(r.run.tokens))/r.run.elapsed.Seconds(), tok.Decode(r.run.tokens, true))
	}
	u, s := sp.usage, sp.stats
	rate := 0.0
	if u.Drafted > 0 {
		rate = float64(u.Accepted) / float64(u.Drafted)
	}
	fmt.Fprintf(out, "\nspeculation: %d target passes for %d tokens (%.2f tokens per pass); %d of %d drafts accepted (%.0f%%), by position %v\n",
		u.Rounds+1, u.CompletionTokens, float64(u.CompletionTokens)/float64(u.Rounds+1), u.Accepted, u.Drafted, 100*rate, s.AcceptedPerPos)
	fmt.Fprintln(out, "  (random weights: the drafter rarely agrees with the target, so here speculation costs time;")
	fmt.Fprintln(out, "  a trained pair accepts most drafts and decodes faster, with the same output)")
	if !slices.Equal(plain.tokens, sp.tokens) {
		fmt.Fprintf(out, "\noutputs: DIFFERENT\n  plain       %v\n  speculative %v\n", plain.tokens, sp.tokens)
		return errors.New("demo: the speculative answer differs from the plain one")
	}
	fmt.Fprintf(out, "\noutputs: identical, token for token (%d tokens)\n", len(sp.tokens))
	fmt.Fprintln(out, "\nTo serve a real checkpoint (OpenAI-compatible API, continuous batching, speculative decoding):")
	fmt.Fprintln(out, "  tandem serve --model ./gemma-4-e2b-it --draft ./gemma-4-e2b-it-assistant")
	return nil
}

// demoAnswer runs req on a fresh engine with cfg and collects the answer.
func demoAnswer(ctx context.Context, cfg engine.Config, req engine.Request) (demoRun, error) {
	e, err := engine.New(cfg)
	if err != nil {
		return demoRun{}, err
	}
	defer e.Close(context.Background())
	start := time.Now()
	ch, err := e.Submit(ctx, req)
	if err != nil {
		return demoRun{}, err
	}
	var run demoRun
	for ev := range ch {
		run.tokens = append(run.tokens, ev.Tokens...)
		if ev.Done {
			run.elapsed, run.usage = time.Since(start), ev.Usage
			if ev.Err != nil {
				return run, ev.Err
			}
			if ev.FinishReason == engine.FinishCancelled {
				return run, context.Cause(ctx)
			}
		}
	}
	run.stats = e.Stats()
	return run, nil
}
