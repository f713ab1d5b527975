package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"tandem/model/gemma4"
)

func newDemo() *cobra.Command {
	var dir string
	var seed uint64
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Generate a tiny Gemma 4 target and drafter and inspect them (runs on CPU)",
		Long: "demo is the embedded default job: it writes the tiny E2B-shaped target and its assistant\n" +
			"drafter (random weights, every structural feature of the real models) and inspects both.\n" +
			"It needs no download and no GPU.",
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
			fmt.Fprintln(out, "demo: tiny target and drafter generated and verified. Speculative decoding lands with the model issues.")
			return nil
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "", "keep the generated models in this directory (default: a temporary one, removed)")
	cmd.Flags().Uint64Var(&seed, "seed", 0, "random seed")
	return cmd
}
