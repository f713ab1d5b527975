// Command tandem is the Tandem CLI: model generation and inspection now;
// generation, serving and benchmarks as they land.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "dev"

func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:           "tandem",
		Short:         "Exactly lossless speculative decoding for Gemma 4",
		Long:          "Tandem is an LLM inference engine built around fast, exactly lossless speculative decoding:\na target model and a small drafter work in tandem, and the output is bit-identical to\ndecoding without the drafter.",
		Version:       version,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newGenModel(), newInspect(), newDemo(), newGenerate(), newServe(), newScore(), newTokenize(), newDetokenize(), newBench())
	return root
}

func main() {
	if err := newRoot().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "tandem:", err)
		os.Exit(1)
	}
}
