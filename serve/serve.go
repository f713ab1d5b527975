// Package serve is `tandem serve` without the command line: it loads a target model (and a
// drafter), builds the continuous-batching engine and the OpenAI-compatible HTTP server over
// it, serves on a listener until its context ends, then shuts down gracefully. It lives
// outside package main so tests (the e2e module) run the real server in-process.
package serve

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"tandem/chat"
	"tandem/checkpoint"
	"tandem/compute"
	"tandem/compute/cpu"
	"tandem/engine"
	"tandem/model/gemma4"
	"tandem/progress"
	"tandem/sample"
	"tandem/server"
	"tandem/tokenizer"
)

// Options configure Run. Model is required; zero values elsewhere take the documented defaults.
type Options struct {
	Model string // target model directory (Hugging Face layout)
	// ModelName is the id clients use; "": the model directory's base name.
	ModelName string
	// Draft is an assistant drafter directory; "": plain decoding.
	Draft       string
	DraftTokens int                 // drafts per round; 0: the engine's default (3)
	DraftOpt    gemma4.DraftOptions // query position, shared-KV cap
	// AdaptiveDrafts lets greedy requests stop drafting while plain steps
	// are faster at the running batch size (engine.Config.AdaptiveDrafts).
	AdaptiveDrafts bool
	// PromptPrecision is the precision of prompt passes' products
	// (gemma4.Model.SetPromptPrecision); the zero value is exact.
	PromptPrecision compute.Precision

	// Backend runs the models; nil: the CPU backend on every core. Device names it for
	// /health (the backend's name when empty).
	Backend compute.Backend
	Device  string

	CtxSize     int // tokens per request (prompt + output); 0: the engine's default
	PrefillSize int // prompt tokens per step per request; 0: the engine's default
	Parallel    int // requests decoding at once; 0: the engine's default
	MaxQueue    int // requests waiting for admission; 0: the engine's default
	MaxTokens   int // default max_tokens of a request; 0: the server's default

	// StopTokens end a request's generation; nil: generation_config.json's eos_token_id
	// (Gemma 4: 1, 106, 50). Chat requests also stop at the chat format's end-of-turn markers.
	StopTokens []int32

	// Sampling are the defaults for what a request leaves out; nil: DefaultSampling(Model).
	Sampling *sample.Params

	APIKey       string
	MaxBodyBytes int64 // 0: the server's default

	// ShutdownGrace is how long in-flight requests may run on after ctx ends before they are
	// cancelled; 0: DefaultGrace; negative (NoGrace): none, they are cancelled at once.
	ShutdownGrace time.Duration

	// Logger gets the startup, ready and shutdown lines and the server's request lines; nil:
	// slog.Default().
	Logger *slog.Logger
	// Progress, when set, shows a progress bar there while weights are read in.
	Progress io.Writer
	// Ready, when set, is called once the server accepts requests, with its base URL.
	Ready func(url string)
}

// DefaultGrace is the shutdown grace period when Options.ShutdownGrace is 0.
const DefaultGrace = 10 * time.Second

// NoGrace as Options.ShutdownGrace cancels in-flight requests as soon as ctx ends (any
// negative value does).
const NoGrace time.Duration = -1

// Run loads the models, serves HTTP on ln until ctx ends, then stops accepting, lets in-flight
// requests finish within the grace period, cancels what is left, and returns nil. While the
// models load, every request gets a 503 ("loading" on /health), and ctx ending stops Run at
// once. It returns an error when loading fails or the listener fails. Run closes ln.
func Run(ctx context.Context, ln net.Listener, opt Options) error {
	defer ln.Close()
	log := opt.Logger
	if log == nil {
		log = slog.Default()
	}
	if opt.Model == "" {
		return errors.New("serve: a model directory is required")
	}
	grace := opt.ShutdownGrace
	switch {
	case grace == 0:
		grace = DefaultGrace
	case grace < 0:
		grace = 0
	}

	// The listener answers from the start, so that a client (or a load balancer's check)
	// gets a 503 while the weights load instead of a connection that hangs.
	var handler atomic.Pointer[http.Handler]
	var wait http.Handler = http.HandlerFunc(server.Loading)
	handler.Store(&wait)
	hs := &http.Server{
		Handler:           http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { (*handler.Load()).ServeHTTP(w, r) }),
		ReadHeaderTimeout: 10 * time.Second,
		// The server bounds reading a body itself, with a 408 (ReadTimeout would make a
		// slow body a client gone).
		IdleTimeout: 2 * time.Minute,
		// Request contexts derive from this one, not from ctx: a shutdown lets in-flight
		// requests finish instead of cancelling them at once.
		BaseContext: func(net.Listener) context.Context { return context.Background() },
		ErrorLog:    slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()

	start := time.Now()
	loaded := make(chan loadResult, 1)
	go func() {
		a, err := load(opt, log)
		loaded <- loadResult{a, err}
	}()
	// abandon closes what the load still makes, when it ends.
	abandon := func() {
		go func() {
			if r := <-loaded; r.a != nil {
				r.a.close()
			}
		}()
	}
	var a *app
	select {
	case r := <-loaded:
		if r.err != nil {
			hs.Close()
			return r.err
		}
		a = r.a
	case <-ctx.Done():
		hs.Close()
		abandon()
		log.Info("tandem serve: stopped while loading")
		return nil
	case err := <-served: // the listener failed
		abandon()
		return fmt.Errorf("serve: %w", err)
	}
	defer a.close()
	ready := a.srv.Handler() // a variable of its own: requests may still read the loading one
	handler.Store(&ready)

	url := "http://" + ln.Addr().String()
	args := []any{"url", url, "model", a.name, "device", a.device, "prefill_precision", a.m.PromptPrecision().String(), "load_s", time.Since(start).Seconds()}
	if a.draftName != "" {
		args = append(args, "draft", a.draftName)
	}
	log.Info("tandem serve: ready", args...)
	if opt.Ready != nil {
		opt.Ready(url)
	}

	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-served: // the listener failed
	}

	// Shutdown: refuse new completions (503, and "draining" on /health, while the listener
	// still answers, so that a load balancer sees it), let running requests finish until the
	// grace period ends, then cancel them (their clients get a 503 shutting_down, or an error
	// event in a stream), and then close the listener and wait for the handlers to return.
	eng := a.eng
	st := eng.Stats()
	log.Info("tandem serve: shutting down", "grace_s", grace.Seconds(), "running", st.Running, "waiting", st.Waiting)
	a.srv.Drain()
	graceCtx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	if err := eng.Close(graceCtx); err != nil && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
		log.Warn("tandem serve: engine close", "err", err)
	}
	// Handlers end soon after the engine cancels their requests; allow a little for that.
	httpCtx, cancelHTTP := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancelHTTP()
	if err := hs.Shutdown(httpCtx); err != nil {
		log.Warn("tandem serve: closing connections that did not finish", "err", err)
		hs.Close()
	}
	if serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) {
		return fmt.Errorf("serve: %w", serveErr)
	}
	log.Info("tandem serve: stopped")
	return nil
}

// loadStarted, when set (tests), runs as a load starts: it can hold the load.
var loadStarted func()

// app is what Run serves: the models, the engine and the HTTP server over them.
type app struct {
	m                       *gemma4.Model
	drafter                 *gemma4.Assistant
	eng                     *engine.Engine
	srv                     *server.Server
	name, device, draftName string
}

type loadResult struct {
	a   *app
	err error
}

// close stops the engine (at once: Run has let it finish by then, where it served) and
// frees the models.
func (a *app) close() {
	if a.eng != nil {
		a.eng.Close(context.Background())
	}
	if a.drafter != nil {
		a.drafter.Close()
	}
	if a.m != nil {
		a.m.Close()
	}
}

// load loads the models and builds the engine and the server; on an error it frees what
// it made.
func load(opt Options, log *slog.Logger) (_ *app, err error) {
	if loadStarted != nil {
		loadStarted()
	}
	a := &app{name: opt.ModelName, device: opt.Device}
	defer func() {
		if err != nil {
			a.close()
		}
	}()
	if a.name == "" {
		a.name = filepath.Base(filepath.Clean(opt.Model))
	}
	b := opt.Backend
	if b == nil {
		b = cpu.New(0)
	}
	if a.device == "" {
		a.device = b.Name()
	}
	var lo gemma4.LoadOptions
	if b.Name() == "cpu" {
		// Weights stay memory-mapped: read them once now, with the bar.
		if err := readWeights(opt.Progress, opt.Model, opt.Draft); err != nil {
			return nil, err
		}
	} else {
		// Weights are copied to the device: the upload is the wait to show.
		lo.Progress = progress.Bar(opt.Progress, "loading weights onto "+b.Name(), 0)
	}
	if a.m, err = gemma4.LoadWith(opt.Model, b, lo); err != nil {
		return nil, err
	}
	if err := a.m.SetPromptPrecision(opt.PromptPrecision); err != nil {
		return nil, err
	}
	if opt.Draft != "" {
		if a.drafter, err = gemma4.LoadAssistant(opt.Draft, b); err != nil {
			return nil, err
		}
		if err := a.drafter.Bind(a.m); err != nil {
			return nil, fmt.Errorf("drafter %s: %w", opt.Draft, err)
		}
	}
	tok, err := tokenizer.LoadDir(opt.Model)
	if err != nil {
		return nil, fmt.Errorf("the model's tokenizer: %w", err)
	}
	tmpl, err := chat.Load(opt.Model)
	if err != nil {
		// A model without a chat template still serves /v1/completions.
		log.Warn("no usable chat template: /v1/chat/completions is off", "err", err)
		tmpl = nil
	}
	stops := opt.StopTokens
	if stops == nil {
		if stops, err = StopTokens(opt.Model); err != nil {
			return nil, err
		}
	}
	sp := opt.Sampling
	if sp == nil {
		def, err := DefaultSampling(opt.Model)
		if err != nil {
			return nil, err
		}
		sp = &def
	}
	if a.eng, err = engine.New(engine.Config{
		Model: a.m, Drafter: a.drafter, DraftTokens: opt.DraftTokens, Draft: opt.DraftOpt, AdaptiveDrafts: opt.AdaptiveDrafts,
		CtxSize: opt.CtxSize, Parallel: opt.Parallel, PrefillSize: opt.PrefillSize, MaxQueue: opt.MaxQueue,
	}); err != nil {
		return nil, err
	}
	if opt.Draft != "" {
		a.draftName = filepath.Base(filepath.Clean(opt.Draft))
	}
	// The engine fills in these defaults too; the server shows them.
	ctxSize, draftTokens := opt.CtxSize, 0
	if ctxSize == 0 {
		ctxSize = min(a.m.Config.Text.MaxPositionEmbeddings, engine.DefaultCtxSize)
	}
	if a.drafter != nil {
		draftTokens = cmp.Or(opt.DraftTokens, engine.DefaultDraftTokens)
	}
	if a.srv, err = server.New(server.Config{
		Engine: a.eng, Tokenizer: tok, Template: tmpl,
		ModelName: a.name, Draft: a.draftName, DraftTokens: draftTokens, Device: a.device, ContextSize: ctxSize,
		APIKey: opt.APIKey, MaxBodyBytes: opt.MaxBodyBytes,
		Sampling: *sp, MaxTokens: opt.MaxTokens, StopTokens: stops,
		Logger: log,
	}); err != nil {
		return nil, err
	}
	return a, nil
}

// writerFunc adapts a function to io.Writer.
type writerFunc func(p []byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// readWeights reads the checkpoints' weight files once, with a progress bar when w is set.
// Weights are memory-mapped, so loading itself is instant and the first requests would page
// them in from disk; reading them here moves that cost to startup, where it can be shown.
func readWeights(w io.Writer, dirs ...string) error {
	var files []string
	var total int64
	for _, d := range dirs {
		if d == "" {
			continue
		}
		names, err := filepath.Glob(filepath.Join(d, "*.safetensors"))
		if err != nil {
			return err
		}
		for _, n := range names {
			st, err := os.Stat(n)
			if err != nil {
				return err
			}
			files = append(files, n)
			total += st.Size()
		}
	}
	bar := progress.Bar(w, "loading weights", 1)
	var done int64
	sink := writerFunc(func(p []byte) (int, error) {
		done += int64(len(p))
		bar(done, total)
		return len(p), nil
	})
	for _, n := range files {
		f, err := os.Open(n)
		if err != nil {
			return err
		}
		_, err = io.Copy(sink, f)
		f.Close()
		if err != nil {
			return fmt.Errorf("reading %s: %w", n, err)
		}
	}
	return nil
}

// StopTokens reads eos_token_id from the model's generation_config.json, or gives Gemma 4's
// stop set.
func StopTokens(dir string) ([]int32, error) {
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

// DefaultSampling is the model's recommended sampling from generation_config.json
// (temperature, top_p, top_k, min_p when do_sample is not false); greedy without one.
func DefaultSampling(dir string) (sample.Params, error) {
	g, err := checkpoint.ReadGenerationConfig(dir)
	if err != nil || g == nil || (g.DoSample != nil && !*g.DoSample) {
		return sample.Params{}, err
	}
	var p sample.Params
	if g.Temperature != nil {
		p.Temperature = *g.Temperature
	}
	if g.TopP != nil {
		p.TopP = *g.TopP
	}
	if g.TopK != nil {
		p.TopK = *g.TopK
	}
	if g.MinP != nil {
		p.MinP = *g.MinP
	}
	if err := p.Validate(); err != nil {
		return sample.Params{}, fmt.Errorf("%s: generation_config.json: %s", dir, strings.TrimSpace(err.Error()))
	}
	return p, nil
}
