package main

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"

	"github.com/spf13/cobra"

	"tandem/model/gemma4"
)

func newInspect() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "inspect DIR",
		Short: "Describe a checkpoint: architecture, size, dtypes, layer types and problems",
		Long: "inspect reads a Gemma 4 target or assistant directory and prints its architecture, parameter\n" +
			"count, dtypes and bytes, the layer types, and every problem found (missing, mis-shaped or\n" +
			"unexpected tensors, malformed files). It exits non-zero when there are problems.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := gemma4.Inspect(args[0])
			if err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				if err := enc.Encode(s); err != nil {
					return err
				}
			} else {
				printSummary(cmd.OutOrStdout(), s)
			}
			if n := len(s.Problems); n > 0 {
				return fmt.Errorf("%s: %d problem(s) found", args[0], n)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object")
	return cmd
}

func printSummary(w io.Writer, s *gemma4.Summary) {
	fmt.Fprintf(w, "%s\n  model type:  %s (%s)\n", s.Dir, s.ModelType, s.Kind)
	for _, line := range s.Structure {
		fmt.Fprintf(w, "  %s\n", line)
	}
	fmt.Fprintf(w, "  layer types: %s  (S sliding, F full; lower case = KV-shared)\n", s.LayerTypes)
	var dts []string
	for dt := range s.DTypes {
		dts = append(dts, dt)
	}
	sort.Strings(dts)
	fmt.Fprintf(w, "  parameters:  %s (%s in tensors, %s on disk in %d file(s))\n", groupDigits(s.Params), humanBytes(s.Bytes), humanBytes(s.FileBytes), len(s.Files))
	for _, dt := range dts {
		fmt.Fprintf(w, "  dtype %-5s  %s parameters\n", dt, groupDigits(s.DTypes[dt]))
	}
	if s.Prefix != "" {
		fmt.Fprintf(w, "  weight prefix: %q\n", s.Prefix)
	}
	for _, n := range s.Notes {
		fmt.Fprintf(w, "  note: %s\n", n)
	}
	if len(s.Problems) == 0 {
		fmt.Fprintln(w, "  problems:    none")
		return
	}
	fmt.Fprintf(w, "  problems:    %d\n", len(s.Problems))
	for _, p := range s.Problems {
		fmt.Fprintf(w, "    - %s\n", p)
	}
}
