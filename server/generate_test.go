package server

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"

	"tandem/engine"
)

// queuedEngine answers every request with events already waiting in the channel.
type queuedEngine struct{ events []engine.Event }

func (q *queuedEngine) Submit(ctx context.Context, r engine.Request) (<-chan engine.Event, error) {
	ch := make(chan engine.Event, len(q.events))
	for _, ev := range q.events {
		ch <- ev
	}
	close(ch)
	return ch, nil
}

func (q *queuedEngine) Stats() engine.Stats { return engine.Stats{} }

// TestClientGoneAsEventArrives: when the client has left and an event is ready too (the
// engine's final event for the cancelled request, or the rest of the output), the outcome is
// that the client left, whichever the select picks: not finish "cancelled" (now a 503 for a
// shutdown) nor an answer written to nobody.
func TestClientGoneAsEventArrives(t *testing.T) {
	tok, tmpl := fixtures(t)
	stop := encode(t, " STOP")
	for _, tc := range []struct {
		name   string
		events []engine.Event
		stops  []string
	}{
		{"final event, cancelled", []engine.Event{{Done: true, FinishReason: engine.FinishCancelled}}, nil},
		{"final event, finished", []engine.Event{{Tokens: encode(t, "all done"), Done: true, FinishReason: engine.FinishStop}}, nil},
		// A stop string matches; the final event that follows is ready too.
		{"stop string, then the final event", []engine.Event{{Tokens: append(encode(t, "text"), stop...)},
			{Done: true, FinishReason: engine.FinishCancelled}}, []string{"STOP"}},
	} {
		qe := &queuedEngine{events: tc.events}
		s, err := New(Config{Engine: qe, Tokenizer: tok, Template: tmpl, ModelName: "tiny",
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		// Often enough that a select choosing at random takes the event at least once.
		for i := range 64 {
			ctx, cancel := context.WithCancel(context.Background())
			cancel() // the client is gone
			r := httptest.NewRequest("POST", "/v1/completions", strings.NewReader("{}")).WithContext(ctx)
			g := &generation{s: s, r: r, req: engine.Request{Prompt: []int32{2}, MaxTokens: 8}, id: "cmpl-test",
				ts: newTextStream(tok, func(int32) bool { return true }, nil, tc.stops)}
			wrote := false
			out, err := g.run(func() error { return nil }, func(step) error { wrote = true; return nil })
			if err != nil || !out.clientGone || out.finish != "" || out.err != nil || wrote {
				t.Fatalf("%s, try %d: outcome %+v, err %v, emitted %v; want the client gone", tc.name, i, out, err, wrote)
			}
		}
	}
}
