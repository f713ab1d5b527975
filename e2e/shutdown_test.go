package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"tandem/serve"
)

// On shutdown a request in flight finishes within the grace period, new requests are
// refused, and serve.Run returns nil (the command's exit 0).
func TestShutdownFinishesInFlight(t *testing.T) {
	s := start(t, serve.Options{StopTokens: []int32{}, ShutdownGrace: 30 * time.Second})
	ctx := context.Background()
	want, err := runCompletion(ctx, s.client, textCompletion("Once upon a time", 300), false)
	if err != nil {
		t.Fatal(err)
	}

	stream := s.client.Completions.NewStreaming(ctx, textCompletion("Once upon a time", 300))
	defer stream.Close()
	if !stream.Next() {
		t.Fatalf("no first chunk: %v", stream.Err())
	}
	text := stream.Current().Choices[0].Text
	s.stop()
	waitFor(t, "the server to refuse new requests", 5*time.Second, func() bool {
		_, err := runCompletion(ctx, s.client, textCompletion("Hello", 2), false)
		return err != nil
	})
	finish := ""
	for stream.Next() {
		for _, c := range stream.Current().Choices {
			text += c.Text
			if c.FinishReason != "" {
				finish = string(c.FinishReason)
			}
		}
	}
	if err := stream.Err(); err != nil || text != want.Text || finish != "length" {
		t.Errorf("the in-flight request: %q (%s, err %v), want %q (length)", text, finish, err, want.Text)
	}
	if err, ok := s.wait(30 * time.Second); !ok || err != nil {
		t.Errorf("serve.Run: returned %v, err %v; want nil", ok, err)
	}
}

// A request still running when the grace period ends is cancelled: its stream ends with an
// error event in OpenAI's shape (code shutting_down; no invented finish_reason) instead of
// hanging, and serve.Run returns nil soon after the grace period.
func TestShutdownCancelsAfterGrace(t *testing.T) {
	t.Run("grace", func(t *testing.T) { testShutdownCancels(t, 300*time.Millisecond, 300*time.Millisecond) })
	// NoGrace (the command's --shutdown-grace 0) cancels at once, not after the default 10s.
	t.Run("no grace", func(t *testing.T) { testShutdownCancels(t, serve.NoGrace, 0) })
}

func testShutdownCancels(t *testing.T, opt, grace time.Duration) {
	s := start(t, serve.Options{StopTokens: []int32{}, ShutdownGrace: opt, CtxSize: 4096})
	stream := s.client.Completions.NewStreaming(context.Background(), textCompletion("Once upon a time", 4000))
	defer stream.Close()
	if !stream.Next() {
		t.Fatalf("no first chunk: %v", stream.Err())
	}
	stopped := time.Now()
	s.stop()
	ended := make(chan int, 1)
	go func() {
		chunks := 0
		for stream.Next() {
			chunks++
			for _, c := range stream.Current().Choices {
				if c.FinishReason != "" {
					t.Errorf("finish_reason %q in a cancelled stream", c.FinishReason)
				}
			}
		}
		ended <- chunks
	}()
	select {
	case chunks := <-ended:
		if chunks >= 4000 {
			t.Errorf("the stream ran to its end (%d chunks) instead of being cancelled", chunks)
		}
		if err := stream.Err(); err == nil || !strings.Contains(err.Error(), `"code":"shutting_down"`) ||
			!strings.Contains(err.Error(), "shut down before the response was complete") {
			t.Errorf("the stream ended with %v, want the shutting_down error event", err)
		}
	case <-time.After(grace + 10*time.Second):
		t.Fatal("the stream did not end after the grace period")
	}
	err, ok := s.wait(grace + 10*time.Second)
	if !ok || err != nil {
		t.Fatalf("serve.Run: returned %v, err %v; want nil", ok, err)
	}
	if d := time.Since(stopped); d > grace+5*time.Second {
		t.Errorf("serve.Run took %s to return with a %s grace period", d, grace)
	}
}
