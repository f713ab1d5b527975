// Package server is Tandem's OpenAI-compatible HTTP API over the engine:
// POST /v1/chat/completions and /v1/completions (streaming with SSE or not),
// GET /v1/models, /health and /metrics (Prometheus).
//
// The engine works in token ids; everything about text lives here: the chat
// template, tokenizing the prompt, streaming detokenization, stop strings,
// splitting reasoning and tool calls from content (chat.OutputParser),
// logprobs in OpenAI's two formats and per-request speculative statistics.
//
// Construct a Server with New and serve its Handler:
//
//	srv, err := server.New(server.Config{
//		Engine:     eng,                  // *engine.Engine, or anything with Submit and Stats
//		Tokenizer:  tok,                  // tokenizer.LoadDir(modelDir)
//		Template:   tmpl,                 // chat.Load(modelDir); nil disables chat completions
//		ModelName:  "gemma-4-e2b-it",
//		StopTokens: stopIDs,              // generation_config.json eos_token_id
//		Sampling:   sample.Params{Temperature: 1, TopP: 0.95, TopK: 64},
//		MaxTokens:  2048,
//	})
//	http.ListenAndServe(addr, srv.Handler())
package server

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"tandem/chat"
	"tandem/engine"
	"tandem/sample"
	"tandem/tokenizer"
)

// Engine is what the server needs of the engine; *engine.Engine satisfies it.
type Engine interface {
	// Submit queues a request; see engine.Engine.Submit for its errors and events.
	// Cancelling ctx ends the request and frees its KV.
	Submit(ctx context.Context, r engine.Request) (<-chan engine.Event, error)
	Stats() engine.Stats
}

// Config configures a Server. Engine, Tokenizer and ModelName are required; the rest have
// working defaults.
type Config struct {
	Engine    Engine
	Tokenizer *tokenizer.Tokenizer
	// Template is the model's chat template (chat.Load). Without one, /v1/chat/completions
	// answers 400 and only /v1/completions works.
	Template *chat.Template

	// ModelName is the id clients send as "model" and /v1/models lists. Requests naming
	// another model get 404 model_not_found; requests with no model are served.
	ModelName string
	// ModelAliases are further names accepted as "model" (not listed).
	ModelAliases []string
	// Draft names the drafter ("" when decoding is not speculative). When set, usage carries
	// the request's speculative statistics and /health and /v1/models show it.
	Draft string
	// DraftTokens is the engine's drafts per round, for /health (informational).
	DraftTokens int
	// Device is shown by /health ("cpu", "cuda:0", …).
	Device string
	// ContextSize is the engine's context size (engine.Config.CtxSize). When set, a request
	// without max_tokens gets min(MaxTokens, ContextSize - prompt tokens), and /v1/models
	// reports it as max_model_len.
	ContextSize int

	// APIKey, when set, is required as "Authorization: Bearer KEY" on every route except
	// /health and /metrics (401 otherwise).
	APIKey string
	// MaxBodyBytes caps request bodies (413 beyond); 0: 64 bytes a token of ContextSize,
	// between 1 and 16 MiB (16 MiB without a ContextSize). A body is read, rendered and
	// tokenized before the engine can say its prompt is too long, so the cap bounds that
	// work: 64 bytes a token is many times what a prompt that fits takes, escapes and all.
	MaxBodyBytes int64

	// Sampling holds the defaults for fields a request leaves out (generation_config.json's
	// temperature, top_p, top_k, …). The zero value is greedy. Seed is not used: a request
	// without a seed gets a random one.
	Sampling sample.Params
	// MaxTokens is the default max_tokens; 0: 2048.
	MaxTokens int
	// StopTokens end generation after they are emitted (generation_config.json's
	// eos_token_id; Gemma 4: 1, 106, 50). Chat requests also stop at the chat format's stop
	// markers (chat.Markers.Stop) that are single tokens.
	StopTokens []int32
	// EnableThinking is the default of the chat template's enable_thinking when a request sets
	// neither chat_template_kwargs.enable_thinking nor reasoning_effort; nil leaves it
	// undefined for the template.
	EnableThinking *bool

	// Logger gets one line per request; nil: slog.Default().
	Logger *slog.Logger
}

// Server serves the OpenAI-compatible API. It is safe for concurrent use.
type Server struct {
	cfg     Config
	eng     Engine
	log     *slog.Logger
	markers chat.Markers
	// chatStopIDs are StopTokens plus the chat format's single-token stop markers.
	chatStopIDs []int32
	// keepSpecial are special tokens kept in chat output text: the parser splits on them.
	keepSpecial map[int32]bool
	metrics     *metrics
	handler     http.Handler
	started     time.Time
	draining    atomic.Bool
	// prep bounds the requests rendering and tokenizing their prompts at once: that work
	// happens before the engine's queue can refuse a request, and a large body takes
	// seconds and a gigabyte of it.
	prep chan struct{}
}

const (
	defaultMaxBodyBytes = 16 << 20
	minMaxBodyBytes     = 1 << 20
	bodyBytesPerToken   = 64
	defaultMaxTokens    = 2048
)

// New checks cfg and builds a Server.
func New(cfg Config) (*Server, error) {
	switch {
	case cfg.Engine == nil:
		return nil, errors.New("server: Config.Engine is required")
	case cfg.Tokenizer == nil:
		return nil, errors.New("server: Config.Tokenizer is required")
	case cfg.ModelName == "":
		return nil, errors.New("server: Config.ModelName is required")
	case cfg.MaxBodyBytes < 0:
		return nil, errors.New("server: Config.MaxBodyBytes must be >= 0")
	case cfg.MaxTokens < 0:
		return nil, errors.New("server: Config.MaxTokens must be >= 0")
	}
	if cfg.MaxBodyBytes == 0 {
		cfg.MaxBodyBytes = defaultMaxBodyBytes
		if cfg.ContextSize > 0 {
			cfg.MaxBodyBytes = min(max(bodyBytesPerToken*int64(cfg.ContextSize), minMaxBodyBytes), defaultMaxBodyBytes)
		}
	}
	if cfg.MaxTokens == 0 {
		cfg.MaxTokens = defaultMaxTokens
	}
	if err := cfg.Sampling.Validate(); err != nil {
		return nil, errors.New("server: Config.Sampling: " + err.Error())
	}
	vocab := cfg.Tokenizer.VocabSize()
	for _, id := range cfg.StopTokens {
		if id < 0 || int(id) >= vocab {
			return nil, errors.New("server: Config.StopTokens holds an id outside the vocabulary")
		}
	}
	s := &Server{cfg: cfg, eng: cfg.Engine, log: cfg.Logger, started: time.Now(), prep: make(chan struct{}, max(2, runtime.GOMAXPROCS(0)))}
	if s.log == nil {
		s.log = slog.Default()
	}
	s.chatStopIDs = append([]int32(nil), cfg.StopTokens...)
	if cfg.Template != nil {
		s.markers = chat.MarkersFor(cfg.Template)
		for _, m := range s.markers.Stop {
			if id, ok := cfg.Tokenizer.ID(m); ok && !containsID(s.chatStopIDs, id) {
				s.chatStopIDs = append(s.chatStopIDs, id)
			}
		}
		s.keepSpecial = markerTokens(cfg.Tokenizer, s.markers)
	}
	s.metrics = newMetrics(prometheus.NewRegistry(), s)
	s.handler = s.routes()
	return s, nil
}

// prepSlot waits for a turn to render and tokenize a prompt (s.prep), or for the client to
// leave; release ends the turn.
func (s *Server) prepSlot(ctx context.Context) (release func(), err error) {
	select {
	case s.prep <- struct{}{}:
		return func() { <-s.prep }, nil
	case <-ctx.Done():
		return nil, submitError(ctx.Err(), "")
	}
}

// Handler returns the HTTP handler serving every route.
func (s *Server) Handler() http.Handler { return s.handler }

// Drain makes the server refuse new completions (503) and report "draining" on /health (with
// status 503, so a load balancer stops routing to it); requests already running go on. Call
// it before closing the engine on shutdown.
func (s *Server) Drain() { s.draining.Store(true) }

func containsID(ids []int32, id int32) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}
