package server

import (
	"math"
	"math/rand/v2"
	"net/http"

	"tandem/engine"
	"tandem/sample"
)

// Limits on request values (OpenAI's ranges where it has them).
const (
	maxTopLogprobs = engine.MaxTopLogprobs
	maxStops       = 32
	maxStopLen     = 1000
	// maxStopTokenIDs bounds stop_token_ids: the engine looks every emitted token up in the
	// list, and no tokenizer has more distinct end markers than this.
	maxStopTokenIDs = 256
)

// genParams are a request's generation settings, validated, with the server's defaults
// filled in.
type genParams struct {
	maxTokens    int
	maxTokensSet bool // the client asked for a number (else the default, clipped to the context)
	sample       sample.Params
	stops        []string
	stopIDs      []int32 // the request's stop_token_ids (the route adds the server's)
	logprobs     bool
	topLogprobs  int
	stream       bool
	includeUsage bool
}

// commonParams validates the fields chat and text completions share. maxTokens is the
// request's max_tokens (or max_completion_tokens), named maxParam in errors.
func (s *Server) commonParams(c *commonRequest, maxTokens *wholeInt, maxParam string) (genParams, error) {
	var p genParams
	if err := s.checkModel(c.Model); err != nil {
		return p, err
	}
	if c.N != nil {
		switch {
		case *c.N < 1:
			return p, badRequest("n", "n must be at least 1, got %d", *c.N)
		case *c.N > 1:
			return p, badRequest("n", "n = %d is not supported: this server returns one choice per request; send %d requests instead", *c.N, *c.N)
		}
	}
	p.stream = c.Stream
	if c.StreamOptions != nil {
		if !c.Stream {
			return p, badRequest("stream_options", "stream_options is only allowed when stream is true")
		}
		p.includeUsage = c.StreamOptions.IncludeUsage
	}

	p.maxTokens = s.cfg.MaxTokens
	if maxTokens != nil {
		if *maxTokens < 1 {
			return p, badRequest(maxParam, "%s must be at least 1, got %d", maxParam, *maxTokens)
		}
		p.maxTokens, p.maxTokensSet = int(*maxTokens), true
	}

	sp := s.cfg.Sampling
	if v := c.Temperature; v != nil {
		if *v < 0 || *v > 2 {
			return p, badRequest("temperature", "temperature must be in [0, 2], got %v", *v)
		}
		sp.Temperature = *v
	}
	if v := c.TopP; v != nil {
		if !(*v > 0 && *v <= 1) {
			return p, badRequest("top_p", "top_p must be in (0, 1], got %v", *v)
		}
		sp.TopP = *v
	}
	if v := c.TopK; v != nil {
		switch {
		case *v == -1: // vLLM's spelling of "off"
			sp.TopK = 0
		case *v < 0:
			return p, badRequest("top_k", "top_k must be >= 0 (or -1 for off), got %d", *v)
		default:
			sp.TopK = int(*v)
		}
	}
	if v := c.MinP; v != nil {
		if *v < 0 || *v > 1 {
			return p, badRequest("min_p", "min_p must be in [0, 1], got %v", *v)
		}
		sp.MinP = *v
	}
	if v := c.RepetitionPenalty; v != nil {
		if !(*v > 0) || math.IsInf(*v, 0) {
			return p, badRequest("repetition_penalty", "repetition_penalty must be > 0, got %v", *v)
		}
		sp.RepetitionPenalty = *v
	}
	if err := applyPenalties(&sp, c.FrequencyPenalty, c.PresencePenalty); err != nil {
		return p, err
	}
	// Without a seed every request gets its own: the same seed for all would make every
	// sampled answer to one prompt the same.
	if c.Seed != nil {
		sp.Seed = uint64(*c.Seed)
	} else {
		sp.Seed = rand.Uint64()
	}
	if err := sp.Validate(); err != nil {
		return p, badRequest("", "%v", err)
	}
	p.sample = sp

	if len(c.Stop) > maxStops {
		return p, badRequest("stop", "stop: at most %d stop strings, got %d", maxStops, len(c.Stop))
	}
	for _, st := range c.Stop {
		if st == "" {
			return p, badRequest("stop", "stop: stop strings must not be empty")
		}
		if len(st) > maxStopLen {
			return p, badRequest("stop", "stop: a stop string is at most %d bytes, got %d", maxStopLen, len(st))
		}
	}
	p.stops = c.Stop
	if len(c.StopTokenIDs) > maxStopTokenIDs {
		return p, badRequest("stop_token_ids", "stop_token_ids: at most %d token ids, got %d", maxStopTokenIDs, len(c.StopTokenIDs))
	}
	vocab := s.cfg.Tokenizer.VocabSize()
	for _, id := range c.StopTokenIDs {
		if id < 0 || id >= int64(vocab) {
			return p, badRequest("stop_token_ids", "stop_token_ids: %d is outside the vocabulary [0, %d)", id, vocab)
		}
		p.stopIDs = append(p.stopIDs, int32(id))
	}
	if len(c.LogitBias) > 0 {
		return p, badRequest("logit_bias", "logit_bias is not supported")
	}
	return p, nil
}

// applyPenalties sets frequency_penalty and presence_penalty (OpenAI's range [-2, 2]; the
// engine applies them, counting generated tokens only, as vLLM does).
func applyPenalties(sp *sample.Params, freq, pres *float64) error {
	for _, f := range []struct {
		name string
		v    *float64
		dst  *float64
	}{{"frequency_penalty", freq, &sp.FrequencyPenalty}, {"presence_penalty", pres, &sp.PresencePenalty}} {
		if f.v == nil {
			continue
		}
		if *f.v < -sample.MaxPenalty || *f.v > sample.MaxPenalty {
			return badRequest(f.name, "%s must be in [-%d, %d], got %v", f.name, sample.MaxPenalty, sample.MaxPenalty, *f.v)
		}
		*f.dst = *f.v
	}
	return nil
}

// checkModel accepts the served model's name (or its aliases), or no name at all.
func (s *Server) checkModel(name string) error {
	if name == "" || name == s.cfg.ModelName {
		return nil
	}
	for _, a := range s.cfg.ModelAliases {
		if name == a {
			return nil
		}
	}
	return &apiError{Status: http.StatusNotFound, Type: "invalid_request_error", Param: "model", Code: "model_not_found",
		Message: "the model `" + name + "` does not exist; this server serves `" + s.cfg.ModelName + "`"}
}

// clipMaxTokens fits a default max_tokens into the context: a client that did not ask for a
// number should get as much as fits, not an error. An explicit max_tokens is left for the
// engine to refuse with both numbers.
func (s *Server) clipMaxTokens(p *genParams, promptTokens int) {
	if p.maxTokensSet || s.cfg.ContextSize <= 0 {
		return
	}
	if room := s.cfg.ContextSize - promptTokens; room >= 1 && room < p.maxTokens {
		p.maxTokens = room
	}
}
