package server

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"tandem/engine"
)

// reqInfo is what one request's log line and metrics say; handlers fill it in.
type reqInfo struct {
	route            string
	id               string // the response id of a completion
	promptTokens     int
	completionTokens int
	finish           string
	stream           bool
	clientGone       bool
}

type infoKey struct{}

func infoFrom(ctx context.Context) *reqInfo {
	if i, ok := ctx.Value(infoKey{}).(*reqInfo); ok {
		return i
	}
	return &reqInfo{}
}

// statusWriter records the status and whether anything was written.
type statusWriter struct {
	http.ResponseWriter
	status int
	wrote  bool
}

func (w *statusWriter) WriteHeader(code int) {
	if !w.wrote {
		w.status, w.wrote = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if !w.wrote {
		w.status, w.wrote = http.StatusOK, true
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach Flush and SetWriteDeadline.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// serve wraps every request: recovery, the log line and the request metrics.
func (s *Server) serve(next http.Handler) http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		start := time.Now()
		info := &reqInfo{route: "other"}
		w := &statusWriter{ResponseWriter: rw}
		r = r.WithContext(context.WithValue(r.Context(), infoKey{}, info))
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				s.log.Error("panic serving a request", "method", r.Method, "path", r.URL.Path, "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
				if !w.wrote {
					writeError(w, internalError("internal error"))
				} else {
					// A stream was under way: end the connection so the client sees it broken,
					// not a response that looks complete.
					s.finishRequest(info, w, r, start)
					panic(http.ErrAbortHandler)
				}
			}
			s.finishRequest(info, w, r, start)
		}()
		next.ServeHTTP(w, r)
	})
}

func (s *Server) finishRequest(info *reqInfo, w *statusWriter, r *http.Request, start time.Time) {
	status := w.status
	if info.clientGone && !w.wrote {
		status = 499 // nginx's "client closed request": nothing was sent
	}
	if status == 0 {
		status = http.StatusOK
	}
	d := time.Since(start)
	s.metrics.requests.WithLabelValues(info.route, strconv.Itoa(status)).Inc()
	s.metrics.duration.WithLabelValues(info.route).Observe(d.Seconds())
	attrs := []slog.Attr{
		slog.String("method", r.Method),
		slog.String("route", info.route),
		slog.Int("status", status),
		slog.Duration("duration", d),
	}
	if info.id != "" {
		attrs = append(attrs, slog.String("id", info.id))
	}
	if info.promptTokens > 0 || info.completionTokens > 0 {
		attrs = append(attrs, slog.Int("prompt_tokens", info.promptTokens), slog.Int("completion_tokens", info.completionTokens))
	}
	if info.finish != "" {
		attrs = append(attrs, slog.String("finish", info.finish))
	}
	if info.stream {
		attrs = append(attrs, slog.Bool("stream", true))
	}
	if info.clientGone {
		attrs = append(attrs, slog.Bool("client_gone", true))
	}
	s.log.LogAttrs(r.Context(), slog.LevelInfo, "request", attrs...)
}

// handlerFunc is a route's handler; an error it returns is written as an OpenAI error when
// nothing has been written yet.
type handlerFunc func(w http.ResponseWriter, r *http.Request) error

// route adapts a handlerFunc: it names the route for logs and metrics, checks the API key
// when auth is set, and writes a returned error.
func (s *Server) route(name string, auth bool, h handlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		info := infoFrom(r.Context())
		info.route = name
		if auth {
			if err := s.checkKey(r); err != nil {
				writeError(w, err)
				return
			}
		}
		err := h(w, r)
		if err == nil {
			return
		}
		if errors.Is(err, errClientGone) {
			info.clientGone = true
			return
		}
		if sw, ok := w.(*statusWriter); ok && sw.wrote {
			return // a stream reports its own errors in-band
		}
		writeError(w, err)
	})
}

// checkKey accepts "Authorization: Bearer KEY" with the configured key. Both sides are hashed
// before the constant-time compare, so neither the key nor its length leaks through timing.
func (s *Server) checkKey(r *http.Request) error {
	if s.cfg.APIKey == "" {
		return nil
	}
	h := r.Header.Get("Authorization")
	ok := len(h) > 7 && strings.EqualFold(h[:7], "Bearer ") // the scheme is case-insensitive (RFC 9110)
	got := ""
	if ok {
		got = h[7:]
	}
	want := sha256.Sum256([]byte(s.cfg.APIKey))
	have := sha256.Sum256([]byte(strings.TrimSpace(got)))
	if !ok || subtle.ConstantTimeCompare(want[:], have[:]) != 1 {
		msg := "invalid API key"
		if !ok {
			msg = "missing API key: send it as \"Authorization: Bearer KEY\""
		}
		return &apiError{Status: http.StatusUnauthorized, Type: "authentication_error", Code: "invalid_api_key", Message: msg}
	}
	return nil
}

// readRequest refuses work while draining, then reads and decodes the
// body into req.
func (s *Server) readRequest(w http.ResponseWriter, r *http.Request, req any) error {
	if s.draining.Load() {
		return submitError(engine.ErrClosed, "")
	}
	body, err := s.readBody(w, r)
	if err != nil {
		return err
	}
	return decodeBody(body, req)
}

// readBody reads the request body, up to MaxBodyBytes (413 beyond).
func (s *Server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	// A body sent a byte at a time must not hold the connection forever: the connection's
	// read deadline is set for the body and cleared once it is in. After a failed read it
	// stays, so that net/http's discarding of the body's rest fails at once and the 408
	// goes out (cleared, the discard would wait for the rest). Connections that cannot
	// take one (HTTP/2) read without.
	rc := http.NewResponseController(w)
	deadline := rc.SetReadDeadline(time.Now().Add(bodyReadTimeout)) == nil
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes))
	if err == nil && deadline {
		rc.SetReadDeadline(time.Time{})
	}
	if err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return nil, &apiError{Status: http.StatusRequestTimeout, Type: "invalid_request_error", Code: "request_timeout",
				Message: fmt.Sprintf("the request body did not arrive within %s", bodyReadTimeout)}
		}
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, &apiError{Status: http.StatusRequestEntityTooLarge, Type: "invalid_request_error", Code: "request_too_large",
				Message: fmt.Sprintf("the request body is larger than %d bytes", mbe.Limit)}
		}
		if r.Context().Err() != nil {
			return nil, errClientGone
		}
		return nil, badRequest("", "reading the request body: %v", err)
	}
	return body, nil
}

// bodyReadTimeout bounds reading a request's body.
var bodyReadTimeout = time.Minute

// methodNotAllowed answers a known path asked with the wrong method.
func methodNotAllowed(allow string) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		w.Header().Set("Allow", allow)
		return &apiError{Status: http.StatusMethodNotAllowed, Type: "invalid_request_error", Code: "method_not_allowed",
			Message: fmt.Sprintf("%s is not allowed on %s; use %s", r.Method, r.URL.Path, allow)}
	}
}

func unknownRoute(w http.ResponseWriter, r *http.Request) error {
	return notFound(fmt.Sprintf("no route %s %s", r.Method, r.URL.Path))
}
