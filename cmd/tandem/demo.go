package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"

	"github.com/spf13/cobra"

	"tandem/chat"
	"tandem/compute/cpu"
	"tandem/generation"
	"tandem/model/gemma4"
	"tandem/spec"
	"tandem/tokenizer"
)

func newDemo() *cobra.Command {
	var dir string
	var seed uint64
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Speculative decoding on a tiny generated Gemma 4 target and drafter (runs on CPU)",
		Long: "demo is the embedded default job: it writes the tiny E2B-shaped target and its assistant\n" +
			"drafter (random weights, every structural feature of the real models), inspects both, then\n" +
			"decodes the same prompt plainly and speculatively and checks that the outputs are identical.\n" +
			"It needs no download and no GPU. With random weights the drafter rarely guesses right, so\n" +
			"expect low acceptance: the point is that the output never changes.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dir == "" {
				tmp, err := os.MkdirTemp("", "tandem-demo-")
				if err != nil {
					return err
				}
				defer os.RemoveAll(tmp)
				dir = tmp
			}
			out, log := cmd.OutOrStdout(), cmd.ErrOrStderr()
			for _, name := range []string{"gemma4-tiny-e2b", "gemma4-tiny-e2b-assistant"} {
				p, err := gemma4.LookupPreset(name)
				if err != nil {
					return err
				}
				d := filepath.Join(dir, name)
				if err := generate(log, p, d, gemma4.GenerateOptions{Seed: seed}); err != nil {
					return err
				}
				s, err := gemma4.Inspect(d)
				if err != nil {
					return err
				}
				printSummary(out, s)
				if len(s.Problems) > 0 {
					return fmt.Errorf("%s: generated checkpoint has problems", name)
				}
				fmt.Fprintln(out)
			}
			return speculativeDemo(cmd.Context(), out, filepath.Join(dir, "gemma4-tiny-e2b"), filepath.Join(dir, "gemma4-tiny-e2b-assistant"))
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "", "keep the generated models in this directory (default: a temporary one, removed)")
	cmd.Flags().Uint64Var(&seed, "seed", 0, "random seed")
	return cmd
}

// speculativeDemo decodes one prompt plainly and speculatively (greedy, k =
// 1..4) and fails unless every output is identical.
func speculativeDemo(ctx context.Context, out io.Writer, target, drafter string) error {
	b := cpu.New(0)
	m, err := gemma4.Load(target, b)
	if err != nil {
		return err
	}
	defer m.Close()
	a, err := gemma4.LoadAssistant(drafter, b)
	if err != nil {
		return err
	}
	defer a.Close()
	if err := a.Bind(m); err != nil {
		return err
	}
	tok, err := tokenizer.LoadDir(target)
	if err != nil {
		return err
	}
	tmpl, err := chat.Load(target)
	if err != nil {
		return err
	}
	text, err := tmpl.Render([]chat.Message{{Role: "user", Content: "Why is speculative decoding lossless?"}}, chat.Options{AddGenerationPrompt: true})
	if err != nil {
		return err
	}
	prompt := tok.Encode(text, false)
	fmt.Fprintf(out, "prompt (chat template, %d tokens): %q\n", len(prompt), text)
	opt := generation.Options{MaxTokens: 32}
	want, err := generation.Generate(ctx, m, prompt, opt, nil)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "plain greedy (random weights, so the text is noise): %q\n", tok.Decode(want.Tokens, true))
	for k := 1; k <= 4; k++ {
		d, err := spec.NewAssistant(a, gemma4.DraftOptions{}, opt.Sample)
		if err != nil {
			return err
		}
		got, err := spec.Generate(ctx, m, d, prompt, spec.Options{Options: opt, DraftTokens: k}, nil)
		if err != nil {
			return err
		}
		same := "identical"
		if !slices.Equal(got.Tokens, want.Tokens) {
			same = "DIFFERENT"
		}
		s := got.Stats
		fmt.Fprintf(out, "speculative, k = %d:  %s output; %d rounds, %d/%d drafts accepted, %.2f tokens per target pass\n",
			k, same, s.Rounds, s.Accepted, s.Drafted, s.MeanAcceptLength())
		if same != "identical" {
			return fmt.Errorf("speculative output %v differs from plain output %v", got.Tokens, want.Tokens)
		}
	}
	fmt.Fprintln(out, "demo: speculative decoding reproduced plain greedy decoding bit for bit.")
	return nil
}
