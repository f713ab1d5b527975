package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"tandem/compute"
	"tandem/compute/cuda"
	"tandem/engine"
	"tandem/generation"
	"tandem/model/gemma4"
	"tandem/progress"
	"tandem/sample"
	"tandem/spec"
)

// benchRow is one context length's measurements.
type benchRow struct {
	Context       int     `json:"context"`
	PrefillTokS   float64 `json:"prefill_tokens_per_s"` // from the median prefill of --prefill-runs
	DecodeTokS    float64 `json:"decode_tokens_per_s"`
	BytesPerToken int64   `json:"bytes_per_token"`
	RooflineTokS  float64 `json:"roofline_tokens_per_s"`
	RooflineFrac  float64 `json:"roofline_fraction"`
	SpecTokS      float64 `json:"speculative_tokens_per_s,omitempty"`
	Acceptance    float64 `json:"acceptance_rate,omitempty"`
	TokensPerPass float64 `json:"tokens_per_target_pass,omitempty"`
	Speedup       float64 `json:"speculative_speedup,omitempty"`
	// Per speculative round, host wall time: drafting (every draft step
	// with its sync) and verifying (the target pass and the judging).
	DraftMs  float64 `json:"draft_ms_per_round,omitempty"`
	VerifyMs float64 `json:"verify_ms_per_round,omitempty"`
	// The spread of plain decode steps and of speculative rounds (wall
	// time, after the warmup steps or rounds): the median, the 90th
	// percentile and the slowest.
	StepMs  *spread `json:"step_ms,omitempty"`
	RoundMs *spread `json:"round_ms,omitempty"`
	// The spread of the prompt's prefills (--prefill-runs of them; the
	// first in a process also makes its first allocations and graphs).
	PrefillMs   *spread `json:"prefill_ms,omitempty"`
	PrefillRuns int     `json:"prefill_runs,omitempty"`
	// The prompt's useful arithmetic (gemma4.Model.PrefillFLOPs: products
	// and attention), its rate at the median prefill, and that rate's share
	// of the device's dense bf16 tensor-core peak (where bench knows it, or
	// --bf16-peak says it).
	PrefillFLOPs    float64 `json:"prefill_flops,omitempty"`
	PrefillFLOPSec  float64 `json:"prefill_flops_per_s,omitempty"`
	PrefillPeakFrac float64 `json:"prefill_bf16_peak_fraction,omitempty"`
	// The host's time per plain decode step, after the warmup: issuing it
	// on the caller's thread, and the device thread's own calls for it
	// (CUDA; waits for the device left out). Either near the step time
	// means the host bounds decoding.
	HostIssueMs    float64 `json:"host_issue_ms_per_step,omitempty"`
	DeviceThreadMs float64 `json:"device_thread_ms_per_step,omitempty"`
	// The device pool's work per plain step (after the warmup) and per
	// speculative round (the whole run): blocks handed out, new device
	// memory asked of the driver, collections started (CUDA).
	PoolPerStep  *poolUse `json:"pool_per_step,omitempty"`
	PoolPerRound *poolUse `json:"pool_per_round,omitempty"`
	// Settings are the switches this row was measured with (--sweep).
	Settings string `json:"settings,omitempty"`
	// Rounds, and those drafted ahead of the last verdict on a right guess
	// and on a wrong one (spec.Stats).
	Rounds      int `json:"rounds,omitempty"`
	Ahead       int `json:"drafted_ahead,omitempty"`
	AheadMissed int `json:"ahead_missed,omitempty"`
	// --kernel-profile: a plain decode with its kernels back to back, a
	// real plain decode's timeline, and a real speculative one's.
	Profile      *cuda.Profile `json:"kernel_profile,omitempty"`
	Timeline     *cuda.Profile `json:"kernel_timeline,omitempty"`
	SpecTimeline *cuda.Profile `json:"speculative_kernel_timeline,omitempty"`
	ProfileSteps int           `json:"profile_steps,omitempty"`
	// The prompt's prefill, its kernels as issued, and its measured time.
	PrefillProfile *cuda.Profile `json:"prefill_kernel_profile,omitempty"`
	PrefillTime    time.Duration `json:"prefill_profile_ns,omitempty"`
	ProfileRounds  int           `json:"profile_rounds,omitempty"`
	// With --engine-batch too, the N requests' plain decode through the
	// engine, as issued, from the moment all have their first token.
	EngineBatchTimeline *cuda.Profile `json:"engine_batch_kernel_timeline,omitempty"`
	EngineBatchSteps    int           `json:"engine_batch_profile_steps,omitempty"`
	// --engine: the same prompt as one request through the serving engine
	// (tandem serve's path), plainly and, with a drafter, speculatively at
	// the drafter's real acceptance or the synthetic one.
	EngineTokS       float64 `json:"engine_decode_tokens_per_s,omitempty"`
	EngineSpecTokS   float64 `json:"engine_speculative_tokens_per_s,omitempty"`
	EngineAcceptance float64 `json:"engine_acceptance_rate,omitempty"`
	EngineRounds     int     `json:"engine_rounds,omitempty"`
	EngineAhead      int     `json:"engine_drafted_ahead,omitempty"` // rounds whose drafts were picked before the last verdict
	// --engine-batch N: N copies of the prompt at once through one engine,
	// their tokens a second in all.
	EngineBatch     int     `json:"engine_batch,omitempty"`
	EngineBatchTokS float64 `json:"engine_batch_decode_tokens_per_s,omitempty"`
	// With a drafter, the same N requests decoded speculatively (batched
	// speculation: each request's rounds verified in one step with the
	// others'), at the drafter's real acceptance or the synthetic one.
	EngineBatchSpecTokS float64 `json:"engine_batch_speculative_tokens_per_s,omitempty"`
	// With --adaptive-drafts: the speculative run's steps, and those in
	// which its greedy requests did not draft.
	EngineBatchSpecSteps      int64 `json:"engine_batch_speculative_steps,omitempty"`
	EngineBatchUndraftedSteps int64 `json:"engine_batch_undrafted_steps,omitempty"`
	// --graph-profile: real plain steps and speculative rounds timed a
	// whole CUDA graph at a time (no events between kernels).
	GraphPlain  *cuda.Profile `json:"graph_timeline,omitempty"`
	GraphSpec   *cuda.Profile `json:"speculative_graph_timeline,omitempty"`
	GraphSteps  int           `json:"graph_steps,omitempty"`
	GraphRounds int           `json:"graph_rounds,omitempty"`
	// --step-stamps: a plain decode's launches, each with its share of
	// the run (cuda.StepStamp), over StampSteps steps; with a drafter, a
	// speculative decode's over StampRounds rounds.
	Stamps      []cuda.StepStamp `json:"-"`
	StampSteps  int              `json:"-"`
	StampsSpec  []cuda.StepStamp `json:"-"`
	StampRounds int              `json:"-"`
}

func newBench() *cobra.Command {
	var (
		preset, model, draft, device, contexts        string
		tokens, k, threads, engineBatch, pruns, psize int
		synthetic, temperature, topP                  float64
		topK                                          int
		asJSON, kernels, graphProfile, viaEng         bool
		stepStamps                                    bool
		adaptive                                      bool
		precision                                     string
		cpuProfile, sweep                             string
		peakTFLOPS                                    float64
	)
	cmd := &cobra.Command{
		Use:   "bench [--preset P | --model DIR] [--draft DIR|auto]",
		Short: "Measure prefill and decode speed against the memory roofline (CPU or GPU), plain and speculative",
		Long: "bench measures prefill tokens/s and batch-1 decode tokens/s at each --contexts length, with\n" +
			"random prompts, and the fraction of the roofline: a memory copy's bandwidth, measured in the\n" +
			"same run, divided by the weight bytes one decode step reads. With --draft it also decodes\n" +
			"speculatively; --synthetic-acceptance P forces each draft to be accepted with probability P\n" +
			"(real drafter and verify work, synthetic outcomes) to measure the mechanism without trained\n" +
			"weights. --preset builds a random-weight model in memory (and, with --draft auto, its\n" +
			"assistant): the weights gen-model would write, without writing them.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var ctxs []int
			for _, f := range strings.Split(contexts, ",") {
				n, err := parseCount(strings.TrimSpace(f))
				if err != nil || n < 1 {
					return fmt.Errorf("--contexts: %q is not a positive length", f)
				}
				ctxs = append(ctxs, n)
			}
			if engineBatch < 0 || engineBatch == 1 {
				return fmt.Errorf("--engine-batch must be 0 (off) or at least 2 requests, got %d", engineBatch)
			}
			if adaptive && cmd.Flags().Changed("adaptive-drafts") && (draft == "" || !viaEng && engineBatch == 0) {
				return errors.New("--adaptive-drafts needs --draft and --engine or --engine-batch")
			}
			if psize < 0 {
				return fmt.Errorf("--prefill-size must be at least 1 (or 0: the default), got %d", psize)
			}
			if pruns < 1 {
				return fmt.Errorf("--prefill-runs must be at least 1, got %d", pruns)
			}
			if peakTFLOPS < 0 || math.IsNaN(peakTFLOPS) || math.IsInf(peakTFLOPS, 0) {
				return fmt.Errorf("--bf16-peak must be a TFLOP/s figure of 0 or more, got %g", peakTFLOPS)
			}
			pprec, err := parsePrecision(precision)
			if err != nil {
				return err
			}
			if tokens < 2 {
				return fmt.Errorf("--tokens must be at least 2, got %d", tokens)
			}
			sp := sample.Params{Temperature: temperature, TopK: topK, TopP: topP, Seed: 1}
			if err := sp.Validate(); err != nil {
				return fmt.Errorf("--temperature, --top-k, --top-p: %w", err)
			}
			if temperature == 0 && (topK != 0 || topP != 0) {
				return fmt.Errorf("--top-k and --top-p need a --temperature above 0")
			}
			groups, err := parseSweep(sweep)
			if err != nil {
				return err
			}
			if kernels && sweep != "" {
				return fmt.Errorf("--kernel-profile and --sweep: profile one setting at a time")
			}
			b, err := openBackend(device, threads)
			if err != nil {
				return err
			}
			prec := pprec.on(b)
			psize = promptChunk(psize, b, prec)
			g, onGPU := b.(*cuda.Backend)
			if kernels && !onGPU {
				return fmt.Errorf("--kernel-profile needs the GPU (--device cuda)")
			}
			if graphProfile && (!onGPU || !g.Device().Graphs()) {
				return fmt.Errorf("--graph-profile needs the GPU with CUDA graphs (--device cuda, TANDEM_CUDA_GRAPHS not 0)")
			}
			if stepStamps && (!onGPU || !cuda.StampsBuilt()) {
				return fmt.Errorf("--step-stamps needs the GPU (--device cuda) and TANDEM_CUDA_STAMPS=1")
			}
			if cpuProfile != "" {
				f, err := os.Create(cpuProfile)
				if err != nil {
					return fmt.Errorf("--cpuprofile: %w", err)
				}
				defer f.Close()
				if err := pprof.StartCPUProfile(f); err != nil {
					return fmt.Errorf("--cpuprofile: %w", err)
				}
				defer pprof.StopCPUProfile()
			}
			log := cmd.ErrOrStderr()
			var m *gemma4.Model
			if model != "" {
				m, err = gemma4.LoadWith(model, b, gemma4.LoadOptions{Progress: progress.Bar(log, "loading weights onto "+b.Name(), 256<<20)})
			} else {
				m, err = randomTarget(log, preset, b)
				model = preset + " (random weights)"
			}
			if err != nil {
				return err
			}
			defer m.Close()
			if err := m.SetPromptPrecision(prec); err != nil {
				return err
			}
			var a *gemma4.Assistant
			switch draft {
			case "":
			case "auto":
				if a, err = randomAssistant(log, preset+"-assistant", b); err != nil {
					return err
				}
				draft = preset + "-assistant (random weights)"
			default:
				if a, err = gemma4.LoadAssistant(draft, b); err != nil {
					return err
				}
			}
			if a != nil {
				defer a.Close()
				if err := a.Bind(m); err != nil {
					return err
				}
			}
			// Building random weights leaves gigabytes of host garbage; collect
			// it now rather than in the middle of a measurement.
			runtime.GC()
			roof := copyBandwidth(b)
			peak := bf16Peak(b)
			if peakTFLOPS > 0 {
				peak = peakTFLOPS * 1e12
			}
			bytes := m.DecodeBytes()
			var rows []benchRow
			ctx := context.Background()
			run := &benchRun{m: m, a: a, g: g, tokens: tokens, k: k, synthetic: synthetic, roof: roof, peak: peak, bytes: bytes, prefillRuns: pruns, prefillSize: psize, graphs: graphProfile, stamps: stepStamps, engine: viaEng, engineBatch: engineBatch,
				adaptive: adaptive, sample: sp}
			for _, grp := range groups {
				err := func() error {
					undo := grp.apply()
					defer func() {
						undo()
						if onGPU {
							g.ReadSettings()
						}
					}()
					if onGPU {
						g.ReadSettings()
					}
					for _, c := range ctxs {
						row, err := run.row(ctx, c)
						if err != nil {
							return err
						}
						row.Settings = grp.name
						rows = append(rows, row)
						fmt.Fprintf(log, "%s done\n", benchRow{Context: c, Settings: grp.name}.label())
					}
					return nil
				}()
				if err != nil {
					return err
				}
			}
			out := cmd.OutOrStdout()
			if kernels {
				for i := range rows {
					r := &rows[i]
					if r.PrefillProfile, r.PrefillTime, err = profilePrefill(ctx, g, m, randomPrompt(m, r.Context, 1), psize); err != nil {
						return err
					}
					prompt := randomPrompt(m, r.Context, 2)
					plain := plainRun(ctx, m, prompt, generation.Options{MaxTokens: tokens, Sample: run.sample})
					if r.Profile, r.ProfileSteps, err = profileRun(g, kernelsBackToBack, plain); err != nil {
						return err
					}
					if r.Timeline, r.ProfileSteps, err = profileRun(g, kernelsAsIssued, plain); err != nil {
						return err
					}
					if engineBatch > 1 {
						batch := func(onStart func(int32)) (int, error) {
							_, _, err := run.engineBatchRun(ctx, prompt, nil, spec.Judge{}, func() { onStart(0) })
							return tokens - 1, err // the engine's decode steps once every request has its first token
						}
						if r.EngineBatchTimeline, r.EngineBatchSteps, err = profileRun(g, kernelsAsIssued, batch); err != nil {
							return err
						}
					}
					if a == nil {
						continue
					}
					d, err := spec.NewAssistant(a, gemma4.DraftOptions{}, run.sample)
					if err != nil {
						return err
					}
					so := spec.Options{Options: generation.Options{MaxTokens: tokens, Sample: run.sample}, DraftTokens: k, Synthetic: synthetic >= 0, SyntheticAcceptance: synthetic}
					if r.SpecTimeline, r.ProfileRounds, err = profileRun(g, kernelsAsIssued, specRun(ctx, m, d, prompt, so)); err != nil {
						return err
					}
				}
			}
			if asJSON {
				return json.NewEncoder(out).Encode(map[string]any{
					"model": model, "draft": draft, "device": b.Name(), "device_name": deviceName(b), "copy_bandwidth_bytes_per_s": roof, "bf16_peak_flops_per_s": knownPeak(peak),
					"prefill_precision": prec.String(), "prefill_size": psize, "draft_tokens": k, "synthetic_acceptance": synthetic, "temperature": temperature, "top_k": topK, "top_p": topP, "results": rows, "settings": envSettings(os.Environ()),
				})
			}
			fmt.Fprintf(out, "model %s on %s; copy bandwidth %.1f GB/s; %s per decode step; prompts at %s in passes of %d tokens\n", model, deviceName(b), roof/1e9, humanBytes(bytes), prec, psize)
			if set := envSettings(os.Environ()); len(set) > 0 {
				fmt.Fprintf(out, "settings from the environment: %s\n", strings.Join(set, " "))
			}
			if temperature > 0 {
				fmt.Fprintf(out, "decoding samples at temperature %g, top-k %d, top-p %g (seed 1): each step's logits are read on the host, so steps are not issued ahead\n", temperature, topK, topP)
			}
			if onGPU && g.Device().Graphs() {
				s := g.Device().GraphStats()
				fmt.Fprintf(out, "CUDA graphs: %d steps launched as graphs (%d instantiated, %d of them for other kernels, clusters or programmatic waits at a site; %.0f ms building them in all), %d ran op by op after a failed capture\n",
					s.Launched, s.Instantiated, s.Reinstantiated, ms(s.Build), s.Fallbacks)
				printChanged(out, s)
			}
			tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
			head := "context\tprefill tok/s\tdecode tok/s\troofline tok/s\tof roofline\t"
			if sweep != "" {
				head = "settings\t" + head
			}
			if a != nil {
				head += "spec tok/s\tacceptance\ttokens/pass\tspeedup\t"
			}
			fmt.Fprintln(tw, head)
			for _, r := range rows {
				line := fmt.Sprintf("%d\t%.1f\t%.2f\t%.2f\t%.0f%%\t", r.Context, r.PrefillTokS, r.DecodeTokS, r.RooflineTokS, 100*r.RooflineFrac)
				if sweep != "" {
					line = r.Settings + "\t" + line
				}
				if a != nil { // the speedup to three places: the issue's 0.85× at P = 0 is a line runs land on
					line += fmt.Sprintf("%.2f\t%.0f%%\t%.2f\t%.3fx\t", r.SpecTokS, 100*r.Acceptance, r.TokensPerPass, r.Speedup)
				}
				fmt.Fprintln(tw, line)
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if w := warmup(tokens); w > 0 {
				fmt.Fprintf(out, "decode rates leave out the first %d of %d tokens (the steps that capture graphs and make first allocations)\n", w, tokens)
			}
			for _, r := range rows {
				at := r.label()
				if r.DraftMs+r.VerifyMs > 0 {
					fmt.Fprintf(out, "%s: a speculative round takes %.2f ms, %.2f ms of it in the drafter's calls (%d drafts; rounds kept on the device only issue the drafts there and wait for them in the verify); a plain step %.2f ms\n",
						at, r.DraftMs+r.VerifyMs, r.DraftMs, k, 1000/r.DecodeTokS)
				}
				if r.HostIssueMs > 0 {
					fmt.Fprintf(out, "%s: the host's time per plain step: %.2f ms issuing it, %.2f ms of the device thread's calls (a step takes %.2f ms)\n",
						at, r.HostIssueMs, r.DeviceThreadMs, 1000/r.DecodeTokS)
				}
				if p := r.PoolPerStep; p != nil {
					line := fmt.Sprintf("%s: the device pool per plain step: %s", at, p)
					if q := r.PoolPerRound; q != nil {
						line += fmt.Sprintf("; per speculative round: %s", q)
					}
					fmt.Fprintln(out, line)
				}
				if p := r.PrefillMs; p != nil && r.PrefillRuns > 1 {
					fmt.Fprintf(out, "%s: prefills of the %d-token prompt, %d of them: %s (median, 90th percentile, slowest; the first in a process makes its allocations)\n", at, r.Context, r.PrefillRuns, p)
				}
				if r.PrefillFLOPs > 0 {
					line := fmt.Sprintf("%s: a prefill's useful work is %.4g FLOPs (products and attention): %s at the median", at, r.PrefillFLOPs, flopRate(r.PrefillFLOPSec))
					if r.PrefillPeakFrac > 0 {
						line += fmt.Sprintf(", %.1f%% of the dense bf16 peak (%s)", 100*r.PrefillPeakFrac, flopRate(run.peak))
						if prec == compute.PrecisionExact {
							line += "; exact prompts take three bf16 products for each useful one (--prefill-precision bf16 takes one)"
						}
					}
					fmt.Fprintln(out, line)
				}
				switch {
				case r.StepMs != nil && r.RoundMs != nil:
					fmt.Fprintf(out, "%s: plain steps %s; speculative rounds %s (median, 90th percentile, slowest)\n", at, r.StepMs, r.RoundMs)
				case r.StepMs != nil:
					fmt.Fprintf(out, "%s: plain steps %s (median, 90th percentile, slowest)\n", at, r.StepMs)
				}
				if r.Ahead+r.AheadMissed > 0 {
					fmt.Fprintf(out, "%s: %d of %d rounds drafted ahead of the last verdict; %d more guessed wrong and drafted again\n",
						at, r.Ahead, r.Rounds, r.AheadMissed)
				}
				if r.EngineTokS > 0 {
					line := fmt.Sprintf("%s: through the serving engine (tandem serve's path, one request): decode %.2f tok/s (%.2fx the direct path)", at, r.EngineTokS, r.EngineTokS/r.DecodeTokS)
					if r.EngineSpecTokS > 0 {
						kind := "real"
						if synthetic >= 0 {
							kind = "synthetic"
						}
						line += fmt.Sprintf(", speculative %.2f tok/s (%.2fx) at %.0f%% %s acceptance, %d of %d rounds drafted ahead",
							r.EngineSpecTokS, r.EngineSpecTokS/r.EngineTokS, 100*r.EngineAcceptance, kind, r.EngineAhead, r.EngineRounds)
					}
					fmt.Fprintln(out, line)
				}
				if r.EngineBatchTokS > 0 {
					fmt.Fprintf(out, "%s: through the serving engine, %d requests at once: %.2f tok/s in all", at, r.EngineBatch, r.EngineBatchTokS)
					if r.EngineTokS > 0 {
						fmt.Fprintf(out, " (%.2fx one request)", r.EngineBatchTokS/r.EngineTokS)
					}
					if r.EngineBatchSpecTokS > 0 {
						fmt.Fprintf(out, "; speculatively %.2f tok/s in all (%.2fx)", r.EngineBatchSpecTokS, r.EngineBatchSpecTokS/r.EngineBatchTokS)
					}
					if r.EngineBatchSpecSteps > 0 {
						fmt.Fprintf(out, ", %d of %d steps without greedy drafts (--adaptive-drafts)", r.EngineBatchUndraftedSteps, r.EngineBatchSpecSteps)
					}
					fmt.Fprintln(out)
				}
			}
			for _, r := range rows {
				if r.Stamps != nil {
					printStamps(out, r.label(), "plain step", r.Stamps, r.StampSteps)
				}
				if r.StampsSpec != nil {
					printStamps(out, r.label(), "speculative round", r.StampsSpec, r.StampRounds)
				}
				if r.GraphPlain != nil {
					printGraphs(out, r.label(), "plain step", r.GraphPlain, r.GraphSteps)
				}
				if r.GraphSpec != nil {
					printGraphs(out, r.label(), "speculative round", r.GraphSpec, r.GraphRounds)
				}
			}
			for _, r := range rows {
				if r.PrefillProfile != nil {
					printProfile(out, fmt.Sprintf("kernel profile: prefill of the %d-token prompt, as issued", r.Context), "prefill", r.PrefillProfile, 1, r.PrefillTime)
				}
				if r.Profile != nil {
					step := time.Duration(float64(time.Second) / r.DecodeTokS)
					printProfile(out, fmt.Sprintf("kernel profile: plain decode after %d tokens, kernels run back to back", r.Context), "step", r.Profile, r.ProfileSteps, step)
				}
				if r.Timeline != nil {
					printTimeline(out, "step", r.Timeline, r.ProfileSteps)
				}
				if r.SpecTimeline != nil {
					round := time.Duration(float64(time.Second) * r.TokensPerPass / r.SpecTokS)
					printProfile(out, fmt.Sprintf("kernel profile: speculative decode after %d tokens, as issued (kernel times include launch latency when the device waits)", r.Context), "round", r.SpecTimeline, r.ProfileRounds, round)
					printTimeline(out, "round", r.SpecTimeline, r.ProfileRounds)
				}
				if r.EngineBatchTimeline != nil && r.EngineBatchTokS > 0 {
					step := time.Duration(float64(time.Second) * float64(r.EngineBatch) / r.EngineBatchTokS)
					printProfile(out, fmt.Sprintf("kernel profile: %d requests at once through the engine after %d tokens, as issued (kernel times include launch latency when the device waits)", r.EngineBatch, r.Context), "step", r.EngineBatchTimeline, r.EngineBatchSteps, step)
					printTimeline(out, "step", r.EngineBatchTimeline, r.EngineBatchSteps)
				}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&preset, "preset", "gemma4-tiny-e2b", "model preset to generate when --model is not given")
	f.StringVar(&model, "model", "", "model directory (default: generate --preset)")
	f.StringVar(&draft, "draft", "", `assistant directory, or "auto" for the preset's assistant`)
	f.StringVar(&device, "device", "auto", "compute device: auto, cpu or cuda")
	f.StringVar(&contexts, "contexts", "128,1024", "prompt lengths to measure at (e.g. 128,4k,32k)")
	f.IntVar(&tokens, "tokens", 32, "tokens to decode at each context")
	f.IntVar(&psize, "prefill-size", 0, "prompt tokens per forward pass of the measured prefills (generate's --prefill-size; 0: 2048 where prompt passes run at bf16 on CUDA, else 512)")
	f.IntVar(&pruns, "prefill-runs", 3, "prefill each context's prompt this many times and report the median (the first also makes allocations and graphs); once where the first took over 10 s")
	f.IntVar(&k, "num-draft-tokens", 3, "drafts per round")
	f.Float64Var(&synthetic, "synthetic-acceptance", -1, "force drafts to be accepted with this probability (0–1; negative: real acceptance)")
	f.Float64Var(&temperature, "temperature", 0, "sample at this temperature (seed 1) instead of decoding greedily, everywhere bench decodes (0: greedy)")
	f.IntVar(&topK, "top-k", 0, "with --temperature, sample from the K most likely tokens (0: all; Gemma 4's generation config has 64)")
	f.Float64Var(&topP, "top-p", 0, "with --temperature, sample from the most likely tokens holding this much probability (0 or 1: all; Gemma 4's has 0.95)")
	f.IntVar(&threads, "threads", 0, "CPU threads (0: all cores)")
	f.BoolVar(&asJSON, "json", false, "print one JSON object")
	precisionFlag(cmd, &precision)
	f.Float64Var(&peakTFLOPS, "bf16-peak", 0, "the device's dense bf16 tensor-core peak in TFLOP/s, for prefill's share of it (0: the datasheet figure of a GPU bench knows: H100, H200, A100)")
	f.BoolVar(&adaptive, "adaptive-drafts", true, "the engine runs' greedy requests stop drafting while steps without drafts are faster, as tandem serve's do by default (engine.Config.AdaptiveDrafts); =false measures drafting in every step")
	f.IntVar(&engineBatch, "engine-batch", 0, "also decode N copies of the prompt at once through one serving engine, and report their tokens/s in all; with --draft, speculatively too (0: not)")
	f.BoolVar(&viaEng, "engine", false, "also decode the same prompt as one request through the serving engine (tandem serve's path: continuous batching's step loop), plainly and, with --draft, speculatively at the drafter's real acceptance (or --synthetic-acceptance's)")
	f.BoolVar(&stepStamps, "step-stamps", false, "also decode plainly, and with --draft speculatively, with every kernel stamped as it starts (kernels built with TANDEM_CUDA_STAMPS=1): each kernel's share of a real step or round, PDL and graphs as they run, and one layer's kernels in order")
	f.BoolVar(&graphProfile, "graph-profile", false, "also decode plainly and speculatively with every CUDA graph timed as a whole (events only between graphs, so the run is real): each recording site's device time, and the device's idle time between graphs, per step and per round")
	f.BoolVar(&kernels, "kernel-profile", false, "time every GPU kernel of the prompt's prefill and of a plain decode at each context: where the device time goes, by kernel and by recording site, and where the device sat idle in a real step (and, with --draft, a speculative round; with --engine-batch, a step of the N requests through the engine)")
	f.StringVar(&cpuProfile, "cpuprofile", "", "write a Go CPU profile of the whole run to this file")
	f.StringVar(&sweep, "sweep", "", `measure each of these settings in turn with the model built once: groups separated by ";", each TANDEM_NAME=VALUE pairs separated by ","; "none" is the settings the process started with (e.g. "none;TANDEM_CUDA_SPLIT=warps;none")`)
	return cmd
}

// tokenTimes records when each token of a generation arrived.
type tokenTimes []time.Time

func (t *tokenTimes) add(int32) { *t = append(*t, time.Now()) }

// rate is the steady decode rate in tokens/s: the tokens after the first
// warmup(n) (the first token comes from the prefill; the first steps
// capture their graphs and make their first allocations) over the time
// they took. Too few tokens give the whole decode's rate (decode: the time
// from the first token to the last).
func (t tokenTimes) rate(decode time.Duration) float64 {
	n := len(t)
	w := warmup(n)
	if w == 0 {
		return float64(n-1) / decode.Seconds()
	}
	return float64(n-1-w) / t[n-1].Sub(t[w]).Seconds()
}

// envSettings lists the TANDEM_ settings in env (os.Environ's form),
// sorted, so that a benchmark's output says which switches it ran with.
// Secrets (a name with KEY, TOKEN or SECRET) are left out.
func envSettings(env []string) []string {
	var set []string
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, "TANDEM_") || strings.Contains(name, "KEY") || strings.Contains(name, "TOKEN") || strings.Contains(name, "SECRET") {
			continue
		}
		set = append(set, kv)
	}
	slices.Sort(set)
	return set
}

// gaps is the time between consecutive arrivals after the warmup: one a
// decode step.
func (t tokenTimes) gaps() []time.Duration {
	var g []time.Duration
	for i := max(1, warmup(len(t))+1); i < len(t); i++ {
		g = append(g, t[i].Sub(t[i-1]))
	}
	return g
}

// hostPerStep is the mean time in ms a plain decode step took to issue
// (issue: one entry a step) and of the device thread's own calls
// (thread: its cumulative time at each token's arrival), both after the
// warmup, the steps rate leaves out; zero where not measured.
func hostPerStep(issue, thread []time.Duration) (issueMs, threadMs float64) {
	if w := warmup(len(issue)); len(issue) > w {
		var sum time.Duration
		for _, d := range issue[w:] {
			sum += d
		}
		issueMs = ms(sum) / float64(len(issue)-w)
	}
	if n, w := len(thread), warmup(len(thread)); n-1 > w {
		threadMs = ms(thread[n-1]-thread[w]) / float64(n-1-w)
	}
	return issueMs, threadMs
}

// benchRun measures one context's row: a plain decode and, with a
// drafter, a speculative one, both from the same random prompt.
type benchRun struct {
	m           *gemma4.Model
	a           *gemma4.Assistant // nil: plain decoding only
	g           *cuda.Backend     // nil off the GPU
	tokens, k   int
	synthetic   float64
	roof        float64       // copy bandwidth, bytes/s
	peak        float64       // dense bf16 FLOP/s (0: unknown)
	bytes       int64         // read per decode step
	prefillRuns int           // --prefill-runs
	prefillSize int           // --prefill-size
	graphs      bool          // --graph-profile
	stamps      bool          // --step-stamps
	engine      bool          // --engine
	engineBatch int           // --engine-batch
	adaptive    bool          // --adaptive-drafts
	sample      sample.Params // --temperature, seed 1
}

func (br *benchRun) row(ctx context.Context, c int) (benchRow, error) {
	m, g, onGPU, tokens := br.m, br.g, br.g != nil, br.tokens
	if c+tokens > m.Config.Text.MaxPositionEmbeddings {
		return benchRow{}, fmt.Errorf("context %d + %d tokens exceeds the model's %d", c, tokens, m.Config.Text.MaxPositionEmbeddings)
	}
	prompt := randomPrompt(m, c, 1)
	opt := generation.Options{MaxTokens: tokens, Sample: br.sample, PrefillSize: br.prefillSize}
	var plainAt tokenTimes
	var threadAt []time.Duration // the device thread's own time at each token (CUDA)
	var poolAt []cuda.PoolStats  // the pool's counts at each token (CUDA)
	onPlain := func(tok int32) {
		plainAt.add(tok)
		if onGPU {
			busy, blocked := g.Device().HostTime()
			threadAt = append(threadAt, busy-blocked)
			poolAt = append(poolAt, g.PoolStats())
		}
	}
	res, err := generation.Generate(ctx, m, prompt, opt, onPlain)
	if err != nil {
		return benchRow{}, err
	}
	prefills := []time.Duration{res.Prefill}
	// A prefill this long is not moved by its first allocations; running it
	// again would only add minutes (32k tokens of the 31B shape).
	for range br.prefillRuns - 1 {
		if res.Prefill > longPrefill {
			break
		}
		r, err := generation.Generate(ctx, m, prompt, generation.Options{MaxTokens: 1, PrefillSize: br.prefillSize}, nil)
		if err != nil {
			return benchRow{}, err
		}
		prefills = append(prefills, r.Prefill)
	}
	row := benchRow{Context: c, BytesPerToken: br.bytes, PrefillMs: spreadOf(prefills), PrefillRuns: len(prefills),
		DecodeTokS: plainAt.rate(res.Decode), RooflineTokS: br.roof / float64(br.bytes)}
	row.PrefillTokS = float64(c) / (row.PrefillMs.P50 / 1000)
	row.PrefillFLOPs = m.PrefillFLOPs(c)
	row.PrefillFLOPSec = row.PrefillFLOPs / (row.PrefillMs.P50 / 1000)
	if br.peak > 0 {
		row.PrefillPeakFrac = row.PrefillFLOPSec / br.peak
	}
	row.RooflineFrac = row.DecodeTokS / row.RooflineTokS
	row.StepMs = spreadOf(plainAt.gaps())
	row.HostIssueMs, row.DeviceThreadMs = hostPerStep(res.IssueTimes, threadAt)
	if w := warmup(len(poolAt)); len(poolAt)-1 > w {
		row.PoolPerStep = poolPer(poolAt[w], poolAt[len(poolAt)-1], len(poolAt)-1-w)
	}
	if br.a == nil {
		if err := br.engineRuns(ctx, &row, prompt); err != nil {
			return benchRow{}, err
		}
		return row, br.graphRuns(ctx, &row, prompt, opt, nil, spec.Options{})
	}
	d, err := spec.NewAssistant(br.a, gemma4.DraftOptions{}, opt.Sample)
	if err != nil {
		return benchRow{}, err
	}
	so := spec.Options{Options: opt, DraftTokens: br.k, Synthetic: br.synthetic >= 0, SyntheticAcceptance: br.synthetic}
	var specAt tokenTimes
	var pool0 cuda.PoolStats
	if onGPU {
		pool0 = g.PoolStats()
	}
	sres, err := spec.Generate(ctx, m, d, prompt, so, specAt.add)
	if err != nil {
		return benchRow{}, err
	}
	if onGPU {
		row.PoolPerRound = poolPer(pool0, g.PoolStats(), sres.Stats.Rounds)
	}
	row.SpecTokS = specAt.rate(sres.Decode)
	row.Acceptance = sres.Stats.AcceptanceRate()
	row.TokensPerPass = sres.Stats.MeanAcceptLength()
	row.Speedup = row.SpecTokS / row.DecodeTokS
	if n := float64(sres.Stats.Rounds); n > 0 {
		row.DraftMs, row.VerifyMs = ms(sres.Stats.DraftTime)/n, ms(sres.Stats.VerifyTime)/n
	}
	row.Rounds, row.Ahead, row.AheadMissed = sres.Stats.Rounds, sres.Stats.Ahead, sres.Stats.AheadMissed
	row.RoundMs = spreadOf(sres.Stats.RoundTimes[warmup(len(sres.Stats.RoundTimes)):])
	if err := br.engineRuns(ctx, &row, prompt); err != nil {
		return benchRow{}, err
	}
	return row, br.graphRuns(ctx, &row, prompt, opt, d, so)
}

// engineRuns adds --engine's rates to row: the prompt as one request on a
// fresh engine sized for it, plain, then with the drafter.
func (br *benchRun) engineRuns(ctx context.Context, row *benchRow, prompt []int32) error {
	// With --synthetic-acceptance the engine's rounds take the same coin.
	judge := spec.Judge{Synthetic: br.synthetic >= 0, SyntheticAcceptance: br.synthetic}
	if br.engineBatch > 1 {
		var err error
		row.EngineBatch = br.engineBatch
		if row.EngineBatchTokS, _, err = br.engineBatchRun(ctx, prompt, nil, judge, nil); err != nil {
			return err
		}
		if br.a != nil {
			var st engine.Stats
			if row.EngineBatchSpecTokS, st, err = br.engineBatchRun(ctx, prompt, br.a, judge, nil); err != nil {
				return err
			}
			if br.adaptive {
				row.EngineBatchSpecSteps, row.EngineBatchUndraftedSteps = st.Steps, st.UndraftedSteps
			}
		}
	}
	if !br.engine {
		return nil
	}
	run := func(drafter *gemma4.Assistant) (float64, engine.Usage, error) {
		e, err := engine.New(engine.Config{Model: br.m, Drafter: drafter, DraftTokens: br.k,
			CtxSize: len(prompt) + br.tokens + 1, Parallel: 1, PrefixCacheTokens: -1, Judge: judge, AdaptiveDrafts: br.adaptive && drafter != nil})
		if err != nil {
			return 0, engine.Usage{}, err
		}
		defer e.Close(context.Background())
		ch, err := e.Submit(ctx, engine.Request{Prompt: prompt, MaxTokens: br.tokens, Sample: br.sample})
		if err != nil {
			return 0, engine.Usage{}, err
		}
		var at tokenTimes
		var usage engine.Usage
		for ev := range ch {
			for range ev.Tokens {
				at.add(0)
			}
			if ev.Done {
				if ev.Err != nil {
					return 0, usage, ev.Err
				}
				usage = ev.Usage
			}
		}
		if len(at) < 2 {
			return 0, usage, nil
		}
		return at.rate(at[len(at)-1].Sub(at[0])), usage, nil
	}
	var err error
	if row.EngineTokS, _, err = run(nil); err != nil || br.a == nil {
		return err
	}
	var u engine.Usage
	if row.EngineSpecTokS, u, err = run(br.a); err != nil {
		return err
	}
	if u.Drafted > 0 {
		row.EngineAcceptance = float64(u.Accepted) / float64(u.Drafted)
	}
	row.EngineRounds, row.EngineAhead = u.Rounds, u.Ahead
	return nil
}

// engineBatchRun decodes engineBatch copies of prompt at once through one
// engine, with drafter where not nil, and returns their tokens a second in
// all, counted from the moment every request has its first token (the
// prefill is behind them all) to the last token.
//
// onStarted, if set, runs once every request has its first token. It
// also returns the engine's counters as it stopped.
func (br *benchRun) engineBatchRun(ctx context.Context, prompt []int32, drafter *gemma4.Assistant, judge spec.Judge, onStarted func()) (float64, engine.Stats, error) {
	n := br.engineBatch
	e, err := engine.New(engine.Config{Model: br.m, Drafter: drafter, DraftTokens: br.k, CtxSize: len(prompt) + br.tokens + 1,
		Parallel: n, PrefixCacheTokens: -1, Judge: judge, AdaptiveDrafts: br.adaptive && drafter != nil})
	if err != nil {
		return 0, engine.Stats{}, err
	}
	defer e.Close(context.Background())
	times := make([]tokenTimes, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	var waiting atomic.Int32 // requests without their first token; the last one's reader calls onStarted
	waiting.Store(int32(n))
	for i := range n {
		ch, err := e.Submit(ctx, engine.Request{Prompt: prompt, MaxTokens: br.tokens, Sample: br.sample})
		if err != nil {
			return 0, engine.Stats{}, err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ev := range ch {
				for range ev.Tokens {
					times[i].add(0)
				}
				if len(ev.Tokens) > 0 && len(times[i]) == len(ev.Tokens) && waiting.Add(-1) == 0 && onStarted != nil {
					onStarted()
				}
				if ev.Done && ev.Err != nil {
					errs[i] = ev.Err
				}
			}
		}()
	}
	wg.Wait()
	st := e.Stats()
	if err := errors.Join(errs...); err != nil {
		return 0, st, err
	}
	return batchRate(times), st, nil
}

// batchRate is the tokens a second in all of requests whose tokens came
// at times, from the moment every one had its first to the last; 0 where
// that leaves nothing to count.
func batchRate(times []tokenTimes) float64 {
	var start, end time.Time
	for _, t := range times {
		if len(t) == 0 {
			return 0
		}
		if t[0].After(start) {
			start = t[0]
		}
		if t[len(t)-1].After(end) {
			end = t[len(t)-1]
		}
	}
	count := 0
	for _, t := range times {
		for _, at := range t {
			if at.After(start) {
				count++
			}
		}
	}
	if count == 0 || !end.After(start) {
		return 0
	}
	return float64(count) / end.Sub(start).Seconds()
}

// graphRuns adds --step-stamps' plain decode and --graph-profile's
// timelines to row: the plain decode and, with a drafter d, the speculative
// one again, after the measured runs so that they do not change them.
func (br *benchRun) graphRuns(ctx context.Context, row *benchRow, prompt []int32, opt generation.Options, d spec.Drafter, so spec.Options) error {
	if br.stamps {
		// A diagnostic: its failure is said, and the row's measurements kept.
		var err error
		if row.Stamps, row.StampSteps, err = stampRun(br.g, plainRun(ctx, br.m, prompt, opt)); err != nil {
			slog.Warn("bench: --step-stamps", "err", err)
		}
		if d != nil {
			if row.StampsSpec, row.StampRounds, err = stampRun(br.g, specRun(ctx, br.m, d, prompt, so)); err != nil {
				slog.Warn("bench: --step-stamps of speculative rounds", "err", err)
			}
		}
	}
	if !br.graphs {
		return nil
	}
	var err error
	if row.GraphPlain, row.GraphSteps, err = profileRun(br.g, graphsAsIssued, plainRun(ctx, br.m, prompt, opt)); err != nil || d == nil {
		return err
	}
	row.GraphSpec, row.GraphRounds, err = profileRun(br.g, graphsAsIssued, specRun(ctx, br.m, d, prompt, so))
	return err
}

// stampRun is profileRun for --step-stamps: run with every launch stamped
// from its first token on.
func stampRun(g *cuda.Backend, run func(onToken func(int32)) (int, error)) ([]cuda.StepStamp, int, error) {
	units, started, err := fromFirstToken(run, func() error { return g.StartStamps(1 << 20) }, nil)
	var st []cuda.StepStamp
	if started {
		var serr error
		st, serr = g.StopStamps()
		err = errors.Join(err, serr)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("step stamps: %w", err)
	}
	return st, units, nil
}

// fromFirstToken runs run, calling start at its first token and then,
// once start has succeeded, each (when given) at every token. It reports
// run's steps, whether start succeeded, and start's error, else run's.
func fromFirstToken(run func(onToken func(int32)) (int, error), start, each func() error) (units int, started bool, err error) {
	units, rerr := run(func(int32) {
		if !started && err == nil {
			err = start()
			started = err == nil
		}
		if started && each != nil {
			each()
		}
	})
	if err == nil {
		err = rerr
	}
	return units, started, err
}

// plainRun is profileRun's plain decode of prompt, whose profile covers the
// steps issued after the first token: on the GPU, Generate issues the
// second token's step before it emits the first (decodeAhead and
// sampleAhead, for a model that takes device tokens), and that step is not
// in the profile.
func plainRun(ctx context.Context, m *gemma4.Model, prompt []int32, opt generation.Options) func(func(int32)) (int, error) {
	steps := opt.MaxTokens - 1
	if m.DeviceTokens() {
		steps--
	}
	return func(onToken func(int32)) (int, error) {
		_, err := generation.Generate(ctx, m, prompt, opt, onToken)
		return max(steps, 0), err
	}
}

// specRun is profileRun's speculative decode of prompt with d, whose
// profile covers its rounds.
func specRun(ctx context.Context, m *gemma4.Model, d spec.Drafter, prompt []int32, so spec.Options) func(func(int32)) (int, error) {
	return func(onToken func(int32)) (int, error) {
		res, err := spec.Generate(ctx, m, d, prompt, so, onToken)
		if err != nil {
			return 0, err
		}
		return res.Stats.Rounds, nil
	}
}

// label names a row in bench's text lines: its context, and its settings
// when sweeping.
func (r benchRow) label() string {
	if r.Settings != "" {
		return fmt.Sprintf("context %d [%s]", r.Context, r.Settings)
	}
	return fmt.Sprintf("context %d", r.Context)
}

// poolUse is the device pool's work per step or round.
type poolUse struct {
	Handouts     float64 `json:"handouts"`
	DriverAllocs float64 `json:"driver_allocs"`
	DriverMB     float64 `json:"driver_mb"`
	Collections  float64 `json:"collections"`
}

// poolPer is the pool's work between two counts, per step of n; nil for
// no steps.
func poolPer(from, to cuda.PoolStats, n int) *poolUse {
	if n <= 0 {
		return nil
	}
	f := float64(n)
	return &poolUse{Handouts: float64(to.Handouts-from.Handouts) / f, DriverAllocs: float64(to.DriverAllocs-from.DriverAllocs) / f,
		DriverMB: float64(to.DriverBytes-from.DriverBytes) / f / 1e6, Collections: float64(to.Collections-from.Collections) / f}
}

func (u *poolUse) String() string {
	return fmt.Sprintf("%.0f blocks handed out, %.2f new from the driver (%.2f MB), %.3f collections started",
		u.Handouts, u.DriverAllocs, u.DriverMB, u.Collections)
}

// spread summarises durations in milliseconds.
type spread struct {
	P50 float64 `json:"p50"`
	P90 float64 `json:"p90"`
	Max float64 `json:"max"`
}

// spreadOf is ds' median, 90th percentile (nearest rank) and maximum, or
// nil for none.
func spreadOf(ds []time.Duration) *spread {
	if len(ds) == 0 {
		return nil
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	rank := func(q float64) float64 {
		i := int(math.Ceil(q*float64(len(s)))) - 1
		return ms(s[max(0, i)])
	}
	return &spread{P50: rank(0.5), P90: rank(0.9), Max: ms(s[len(s)-1])}
}

func (s *spread) String() string {
	return fmt.Sprintf("%.2f / %.2f / %.2f ms", s.P50, s.P90, s.Max)
}

// longPrefill is how long a context's first prefill may take and still be
// run --prefill-runs times.
const longPrefill = 10 * time.Second

// warmup is how many of n tokens' arrivals the steady rate leaves out.
func warmup(n int) int {
	if n < 8 {
		return 0
	}
	return min(8, n/4)
}

// parseCount reads 128, 4k or 32k.
func parseCount(s string) (int, error) {
	mult := 1
	if rest, ok := strings.CutSuffix(strings.ToLower(s), "k"); ok {
		s, mult = rest, 1024
	}
	n, err := strconv.Atoi(s)
	return n * mult, err
}

// randomTarget builds a preset's random-weight target on b, with progress.
func randomTarget(log io.Writer, name string, b compute.Backend) (*gemma4.Model, error) {
	p, err := gemma4.LookupPreset(name)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	fmt.Fprintf(log, "building %s with random weights on %s...\n", name, b.Name())
	m, err := p.Random(b, compute.BF16, 0, randomOptions(log, name))
	if err != nil {
		return nil, err
	}
	if err := compute.Sync(b); err != nil { // weights made on the device: the build ends when their kernels do
		m.Close()
		return nil, fmt.Errorf("building %s: %w", name, err)
	}
	fmt.Fprintf(log, "built %s (%s) in %.1fs\n", name, humanBytes(m.DecodeBytes()), time.Since(start).Seconds())
	return m, nil
}

// randomAssistant is randomTarget for a drafter preset.
func randomAssistant(log io.Writer, name string, b compute.Backend) (*gemma4.Assistant, error) {
	p, err := gemma4.LookupPreset(name)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(log, "building %s with random weights on %s...\n", name, b.Name())
	return p.RandomAssistant(b, compute.BF16, 0, randomOptions(log, name))
}

// randomOptions are the options bench builds a preset with: a progress
// bar, and the weights made by the backend where it can (the GPU: the same
// values, without drawing 62 GB on the host and copying them over; the 31B
// shape builds in 0.8 s instead of 66). TANDEM_RANDOM_ON_DEVICE=0 draws them
// on the host.
func randomOptions(log io.Writer, name string) gemma4.LoadOptions {
	return gemma4.LoadOptions{Progress: progress.Bar(log, "building "+name, 256<<20),
		RandomOnDevice: os.Getenv("TANDEM_RANDOM_ON_DEVICE") != "0"}
}

// profileKind is what profileRun times.
type profileKind int

const (
	kernelsBackToBack profileKind = iota // every kernel, held back behind a spin so they run back to back
	kernelsAsIssued                      // every kernel, as the host issues them (recordings run as calls)
	graphsAsIssued                       // whole graphs, as a real run launches them
)

// profileRun profiles run from its first token on. With kernelsBackToBack
// every token callback queues a spin long enough for the host to issue the
// next step behind it, so a plain step's kernels run back to back and their
// times are the device's alone. Otherwise the profile is the real
// timeline: where the device sat idle and why. run reports how many steps
// (or rounds) the profile covers.

func profileRun(g *cuda.Backend, kind profileKind, run func(onToken func(int32)) (int, error)) (*cuda.Profile, int, error) {
	start := g.Device().StartProfile
	if kind == graphsAsIssued {
		start = g.Device().StartGraphProfile
	}
	var each func() error
	if kind == kernelsBackToBack {
		each = func() error { g.Spin(100 * time.Millisecond); return nil }
	}
	units, started, err := fromFirstToken(run, start, each)
	issue := g.IssueTimes()
	var prof cuda.Profile
	if started {
		p, perr := g.Device().StopProfile()
		if err == nil {
			err = perr
		}
		prof = p
	}
	if err != nil {
		return nil, 0, fmt.Errorf("profile: %w", err)
	}
	for _, d := range issue {
		prof.Issue += d
	}
	if len(issue) > 0 {
		prof.Issue /= time.Duration(len(issue))
	}
	return &prof, units, nil
}

// profilePrefill times every kernel of prompt's prefill as issued (a
// prefill's kernels are long enough that the device seldom waits on the
// host): where a prompt pass's time goes, by kernel.
func profilePrefill(ctx context.Context, g *cuda.Backend, m *gemma4.Model, prompt []int32, chunk int) (*cuda.Profile, time.Duration, error) {
	if err := g.Device().StartProfile(); err != nil {
		return nil, 0, fmt.Errorf("prefill profile: %w", err)
	}
	res, err := generation.Generate(ctx, m, prompt, generation.Options{MaxTokens: 1, PrefillSize: chunk}, nil)
	p, perr := g.Device().StopProfile()
	if err = errors.Join(err, perr); err != nil {
		return nil, 0, fmt.Errorf("prefill profile: %w", err)
	}
	return &p, res.Prefill, nil
}

// randomPrompt is c random token ids, the same for a given c.
func randomPrompt(m *gemma4.Model, c int, stream uint64) []int32 {
	r := rand.New(rand.NewPCG(uint64(c), stream))
	prompt := make([]int32, c)
	for i := range prompt {
		prompt[i] = int32(3 + r.IntN(m.Config.Text.VocabSize-3))
	}
	return prompt
}

// printProfile lists the kernels that take the most device time per unit
// (a step or a round) and compares the device's time with the measured one.
func printProfile(w io.Writer, title, unit string, p *cuda.Profile, units int, measured time.Duration) {
	n := float64(max(units, 1))
	var busy time.Duration
	for _, k := range p.Kernels {
		if k.Name != "spin" {
			busy += k.Time
		}
	}
	dev := ms(busy) / n
	fmt.Fprintf(w, "\n%s, %d %ss: %.2f ms of kernel time per %s; a measured %s takes %.2f ms (kernels %.0f%% of it)",
		title, units, unit, dev, unit, unit, ms(measured), 100*dev/ms(measured))
	if p.Issue > 0 {
		fmt.Fprintf(w, "; the host takes %.2f ms to issue a %s (with profiling events)", ms(p.Issue), unit)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "kernel\tcalls/%s\tms/%s\tshare\t\n", unit, unit)
	shown := 0
	for _, k := range p.Kernels {
		if k.Name == "spin" {
			continue
		}
		if shown++; shown > 15 {
			break
		}
		fmt.Fprintf(tw, "%s\t%.1f\t%.3f\t%.1f%%\t\n", k.Name, float64(k.Calls)/n, ms(k.Time)/n, 100*float64(k.Time)/float64(busy))
	}
	tw.Flush()
	if len(p.Sites) > 1 {
		var parts []string
		for _, s := range p.Sites {
			name := s.Name
			if name == "" {
				name = "(outside recordings)"
			}
			parts = append(parts, fmt.Sprintf("%s %.3f ms (%.0f kernels)", name, ms(s.Time)/n, float64(s.Calls)/n))
		}
		fmt.Fprintf(w, "by recording site, per %s: %s\n", unit, strings.Join(parts, ", "))
		printSiteKernels(w, p, n)
	}
}

// printSiteKernels lists each recording site's longest kernels per unit:
// what a draft step or a verify's part spends its time on.
func printSiteKernels(w io.Writer, p *cuda.Profile, n float64) {
	for _, s := range p.Sites {
		ks := p.SiteKernels[s.Name]
		if s.Name == "" || len(ks) == 0 {
			continue
		}
		var parts []string
		for i, k := range ks {
			if i == 6 {
				parts = append(parts, "…")
				break
			}
			parts = append(parts, fmt.Sprintf("%s %.3f ms (%.1f)", k.Name, ms(k.Time)/n, float64(k.Calls)/n))
		}
		fmt.Fprintf(w, "  %s: %s\n", s.Name, strings.Join(parts, ", "))
	}
}

// printTimeline says how long the device sat idle in a real (unspun)
// profiled run, how much of that it waited for the host to issue the next
// kernel, and lists the longest gaps.
func printTimeline(w io.Writer, unit string, p *cuda.Profile, units int) {
	n := float64(max(units, 1))
	fmt.Fprintf(w, "timeline of a real %s (with profiling events): device idle %.2f ms per %s between kernels, %.2f ms of it waiting for the host to issue the next; longest gaps:\n",
		unit, ms(p.Idle)/n, unit, ms(p.HostBound)/n)
	printGaps(w, p.Gaps)
}

// printGaps lists a profile's longest idle stretches.
func printGaps(w io.Writer, gaps []cuda.Gap) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  idle\thost late\tbetween\tsynchronous calls in between")
	for _, g := range gaps {
		fmt.Fprintf(tw, "  %v\t%v\t%s → %s\t%s\n", g.Idle.Round(time.Microsecond), g.HostLate.Round(time.Microsecond), g.After, g.Before, g.HostCalls)
	}
	tw.Flush()
}

// printStamps prints --step-stamps: each kernel's share of a real unit
// (a plain step or a speculative round, whose draft steps' kernels and
// verify's are summed by name alike), summed by kernel, then one layer's
// launches in order from the middle of the run (a layer being the
// launches from one rmsnorm2 to the second after it; in a round, most
// likely the verify's). A share runs to the next kernel's start, so the
// last kernel of a unit also carries the gap to the next one's graph.
func printStamps(w io.Writer, label, unit string, st []cuda.StepStamp, steps int) {
	n := float64(max(steps, 1))
	kernels := cuda.StampKernels(st)
	var total time.Duration
	for _, k := range kernels {
		total += k.Time
	}
	short := unit[strings.LastIndexByte(unit, ' ')+1:] // "step", "round"
	fmt.Fprintf(w, "%s: step stamps, %d launches over %d %ss: %.2f ms a %s from the first stamp to the last; each kernel's share of a %s (from its start to the next kernel's, PDL and graphs as they run):\n",
		label, len(st), steps, unit, ms(total)/n, short, short)
	fmt.Fprintf(w, "  %28s %11s %9s %9s %6s\n", "kernel", "calls/"+short, "ms/"+short, "µs/call", "share")
	for _, k := range kernels {
		fmt.Fprintf(w, "  %28s %11.1f %9.3f %9.2f %5.1f%%\n", k.Name, float64(k.Calls)/n, ms(k.Time)/n,
			float64(k.Time)/float64(time.Microsecond)/float64(k.Calls), 100*float64(k.Time)/float64(max(total, 1)))
	}
	// One layer from the middle of the run: from an rmsnorm2 to the second
	// one after it (a layer's two boundaries), or 40 launches.
	i0 := len(st) / 2
	for i0 < len(st) && st[i0].Name != "rmsnorm2" {
		i0++
	}
	if i0 == len(st) {
		i0 = len(st) / 2
	}
	i1, seen := i0+1, 0
	for ; i1 < len(st) && i1-i0 < 40; i1++ {
		if st[i1].Name == "rmsnorm2" {
			if seen++; seen == 2 {
				i1++
				break
			}
		}
	}
	var parts []string
	for _, s := range st[i0:min(i1, len(st))] {
		parts = append(parts, fmt.Sprintf("%s %.1f", s.Name, float64(s.Share)/float64(time.Microsecond)))
	}
	fmt.Fprintf(w, "%s: one layer's launches in order (a %s's), µs each: %s\n", label, unit, strings.Join(parts, ", "))
}

// printGraphs prints a --graph-profile timeline: the device time of each
// recording site's graphs and the idle time between graphs, per unit (a
// plain step or a speculative round).
func printGraphs(w io.Writer, label, unit string, p *cuda.Profile, units int) {
	fmt.Fprintf(w, "%s: graphs of real %ss, %s\n", label, unit, graphSummary(unit, p, units))
	printGaps(w, p.Gaps)
}

// graphSummary is printGraphs' line: time in graphs by site, then idle.
func graphSummary(unit string, p *cuda.Profile, units int) string {
	n := float64(max(units, 1))
	var parts []string
	for _, s := range p.Sites {
		parts = append(parts, fmt.Sprintf("%s %.2f ms (%.1f graphs)", s.Name, ms(s.Time)/n, float64(s.Calls)/n))
	}
	return fmt.Sprintf("%d of them: %.2f ms a %s in graphs (%s; a graph's time includes its launch when the device waits for it); %.2f ms a %s between graphs (idle, or running work outside graphs), %.2f ms of it before the host had launched the next; longest gaps:",
		units, ms(p.Busy)/n, unit, strings.Join(parts, ", "), ms(p.Idle)/n, unit, ms(p.HostBound)/n)
}

// printChanged says which kernels' launches changed their grid or
// arguments from one step of a recording site to the next: what stands
// between capturing a step's graph every step and replaying one.
func printChanged(w io.Writer, s cuda.GraphStats) {
	total, changed := 0, 0
	var kernels []string
	for k, n := range s.Compared {
		total += n
		changed += s.Changed[k]
		if s.Changed[k] > 0 {
			kernels = append(kernels, k)
		}
	}
	if total == 0 {
		return
	}
	sort.Slice(kernels, func(i, j int) bool {
		if a, b := s.Changed[kernels[i]], s.Changed[kernels[j]]; a != b {
			return a > b
		}
		return kernels[i] < kernels[j]
	})
	var parts []string
	for _, k := range kernels {
		parts = append(parts, fmt.Sprintf("%s %d of %d", k, s.Changed[k], s.Compared[k]))
	}
	fmt.Fprintf(w, "graph kernels whose grid or arguments changed from their site's previous step: %d of %d launches (%s); %d recordings launched other kernels than their site's previous one\n",
		changed, total, strings.Join(parts, ", "), s.Reshaped)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// flopRate formats FLOP/s in TFLOP/s, or GFLOP/s below one.
func flopRate(f float64) string {
	if f >= 1e12 {
		return fmt.Sprintf("%.1f TFLOP/s", f/1e12)
	}
	return fmt.Sprintf("%.2f GFLOP/s", f/1e9)
}

// knownPeak is a peak for JSON: null where unknown (0).
func knownPeak(p float64) any {
	if p <= 0 {
		return nil
	}
	return p
}
