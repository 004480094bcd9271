package server

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/agentichost/agentic/ledger"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/storage"
)

// The routes, authentication, and the JSON shapes of answers and errors.

// apiError is the body of every error answer: {"error":{"code","message"}},
// with the run a 409 concerns (run_id).
type apiError struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
		RunID   string `json:"run_id,omitempty"`
		// Features and Hosts, with code feature_unavailable: the ledger
		// features the request needs, and the live hosts that do not
		// read them yet.
		Features []ledger.Feature `json:"features,omitempty"`
		Hosts    []string         `json:"hosts,omitempty"`
	} `json:"error"`
}

// The error codes of the API, each with its HTTP status.
const (
	codeInvalid      = "invalid_request"     // 400
	codeUnauthorized = "unauthorized"        // 401
	codeBudget       = "budget_exceeded"     // 402
	codeForbidden    = "forbidden"           // 403
	codeNotFound     = "not_found"           // 404
	codeMethod       = "method_not_allowed"  // 405
	codeConflict     = "conflict"            // 409
	codeFeature      = "feature_unavailable" // 409: a live host does not read a ledger feature the request needs
	codeUnreadable   = "unreadable"          // 503: this host cannot read the session (a newer build wrote it)
	codeTimeout      = "request_timeout"     // 408
	codeTooLarge     = "payload_too_large"   // 413
	codeBlobQuota    = "blob_quota_exceeded" // 413
	codeRateLimited  = "rate_limited"        // 429
	codeInternal     = "internal"            // 500
	codeUnavailable  = "unavailable"         // 503
	// codeTooSlow ends an event stream whose client fell behind (an SSE
	// "error" event, not an HTTP status).
	codeTooSlow = "too_slow"
)

// readBody reads the request's body, at most limit bytes (the config key
// named by limitKey), within Config.BodyTimeout: a body that is larger is
// answered 413, one that takes longer to arrive (a client that trickles
// it) 408, and the connection is closed. Every handler that reads a body
// reads it through readBody. The deadline is lifted once the body is read,
// so that a handler that goes on (waiting for a run, streaming its answer)
// keeps its connection.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request, limit int64, limitKey string) ([]byte, bool) {
	return s.readBodyOr(w, r, limit, limitKey, func(status int, code, message string) {
		writeError(w, status, code, "%s", message)
	})
}

// readBodyOr is readBody for a protocol with errors of its own: a body
// that cannot be read is answered by fail, with the HTTP status, the API's
// error code and the message readBody would answer.
func (s *Server) readBodyOr(w http.ResponseWriter, r *http.Request, limit int64, limitKey string, fail func(status int, code, message string)) ([]byte, bool) {
	if r.ContentLength > limit {
		// Refused before a byte of it is read.
		w.Header().Set("Connection", "close")
		fail(http.StatusRequestEntityTooLarge, codeTooLarge, fmt.Sprintf("the body is larger than %d bytes (%s)", limit, limitKey))
		return nil, false
	}
	rc := http.NewResponseController(w)
	timeout := time.Duration(s.cfg.BodyTimeout)
	if err := rc.SetReadDeadline(time.Now().Add(timeout)); err != nil && !errors.Is(err, http.ErrNotSupported) {
		fail(http.StatusInternalServerError, codeInternal, fmt.Sprintf("cannot bound the body's reading: %v", err))
		return nil, false
	}
	body := http.MaxBytesReader(w, r.Body, limit)
	// A declared length is a hint, never an allocation: a client that
	// declares the limit and trickles a few bytes holds what it sent, not
	// the limit. The buffer starts at the declared length up to 64 KiB
	// and grows as the body arrives.
	var buf bytes.Buffer
	buf.Grow(int(min(max(r.ContentLength, 0), 64<<10)))
	_, err := buf.ReadFrom(body)
	if err == nil && r.ContentLength > 0 && int64(buf.Len()) != r.ContentLength {
		err = io.ErrUnexpectedEOF
	}
	b := buf.Bytes()
	var tooBig *http.MaxBytesError
	switch {
	case err == nil:
		_ = rc.SetReadDeadline(time.Time{})
		return b, true
	case errors.As(err, &tooBig):
		fail(http.StatusRequestEntityTooLarge, codeTooLarge, fmt.Sprintf("the body is larger than %d bytes (%s)", tooBig.Limit, limitKey))
	case errors.Is(err, os.ErrDeadlineExceeded):
		w.Header().Set("Connection", "close")
		fail(http.StatusRequestTimeout, codeTimeout, fmt.Sprintf("the body did not arrive within %v (body_timeout)", timeout))
	default:
		fail(http.StatusBadRequest, codeInvalid, fmt.Sprintf("cannot read the body: %v", err))
	}
	return nil, false
}

// writeError answers with an error.
func writeError(w http.ResponseWriter, status int, code, format string, args ...any) {
	var e apiError
	e.Error.Code, e.Error.Message = code, fmt.Sprintf(format, args...)
	writeJSON(w, status, e)
}

// writeJSON answers with v as JSON.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.Encode(v)
}

// notFound is the answer for a session, run, approval, task or plugin that
// does not exist — or is another tenant's: the two are indistinguishable.
func notFound(w http.ResponseWriter, what, id string) {
	writeError(w, http.StatusNotFound, codeNotFound, "no %s %q", what, id)
}

// decodeBody reads a JSON request body into v, strictly: a body that is
// not one JSON object, unknown fields, wrong types, trailing data and
// bodies past the limit are errors that say which field. It answers the
// error itself and returns false.
func (s *Server) decodeBody(w http.ResponseWriter, r *http.Request, v any) bool {
	return s.decode(w, r, v, false)
}

// decodeOptionalBody is decodeBody for a body that may be left out: an
// empty one leaves v as it is.
func (s *Server) decodeOptionalBody(w http.ResponseWriter, r *http.Request, v any) bool {
	return s.decode(w, r, v, true)
}

func (s *Server) decode(w http.ResponseWriter, r *http.Request, v any, optional bool) bool {
	b, ok := s.readBody(w, r, s.cfg.MaxRequestBytes, "max_request_bytes")
	if !ok {
		return false
	}
	body := bytes.TrimSpace(b)
	switch {
	case len(body) == 0 && optional:
		return true
	case len(body) == 0:
		writeError(w, http.StatusBadRequest, codeInvalid, "the body is empty; want a JSON object")
		return false
	case body[0] != '{' && !json.Valid(body):
		writeError(w, http.StatusBadRequest, codeInvalid, "the body is not JSON; want a JSON object")
		return false
	case body[0] != '{':
		writeError(w, http.StatusBadRequest, codeInvalid, "the body is JSON but not an object; want a JSON object")
		return false
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil {
		if _, rerr := dec.Token(); rerr != io.EOF {
			err = errors.New("the body holds more than one JSON value")
		}
	}
	if err == nil {
		return true
	}
	var typ *json.UnmarshalTypeError
	var syn *json.SyntaxError
	switch {
	case errors.As(err, &typ) && typ.Field != "":
		writeError(w, http.StatusBadRequest, codeInvalid, "field %q: want %s, got a JSON %s", typ.Field, jsonKind(typ.Type), typ.Value)
	case errors.As(err, &syn):
		writeError(w, http.StatusBadRequest, codeInvalid, "the body is not JSON: %v (at byte %d)", syn, syn.Offset)
	case errors.Is(err, io.ErrUnexpectedEOF):
		writeError(w, http.StatusBadRequest, codeInvalid, "the body is not JSON: it ends within a value")
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		writeError(w, http.StatusBadRequest, codeInvalid, "unknown field %s", strings.TrimPrefix(err.Error(), "json: unknown field "))
	default:
		writeError(w, http.StatusBadRequest, codeInvalid, "the body: %s", strings.TrimPrefix(err.Error(), "json: "))
	}
	return false
}

// jsonKind names the JSON value a Go type is read from.
func jsonKind(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Pointer:
		return jsonKind(t.Elem())
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64, reflect.Uint, reflect.Uint8, reflect.Uint16,
		reflect.Uint32, reflect.Uint64, reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		if t.Elem().Kind() == reflect.Uint8 {
			return "a base64 string"
		}
		return "an array"
	case reflect.Map, reflect.Struct:
		return "an object"
	}
	return "another value"
}

// apiKey returns the key a request presents: "Authorization: Bearer KEY"
// (the scheme in any case, as RFC 9110 has it), or the X-API-Key header.
func apiKey(r *http.Request) string {
	if scheme, k, ok := strings.Cut(r.Header.Get("Authorization"), " "); ok && strings.EqualFold(scheme, "Bearer") {
		return strings.TrimSpace(k)
	}
	return r.Header.Get("X-API-Key")
}

// tenantHandler is a handler for an authenticated tenant.
type tenantHandler func(w http.ResponseWriter, r *http.Request, t *tenant)

// authed authenticates a request, applies its tenant's rate limit, counts
// it, and calls h.
func (s *Server) authed(route string, h tenantHandler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		defer func() {
			s.metrics.requests.Add(context.Background(), 1, metric.WithAttributes(
				attribute.String("http.route", route), attribute.Int("http.response.status_code", rec.status)))
		}()
		owner, _, err := s.keys.ownerOf(r.Context(), apiKey(r), s.serves)
		name := owner.tenant
		if err != nil {
			s.log.Warn("cannot check an API key", "err", err)
			writeError(rec, http.StatusServiceUnavailable, codeUnavailable, "cannot check the API key now; try again")
			return
		}
		if name == "" {
			rec.Header().Set("WWW-Authenticate", `Bearer realm="agentic-host"`)
			writeError(rec, http.StatusUnauthorized, codeUnauthorized, "a valid API key is required (Authorization: Bearer KEY)")
			return
		}
		t := s.tenants[name]
		if t.limiter != nil && !t.limiter.Allow() {
			if ok, why := s.waitToken(r.Context(), t); !ok {
				rec.Header().Set("Retry-After", "1")
				writeError(rec, http.StatusTooManyRequests, codeRateLimited, "tenant %s is past its rate limit of %g requests a second%s", name, t.cfg.RateLimit.RequestsPerSecond, why)
				return
			}
		}
		r, ok := t.userRequest(rec, r, owner.user)
		if !ok {
			return
		}
		h(rec, r, t)
	})
}

// statusRecorder remembers the status a handler answered with.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (r *statusRecorder) WriteHeader(code int) {
	r.status = code
	r.ResponseWriter.WriteHeader(code)
}

// Flush passes through, for event streams.
func (r *statusRecorder) Flush() {
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap gives http.ResponseController the writer underneath.
func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// routes registers the API.
func (s *Server) routes() {
	handle := func(pattern string, h tenantHandler) {
		_, route, _ := strings.Cut(pattern, " ")
		s.mux.Handle(pattern, s.authed(route, h))
		s.patterns = append(s.patterns, pattern)
	}
	handle("POST /v1/sessions/{id}/messages", s.postMessage)
	handle("GET /v1/sessions", s.listSessions)
	handle("GET /v1/sessions/{id}", s.getSession)
	handle("GET /v1/sessions/{id}/transcript", s.getTranscript)
	handle("GET /v1/sessions/{id}/events", s.streaming(s.getEvents, true))
	handle("DELETE /v1/sessions/{id}", s.deleteSession)
	handle("GET /v1/sessions/{id}/export", s.exportSession)
	handle("POST /v1/sessions/import", s.importSessions)
	handle("PUT /v1/sessions/{id}/retention", s.putRetention)
	handle("POST /v1/retention/sweep", s.sweepNow)
	handle("POST /v1/sessions/{id}/cancel", s.cancelSession)
	handle("POST /v1/sessions/{id}/events/{key}", s.postEvent)
	handle("POST /v1/sessions/{id}/replay", s.replaySession)
	handle("POST /v1/sessions/{id}/resume", s.resumeSession)
	handle("POST /v1/sessions/{id}/fork", s.forkSession)
	handle("POST /v1/eval", s.postEval)
	handle("POST /v1/tasks", s.postTask)
	handle("GET /v1/tasks/{id}", s.getTask)
	handle("GET /v1/approvals", s.listApprovals)
	handle("POST /v1/approvals/{id}", s.decideApproval)
	handle("POST /v1/plugins/{name}/versions/{hash}", s.decideVersion)
	handle("POST /v1/plugins/{name}/release", s.releasePlugin)
	handle("POST /v1/plugins/{name}/rollback", s.rollbackPlugin)
	handle("PUT /v1/plugins/{name}/canary", s.putCanary)
	handle("POST /v1/plugins/{name}/canary/promote", s.promoteCanary)
	handle("DELETE /v1/plugins/{name}/canary", s.deleteCanary)
	handle("GET /v1/plugins", s.listPlugins)
	handle("GET /v1/audit", s.getAudit)
	handle("GET /v1/mcp", s.listMCP)
	handle("POST /v1/mcp/{server}/tools/{tool}/approve", s.approveMCPTool)
	handle("GET /v1/plugins/{name}", s.getPlugin)
	handle("PUT /v1/plugins/{name}", s.putPlugin)
	handle("DELETE /v1/plugins/{name}", s.deletePlugin)
	handle("GET /v1/feed", s.streaming(s.getFeed, true))
	handle("GET /v1/usage", s.getUsage)
	handle("GET /v1/blobs/{digest}", s.getBlob)
	// The UI message streams end with their message: no lifetime bound,
	// which would cut an answer the AI SDK then takes for failed.
	handle("POST /v1/ui/chat", s.streaming(s.uiChat, false))
	handle("GET /v1/ui/chat/{id}/stream", s.streaming(s.uiResume, false))
	// A2A: the JSON-RPC endpoint takes its stream slots itself, for the
	// methods that stream (message/stream, tasks/resubscribe).
	handle("GET /a2a/{agent}/.well-known/agent-card.json", s.a2aCard)
	handle("POST /a2a/{agent}", s.a2aRPC)
	handle("GET /v1/a2a/tasks", s.listA2ATasks)
	handle("GET /v1/webhooks", s.listWebhooks)
	handle("GET /v1/webhooks/deliveries", s.listDeliveries)
	handle("GET /v1/webhooks/deliveries/{id}", s.getDelivery)
	handle("GET /v1/schedules", s.listSchedules)
	handle("POST /v1/schedules", s.postSchedule)
	handle("DELETE /v1/schedules/{id}", s.deleteSchedule)
	s.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	if assets, err := loadConsole(); err == nil {
		s.mux.Handle("GET /console", http.RedirectHandler("/console/", http.StatusMovedPermanently))
		s.mux.HandleFunc("GET /console/", s.serveConsole(assets))
		s.mux.HandleFunc("GET /console/config.json", s.serveConsoleConfig)
	} else {
		s.log.Error("the console's files cannot be read; /console is off", "err", err)
	}
	s.mux.HandleFunc("GET /readyz", s.readyz)
	s.mux.HandleFunc("GET /metrics", s.serveMetrics)
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if allow := s.allowed(r); len(allow) > 0 {
			w.Header().Set("Allow", strings.Join(allow, ", "))
			writeError(w, http.StatusMethodNotAllowed, codeMethod, "%s %s: the route takes %s", r.Method, r.URL.Path, strings.Join(allow, ", "))
			return
		}
		writeError(w, http.StatusNotFound, codeNotFound, "no route %s %s", r.Method, r.URL.Path)
	})
}

// allowed returns the methods of the routes of r's path, none when the
// path has no route. (The catch-all route "/" takes every method, so
// that the mux never answers 405 itself, in plain text.)
func (s *Server) allowed(r *http.Request) []string {
	var allow []string
	for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
		probe := r.Clone(r.Context())
		probe.Method = m
		if _, pattern := s.mux.Handler(probe); pattern != "/" && pattern != "" {
			allow = append(allow, m)
		}
	}
	return allow
}

// Routes returns the API's authenticated routes, "METHOD /path/{param}",
// in the order they are registered: what a test of the server's limits
// walks.
func (s *Server) Routes() []string { return slices.Clone(s.patterns) }

// readyz answers 200 while the server takes work and its storage answers.
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	if s.closing.Load() {
		writeError(w, http.StatusServiceUnavailable, codeUnavailable, "shutting down")
		return
	}
	if _, _, err := s.kv.Get(r.Context(), keysNamespace, "readyz"); err != nil {
		writeError(w, http.StatusServiceUnavailable, codeUnavailable, "the storage does not answer: %v", err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}

// serveMetrics serves the Prometheus metrics, behind Config.MetricsKey
// when one is set.
func (s *Server) serveMetrics(w http.ResponseWriter, r *http.Request) {
	if s.cfg.MetricsKey == "" && !loopbackListen(s.cfg.Listen) {
		// The metrics name the tenants: open only on a loopback address.
		writeError(w, http.StatusForbidden, codeForbidden, "/metrics is served without a key only when listen is a loopback address (listen is %q): set metrics_key, and scrape with it as a bearer token", s.cfg.Listen)
		return
	}
	if s.cfg.MetricsKey != "" && subtle.ConstantTimeCompare([]byte(apiKey(r)), []byte(s.cfg.MetricsKey)) != 1 {
		writeError(w, http.StatusUnauthorized, codeUnauthorized, "the metrics key is required")
		return
	}
	s.metrics.handler.ServeHTTP(w, r)
}

// loopbackListen reports whether the address listen binds is a loopback
// one ("127.0.0.1:8080", "[::1]:8080", "localhost:8080"); an address of
// every interface (":8080", "0.0.0.0:8080") or a host name is not.
func loopbackListen(listen string) bool {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// sessionID returns the request's {id}, answering 400 when it is not a
// session id.
func sessionID(w http.ResponseWriter, r *http.Request) (string, bool) {
	id := r.PathValue("id")
	if !storage.ValidSessionID(id) {
		writeError(w, http.StatusBadRequest, codeInvalid, "session id %q: want 1 to 128 of [A-Za-z0-9._:-], not starting with '.'", id)
		return "", false
	}
	return id, true
}

// onEvent observes a tenant's live events: the changes its feed tells, and
// the runs in flight, for the tenant's bound on concurrent runs and the
// metrics.
func (s *Server) onEvent(t *tenant, e host.Event) {
	if feedWorthy(e.Type) {
		c := feedChange{SessionID: e.SessionID, Type: e.Type, RunID: e.RunID}
		if e.Approval != nil {
			c.ApprovalID = e.Approval.ApprovalID
		}
		t.feed.publish(c)
	}
	switch {
	case e.Type == host.EventRunStart:
		t.slots.observe(e.SessionID)
		s.metrics.runs.Add(context.Background(), 1, metric.WithAttributes(attribute.String("tenant", t.name)))
	case e.Type == host.EventRunEnd:
		s.metrics.runs.Add(context.Background(), -1, metric.WithAttributes(attribute.String("tenant", t.name)))
		t.slots.wake() // a place under rate_limit.concurrent_runs freed
		if s.runq != nil {
			s.runq.wake() // and one under max_runs
		}
	}
}
