package mcp

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// HTTPOptions configures [Server.Handler].
type HTTPOptions struct {
	// APIKey is the key every request must carry as
	// "Authorization: Bearer KEY"; a request without it gets 401.
	// Default: "", no key (serve only on a loopback address then).
	APIKey string
	// SessionTimeout closes a session that sent no request for this long.
	// Default: 0, which means 30 minutes; -1 never closes idle sessions.
	SessionTimeout time.Duration
	// BodyTimeout bounds the reading of a POST's body: a client that
	// sends it slower is answered 408 and its connection closed.
	// Default: 0, which means 60s.
	BodyTimeout time.Duration
}

// The defaults of [HTTPOptions].
const (
	DefaultSessionTimeout = 30 * time.Minute
	DefaultBodyTimeout    = 60 * time.Second
)

// Handler serves the tools over MCP's streamable HTTP transport, at
// whatever path it is mounted on: POST for messages (answered as a stream
// of server-sent events, so that approvals can be asked during a call),
// GET for the session's own stream, DELETE to end a session. A POST whose
// body is not a JSON-RPC message gets a JSON-RPC error (HTTP 400), one
// over [MaxMessageBytes] HTTP 413. Requests that arrive on a loopback
// address with another Host header are refused (DNS rebinding), and so is
// a browser's request from another origin (403, http.CrossOriginProtection).
func (s *Server) Handler(opts HTTPOptions) http.Handler {
	timeout := opts.SessionTimeout
	switch {
	case timeout == 0:
		timeout = DefaultSessionTimeout
	case timeout < 0:
		timeout = 0
	}
	var h http.Handler = sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return s.sdk }, &sdk.StreamableHTTPOptions{
		Logger:              s.log,
		SessionTimeout:      timeout,
		MaxRequestBodyBytes: MaxMessageBytes,
	})
	body := opts.BodyTimeout
	if body <= 0 {
		body = DefaultBodyTimeout
	}
	h = s.guard(h, body)
	if opts.APIKey != "" {
		h = bearer(opts.APIKey, h)
	}
	// A browser's request from another origin (a page the user visits
	// posting to a loopback server) is refused outright (403), whatever
	// its content type would have made the browser do first.
	h = http.NewCrossOriginProtection().Handler(h)
	return h
}

// guard answers a POST whose body is not a JSON-RPC message with a
// JSON-RPC error; the SDK would answer plain text.
func (s *Server) guard(next http.Handler, bodyTimeout time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.Body == nil {
			next.ServeHTTP(w, r)
			return
		}
		// The body within bodyTimeout; the deadline is lifted once it is
		// read, for the answer's stream.
		rc := http.NewResponseController(w)
		_ = rc.SetReadDeadline(time.Now().Add(bodyTimeout))
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxMessageBytes))
		if err != nil {
			var mbe *http.MaxBytesError
			switch {
			case errors.As(err, &mbe):
				writeRPCError(w, http.StatusRequestEntityTooLarge, jsonrpc.CodeInvalidRequest, jsonrpc.ID{},
					fmt.Sprintf("Invalid Request: a message longer than %d bytes", MaxMessageBytes))
			case errors.Is(err, os.ErrDeadlineExceeded):
				w.Header().Set("Connection", "close")
				http.Error(w, fmt.Sprintf("the request body did not arrive within %v", bodyTimeout), http.StatusRequestTimeout)
			default:
				http.Error(w, "reading the request body: "+err.Error(), http.StatusBadRequest)
			}
			return
		}
		_ = rc.SetReadDeadline(time.Time{})
		if code, id, problem := checkBody(body); problem != "" {
			s.log.Warn("mcp: answered an unreadable message with an error", "code", code, "problem", problem)
			writeRPCError(w, http.StatusBadRequest, code, id, problem)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.ContentLength = int64(len(body))
		next.ServeHTTP(w, r)
	})
}

// checkBody says what makes a POST's body unreadable, if anything. A batch
// (older protocol versions allow them) is passed on when each of its
// messages is readable: the SDK decides by the session's version.
func checkBody(body []byte) (code int64, id jsonrpc.ID, problem string) {
	body = bytes.TrimSpace(body)
	var batch []json.RawMessage
	if len(body) > 0 && body[0] == '[' && json.Unmarshal(body, &batch) == nil {
		if len(batch) == 0 {
			return jsonrpc.CodeInvalidRequest, id, "Invalid Request: an empty batch"
		}
		for _, m := range batch {
			if msg, code, id, problem := parse(m); msg == nil {
				return code, id, problem
			}
		}
		return 0, id, ""
	}
	if msg, code, id, problem := parse(body); msg == nil {
		return code, id, problem
	}
	return 0, id, ""
}

func writeRPCError(w http.ResponseWriter, status int, code int64, id jsonrpc.ID, message string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(errorResponse(code, id, message))
}

// codeUnauthorized is the JSON-RPC error code of a 401's body (the
// implementation-defined server error range).
const codeUnauthorized = -32001

// bearer lets through the requests that carry the key as a bearer token.
func bearer(key string, next http.Handler) http.Handler {
	want := sha256.Sum256([]byte(key))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth := r.Header.Get("Authorization")
		scheme, token, _ := strings.Cut(auth, " ")
		got := sha256.Sum256([]byte(strings.TrimSpace(token)))
		if !strings.EqualFold(scheme, "Bearer") || subtle.ConstantTimeCompare(got[:], want[:]) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="agentic-host"`)
			msg := "Unauthorized: this server needs its API key as Authorization: Bearer KEY"
			if auth != "" {
				msg = "Unauthorized: the API key is not this server's"
			}
			writeRPCError(w, http.StatusUnauthorized, codeUnauthorized, jsonrpc.ID{}, msg)
			return
		}
		next.ServeHTTP(w, r)
	})
}
