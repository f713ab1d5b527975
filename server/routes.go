package server

import (
	"net/http"
	"runtime"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// routes builds the mux. Each path is registered twice: with its method (the handler) and
// without (a JSON 405 naming the allowed method, instead of ServeMux's plain-text one).
func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	add := func(method, path string, auth bool, h handlerFunc) {
		mux.Handle(method+" "+path, s.route(path, auth, h))
		mux.Handle(path, s.route(path, auth, methodNotAllowed(method)))
	}
	add(http.MethodPost, "/v1/chat/completions", true, s.chatCompletions)
	add(http.MethodPost, "/v1/completions", true, s.completions)
	add(http.MethodGet, "/v1/models", true, s.listModels)
	add(http.MethodGet, "/v1/models/{model...}", true, s.getModel)
	// /health and /metrics stay open with an API key set: probes and scrapers carry none,
	// and neither says anything a client could misuse.
	add(http.MethodGet, "/health", false, s.health)
	metrics := promhttp.HandlerFor(s.metrics.reg, promhttp.HandlerOpts{ErrorLog: nil})
	add(http.MethodGet, "/metrics", false, func(w http.ResponseWriter, r *http.Request) error {
		metrics.ServeHTTP(w, r)
		return nil
	})
	mux.Handle("/", s.route("other", false, unknownRoute))
	return s.serve(mux)
}

// modelObject is an entry of /v1/models.
type modelObject struct {
	ID          string `json:"id"`
	Object      string `json:"object"`
	Created     int64  `json:"created"`
	OwnedBy     string `json:"owned_by"`
	MaxModelLen int    `json:"max_model_len,omitempty"`
	Draft       string `json:"draft,omitempty"`
}

func (s *Server) model() modelObject {
	return modelObject{ID: s.cfg.ModelName, Object: "model", Created: s.started.Unix(), OwnedBy: "tandem",
		MaxModelLen: s.cfg.ContextSize, Draft: s.cfg.Draft}
}

func (s *Server) listModels(w http.ResponseWriter, r *http.Request) error {
	writeJSON(w, http.StatusOK, struct {
		Object string        `json:"object"`
		Data   []modelObject `json:"data"`
	}{"list", []modelObject{s.model()}})
	return nil
}

func (s *Server) getModel(w http.ResponseWriter, r *http.Request) error {
	name := r.PathValue("model")
	if name == "" {
		return notFound("no model named; GET /v1/models lists them")
	}
	if err := s.checkModel(name); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, s.model())
	return nil
}

// health reports the server's state for probes and people: the model, the device, memory
// (Go runtime and KV), the queue and the decode rate.
func (s *Server) health(w http.ResponseWriter, r *http.Request) error {
	st := s.eng.Stats()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	type memory struct {
		GoHeapBytes    uint64  `json:"go_heap_bytes"`
		GoSysBytes     uint64  `json:"go_sys_bytes"`
		KVUsedTokens   int     `json:"kv_used_tokens"`
		KVBudgetTokens int     `json:"kv_budget_tokens"`
		KVUsage        float64 `json:"kv_usage"`
		PrefixTokens   int     `json:"prefix_cache_tokens"`
	}
	type queue struct {
		Running int `json:"running"`
		Waiting int `json:"waiting"`
	}
	type speculative struct {
		Draft          string  `json:"draft"`
		DraftTokens    int     `json:"draft_tokens,omitempty"`
		AcceptanceRate float64 `json:"acceptance_rate"`
	}
	body := struct {
		Status        string       `json:"status"`
		Model         string       `json:"model"`
		Device        string       `json:"device,omitempty"`
		UptimeSeconds float64      `json:"uptime_seconds"`
		Memory        memory       `json:"memory"`
		Queue         queue        `json:"queue"`
		TokensPerSec  float64      `json:"tokens_per_second"`
		Requests      int64        `json:"requests_total"`
		Speculative   *speculative `json:"speculative,omitempty"`
	}{
		Status: "ok", Model: s.cfg.ModelName, Device: s.cfg.Device,
		UptimeSeconds: time.Since(s.started).Seconds(),
		Memory: memory{GoHeapBytes: ms.HeapAlloc, GoSysBytes: ms.Sys, KVUsedTokens: st.KVUsedTokens,
			KVBudgetTokens: st.KVBudgetTokens, KVUsage: kvUsage(st), PrefixTokens: st.PrefixTokens},
		Queue:        queue{Running: st.Running, Waiting: st.Waiting},
		TokensPerSec: st.DecodeTokensRate,
		Requests:     st.Requests,
	}
	if s.cfg.Draft != "" {
		sp := &speculative{Draft: s.cfg.Draft, DraftTokens: s.cfg.DraftTokens}
		if st.DraftTokens > 0 {
			sp.AcceptanceRate = float64(st.AcceptedTokens) / float64(st.DraftTokens)
		}
		body.Speculative = sp
	}
	status := http.StatusOK
	if s.draining.Load() {
		body.Status, status = "draining", http.StatusServiceUnavailable
	}
	writeJSON(w, status, body)
	return nil
}
