package main

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"tandem/compute/cuda"
)

// TestGenerateWithDraft protects the speculative CLI: --draft and its
// SwiftLM alias give the plain output plus speculative stats.
func TestGenerateWithDraft(t *testing.T) {
	target := tinyModel(t, "gemma4-tiny-e4b")
	drafter := tinyModel(t, "gemma4-tiny-e4b-assistant")
	ids := "2,17,99,4,250,31,77"
	decode := func(args ...string) map[string]any {
		t.Helper()
		out, _ := mustExecute(t, append([]string{"generate", "--model", target, "--prompt-ids", ids, "--max-tokens", "12", "--json"}, args...)...)
		var v map[string]any
		if err := json.Unmarshal([]byte(out), &v); err != nil {
			t.Fatalf("output is not JSON: %v\n%s", err, out)
		}
		return v
	}
	tokens := func(v map[string]any) []float64 {
		var ts []float64
		for _, x := range v["tokens"].([]any) {
			ts = append(ts, x.(float64))
		}
		return ts
	}
	want := tokens(decode())
	for _, args := range [][]string{
		{"--draft", drafter},
		{"--mtp-assistant-model", drafter, "--num-draft-tokens", "5", "--draft-position", "T-1"},
		{"--draft", drafter, "--num-draft-tokens", "1", "--max-shared-kv", "4"},
	} {
		v := decode(args...)
		if got := tokens(v); !slices.Equal(got, want) {
			t.Fatalf("%v: tokens %v, plain %v", args, got, want)
		}
		stats := v["stats"].(map[string]any)
		for _, k := range []string{"rounds", "drafted", "accepted", "acceptance_rate", "mean_acceptance_length", "per_position_acceptance", "draft_s", "verify_s", "prompt_tokens", "generated_tokens"} {
			if _, ok := stats[k]; !ok {
				t.Errorf("%v: stats lack %q: %v", args, k, stats)
			}
		}
	}
}

func TestGenerateDraftErrors(t *testing.T) {
	target := tinyModel(t, "gemma4-tiny-e2b")
	drafter := tinyModel(t, "gemma4-tiny-e2b-assistant")
	wrong := tinyModel(t, "gemma4-tiny-31b-assistant")
	base := []string{"generate", "--model", target, "--prompt-ids", "2,5,9"}
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--num-draft-tokens", "4"}, []string{"--num-draft-tokens needs --draft"}},
		{[]string{"--draft", drafter, "--num-draft-tokens", "0"}, []string{"number of draft tokens", "got 0"}},
		{[]string{"--draft", drafter, "--draft-position", "T+1"}, []string{`--draft-position "T+1"`}},
		{[]string{"--draft", drafter, "--max-shared-kv", "-2"}, []string{"--max-shared-kv"}},
		{[]string{"--draft", wrong}, []string{"does not fit the target", "backbone_hidden_size 128, target hidden_size 64"}},
		{[]string{"--draft", target}, []string{"not a Gemma 4 assistant"}},
		{[]string{"--draft", t.TempDir()}, []string{"no config.json"}},
	} {
		_, _, err := execute(t, append(base, tc.args...)...)
		wantError(t, err, tc.want...)
	}
}

func TestBench(t *testing.T) {
	out, _ := mustExecute(t, "bench", "--device", "cpu", "--draft", "auto", "--synthetic-acceptance", "1", "--contexts", "16,64", "--tokens", "9", "--bf16-peak", "0.001", "--json")
	var v struct {
		Results []struct {
			Context       int
			DecodeTokS    float64 `json:"decode_tokens_per_s"`
			RooflineFrac  float64 `json:"roofline_fraction"`
			Acceptance    float64 `json:"acceptance_rate"`
			TokensPerPass float64 `json:"tokens_per_target_pass"`
			StepMs        *spread `json:"step_ms"`
			RoundMs       *spread `json:"round_ms"`
			PrefillMs     *spread `json:"prefill_ms"`
			PrefillRuns   int     `json:"prefill_runs"`
			PrefillTokS   float64 `json:"prefill_tokens_per_s"`
			PrefillFLOPs  float64 `json:"prefill_flops"`
			FLOPSec       float64 `json:"prefill_flops_per_s"`
			PeakFrac      float64 `json:"prefill_bf16_peak_fraction"`
		}
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if len(v.Results) != 2 || v.Results[1].Context != 64 {
		t.Fatalf("results %+v", v.Results)
	}
	for _, r := range v.Results {
		if r.DecodeTokS <= 0 || r.RooflineFrac <= 0 || r.Acceptance != 1 || r.TokensPerPass < 2 {
			t.Fatalf("implausible row %+v", r)
		}
		// The prefill rate is the median of --prefill-runs (3) prefills.
		if p := r.PrefillMs; r.PrefillRuns != 3 || p == nil || p.P50 <= 0 || p.Max < p.P50 || math.Abs(r.PrefillTokS-float64(r.Context)/(p.P50/1000)) > 1e-6*r.PrefillTokS {
			t.Fatalf("implausible prefills: %v at %.1f tok/s", p, r.PrefillTokS)
		}
		// Its useful work and rate, and the rate's share of --bf16-peak's 1 GFLOP/s.
		if p := r.PrefillMs; r.PrefillFLOPs <= 0 || math.Abs(r.FLOPSec-r.PrefillFLOPs/(p.P50/1000)) > 1e-6*r.FLOPSec ||
			math.Abs(r.PeakFrac-r.FLOPSec/1e9) > 1e-6*r.PeakFrac {
			t.Fatalf("implausible prefill work: %g FLOPs, %g FLOP/s, %g of the peak", r.PrefillFLOPs, r.FLOPSec, r.PeakFrac)
		}
		if r.StepMs == nil || r.RoundMs == nil || r.StepMs.P50 <= 0 || r.RoundMs.Max < r.RoundMs.P90 || r.RoundMs.P90 < r.RoundMs.P50 {
			t.Fatalf("implausible spreads: steps %+v, rounds %+v", r.StepMs, r.RoundMs)
		}
	}
	// --engine: the serving engine's rates beside the direct path's, and
	// --sweep: one row per setting.
	out, _ = mustExecute(t, "bench", "--device", "cpu", "--draft", "auto", "--contexts", "16", "--tokens", "9", "--engine",
		"--engine-batch", "2", "--sweep", "none;TANDEM_SPEC_AHEAD=0", "--json")
	var e struct {
		Results []struct {
			Settings         string
			EngineTokS       float64  `json:"engine_decode_tokens_per_s"`
			EngineSpecTokS   float64  `json:"engine_speculative_tokens_per_s"`
			EngineAcceptance *float64 `json:"engine_acceptance_rate"`
			EngineBatch      int      `json:"engine_batch"`
			EngineBatchTokS  float64  `json:"engine_batch_decode_tokens_per_s"`
			EngineBatchSpec  float64  `json:"engine_batch_speculative_tokens_per_s"`
		}
	}
	if err := json.Unmarshal([]byte(out), &e); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if len(e.Results) != 2 || e.Results[0].Settings != "none" || e.Results[1].Settings != "TANDEM_SPEC_AHEAD=0" {
		t.Fatalf("sweep rows %+v", e.Results)
	}
	for _, r := range e.Results {
		if r.EngineTokS <= 0 || r.EngineSpecTokS <= 0 || r.EngineBatch != 2 || r.EngineBatchTokS <= 0 || r.EngineBatchSpec <= 0 {
			t.Fatalf("engine rates %+v", r)
		}
	}
	_, _, err := execute(t, "bench", "--engine-batch", "1")
	wantError(t, err, "--engine-batch")
	_, _, err = execute(t, "bench", "--prefill-runs", "0")
	wantError(t, err, "--prefill-runs")
	_, _, err = execute(t, "bench", "--prefill-size", "-1")
	wantError(t, err, "--prefill-size")
	_, _, err = execute(t, "bench", "--bf16-peak", "-1")
	wantError(t, err, "--bf16-peak")
	_, _, err = execute(t, "bench", "--draft", "auto", "--adaptive-drafts")
	wantError(t, err, "--adaptive-drafts needs")
	_, _, err = execute(t, "bench", "--contexts", "0")
	wantError(t, err, "--contexts")
	_, _, err = execute(t, "bench", "--preset", "gemma4-nope", "--contexts", "8")
	wantError(t, err, "gemma4-nope")
}

// The steady decode rate leaves out the first tokens (graph capture, first
// allocations) once there are enough of them, and is the plain average
// otherwise.
func TestSteadyRate(t *testing.T) {
	at := func(ms ...int) tokenTimes {
		var tt tokenTimes
		base := time.Unix(0, 0)
		for _, m := range ms {
			tt = append(tt, base.Add(time.Duration(m)*time.Millisecond))
		}
		return tt
	}
	for _, c := range []struct {
		name   string
		times  tokenTimes
		decode time.Duration
		want   float64
	}{
		{"too few: the whole decode", at(0, 500, 510), 510 * time.Millisecond, 2 / 0.51},
		{"slow first steps left out", at(0, 500, 900, 910, 920, 930, 940, 950, 960, 970), 970 * time.Millisecond, 100},
	} {
		if got := c.times.rate(c.decode); math.Abs(got-c.want) > 1e-6*c.want {
			t.Errorf("%s: rate %v, want %v", c.name, got, c.want)
		}
	}
}

// The spread of steps or rounds: the median and 90th percentile by nearest
// rank and the slowest, over the gaps between arrivals after the warmup.
func TestSpread(t *testing.T) {
	for _, c := range []struct {
		name string
		ds   []time.Duration
		want *spread
	}{
		{"none", nil, nil},
		{"one", millis(5), &spread{5, 5, 5}},
		{"ten, unsorted", millis(10, 1, 9, 2, 8, 3, 7, 4, 6, 5), &spread{5, 9, 10}},
		{"an outlier", millis(2, 2, 2, 2, 2, 2, 2, 2, 2, 40), &spread{2, 2, 40}},
	} {
		got := spreadOf(c.ds)
		if (got == nil) != (c.want == nil) || got != nil && *got != *c.want {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
	var tt tokenTimes
	base := time.Unix(0, 0)
	for _, m := range []int{0, 500, 900, 910, 920, 930, 940, 950, 960, 975} { // warmup(10) leaves out 2
		tt = append(tt, base.Add(time.Duration(m)*time.Millisecond))
	}
	if got, want := tt.gaps(), millis(10, 10, 10, 10, 10, 10, 15); !slices.Equal(got, want) {
		t.Errorf("gaps %v, want %v", got, want)
	}
}

// A benchmark names the switches it ran with, sorted, and never a secret.
func TestEnvSettings(t *testing.T) {
	got := envSettings([]string{"PATH=/bin", "TANDEM_CUDA_PDL=0", "TANDEM_API_KEY=hunter2", "TANDEM_CUDA_ATTN_STAGED=1",
		"TANDEM_HF_TOKEN=x", "MY_TANDEM_X=1", "TANDEM_SPEC_AHEAD="})
	want := []string{"TANDEM_CUDA_ATTN_STAGED=1", "TANDEM_CUDA_PDL=0", "TANDEM_SPEC_AHEAD="}
	if !slices.Equal(got, want) {
		t.Errorf("envSettings = %q, want %q", got, want)
	}
}

// The host's time per step leaves out the warmup steps, as the steady rate
// does: issuing is the mean of the steps after it, the device thread's the
// growth of its cumulative time from the warmup's last token to the last.
func TestHostPerStep(t *testing.T) {
	for _, c := range []struct {
		name          string
		issue, thread []time.Duration
		wantIssue     float64
		wantThread    float64
	}{
		{"nothing measured", nil, nil, 0, 0},
		{"too few to leave anything out", millis(2, 4), millis(0, 3, 6), 3, 3},
		{"warmup left out", millis(50, 60, 2, 2, 2, 2, 2, 2), millis(0, 80, 160, 161, 162, 163, 164, 165, 166), 2, 1},
	} {
		gotIssue, gotThread := hostPerStep(c.issue, c.thread)
		if math.Abs(gotIssue-c.wantIssue) > 1e-9 || math.Abs(gotThread-c.wantThread) > 1e-9 {
			t.Errorf("%s: %v, %v ms; want %v, %v", c.name, gotIssue, gotThread, c.wantIssue, c.wantThread)
		}
	}
}

// TestPoolPer protects the pool line of bench: counts between two
// snapshots divided by the steps between them, bytes in megabytes, and
// nothing for no steps.
func TestPoolPer(t *testing.T) {
	from := cuda.PoolStats{Handouts: 100, DriverAllocs: 10, DriverBytes: 1e6, Collections: 1}
	to := cuda.PoolStats{Handouts: 500, DriverAllocs: 14, DriverBytes: 3e6, Collections: 2}
	for _, c := range []struct {
		name string
		n    int
		want *poolUse
	}{
		{"no steps", 0, nil},
		{"four steps", 4, &poolUse{Handouts: 100, DriverAllocs: 1, DriverMB: 0.5, Collections: 0.25}},
	} {
		got := poolPer(from, to, c.n)
		if (got == nil) != (c.want == nil) || got != nil && *got != *c.want {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
	if got, want := poolPer(from, to, 4).String(), "100 blocks handed out, 1.00 new from the driver (0.50 MB), 0.250 collections started"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}

// TestGraphSummary protects --graph-profile's line: each site's graph time
// and graph count per unit, then the idle time between graphs and the part
// the host caused, per unit.
func TestGraphSummary(t *testing.T) {
	p := &cuda.Profile{
		Sites:     []cuda.KernelTime{{Name: "verify-at4", Calls: 20, Time: 46 * time.Millisecond}, {Name: "draft-ahead-at0", Calls: 2, Time: time.Millisecond}},
		Busy:      47 * time.Millisecond,
		Idle:      3 * time.Millisecond,
		HostBound: time.Millisecond,
	}
	got := graphSummary("round", p, 2)
	want := "2 of them: 23.50 ms a round in graphs (verify-at4 23.00 ms (10.0 graphs), draft-ahead-at0 0.50 ms (1.0 graphs); a graph's time includes its launch when the device waits for it); 1.50 ms a round between graphs (idle, or running work outside graphs), 0.50 ms of it before the host had launched the next; longest gaps:"
	if got != want {
		t.Errorf("graphSummary:\n got %s\nwant %s", got, want)
	}
}

// millis makes durations of whole milliseconds.
func millis(v ...int) []time.Duration {
	var ds []time.Duration
	for _, x := range v {
		ds = append(ds, time.Duration(x)*time.Millisecond)
	}
	return ds
}

// TestPrintSiteKernels protects --kernel-profile's breakdown of each
// recording site: its longest kernels per unit, at most six, sites in the
// profile's order and work outside recordings left out.
func TestPrintSiteKernels(t *testing.T) {
	ms := func(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }
	var many []cuda.KernelTime
	for i := range 7 {
		many = append(many, cuda.KernelTime{Name: fmt.Sprintf("k%d", i), Calls: 2, Time: ms(float64(7 - i))})
	}
	p := &cuda.Profile{
		Sites: []cuda.KernelTime{{Name: "verify-at4"}, {Name: ""}, {Name: "draft-at1"}},
		SiteKernels: map[string][]cuda.KernelTime{
			"verify-at4": {{Name: "matmul_rows", Calls: 4, Time: ms(3)}, {Name: "rmsnorm2", Calls: 2, Time: ms(1)}},
			"":           {{Name: "gather", Calls: 2, Time: ms(1)}},
			"draft-at1":  many,
		},
	}
	var b strings.Builder
	printSiteKernels(&b, p, 2)
	want := "  verify-at4: matmul_rows 1.500 ms (2.0), rmsnorm2 0.500 ms (1.0)\n" +
		"  draft-at1: k0 3.500 ms (1.0), k1 3.000 ms (1.0), k2 2.500 ms (1.0), k3 2.000 ms (1.0), k4 1.500 ms (1.0), k5 1.000 ms (1.0), …\n"
	if got := b.String(); got != want {
		t.Errorf("printSiteKernels:\n got %q\nwant %q", got, want)
	}
}

// TestPrintStamps protects --step-stamps' report: each kernel's shares
// summed per step, longest first, and one layer's launches in order from
// an rmsnorm2 in the middle of the run to the second one after it (or the
// run's end).
func TestPrintStamps(t *testing.T) {
	us := func(v float64) time.Duration { return time.Duration(v * float64(time.Microsecond)) }
	var st []cuda.StepStamp
	at := time.Duration(0)
	for range 2 { // two steps of one layer each
		for _, k := range []struct {
			name  string
			share float64
		}{{"rmsnorm2", 5}, {"matmul_rows", 10}, {"attn_cluster", 20}, {"matmul_rows", 10}, {"rmsnorm2", 5}, {"argmax_part", 2}} {
			st = append(st, cuda.StepStamp{Name: k.name, At: at, Share: us(k.share)})
			at += us(k.share)
		}
	}
	var b strings.Builder
	printStamps(&b, "context 128", "plain step", st, 2)
	got := b.String()
	for _, want := range []string{
		"12 launches over 2 plain steps: 0.05 ms a step",
		"kernel  calls/step   ms/step",
		"  attn_cluster         1.0     0.020     20.00  38.5%",
		"  matmul_rows         2.0     0.020     10.00  38.5%",
		"one layer's launches in order (a plain step's), µs each: rmsnorm2 5.0, matmul_rows 10.0, attn_cluster 20.0, matmul_rows 10.0, rmsnorm2 5.0, argmax_part 2.0\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("printStamps lacks %q:\n%s", want, got)
		}
	}
	b.Reset()
	printStamps(&b, "context 128", "speculative round", st, 1) // the same launches as one round
	for _, want := range []string{
		"12 launches over 1 speculative rounds: 0.10 ms a round",
		"kernel calls/round  ms/round",
		"  attn_cluster         2.0     0.040     20.00  38.5%",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("printStamps of rounds lacks %q:\n%s", want, b.String())
		}
	}
	if i, j := strings.Index(got, " attn_cluster "), strings.Index(got, " rmsnorm2 "); i > j {
		t.Errorf("kernels not longest first:\n%s", got)
	}
}

// TestPeakByName protects bench's share of the bf16 peak: a GPU's
// datasheet peak by its reported name, the PCIe and NVL H100s before the
// plain name that is in theirs too, and none for a GPU it does not know.
func TestPeakByName(t *testing.T) {
	for _, c := range []struct {
		name string
		want float64
	}{
		{"NVIDIA H200", 989.5e12},
		{"NVIDIA H100 80GB HBM3", 989.5e12},
		{"NVIDIA H100 PCIe", 756.5e12},
		{"NVIDIA H100 NVL", 835.5e12},
		{"NVIDIA H200 NVL", 835.5e12},
		{"NVIDIA GH200 480GB", 989.5e12},
		{"NVIDIA A100-SXM4-80GB", 312e12},
		{"NVIDIA L4", 0},
	} {
		if got := peakByName(c.name); got != c.want {
			t.Errorf("peakByName(%q) = %g, want %g", c.name, got, c.want)
		}
	}
}
