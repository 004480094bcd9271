package provider

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/packages/ssestream"
)

var (
	// ErrIncompleteStream is returned when a stream ends (the connection
	// closed, or [DONE] came) before any choice carried a finish reason:
	// the answer may be cut short. The partial result is returned with it.
	ErrIncompleteStream = errors.New("provider: stream ended without a finish reason")
	// ErrStalled is returned when a response body stays silent longer than
	// Config.IdleTimeout. The partial result is returned with it.
	ErrStalled = errors.New("provider: stream stalled")
	// ErrMalformedStream is returned when the endpoint answers 2xx with
	// something that is not a usable chat-completion stream: a chunk that
	// is not valid JSON, one the accumulator rejects, or a body that is not
	// an event stream.
	ErrMalformedStream = errors.New("provider: malformed stream")
	// ErrInvalidRequest is returned, before anything is sent, for a
	// [Request] that cannot be expressed on the wire (no model, a tool
	// schema that is not a JSON object, a part the role cannot carry, …).
	ErrInvalidRequest = errors.New("provider: invalid request")
	// ErrUnknownModel is returned by [Client.ContextWindow] for a model
	// the endpoint's model list does not name, or names without a context
	// length.
	ErrUnknownModel = errors.New("provider: unknown model")
)

// Error is a failure the provider reported: an HTTP error status before the
// stream began, or an error chunk in the middle of a stream. It carries
// everything a retry classifier needs; this package does not classify.
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

	err error // *openai.Error or *ssestream.StreamError, when there is one
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

// Unwrap returns the openai-go error this one was made from: an
// [*openai.Error] for an HTTP error, an [*ssestream.StreamError] for an
// error chunk; nil when there was none.
func (e *Error) Unwrap() error { return e.err }

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

// errorEnvelope is the error object of OpenAI-compatible error bodies and
// of OpenRouter's mid-stream error chunks.
type errorEnvelope struct {
	Code     json.RawMessage `json:"code"`
	Message  json.RawMessage `json:"message"`
	Type     json.RawMessage `json:"type"`
	Metadata json.RawMessage `json:"metadata"`
}

// fill sets e's Code, Message, Type and Metadata from the "error" member of
// body. It reports whether body had one.
func (e *Error) fill(body []byte) bool {
	var top struct {
		Error json.RawMessage `json:"error"`
	}
	if json.Unmarshal(body, &top) != nil || len(top.Error) == 0 {
		return false
	}
	var env errorEnvelope
	if json.Unmarshal(top.Error, &env) != nil {
		// "error" is not an object, e.g. a bare string.
		e.Message = jsonText(top.Error)
		return true
	}
	e.Code = jsonText(env.Code)
	e.Message = jsonText(env.Message)
	e.Type = jsonText(env.Type)
	if len(env.Metadata) > 0 && string(env.Metadata) != "null" {
		e.Metadata = append(json.RawMessage(nil), env.Metadata...)
	}
	return true
}

// httpError builds the Error of a non-2xx response whose body is body.
func httpError(res *http.Response, body []byte, cause error, now time.Time) *Error {
	e := &Error{StatusCode: res.StatusCode, Header: res.Header.Clone(), Body: body, err: cause}
	if !e.fill(body) {
		e.Message = truncate(strings.TrimSpace(string(body)), 500)
	}
	if e.Message == "" {
		e.Message = http.StatusText(res.StatusCode)
	}
	e.RetryAfter = retryAfter(res.Header, now)
	if e.RetryAfter == 0 {
		e.RetryAfter = metadataRetryAfter(e.Metadata)
	}
	return e
}

// fromAPIError converts openai-go's HTTP error.
func fromAPIError(apiErr *openai.Error, now time.Time) *Error {
	res := apiErr.Response
	if res == nil {
		return &Error{StatusCode: apiErr.StatusCode, Code: apiErr.Code, Type: apiErr.Type,
			Message: apiErr.Message, err: apiErr}
	}
	var body []byte
	if res.Body != nil {
		// openai-go has read the body and put it back as an in-memory reader.
		body, _ = io.ReadAll(io.LimitReader(res.Body, 1<<20))
		res.Body = io.NopCloser(bytes.NewReader(body))
	}
	e := httpError(res, body, apiErr, now)
	if e.Code == "" {
		e.Code = apiErr.Code
	}
	return e
}

// streamError converts an error chunk that ended a stream.
func streamError(se *ssestream.StreamError) *Error {
	data := bytes.TrimSpace(se.Event.Data)
	e := &Error{MidStream: true, Body: append([]byte(nil), data...), err: se}
	if !e.fill(data) {
		e.Message = se.Message
	}
	if n, err := strconv.Atoi(e.Code); err == nil && n >= 100 && n <= 599 {
		e.StatusCode = n
	}
	if e.Message == "" {
		if e.Code == "" && e.Metadata == nil {
			// openai-go ends a stream at any "error" key, even "error": null.
			e.Message = `the stream carried an empty "error" field, which ends it`
		} else {
			e.Message = "the provider reported an error mid-stream"
		}
	}
	e.RetryAfter = metadataRetryAfter(e.Metadata)
	return e
}

// retryAfter reads Retry-After-Ms, then Retry-After (delay-seconds or an
// HTTP date). It returns 0 when neither is usable.
func retryAfter(h http.Header, now time.Time) time.Duration {
	if v := strings.TrimSpace(h.Get("Retry-After-Ms")); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil {
			return durationOf(ms, time.Millisecond)
		}
	}
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil {
		return durationOf(s, time.Second)
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := t.Sub(now); d > 0 {
			return d
		}
	}
	return 0
}

// metadataRetryAfter reads the delay newer OpenRouter bodies carry in
// metadata.retry_after_seconds or metadata.headers["Retry-After"].
func metadataRetryAfter(meta json.RawMessage) time.Duration {
	if len(meta) == 0 {
		return 0
	}
	var m struct {
		Seconds json.RawMessage            `json:"retry_after_seconds"`
		Headers map[string]json.RawMessage `json:"headers"`
	}
	if json.Unmarshal(meta, &m) != nil {
		return 0
	}
	if s, err := strconv.ParseFloat(jsonText(m.Seconds), 64); err == nil {
		return durationOf(s, time.Second)
	}
	for k, v := range m.Headers {
		if strings.EqualFold(k, "Retry-After") {
			if s, err := strconv.ParseFloat(jsonText(v), 64); err == nil {
				return durationOf(s, time.Second)
			}
		}
	}
	return 0
}

// durationOf converts v units to a duration, clamping nonsense to 0 and
// huge values to a day.
func durationOf(v float64, unit time.Duration) time.Duration {
	if math.IsNaN(v) || v <= 0 {
		return 0
	}
	const max = 24 * time.Hour
	if v >= float64(max)/float64(unit) {
		return max
	}
	return time.Duration(v * float64(unit))
}

// jsonText renders a JSON scalar as text: a string unquoted, a number as
// written; "" for null, absent or an unparsable value. Objects and arrays
// come back as their JSON.
func jsonText(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
	if raw[0] == '"' {
		var s string
		if json.Unmarshal(raw, &s) == nil {
			return s
		}
		return ""
	}
	return string(raw)
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
