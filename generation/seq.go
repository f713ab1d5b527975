package generation

import (
	"slices"

	"tandem/sample"
)

// Seq is one sequence's decoding state: the prompt and the tokens emitted
// so far, its seeded sampler and its stop conditions. Generate keeps one;
// speculative decoding (package spec) and the engine keep one per
// sequence. Every path samples through it with the same calls in the same
// order, which is what makes a sequence's tokens independent of who runs it.
type Seq struct {
	// History is the prompt followed by the emitted tokens; the penalties
	// and the drafter read it.
	History []int32
	// Prompt is the prompt's length within History.
	Prompt int
	// Done is set once a stop token or the budget ended the sequence;
	// StopReason then says which.
	Done       bool
	StopReason string

	maxTokens int
	stop      []int32 // sorted, without duplicates: Emit looks a token up by binary search
	sampler   *sample.Sampler
}

// NewSeq starts a sequence after prompt. opt must have been validated.
func NewSeq(prompt []int32, opt Options) *Seq {
	return &Seq{
		History:   slices.Clone(prompt),
		Prompt:    len(prompt),
		maxTokens: opt.MaxTokens,
		stop:      stopSet(opt.StopTokens),
		sampler:   sample.New(opt.Sample),
	}
}

// Tokens are the emitted tokens.
func (s *Seq) Tokens() []int32 { return s.History[s.Prompt:] }

// Left is how many more tokens the budget allows.
func (s *Seq) Left() int { return s.maxTokens - len(s.Tokens()) }

// Params are the sampling settings.
func (s *Seq) Params() sample.Params { return s.sampler.Params() }

// Sampler is the sequence's own random stream.
func (s *Seq) Sampler() *sample.Sampler { return s.sampler }

// Sample picks the token that follows History from its logits, without
// emitting it.
func (s *Seq) Sample(logits []float32) int32 {
	return s.sampler.NextAfter(logits, s.History, s.Prompt)
}

// SampleTop is Sample from the row's largest logits, where they decide the
// token (sample.Sampler.NextTop); false, drawing nothing, where they do not.
func (s *Seq) SampleTop(top sample.Top) (int32, bool) { return s.sampler.NextTop(top) }

// Next samples the token that follows History and emits it: one step of
// plain decoding.
func (s *Seq) Next(logits []float32) (tok int32, done bool) {
	tok = s.Sample(logits)
	return tok, s.Emit(tok)
}

// Emit appends tok and reports whether the sequence is over: tok is a stop
// token (kept, as plain decoding keeps it) or the budget is spent.
func (s *Seq) Emit(tok int32) bool {
	s.History = append(s.History, tok)
	switch {
	case isStop(s.stop, tok):
		s.Done, s.StopReason = true, StopToken
	case s.Left() <= 0:
		s.Done, s.StopReason = true, StopLength
	}
	return s.Done
}

// stopSet is ids sorted and deduplicated. A request may list many stop tokens; Emit runs
// once per emitted token on the decoding loop, so it must not scan them all.
func stopSet(ids []int32) []int32 {
	if len(ids) == 0 {
		return nil
	}
	set := slices.Clone(ids)
	slices.Sort(set)
	return slices.Compact(set)
}

func isStop(set []int32, tok int32) bool {
	_, found := slices.BinarySearch(set, tok)
	return found
}
