package server

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"tandem/engine"
)

// metrics are a Server's Prometheus metrics, on a registry of its own (a process may hold
// several servers, as tests do). Names follow vLLM's (vllm:… → tandem:…) so dashboards and
// benchmark tools that scrape vLLM read them.
type metrics struct {
	reg      *prometheus.Registry
	requests *prometheus.CounterVec   // by route and status
	duration *prometheus.HistogramVec // request duration by route
	ttft     prometheus.Histogram
	itl      prometheus.Histogram
	e2e      prometheus.Histogram
	queue    prometheus.Histogram
}

// Latency buckets in seconds, from a fast GPU decode step to a long request.
var (
	ttftBuckets = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80}
	itlBuckets  = []float64{0.0005, 0.001, 0.002, 0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 2.5}
	e2eBuckets  = []float64{0.01, 0.05, 0.1, 0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, 40, 50, 60, 120, 240, 480, 960}
)

func newMetrics(reg *prometheus.Registry, s *Server) *metrics {
	m := &metrics{
		reg: reg,
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tandem:http_requests_total",
			Help: "HTTP requests by route and status code.",
		}, []string{"route", "status"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "tandem:http_request_duration_seconds",
			Help:    "HTTP request duration by route, streaming included.",
			Buckets: e2eBuckets,
		}, []string{"route"}),
		ttft: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "tandem:time_to_first_token_seconds",
			Help:    "Time from a request's arrival to its first generated token.",
			Buckets: ttftBuckets,
		}),
		itl: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "tandem:inter_token_latency_seconds",
			Help:    "Time between generated tokens (a speculative round's tokens share its time).",
			Buckets: itlBuckets,
		}),
		e2e: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "tandem:e2e_request_latency_seconds",
			Help:    "Time from a completion request's arrival to its last token.",
			Buckets: e2eBuckets,
		}),
		queue: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "tandem:request_queue_time_seconds",
			Help:    "Time a request waited in the engine's queue before admission.",
			Buckets: ttftBuckets,
		}),
	}
	reg.MustRegister(m.requests, m.duration, m.ttft, m.itl, m.e2e, m.queue,
		&engineCollector{s: s},
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// engineCollector reads engine.Stats at scrape time: the engine keeps cumulative counters, so
// the server need not mirror them.
type engineCollector struct{ s *Server }

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, labels, nil)
}

var (
	descRunning      = desc("tandem:num_requests_running", "Requests decoding now.")
	descWaiting      = desc("tandem:num_requests_waiting", "Requests waiting in the queue.")
	descKVUsage      = desc("tandem:kv_cache_usage_perc", "Fraction of the KV budget reserved by running requests (0-1).")
	descKVUsed       = desc("tandem:kv_cache_used_tokens", "KV tokens reserved by running requests.")
	descKVBudget     = desc("tandem:kv_cache_budget_tokens", "KV tokens the engine may reserve.")
	descPrefix       = desc("tandem:prefix_cache_tokens", "KV tokens held by the prefix cache.")
	descRate         = desc("tandem:generation_tokens_per_second", "Generated tokens per second over the last few seconds.")
	descFinished     = desc("tandem:request_finished_total", "Requests the engine finished, any reason.")
	descPrompt       = desc("tandem:prompt_tokens_total", "Prompt tokens of requests the engine admitted (counted at admission, finished or not).")
	descCached       = desc("tandem:prompt_tokens_cached_total", "Prompt tokens whose KV came from the prefix cache.")
	descGenerated    = desc("tandem:generation_tokens_total", "Generated tokens.")
	descSteps        = desc("tandem:engine_steps_total", "Forward passes of the target model.")
	descDrafts       = desc("tandem:spec_decode_num_drafts_total", "Speculative rounds with at least one draft.")
	descDraftTokens  = desc("tandem:spec_decode_num_draft_tokens_total", "Draft tokens proposed.")
	descAccepted     = desc("tandem:spec_decode_num_accepted_tokens_total", "Draft tokens accepted.")
	descAcceptPerPos = desc("tandem:spec_decode_num_accepted_tokens_per_pos_total", "Draft tokens accepted, by draft position (0-based).", "position")
	descUndrafted    = desc("tandem:spec_decode_undrafted_steps_total", "Steps whose greedy requests did not draft because steps without drafts were faster (--adaptive-drafts).")
)

func (c *engineCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descRunning, descWaiting, descKVUsage, descKVUsed, descKVBudget, descPrefix, descRate,
		descFinished, descPrompt, descCached, descGenerated, descSteps, descDrafts, descDraftTokens, descAccepted, descAcceptPerPos, descUndrafted} {
		ch <- d
	}
}

func (c *engineCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.s.eng.Stats()
	gauge := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v)
	}
	counter := func(d *prometheus.Desc, v int64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	gauge(descRunning, float64(st.Running))
	gauge(descWaiting, float64(st.Waiting))
	gauge(descKVUsage, kvUsage(st))
	gauge(descKVUsed, float64(st.KVUsedTokens))
	gauge(descKVBudget, float64(st.KVBudgetTokens))
	gauge(descPrefix, float64(st.PrefixTokens))
	gauge(descRate, st.DecodeTokensRate)
	counter(descFinished, st.Requests)
	counter(descPrompt, st.PromptTokens)
	counter(descCached, st.CachedTokens)
	counter(descGenerated, st.GeneratedTokens)
	counter(descSteps, st.Steps)
	counter(descDrafts, st.Drafts)
	counter(descDraftTokens, st.DraftTokens)
	counter(descAccepted, st.AcceptedTokens)
	counter(descUndrafted, st.UndraftedSteps)
	for i, n := range st.AcceptedPerPos {
		// vLLM numbers positions from 0.
		counter(descAcceptPerPos, n, strconv.Itoa(i))
	}
}

func kvUsage(st engine.Stats) float64 {
	if st.KVBudgetTokens <= 0 {
		return 0
	}
	return float64(st.KVUsedTokens) / float64(st.KVBudgetTokens)
}
