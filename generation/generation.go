// Package generation runs plain (non-speculative) decoding and teacher-forced
// scoring on a Gemma 4 target: chunked prefill, then one token per step.
package generation

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"tandem/compute"
	"tandem/kvcache"
	"tandem/model/gemma4"
	"tandem/sample"
)

// DefaultPrefillSize is the default prompt chunk per forward pass.
const DefaultPrefillSize = 512

// Options controls Generate.
type Options struct {
	MaxTokens   int // > 0
	Sample      sample.Params
	StopTokens  []int32
	PrefillSize int // tokens per prefill forward pass; 0: DefaultPrefillSize
}

// Stop reasons.
const (
	StopToken  = "stop"   // a stop token was generated (and is included)
	StopLength = "length" // MaxTokens reached
)

// Result of Generate.
type Result struct {
	Tokens       []int32 `json:"tokens"`
	StopReason   string  `json:"stop_reason"`
	PromptTokens int     `json:"prompt_tokens"`
	Prefill      time.Duration
	Decode       time.Duration
	// IssueTimes is, step by step, the time the caller's thread spent
	// issuing decode steps (recording and launching them; reading tokens
	// is left out), where steps run ahead of the host (decodeAhead). Near
	// the step time, the host is what bounds decoding.
	IssueTimes []time.Duration `json:"-"`
}

// Validate checks options against the model and fills in defaults.
func (o *Options) Validate(m *gemma4.Model, promptLen int) error {
	if promptLen == 0 {
		return errors.New("the prompt is empty")
	}
	if o.MaxTokens <= 0 {
		return fmt.Errorf("max tokens must be positive, got %d", o.MaxTokens)
	}
	if o.PrefillSize == 0 {
		o.PrefillSize = DefaultPrefillSize
	}
	if o.PrefillSize < 1 {
		return fmt.Errorf("prefill size must be positive, got %d", o.PrefillSize)
	}
	if limit := m.Config.Text.MaxPositionEmbeddings; promptLen+o.MaxTokens > limit {
		return fmt.Errorf("prompt (%d tokens) + max tokens (%d) exceeds the model's context of %d", promptLen, o.MaxTokens, limit)
	}
	return o.Sample.Validate()
}

// Generate decodes up to MaxTokens tokens after prompt. onToken, if set, sees
// each token as it is produced. Cancelling ctx stops between steps.
func Generate(ctx context.Context, m *gemma4.Model, prompt []int32, opt Options, onToken func(int32)) (*Result, error) {
	if err := opt.Validate(m, len(prompt)); err != nil {
		return nil, err
	}
	b := m.Backend()
	res := &Result{PromptTokens: len(prompt), StopReason: StopLength}
	// No pass writes more than the prompt: a larger chunk would only grow
	// the sliding rings (and the keys every decode step scans) for nothing.
	chunk := min(opt.PrefillSize, len(prompt))
	cache := m.NewCache(chunk)
	start := time.Now()
	logits, _, err := Prefill(ctx, m, cache, prompt, chunk)
	if err != nil {
		return nil, err
	}
	res.Prefill = time.Since(start)
	start = time.Now()
	seq := NewSeq(prompt, opt)
	defer func() {
		res.Tokens = seq.Tokens()
		if seq.Done {
			res.StopReason = seq.StopReason
		}
		res.Decode = time.Since(start)
	}()
	if pf, ok := b.(compute.Prefetcher); ok && opt.Sample.ArgmaxOnly() && m.DeviceTokens() {
		return res, decodeAhead(ctx, m, cache, seq, logits, pf, onToken, &res.IssueTimes)
	}
	late, _ := b.(compute.LateUploader)
	if !m.DeviceTokens() {
		late = nil
	}
	var cur sampled // logits, and their top: sampleAhead's
	for {
		if late != nil && seq.Left() > 1 && ctx.Err() == nil {
			if cur.logits != logits {
				cur = withTop(m, seq, logits)
			}
			var err error
			if cur, err = sampleAhead(m, cache, seq, cur, late, onToken); cur.logits == nil || err != nil {
				return res, err
			}
			logits = cur.logits
			continue
		}
		tok, done := seq.Next(b.ToF32(logits))
		if onToken != nil {
			onToken(tok)
		}
		if done {
			return res, nil
		}
		if err := ctx.Err(); err != nil {
			return res, err
		}
		end := compute.Record(b, sampledSite)
		out, err := m.Forward([]gemma4.Row{{Tokens: []int32{tok}, Cache: cache}}, sampledStep)
		end()
		if err != nil {
			return res, err
		}
		logits = out.Logits
	}
}

// A decode step is the same ops every time: backends that can record it
// launch it as one unit (CUDA graphs). After a sampled token the step is
// issued with the device idle, so it is recorded in parts (Checkpoint) and
// the device starts on its first layers while the host records the rest;
// a site of its own, since decodeAhead's "decode" is one part.
const sampledSite = "decode-sampled"

var sampledStep = gemma4.ForwardOptions{Logits: gemma4.LogitsLast, Checkpoint: true}

// sampled is a step's logits and, where the sequence's top-k decides its
// token from them (sample.Params.TopNeeded), their top: vals and ids.
type sampled struct{ logits, vals, ids *compute.Tensor }

// withTop issues the top of logits where the sequence can sample from it.
func withTop(m *gemma4.Model, seq *Seq, logits *compute.Tensor) sampled {
	s := sampled{logits: logits}
	if n := seq.Params().TopNeeded(m.Config.Text.VocabSize); n > 0 {
		s.vals, s.ids = m.Backend().TopK(logits, n)
	}
	return s
}

// read queues the copy sampling reads: the top, where there is one, else
// the logits.
func (s sampled) read(late compute.LateUploader) func() ([][]uint32, error) {
	if s.vals != nil {
		return late.ReadLate(s.vals, s.ids)
	}
	return late.ReadLate(s.logits)
}

// sample picks the token from what read copied; false where the top does
// not decide it (a tie at top-k's cut, a NaN), drawing nothing.
func (s sampled) sample(seq *Seq, host [][]uint32, vocab int) (int32, bool) {
	if s.vals != nil {
		return seq.SampleTop(sample.Top{Values: compute.Float32s(host[0]), IDs: compute.Int32s(host[1]), Vocab: vocab})
	}
	return seq.Sample(compute.Float32s(host[0])), true
}

// sampleAhead records the step after cur with its token a late upload
// (compute.LateUploader), picked from cur's top or logits, which reach the
// host behind the step still running, only where the step's first part
// launches: the host records while the device finishes the last step, and
// the device waits only for the copy and the sampling. It emits the token
// and returns the new step's logits, or none once the sequence is done;
// the step issued after a stop token is wasted device work, as in
// decodeAhead. Where the top does not decide the token, the step issued
// with a stand-in is rolled back and the token sampled from the logits.
func sampleAhead(m *gemma4.Model, cache *kvcache.Cache, seq *Seq, cur sampled, late compute.LateUploader, onToken func(int32)) (sampled, error) {
	b, V := m.Backend(), m.Config.Text.VocabSize
	read := cur.read(late)
	var tok int32
	var undecided bool
	var sampleErr error
	end := compute.Record(b, sampledSite)
	next, got := late.LateI32(1, func() (ids []int32) {
		defer func() {
			if p := recover(); p != nil {
				sampleErr = fmt.Errorf("sampling: %v", p)
				ids = []int32{0} // a token in the vocabulary, for the step issued
			}
		}()
		host, err := read()
		if err != nil {
			sampleErr = err
			return []int32{0}
		}
		var ok bool
		tok, ok = cur.sample(seq, host, V)
		undecided = !ok
		return []int32{tok}
	})
	out, err := m.Forward([]gemma4.Row{{Next: next, Cache: cache}}, sampledStep)
	var s sampled
	if err == nil {
		s = withTop(m, seq, out.Logits)
	}
	end()
	if gerr := got(); gerr != nil || sampleErr != nil {
		return sampled{}, errors.Join(gerr, sampleErr)
	}
	if undecided {
		if err == nil {
			if err := cache.Truncate(cache.Len() - 1); err != nil {
				return sampled{}, err
			}
		}
		tok = seq.Sample(b.ToF32(cur.logits))
	}
	done := seq.Emit(tok)
	if onToken != nil {
		onToken(tok)
	}
	switch {
	case done:
		return sampled{}, nil
	case err != nil:
		return sampled{}, err
	case undecided:
		end := compute.Record(b, sampledSite)
		out, err := m.Forward([]gemma4.Row{{Tokens: []int32{tok}, Cache: cache}}, sampledStep)
		if err == nil {
			s = withTop(m, seq, out.Logits)
		}
		end()
		return s, err
	}
	return s, nil
}

// decodeAhead is greedy decoding that stays one step ahead of the host, for
// backends whose ops run asynchronously. Each step's token is picked on the
// device (TopK 1: the maximum, lowest index on ties, as sample.Argmax) and
// the next step is issued with it before the host reads it, so the device
// never idles while the host reads a token, emits it and issues the next
// step; reading a token waits for its own step only. The tokens are plain
// greedy's. A NaN logit is where the device's pick (NaN wins) and the
// host's (NaN never wins) part: that step's token is sampled on the host
// and the step issued ahead is rolled back. When a stop token ends the
// sequence, the step issued after it is wasted device work.
func decodeAhead(ctx context.Context, m *gemma4.Model, cache *kvcache.Cache, seq *Seq, logits *compute.Tensor,
	pf compute.Prefetcher, onToken func(int32), issue *[]time.Duration) error {
	b := m.Backend()
	read := func(p *Picks) (float32, int32) {
		v, t := p.Read()
		return v[0], t[0]
	}
	step := func(row gemma4.Row) (*Picks, error) {
		t0 := time.Now()
		defer func() { *issue = append(*issue, time.Since(t0)) }()
		end := compute.Record(b, "decode")
		out, err := m.Forward([]gemma4.Row{row}, gemma4.ForwardOptions{Logits: gemma4.LogitsLast})
		end()
		if err != nil {
			return nil, err
		}
		return PickOnDevice(b, pf, out.Logits), nil
	}
	cur := PickOnDevice(b, pf, logits)
	for {
		var next *Picks
		var aheadErr error // reported once cur's token is emitted, as the host loop would
		if seq.Left() > 1 && ctx.Err() == nil {
			next, aheadErr = step(gemma4.Row{Next: cur.Idx, Cache: cache})
		}
		v, tok := read(cur)
		if v != v {
			tok = seq.Sample(b.ToF32(cur.Logits))
			if next != nil {
				read(next)
				next = nil
				if err := cache.Truncate(cache.Len() - 1); err != nil {
					return err
				}
			}
		}
		done := seq.Emit(tok)
		if onToken != nil {
			onToken(tok)
		}
		if aheadErr != nil && !done {
			return aheadErr
		}
		err := ctx.Err()
		if done || err != nil {
			if next != nil {
				read(next)
			}
			if done {
				return nil
			}
			return err
		}
		if next == nil {
			if next, err = step(gemma4.Row{Tokens: []int32{tok}, Cache: cache}); err != nil {
				return err
			}
		}
		cur = next
	}
}

// Prefill feeds prompt into cache in chunks of at most chunk tokens and
// returns the last position's logits [1, V] and post-norm hidden state
// [1, H] (what a drafter starts from). Batch invariance makes the result
// bit-identical for every chunk size. chunk must be at least 1 and at most
// cache.MaxStep(). It returns once the backend has done the work
// (compute.Sync), so that a prefill's time is the device's: an
// asynchronous backend's last op is issued up to a few thousand launches
// before the device finishes them (a 31B 4k prefill read 363 ms for about
// 640).
func Prefill(ctx context.Context, m *gemma4.Model, cache *kvcache.Cache, prompt []int32, chunk int) (logits, hidden *compute.Tensor, err error) {
	if len(prompt) == 0 {
		return nil, nil, errors.New("prefill: the prompt is empty")
	}
	if chunk < 1 {
		return nil, nil, fmt.Errorf("prefill: chunk size must be positive, got %d", chunk)
	}
	for s := 0; s < len(prompt); s += chunk {
		if err := ctx.Err(); err != nil {
			return nil, nil, err
		}
		e := min(s+chunk, len(prompt))
		which := gemma4.LogitsNone
		if e == len(prompt) {
			which = gemma4.LogitsLast
		}
		out, err := m.Forward([]gemma4.Row{{Tokens: prompt[s:e], Cache: cache}}, gemma4.ForwardOptions{Logits: which, Prompt: true})
		if err != nil {
			return nil, nil, err
		}
		logits = out.Logits
		if e == len(prompt) {
			hidden = m.Backend().Slice(out.Hidden, e-s-1, e-s)
		}
	}
	if err := compute.Sync(m.Backend()); err != nil {
		return nil, nil, err
	}
	return logits, hidden, nil
}

// Position is one scored position of a sequence: how likely the model found
// the token that actually came next.
type Position struct {
	Next        int32   `json:"next"`
	Logprob     float64 `json:"logprob"`
	Top1        int32   `json:"top1"`
	Top1Logprob float64 `json:"top1_logprob"`
}

// Score is teacher-forced scoring of a sequence.
type Score struct {
	Positions  []Position `json:"positions"`
	NLL        float64    `json:"nll"`        // total negative log-likelihood, nats
	Perplexity float64    `json:"perplexity"` // exp(NLL / scored positions)
}

// ScoreTokens runs tokens through the model (in chunks of at most chunk) and,
// for every position but the last, reports the logprob of the next token and
// the model's top-1 choice.
func ScoreTokens(ctx context.Context, m *gemma4.Model, tokens []int32, chunk int) (*Score, error) {
	if len(tokens) < 2 {
		return nil, fmt.Errorf("scoring needs at least 2 tokens, got %d", len(tokens))
	}
	if chunk <= 0 {
		chunk = DefaultPrefillSize
	}
	if limit := m.Config.Text.MaxPositionEmbeddings; len(tokens) > limit {
		return nil, fmt.Errorf("%d tokens exceed the model's context of %d", len(tokens), limit)
	}
	V := m.Config.Text.VocabSize
	// The last token is only looked up, never fed to Forward (which checks
	// the others): check them all here rather than index out of range.
	for i, t := range tokens {
		if t < 0 || int(t) >= V {
			return nil, fmt.Errorf("token %d is %d, outside the vocabulary [0, %d)", i, t, V)
		}
	}
	b := m.Backend()
	chunk = min(chunk, len(tokens)-1) // as in Generate: no larger rings than needed
	cache := m.NewCache(chunk)
	sc := &Score{}
	for s := 0; s < len(tokens)-1; s += chunk {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		e := min(s+chunk, len(tokens)-1)
		out, err := m.Forward([]gemma4.Row{{Tokens: tokens[s:e], Cache: cache}}, gemma4.ForwardOptions{Logits: gemma4.LogitsAll, Prompt: true})
		if err != nil {
			return nil, err
		}
		all := b.ToF32(out.Logits)
		for i := range e - s {
			row := all[i*V : (i+1)*V]
			lse := logSumExp(row)
			next := tokens[s+i+1]
			top := sample.Argmax(row)
			p := Position{Next: next, Logprob: float64(row[next]) - lse, Top1: top, Top1Logprob: float64(row[top]) - lse}
			sc.Positions = append(sc.Positions, p)
			sc.NLL -= p.Logprob
		}
	}
	sc.Perplexity = math.Exp(sc.NLL / float64(len(sc.Positions)))
	return sc, nil
}

func logSumExp(x []float32) float64 {
	m := float64(x[sample.Argmax(x)])
	var z float64
	for _, v := range x {
		z += math.Exp(float64(v) - m)
	}
	return m + math.Log(z)
}
