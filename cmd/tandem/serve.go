package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strconv"
	"syscall"

	"github.com/spf13/cobra"

	"tandem/sample"
	"tandem/serve"
)

func newServe() *cobra.Command {
	var opt serve.Options
	var df draftFlags
	var device, host, logFormat, precision string
	var port, threads int
	var sp sample.Params
	cmd := &cobra.Command{
		Use:   "serve --model DIR [--draft DIR]",
		Short: "Serve the OpenAI-compatible API (chat and text completions, streaming) with continuous batching",
		Long: "serve loads the model (and an assistant drafter: every request is then decoded speculatively,\n" +
			"with output identical to plain decoding) and answers POST /v1/chat/completions and\n" +
			"/v1/completions, GET /v1/models, /health and /metrics. Sampling defaults come from the\n" +
			"model's generation_config.json unless --temp, --top-p, --top-k or --min-p are given; a request's\n" +
			"own values win. While the weights load, the port answers 503 (/health: loading). SIGINT or\n" +
			"SIGTERM stops accepting requests, lets running ones finish for --shutdown-grace, cancels the\n" +
			"rest and exits 0; a second signal, or one during the load, exits at once.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if opt.Model == "" {
				return errors.New("--model is required")
			}
			dopt, err := df.options(cmd)
			if err != nil {
				return err
			}
			opt.Draft, opt.DraftTokens, opt.DraftOpt = df.dir, df.k, dopt
			if opt.AdaptiveDrafts && cmd.Flags().Changed("adaptive-drafts") && df.dir == "" {
				return errors.New("--adaptive-drafts needs --draft")
			}
			prec, err := parsePrecision(precision)
			if err != nil {
				return err
			}
			if opt.Backend, err = openBackend(device, threads); err != nil {
				return err
			}
			opt.PromptPrecision = prec.on(opt.Backend)
			opt.Device = deviceName(opt.Backend)
			for _, f := range []struct {
				name string
				v    int
			}{{"port", port}, {"ctx-size", opt.CtxSize}, {"prefill-size", opt.PrefillSize}, {"parallel", opt.Parallel},
				{"max-tokens", opt.MaxTokens}, {"max-queue", opt.MaxQueue}} {
				if f.v < 0 || (f.name == "port" && f.v > 65535) {
					return fmt.Errorf("--%s %d is out of range", f.name, f.v)
				}
			}
			switch {
			case opt.ShutdownGrace < 0:
				return fmt.Errorf("--shutdown-grace must be >= 0, got %s", opt.ShutdownGrace)
			case opt.ShutdownGrace == 0:
				// 0 means no grace at all; serve.Options' zero value would be its default.
				opt.ShutdownGrace = serve.NoGrace
			}
			if opt.Sampling, err = samplingDefaults(cmd, opt.Model, sp); err != nil {
				return err
			}
			if !cmd.Flags().Changed("api-key") {
				opt.APIKey = os.Getenv("TANDEM_API_KEY")
			}
			log, err := newLogger(cmd, logFormat)
			if err != nil {
				return err
			}
			opt.Logger, opt.Progress = log, cmd.ErrOrStderr()

			ln, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			go func() {
				<-ctx.Done()
				stop() // a second signal gets the default behaviour: exit now
			}()
			return serve.Run(ctx, ln, opt)
		},
	}
	df.register(cmd)
	fl := cmd.Flags()
	fl.StringVar(&opt.Model, "model", "", "model directory (Hugging Face layout)")
	fl.StringVar(&opt.ModelName, "model-name", "", "model id clients send and /v1/models lists (default: the model directory's name)")
	fl.StringVar(&host, "host", "127.0.0.1", "address to listen on")
	fl.IntVar(&port, "port", 8080, "port to listen on (0: any free port)")
	fl.StringVar(&device, "device", "auto", "compute device: auto, cpu or cuda")
	fl.IntVar(&threads, "threads", 0, "CPU threads (0: all cores)")
	fl.IntVar(&opt.CtxSize, "ctx-size", 0, "most tokens (prompt + output) per request (0: min(the model's max positions, 8192))")
	fl.IntVar(&opt.PrefillSize, "prefill-size", 0, "prompt tokens per request per step (0: 512)")
	fl.IntVar(&opt.Parallel, "parallel", 0, "requests decoding at once; the KV budget is ctx-size × parallel tokens (0: 4)")
	fl.IntVar(&opt.MaxTokens, "max-tokens", 0, "default max_tokens of a request that sets none (0: 2048)")
	precisionFlag(cmd, &precision)
	fl.BoolVar(&opt.AdaptiveDrafts, "adaptive-drafts", true, "greedy requests stop drafting while steps without drafts are faster at the running batch size, as measured (output unchanged; sampled requests always draft); =false drafts in every step")
	fl.IntVar(&opt.MaxQueue, "max-queue", 0, "requests waiting for a slot before new ones get 429 (0: 64)")
	fl.Float64Var(&sp.Temperature, "temp", 0, "default temperature (default: generation_config.json's, else 0 = greedy)")
	fl.Float64Var(&sp.TopP, "top-p", 0, "default nucleus mass (default: generation_config.json's, else off)")
	fl.IntVar(&sp.TopK, "top-k", 0, "default top-k (default: generation_config.json's, else 0 = off)")
	fl.Float64Var(&sp.MinP, "min-p", 0, "default min-p (default: generation_config.json's, else 0 = off)")
	fl.StringVar(&opt.APIKey, "api-key", "", "require \"Authorization: Bearer KEY\" (default: $TANDEM_API_KEY; /health and /metrics stay open)")
	fl.StringVar(&logFormat, "log-format", "text", "log format: text or json")
	fl.DurationVar(&opt.ShutdownGrace, "shutdown-grace", serve.DefaultGrace, "on SIGINT/SIGTERM, how long running requests may finish before they are cancelled (0: cancel them at once)")
	return cmd
}

// samplingDefaults starts from the model's generation_config.json and applies the sampling
// flags that were given.
func samplingDefaults(cmd *cobra.Command, model string, flags sample.Params) (*sample.Params, error) {
	sp, err := serve.DefaultSampling(model)
	if err != nil {
		return nil, err
	}
	fl := cmd.Flags()
	if fl.Changed("temp") {
		sp.Temperature = flags.Temperature
	}
	if fl.Changed("top-p") {
		sp.TopP = flags.TopP
	}
	if fl.Changed("top-k") {
		sp.TopK = flags.TopK
	}
	if fl.Changed("min-p") {
		sp.MinP = flags.MinP
	}
	if err := sp.Validate(); err != nil {
		return nil, fmt.Errorf("sampling flags: %w", err)
	}
	return &sp, nil
}

// newLogger writes text or JSON lines to the command's stderr.
func newLogger(cmd *cobra.Command, format string) (*slog.Logger, error) {
	w := cmd.ErrOrStderr()
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, nil)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, nil)), nil
	}
	return nil, fmt.Errorf("--log-format %q: want text or json", format)
}
