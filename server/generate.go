package server

import (
	"context"
	"errors"
	"net/http"
	"time"

	"tandem/engine"
)

// step is what one engine event adds to a response.
type step struct {
	text     string           // new output text, after stop strings
	logprobs []engine.Logprob // of the tokens consumed
	// offsets are the logprobs' text offsets: the characters of output text before each
	// token's own, counted in what the detokenizer released (textStream.offset), so they
	// index the returned text.
	offsets []int
	final   bool   // the last step; finish is set
	finish  string // "stop" or "length"
}

// outcome is how a generation ended.
type outcome struct {
	// finish is the reason the log line shows: as step.finish, or "cancelled" (the engine
	// shut down) or "error" (the engine failed) with err set; "" when the client left.
	finish           string
	usage            engine.Usage
	completionTokens int
	err              error // what to tell the client when the generation did not complete
	clientGone       bool  // the client disconnected (nothing more can be written)
}

// generation runs one request on the engine and feeds its output through a textStream.
type generation struct {
	s       *Server
	r       *http.Request
	req     engine.Request
	ts      *textStream
	arrived time.Time
	param   string // the request field a context error names ("messages" or "prompt")
	id      string // the response's id, for the log and error messages
}

// shutdownError is what a client whose request the engine cancelled on shutdown is told: a
// 503 before a stream starts, an error event after.
func shutdownError() *apiError {
	return &apiError{Status: http.StatusServiceUnavailable, Type: "server_error", Code: "shutting_down",
		Message: "the server shut down before the response was complete; retry the request", RetryAfter: retryAfter}
}

// run submits the request; when the engine accepts it, started is called (a streaming
// response writes its headers there), then emit for each event's output, the last with
// final set. A Submit error is returned as the *apiError to answer with; everything after
// that is in the outcome.
func (g *generation) run(started func() error, emit func(step) error) (outcome, error) {
	// The request's own context ends when the client disconnects (net/http cancels it);
	// cancel also ends the engine's work early on a stop string.
	ctx, cancel := context.WithCancel(g.r.Context())
	defer cancel()
	ch, err := g.s.eng.Submit(ctx, g.req)
	if err != nil {
		return outcome{}, submitError(err, g.param)
	}
	var out outcome
	// abandon stops reading: the engine still delivers a final event and closes the channel
	// (within a step of cancel), so drain it for the engine's sake.
	abandon := func() {
		cancel()
		go func() {
			for range ch {
			}
		}()
	}
	if err := started(); err != nil {
		out.clientGone = true
		abandon()
		return out, nil
	}

	m := g.s.metrics
	consumed := 0
	var last time.Time
	for {
		var ev engine.Event
		var ok bool
		select {
		case <-g.r.Context().Done():
		case ev, ok = <-ch:
		}
		// Checked after the select too: when the client leaves as an event arrives, select
		// may pick the event (for the engine, a request that was cancelled), and the outcome
		// is still that the client left.
		if g.r.Context().Err() != nil {
			out.clientGone = true
			abandon()
			return out, nil
		}
		if !ok {
			out.err = internalError("the engine ended the request without a result")
			return out, nil
		}
		now := time.Now()
		if n := len(ev.Tokens); n > 0 && !g.ts.stopped {
			if last.IsZero() {
				m.ttft.Observe(now.Sub(g.arrived).Seconds())
			} else {
				// A speculative round yields several tokens at once: spread the gap over them,
				// so the histogram's mean is the time per output token.
				per := now.Sub(last).Seconds() / float64(n)
				for range n {
					m.itl.Observe(per)
				}
			}
			last = now
		}

		var st step
		for i, id := range ev.Tokens {
			if g.ts.stopped {
				break
			}
			consumed++
			before := g.ts.released
			text, hit := g.ts.token(id) // "" for a stop token
			// One logprob entry per completion token, a stop token's included (its text is
			// not in the output), as OpenAI lists <|endoftext|>.
			if g.req.Logprobs && i < len(ev.Logprobs) {
				st.logprobs = append(st.logprobs, ev.Logprobs[i])
				st.offsets = append(st.offsets, g.ts.offset(id, before))
			}
			st.text += text
			if hit {
				cancel() // the engine may stop: nothing after a stop string is used
			}
		}

		if g.ts.stopped || ev.Done {
			if !ev.Done {
				// Wait for the final event, which carries the usage; after cancel it comes
				// within one engine step.
				ev, out.clientGone = g.waitFinal(ch)
				if out.clientGone {
					abandon()
					return out, nil
				}
			}
			out.usage = ev.Usage
			out.completionTokens = ev.Usage.CompletionTokens
			if !ev.Queued.IsZero() && !ev.Started.IsZero() {
				m.queue.Observe(ev.Started.Sub(ev.Queued).Seconds())
			}
			m.e2e.Observe(time.Since(g.arrived).Seconds())
			switch {
			case g.ts.stopped:
				out.finish = engine.FinishStop
				// The engine may have produced more before it saw the cancel: count what the
				// client got, up to the token that completed the stop string.
				out.completionTokens = consumed
			case ev.Err != nil:
				// The engine's error (a recovered panic's value among them) is for the log,
				// not for the client.
				out.finish = engine.FinishError
				g.s.log.Error("generation failed", "id", g.id, "route", g.r.URL.Path, "err", ev.Err.Error())
				out.err = internalError("the engine failed while generating the response (id " + g.id + "); the server log has the details")
			case ev.FinishReason == engine.FinishCancelled:
				// Not our cancel (the client is still here, and no stop string matched yet):
				// the engine is shutting down. Unless the text held back completes a stop
				// string, the answer is incomplete; OpenAI has no finish reason for that, so
				// the client gets an error.
				if text, hit := g.ts.finish(); hit {
					st.text += text
					out.finish = engine.FinishStop
				} else {
					out.finish = engine.FinishCancelled
					out.err = shutdownError()
				}
			default:
				text, hit := g.ts.finish()
				st.text += text
				out.finish = ev.FinishReason
				if hit {
					out.finish = engine.FinishStop
				}
			}
			if out.completionTokens == 0 {
				out.completionTokens = consumed
			}
			if out.err != nil {
				return out, nil
			}
			st.final, st.finish = true, out.finish
			if err := emit(st); err != nil {
				out.clientGone = true
			}
			return out, nil
		}
		if st.text == "" && len(st.logprobs) == 0 {
			continue
		}
		if err := emit(st); err != nil {
			out.clientGone = true
			abandon()
			return out, nil
		}
	}
}

// waitFinal reads events until the final one; gone reports that the client left first.
func (g *generation) waitFinal(ch <-chan engine.Event) (ev engine.Event, gone bool) {
	for {
		select {
		case <-g.r.Context().Done():
			return engine.Event{}, true
		case e, ok := <-ch:
			if g.r.Context().Err() != nil {
				return engine.Event{}, true
			}
			if !ok {
				return engine.Event{Done: true}, false
			}
			if e.Done {
				return e, false
			}
		}
	}
}

// usage is a response's token accounting.
type usage struct {
	PromptTokens        int           `json:"prompt_tokens"`
	CompletionTokens    int           `json:"completion_tokens"`
	TotalTokens         int           `json:"total_tokens"`
	PromptTokensDetails promptDetails `json:"prompt_tokens_details"`
	Speculative         *specUsage    `json:"speculative,omitempty"`
}

type promptDetails struct {
	CachedTokens int `json:"cached_tokens"`
}

// specUsage is the request's speculative decoding: verify passes (rounds), drafts proposed
// and accepted, accepted/drafted, and tokens per verify pass (1 + accepted/rounds).
type specUsage struct {
	Rounds               int     `json:"rounds"`
	Drafted              int     `json:"drafted"`
	Accepted             int     `json:"accepted"`
	AcceptanceRate       float64 `json:"acceptance_rate"`
	MeanAcceptanceLength float64 `json:"mean_acceptance_length"`
}

func (s *Server) usageOf(out outcome, promptTokens int) *usage {
	u := &usage{PromptTokens: out.usage.PromptTokens, CompletionTokens: out.completionTokens}
	if u.PromptTokens == 0 {
		u.PromptTokens = promptTokens
	}
	u.TotalTokens = u.PromptTokens + u.CompletionTokens
	u.PromptTokensDetails.CachedTokens = out.usage.CachedTokens
	if s.cfg.Draft != "" {
		eu := out.usage
		sp := &specUsage{Rounds: eu.Rounds, Drafted: eu.Drafted, Accepted: eu.Accepted, MeanAcceptanceLength: eu.MeanAcceptLength()}
		if eu.Drafted > 0 {
			sp.AcceptanceRate = float64(eu.Accepted) / float64(eu.Drafted)
		}
		u.Speculative = sp
	}
	return u
}

// errClientGone marks a handler return after the client disconnected: nothing is written.
var errClientGone = errors.New("client disconnected")
