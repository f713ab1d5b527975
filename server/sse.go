package server

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"time"
)

// sseWriter writes a Server-Sent Events stream: "data: JSON\n\n" per event, flushed at once,
// ended by "data: [DONE]\n\n".
type sseWriter struct {
	w  http.ResponseWriter
	rc *http.ResponseController
}

func newSSE(w http.ResponseWriter) *sseWriter {
	return &sseWriter{w: w, rc: http.NewResponseController(w)}
}

// start writes the headers. A generation may run longer than the http.Server's WriteTimeout,
// which suits ordinary responses, so a stream clears its write deadline.
func (e *sseWriter) start() error {
	h := e.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no") // nginx: do not buffer the stream
	e.rc.SetWriteDeadline(time.Time{})
	e.w.WriteHeader(http.StatusOK)
	return e.rc.Flush()
}

func (e *sseWriter) send(v any) error {
	b, err := marshal(v)
	if err != nil {
		return err
	}
	return e.raw(bytes.TrimSuffix(b, []byte("\n")))
}

func (e *sseWriter) raw(b []byte) error {
	buf := make([]byte, 0, len(b)+8)
	buf = append(buf, "data: "...)
	buf = append(buf, b...)
	buf = append(buf, "\n\n"...)
	if _, err := e.w.Write(buf); err != nil {
		return err
	}
	return e.rc.Flush()
}

func (e *sseWriter) done() error { return e.raw([]byte("[DONE]")) }

// fail reports an error that happened after the stream began, in OpenAI's error shape, and
// ends the stream.
func (e *sseWriter) fail(err error) {
	ae, ok := err.(*apiError)
	if !ok {
		ae = internalError("internal error")
	}
	e.send(ae.body())
	e.done()
}

// newID returns a response id: prefix and 24 random hex digits.
func newID(prefix string) string {
	var b [12]byte
	rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}
