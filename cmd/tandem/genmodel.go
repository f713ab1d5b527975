package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"tandem/compute"
	"tandem/model/gemma4"
	"tandem/progress"
)

func newGenModel() *cobra.Command {
	var (
		preset, out, dtype, shard, tokDir string
		seed                              uint64
		force, list                       bool
	)
	cmd := &cobra.Command{
		Use:   "gen-model --preset P --out DIR",
		Short: "Write a random-weight checkpoint in the Hugging Face layout",
		Long: "gen-model writes config.json, generation_config.json and safetensors weights (sharded with an\n" +
			"index when large) for a Gemma 4 target or assistant preset, filled with seeded random values\n" +
			"scaled so that logits are peaked rather than flat. The same seed gives the same bytes.\n\n" +
			"Presets: " + strings.Join(gemma4.PresetNames(), ", "),
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if list {
				return listPresets(cmd.OutOrStdout())
			}
			if preset == "" || out == "" {
				return fmt.Errorf("gen-model needs --preset and --out (see --list for presets)")
			}
			p, err := gemma4.LookupPreset(preset)
			if err != nil {
				return err
			}
			dt, err := compute.ParseDType(dtype)
			if err != nil || !dt.IsFloat() {
				return fmt.Errorf("--dtype %q: want bf16, f16 or f32", dtype)
			}
			maxShard, err := parseBytes(shard)
			if err != nil {
				return fmt.Errorf("--max-shard-size: %w", err)
			}
			if _, err := os.Stat(filepath.Join(out, "config.json")); err == nil && !force {
				return fmt.Errorf("%s already holds a model (config.json); pass --force to overwrite", out)
			}
			if force {
				if err := removeWeights(out); err != nil {
					return err
				}
			}
			return generate(cmd.ErrOrStderr(), p, out, gemma4.GenerateOptions{Seed: seed, DType: dt, MaxShardBytes: maxShard, TokenizerDir: tokDir})
		},
	}
	f := cmd.Flags()
	f.StringVar(&preset, "preset", "", "model preset (see --list)")
	f.StringVar(&out, "out", "", "output directory")
	f.Uint64Var(&seed, "seed", 0, "random seed")
	f.StringVar(&dtype, "dtype", "bf16", "weight dtype: bf16, f16 or f32")
	f.StringVar(&shard, "max-shard-size", "5GB", "largest shard before splitting (e.g. 500MB, 5GB; 0 = never split)")
	f.StringVar(&tokDir, "tokenizer", "", "copy the tokenizer files of this directory (default: a synthetic Gemma tokenizer of the model's vocabulary)")
	f.BoolVar(&force, "force", false, "overwrite an existing model directory")
	f.BoolVar(&list, "list", false, "list presets with their sizes and exit")
	return cmd
}

// removeWeights deletes the weight files a previous gen-model wrote to dir:
// rewriting with another shard size would otherwise leave stale shards (or
// a stale model.safetensors next to a new index) behind, as HF's
// save_pretrained avoids by cleaning up too.
func removeWeights(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range entries {
		name := e.Name()
		shard, _ := filepath.Match("model-*-of-*.safetensors", name)
		if shard || name == "model.safetensors" || name == "model.safetensors.index.json" {
			if err := os.Remove(filepath.Join(dir, name)); err != nil {
				return err
			}
		}
	}
	return nil
}

// generate writes preset p to dir, with a progress bar for large models.
func generate(log io.Writer, p gemma4.Preset, dir string, opt gemma4.GenerateOptions) error {
	if opt.DType == compute.Invalid {
		opt.DType = compute.BF16
	}
	var total int64
	for _, w := range p.Weights() {
		total += w.Bytes(opt.DType)
	}
	start := time.Now()
	opt.Progress = progress.Bar(log, "writing "+p.Name, 256<<20)
	if err := p.Generate(dir, opt); err != nil {
		return err
	}
	fmt.Fprintf(log, "wrote %s (%s, %s, seed %d) to %s in %s\n", p.Name, humanBytes(total), opt.DType, opt.Seed, dir, time.Since(start).Round(time.Millisecond))
	return nil
}

func listPresets(w io.Writer) error {
	fmt.Fprintf(w, "%-32s %14s %10s  %s\n", "PRESET", "PARAMETERS", "BF16", "DESCRIPTION")
	for _, p := range gemma4.Presets() {
		var n, b int64
		for _, wt := range p.Weights() {
			n += int64(compute.NumElements(wt.Shape))
			b += wt.Bytes(compute.BF16)
		}
		fmt.Fprintf(w, "%-32s %14s %10s  %s\n", p.Name, groupDigits(n), humanBytes(b), p.Description)
	}
	return nil
}

// parseBytes reads sizes such as 5GB, 500MB, 64KiB or a plain byte count;
// 0 means never split (-1).
func parseBytes(in string) (int64, error) {
	s := strings.TrimSpace(strings.ToUpper(in))
	units := []struct {
		suffix string
		mult   int64
	}{{"GIB", 1 << 30}, {"MIB", 1 << 20}, {"KIB", 1 << 10}, {"GB", 1e9}, {"MB", 1e6}, {"KB", 1e3}, {"B", 1}}
	mult := int64(1)
	for _, u := range units {
		if strings.HasSuffix(s, u.suffix) {
			s, mult = strings.TrimSpace(strings.TrimSuffix(s, u.suffix)), u.mult
			break
		}
	}
	v, err := strconv.ParseFloat(s, 64)
	// ParseFloat also takes "NaN" and "Inf", which are no sizes.
	if err != nil || v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("bad size %q (want e.g. 5GB, 500MB or 0)", in)
	}
	if v == 0 {
		return -1, nil // never split
	}
	n := v * float64(mult)
	switch {
	case n < 1:
		// It would truncate to 0, which GenerateOptions reads as the 5 GiB default.
		return 0, fmt.Errorf("size %q is less than one byte (0 means never split)", in)
	case n >= math.MaxInt64:
		return 0, fmt.Errorf("size %q is too large", in)
	}
	return int64(n), nil
}

func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

func groupDigits(n int64) string {
	s := strconv.FormatInt(n, 10)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}
