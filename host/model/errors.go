package model

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// The sentinel errors of model calls: what a client returns when a pass
// cannot complete, for [Classify] to decide on.
var (
	// ErrIncompleteStream is returned when a stream ends (the connection
	// closed, or [DONE] came) before any choice carried a finish reason:
	// the answer may be cut short. The partial result is returned with it.
	ErrIncompleteStream = errors.New("model: stream ended without a finish reason")
	// ErrStalled is returned when a response stays silent longer than the
	// client allows (provider.Config.IdleTimeout). The partial result is
	// returned with it.
	ErrStalled = errors.New("model: stream stalled")
	// ErrMalformedStream is returned when the endpoint answers 2xx with
	// something that is not a usable chat-completion stream: a chunk that
	// is not valid JSON, one the accumulator rejects, or a body that is not
	// an event stream.
	ErrMalformedStream = errors.New("model: malformed stream")
	// ErrInvalidRequest is returned, before anything is sent, for a
	// [Request] that cannot be expressed on the wire (no model, a tool
	// schema that is not a JSON object, a part the role cannot carry, …).
	ErrInvalidRequest = errors.New("model: invalid request")
)

// Error is a failure the provider reported: an HTTP error status before the
// stream began, or an error chunk in the middle of a stream. It carries
// everything [Classify] needs.
type Error struct {
	// StatusCode is the HTTP status of a pre-stream error. For a mid-stream
	// error it is the error chunk's code when that code is a number in the
	// HTTP status range (OpenRouter sends e.g. 429 or 502), else 0.
	StatusCode int
	// Code is the provider's error code as a string: "context_length_exceeded",
	// "server_error", or a numeric code such as "429". Empty when none.
	Code string
	// Type is the error's "type" field when the provider sent one (OpenAI
	// and Anthropic do, e.g. "invalid_request_error").
	Type string
	// Message is the provider's message; for a body that is not a JSON
	// error envelope, its text (trimmed), else the HTTP status text.
	Message string
	// Metadata is the raw JSON of error.metadata, nil when absent.
	// OpenRouter puts the upstream provider's own error, usually as a JSON
	// string, in metadata.raw (see [Error.RawMetadata]).
	Metadata json.RawMessage
	// RetryAfter is how long the provider asked the caller to wait: the
	// Retry-After-Ms header, else Retry-After (seconds or an HTTP date),
	// else metadata.retry_after_seconds or metadata.headers.Retry-After.
	// 0 when none.
	RetryAfter time.Duration
	// MidStream tells that the error arrived after the response began
	// (an error chunk, or finish_reason "error"): tokens may have been
	// generated and billed.
	MidStream bool
	// Header is the response's header for a pre-stream error, nil for a
	// mid-stream one (e.g. for OpenRouter's x-ratelimit-reset).
	Header http.Header
	// Body is the raw response body of a pre-stream error, or the raw
	// error chunk of a mid-stream one.
	Body []byte

	// Err is the error of the client library this one was made from (for
	// openai-go, an *openai.Error or an *ssestream.StreamError); nil when
	// there is none.
	Err error
}

// Error describes the failure on one line.
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("provider: ")
	if e.MidStream {
		b.WriteString("error mid-stream")
		if e.StatusCode != 0 {
			fmt.Fprintf(&b, " (HTTP %d)", e.StatusCode)
		}
	} else {
		fmt.Fprintf(&b, "HTTP %d", e.StatusCode)
		if t := http.StatusText(e.StatusCode); t != "" {
			b.WriteString(" " + t)
		}
	}
	if e.Message != "" {
		b.WriteString(": " + e.Message)
	}
	var notes []string
	if e.Code != "" && e.Code != strconv.Itoa(e.StatusCode) {
		notes = append(notes, "code "+e.Code)
	}
	if raw := e.RawMetadata(); raw != "" {
		notes = append(notes, "upstream: "+truncate(raw, 300))
	}
	if e.RetryAfter > 0 {
		notes = append(notes, "retry after "+e.RetryAfter.String())
	}
	if len(notes) > 0 {
		b.WriteString(" (" + strings.Join(notes, "; ") + ")")
	}
	return b.String()
}

// Unwrap returns Err, the client library's error this one was made from.
func (e *Error) Unwrap() error { return e.Err }

// RawMetadata returns metadata.raw as text: the string itself when it is a
// JSON string (OpenRouter's usual form), else its JSON. Empty when absent.
func (e *Error) RawMetadata() string {
	if len(e.Metadata) == 0 {
		return ""
	}
	var m struct {
		Raw json.RawMessage `json:"raw"`
	}
	if json.Unmarshal(e.Metadata, &m) != nil || len(m.Raw) == 0 || string(m.Raw) == "null" {
		return ""
	}
	var s string
	if json.Unmarshal(m.Raw, &s) == nil {
		return s
	}
	return string(m.Raw)
}

// truncate shortens s to at most n bytes on a rune boundary, marking the
// cut with "…".
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
