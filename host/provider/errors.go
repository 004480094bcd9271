package provider

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/packages/ssestream"

	"github.com/agentichost/agentic/host/model"
)

var (
	// ErrUnknownModel is returned by [Client.ContextWindow] for a model
	// the endpoint's model list does not name, or names without a context
	// length.
	ErrUnknownModel = errors.New("provider: unknown model")
)

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
func fill(e *model.Error, body []byte) bool {
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
func httpError(res *http.Response, body []byte, cause error, now time.Time) *model.Error {
	e := &model.Error{StatusCode: res.StatusCode, Header: res.Header.Clone(), Body: body, Err: cause}
	if !fill(e, body) {
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
func fromAPIError(apiErr *openai.Error, now time.Time) *model.Error {
	res := apiErr.Response
	if res == nil {
		return &model.Error{StatusCode: apiErr.StatusCode, Code: apiErr.Code, Type: apiErr.Type,
			Message: apiErr.Message, Err: apiErr}
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
func streamError(se *ssestream.StreamError) *model.Error {
	data := bytes.TrimSpace(se.Event.Data)
	e := &model.Error{MidStream: true, Body: append([]byte(nil), data...), Err: se}
	if !fill(e, data) {
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
