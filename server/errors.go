package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"tandem/engine"
)

// apiError is an error a client sees, in OpenAI's shape:
// {"error":{"message","type","param","code"}}. Handlers return it; writeError
// writes it with its HTTP status.
type apiError struct {
	Status  int
	Message string
	Type    string // invalid_request_error, authentication_error, …
	Param   string // the request field at fault, "" for none
	Code    string // a stable machine-readable code, "" for none
	// RetryAfter, when > 0, is sent as a Retry-After header (seconds).
	RetryAfter int
}

func (e *apiError) Error() string { return e.Message }

// badRequest is a 400 about one request field (param may be "").
func badRequest(param, format string, args ...any) *apiError {
	return &apiError{Status: http.StatusBadRequest, Type: "invalid_request_error", Param: param,
		Message: fmt.Sprintf(format, args...)}
}

func notFound(msg string) *apiError {
	return &apiError{Status: http.StatusNotFound, Type: "invalid_request_error", Code: "not_found", Message: msg}
}

func internalError(msg string) *apiError {
	return &apiError{Status: http.StatusInternalServerError, Type: "server_error", Code: "internal_error", Message: msg}
}

// errorBody is the JSON envelope of an error response and of an error event in a stream.
type errorBody struct {
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"` // null when no field is at fault, as OpenAI sends it
	Code    *string `json:"code"`
}

func (e *apiError) body() errorBody {
	d := errorDetail{Message: e.Message, Type: e.Type}
	if e.Param != "" {
		d.Param = &e.Param
	}
	if e.Code != "" {
		d.Code = &e.Code
	}
	return errorBody{Error: d}
}

// writeError writes err as an OpenAI error response. Errors that are not an *apiError are
// reported as internal errors without their text (it may hold details of the host).
func writeError(w http.ResponseWriter, err error) {
	var ae *apiError
	if !errors.As(err, &ae) {
		ae = internalError("internal error")
	}
	if ae.RetryAfter > 0 {
		w.Header().Set("Retry-After", fmt.Sprint(ae.RetryAfter))
	}
	writeJSON(w, ae.Status, ae.body())
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := marshal(v)
	if err != nil { // only our own types are written: a bug, not a client's fault
		status = http.StatusInternalServerError
		b = []byte(`{"error":{"message":"internal error: encoding the response","type":"server_error","param":null,"code":"internal_error"}}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(b)
}

// marshal encodes v without HTML escaping: model output is full of <, > and & (Gemma's
// markers, code), and \u003c in every answer helps no one. The result ends with a newline.
func marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// retryAfter is the Retry-After, in seconds, of the 503s a client should
// retry elsewhere or soon: the server loading or shutting down.
const retryAfter = 5

// Loading answers every request while the models load (before there is a
// Server): a 503 with Retry-After in the API's error shape, and
// {"status":"loading"} on /health.
func Loading(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/health" {
		w.Header().Set("Retry-After", fmt.Sprint(retryAfter))
		writeJSON(w, http.StatusServiceUnavailable, struct {
			Status string `json:"status"`
		}{"loading"})
		return
	}
	writeError(w, &apiError{Status: http.StatusServiceUnavailable, Type: "server_error", Code: "model_loading",
		Message: "the model is loading; retry shortly", RetryAfter: retryAfter})
}

// submitError maps an error of Engine.Submit to what the client is told.
func submitError(err error, promptParam string) *apiError {
	var ce *engine.ContextError
	switch {
	case errors.Is(err, engine.ErrQueueFull):
		return &apiError{Status: http.StatusTooManyRequests, Type: "rate_limit_error", Code: "queue_full",
			Message: "the server is busy: its request queue is full; retry later", RetryAfter: 1}
	case errors.Is(err, engine.ErrClosed):
		return &apiError{Status: http.StatusServiceUnavailable, Type: "server_error", Code: "shutting_down",
			Message: "the server is shutting down", RetryAfter: retryAfter}
	case errors.As(err, &ce):
		return &apiError{Status: http.StatusBadRequest, Type: "invalid_request_error", Param: promptParam,
			Code: "context_length_exceeded", Message: ce.Error()}
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		// The client went away before the request was queued; nobody reads this.
		return &apiError{Status: 499, Type: "invalid_request_error", Code: "client_closed_request",
			Message: "the client closed the request"}
	}
	// Any other Submit error is the engine refusing the request's values (bad sampling
	// settings, token ids outside the vocabulary): the client's to fix.
	return &apiError{Status: http.StatusBadRequest, Type: "invalid_request_error", Message: err.Error()}
}
