package server

import (
	"strings"
	"testing"

	"tandem/engine"
)

func TestMetrics(t *testing.T) {
	fe := newFake(append(encode(t, "metrics please"), turnEnd))
	fe.stats = engine.Stats{
		Running: 3, Waiting: 2, KVUsedTokens: 512, KVBudgetTokens: 2048, PrefixTokens: 64,
		Requests: 10, PromptTokens: 1000, CachedTokens: 100, GeneratedTokens: 500, Steps: 200,
		Drafts: 150, DraftTokens: 450, AcceptedTokens: 300, AcceptedPerPos: []int64{140, 100, 60},
		UndraftedSteps: 7, DecodeTokensRate: 42,
	}
	_, ts, _ := newTestServer(t, fe, nil)
	post(t, ts.URL+"/v1/chat/completions", `{`+userHi+`}`)
	post(t, ts.URL+"/v1/chat/completions", `{`+userHi+`,"stream":true}`)
	post(t, ts.URL+"/v1/chat/completions", `{`+userHi+`,"n":3}`)
	get(t, ts.URL+"/health")

	status, h, body := get(t, ts.URL+"/metrics")
	if status != 200 || !strings.HasPrefix(h.Get("Content-Type"), "text/plain") {
		t.Fatalf("%d %v", status, h)
	}
	text := string(body)
	for _, want := range []string{
		"tandem:spec_decode_num_drafts_total 150",
		"tandem:spec_decode_num_draft_tokens_total 450",
		"tandem:spec_decode_num_accepted_tokens_total 300",
		"tandem:spec_decode_undrafted_steps_total 7",
		`tandem:spec_decode_num_accepted_tokens_per_pos_total{position="0"} 140`,
		`tandem:spec_decode_num_accepted_tokens_per_pos_total{position="1"} 100`,
		`tandem:spec_decode_num_accepted_tokens_per_pos_total{position="2"} 60`,
		"# TYPE tandem:spec_decode_num_drafts_total counter",
		"tandem:num_requests_running 3",
		// The engine counts prompt tokens when it admits a request, not when it finishes.
		"# HELP tandem:prompt_tokens_total Prompt tokens of requests the engine admitted (counted at admission, finished or not).",
		"tandem:num_requests_waiting 2",
		"tandem:kv_cache_usage_perc 0.25",
		"tandem:kv_cache_used_tokens 512",
		"tandem:prefix_cache_tokens 64",
		"tandem:prompt_tokens_total 1000",
		"tandem:prompt_tokens_cached_total 100",
		"tandem:generation_tokens_total 500",
		"tandem:generation_tokens_per_second 42",
		"tandem:request_finished_total 10",
		`tandem:http_requests_total{route="/v1/chat/completions",status="200"} 2`,
		`tandem:http_requests_total{route="/v1/chat/completions",status="400"} 1`,
		`tandem:http_requests_total{route="/health",status="200"} 1`,
		"# TYPE tandem:time_to_first_token_seconds histogram",
		"tandem:time_to_first_token_seconds_count 2",
		"# TYPE tandem:inter_token_latency_seconds histogram",
		"tandem:e2e_request_latency_seconds_count 2",
		"tandem:request_queue_time_seconds_count 2",
		"go_goroutines",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if t.Failed() {
		t.Logf("%s", text)
	}
}

// TestMetricsPerServer: each Server has its own registry, so many can live in one process.
func TestMetricsPerServer(t *testing.T) {
	for range 3 {
		newTestServer(t, newFake(nil), nil)
	}
}
