package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"tandem/tokenizer"
)

// tokenizerFlags locate a tokenizer: a model directory or a tokenizer.json.
type tokenizerFlags struct {
	model, file string
}

func (f *tokenizerFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.model, "model", "", "model directory holding tokenizer.json")
	cmd.Flags().StringVar(&f.file, "tokenizer", "", "a tokenizer.json file (tokenizer_config.json beside it is read too)")
}

func (f *tokenizerFlags) load() (*tokenizer.Tokenizer, error) {
	switch {
	case f.model != "" && f.file != "":
		return nil, errors.New("give --model or --tokenizer, not both")
	case f.model != "":
		return tokenizer.LoadDir(f.model)
	case f.file != "":
		return tokenizer.Load(f.file)
	}
	return nil, errors.New("give --model DIR or --tokenizer FILE")
}

func newTokenize() *cobra.Command {
	var f tokenizerFlags
	var text, file string
	var asJSON, noSpecial bool
	cmd := &cobra.Command{
		Use:   "tokenize (--model DIR | --tokenizer FILE) (--text T | --file F)",
		Short: "Encode text into token ids with a model's tokenizer",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			tok, err := f.load()
			if err != nil {
				return err
			}
			switch {
			case text != "" && file != "":
				return errors.New("give --text or --file, not both")
			case file != "":
				b, err := os.ReadFile(file)
				if err != nil {
					return err
				}
				text = string(b)
			case !cmd.Flags().Changed("text"):
				return errors.New("give --text T or --file F")
			}
			ids := tok.Encode(text, !noSpecial)
			out := cmd.OutOrStdout()
			if asJSON {
				pieces := make([]string, len(ids))
				for i, id := range ids {
					pieces[i], _ = tok.Token(id)
				}
				return json.NewEncoder(out).Encode(map[string]any{"ids": ids, "pieces": pieces})
			}
			for _, id := range ids {
				p, _ := tok.Token(id)
				fmt.Fprintf(out, "%d\t%q\n", id, p)
			}
			return nil
		},
	}
	f.register(cmd)
	cmd.Flags().StringVar(&text, "text", "", "text to encode")
	cmd.Flags().StringVar(&file, "file", "", "file whose contents to encode")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object: ids and pieces")
	cmd.Flags().BoolVar(&noSpecial, "no-special", false, "do not add BOS or other special tokens")
	return cmd
}

func newDetokenize() *cobra.Command {
	var f tokenizerFlags
	var ids string
	var skip, asJSON bool
	cmd := &cobra.Command{
		Use:   "detokenize (--model DIR | --tokenizer FILE) --ids 1,2,3",
		Short: "Decode token ids into text",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			tok, err := f.load()
			if err != nil {
				return err
			}
			list, err := parseIDs(ids)
			if err != nil {
				return fmt.Errorf("--ids: %w", err)
			}
			for i, id := range list {
				if int(id) >= tok.VocabSize() {
					return fmt.Errorf("--ids: id %d (%d) is outside the vocabulary of %d tokens", i, id, tok.VocabSize())
				}
			}
			text := tok.Decode(list, skip)
			if asJSON {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(map[string]any{"text": text})
			}
			fmt.Fprint(cmd.OutOrStdout(), text)
			if !strings.HasSuffix(text, "\n") {
				fmt.Fprintln(cmd.OutOrStdout())
			}
			return nil
		},
	}
	f.register(cmd)
	cmd.Flags().StringVar(&ids, "ids", "", "token ids: 1,2,3 or @FILE")
	cmd.Flags().BoolVar(&skip, "skip-special", false, "leave special tokens out")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object")
	return cmd
}
