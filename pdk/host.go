package pdk

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// LogLevel is the level of a log line sent to the host.
type LogLevel int32

// The log levels; the host maps them onto its slog levels.
const (
	LogDebug LogLevel = 0
	LogInfo  LogLevel = 1
	LogWarn  LogLevel = 2
	LogError LogLevel = 3
)

// Log sends a line to the host's log, tagged with the plugin and tenant.
// The host caps how much one call may log; lines past the cap are dropped.
func Log(level LogLevel, msg string) { platformLog(int32(level), []byte(msg)) }

// Logf is [Log] with fmt.Sprintf formatting.
func Logf(level LogLevel, format string, args ...any) {
	Log(level, fmt.Sprintf(format, args...))
}

// Config returns the plugin's configuration value for key, set by the host
// for the tenant (endpoints, modes; never secrets).
func Config(key string) (string, bool) { return platformConfig(key) }

// ErrHostDenied is wrapped by the errors of host functions the tenant's
// limits deny (the key-value store when disabled, HTTP to a host not
// allowed).
var ErrHostDenied = errors.New("pdk: denied by the host")

// kv_get answers a block whose first byte is its status.
const (
	kvMissing = 0
	kvFound   = 1
	kvError   = 2
)

// KVGet returns the value stored under key in the tenant's key-value store;
// ok is false when there is none.
func KVGet(key string) (value []byte, ok bool, err error) {
	res := platformKVGet([]byte(key))
	if len(res) == 0 {
		return nil, false, errors.New("pdk: kv_get: empty answer from the host")
	}
	switch res[0] {
	case kvMissing:
		return nil, false, nil
	case kvFound:
		return res[1:], true, nil
	default:
		return nil, false, hostError("kv_get", res[1:])
	}
}

// KVSet stores value under key in the tenant's key-value store.
func KVSet(key string, value []byte) error {
	if msg := platformKVSet([]byte(key), value); msg != nil {
		return hostError("kv_set", msg)
	}
	return nil
}

// KVDelete removes key from the tenant's key-value store; removing a
// missing key is not an error.
func KVDelete(key string) error {
	if msg := platformKVDelete([]byte(key)); msg != nil {
		return hostError("kv_delete", msg)
	}
	return nil
}

// hostError turns a host's error message into an error; messages that
// start with "denied:" wrap ErrHostDenied.
func hostError(fn string, msg []byte) error {
	s := string(msg)
	if reason, ok := strings.CutPrefix(s, "denied:"); ok {
		return fmt.Errorf("%w: %s: %s", ErrHostDenied, fn, strings.TrimLeft(reason, " "))
	}
	return fmt.Errorf("pdk: %s: %s", fn, s)
}

// IdempotencyKey returns the Idempotency-Key header the host puts on the
// call's next [Fetch] (unless the request sets its own). A call's keys
// are derived from its session, its call id and the request's place in
// the call: a call that its host replays after a crash sends the same
// request with the same key, so a server that honours Idempotency-Key
// runs it once.
func IdempotencyKey() string { return string(platformIdempotencyKey()) }

// WaitEvent waits for the event named key to be posted to the call's
// session (POST /v1/sessions/{id}/events/{key}, or the host's
// Session.PostEvent) and returns its payload. The call holds nothing while
// it waits: the host ends it there and parks the run; once the event is
// posted, the call is replayed from its journal up to here, and WaitEvent
// returns. Only a durable call waits (a tool call of a run): elsewhere
// (plugin call, MCP) it fails. key: 1 to 256 bytes, no control
// characters.
func WaitEvent(key string) ([]byte, error) {
	res := platformWaitEvent([]byte(key))
	if len(res) == 0 {
		return nil, errors.New("pdk: wait_event: empty answer from the host")
	}
	if res[0] != 0 {
		return nil, hostError("wait_event", res[1:])
	}
	return res[1:], nil
}

// WaitFor waits d (rounded down to milliseconds). In a durable call it
// holds nothing while it waits (as [WaitEvent]); elsewhere it waits in
// place, within the call's deadline.
func WaitFor(d time.Duration) error {
	if msg := platformWaitFor(d.Milliseconds()); msg != nil {
		return hostError("wait_for", msg)
	}
	return nil
}

// HTTPRequest is a request made through the host. The host sends it only
// to the hosts the tenant allows, refuses private and loopback addresses
// unless allowed, re-checks every redirect and caps the response's size
// and time.
type HTTPRequest struct {
	// Method is the HTTP method. Default: GET.
	Method string
	// URL is an absolute http or https URL. Required.
	URL string
	// Headers are the request headers.
	Headers map[string]string
	// Body is the request body. Default: none.
	Body []byte
}

// HTTPResponse is the answer to an [HTTPRequest].
type HTTPResponse struct {
	// Status is the HTTP status code.
	Status int
	// Headers are the response headers (lower-case names, values joined
	// with ", ").
	Headers map[string]string
	// Body is the response body.
	Body []byte
}

type httpWireRequest struct {
	Method     string            `json:"method,omitempty"`
	URL        string            `json:"url"`
	Headers    map[string]string `json:"headers,omitempty"`
	Body       *string           `json:"body,omitempty"`
	BodyBase64 []byte            `json:"body_base64,omitempty"`
}

type httpWireResponse struct {
	Status     int               `json:"status"`
	Headers    map[string]string `json:"headers"`
	Body       *string           `json:"body"`
	BodyBase64 string            `json:"body_base64"`
	Error      string            `json:"error"`
	Denied     bool              `json:"denied"`
}

// Fetch sends req through the host and returns its response. A response
// with any status is a response, not an error; errors are the host's
// refusals (wrapping [ErrHostDenied]) and transport failures.
func Fetch(req HTTPRequest) (*HTTPResponse, error) {
	w := httpWireRequest{Method: req.Method, URL: req.URL, Headers: req.Headers}
	if req.Body != nil {
		if utf8.Valid(req.Body) {
			s := string(req.Body)
			w.Body = &s
		} else {
			w.BodyBase64 = req.Body
		}
	}
	raw, err := json.Marshal(w)
	if err != nil {
		return nil, err
	}
	var res httpWireResponse
	if err := json.Unmarshal(platformHTTP(raw), &res); err != nil {
		return nil, fmt.Errorf("pdk: http_request: malformed answer from the host: %w", err)
	}
	if res.Error != "" {
		if res.Denied {
			return nil, fmt.Errorf("%w: http_request: %s", ErrHostDenied, res.Error)
		}
		return nil, fmt.Errorf("pdk: http_request: %s", res.Error)
	}
	out := &HTTPResponse{Status: res.Status, Headers: res.Headers}
	switch {
	case res.Body != nil:
		out.Body = []byte(*res.Body)
	case res.BodyBase64 != "":
		out.Body, err = base64.StdEncoding.DecodeString(res.BodyBase64)
		if err != nil {
			return nil, fmt.Errorf("pdk: http_request: bad body_base64: %w", err)
		}
	}
	return out, nil
}
