//go:build !wasip1

package pdk

import (
	"encoding/json"
	"fmt"
	"sync"
	"time"
)

// FakeHost stands in for the host when the kit is built natively (for
// tests of a plugin's handlers without Wasm). It is not part of Wasm builds.
type FakeHost struct {
	mu sync.Mutex
	// KV is the key-value store; nil denies the key-value store.
	KV map[string][]byte
	// Fetch answers HTTP requests; nil denies HTTP.
	Fetch func(HTTPRequest) (*HTTPResponse, error)
	// Logs collects the lines logged, as "LEVEL message".
	Logs []string
	// Config is the plugin's configuration.
	Config map[string]string
	// Requests counts the requests Fetch sent, for IdempotencyKey.
	Requests int
	// Events are the events posted, for WaitEvent: a key missing fails it
	// (natively nothing can wait).
	Events map[string][]byte
	// Waited sums the durations WaitFor was asked to wait (natively it
	// returns at once).
	Waited time.Duration
}

// TestHost is the host of native builds. Tests may replace it or its
// fields. Default: an empty key-value store, HTTP denied.
var TestHost = &FakeHost{KV: map[string][]byte{}}

func platformConfig(key string) (string, bool) {
	h := TestHost
	h.mu.Lock()
	defer h.mu.Unlock()
	v, ok := h.Config[key]
	return v, ok
}

func platformLog(level int32, msg []byte) {
	h := TestHost
	h.mu.Lock()
	defer h.mu.Unlock()
	names := map[int32]string{0: "DEBUG", 1: "INFO", 2: "WARN", 3: "ERROR"}
	h.Logs = append(h.Logs, names[level]+" "+string(msg))
}

func platformKVGet(key []byte) []byte {
	h := TestHost
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.KV == nil {
		return append([]byte{kvError}, "denied: the key-value store is disabled"...)
	}
	v, ok := h.KV[string(key)]
	if !ok {
		return []byte{kvMissing}
	}
	return append([]byte{kvFound}, v...)
}

func platformKVSet(key, value []byte) []byte {
	h := TestHost
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.KV == nil {
		return []byte("denied: the key-value store is disabled")
	}
	h.KV[string(key)] = append([]byte(nil), value...)
	return nil
}

func platformKVDelete(key []byte) []byte {
	h := TestHost
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.KV == nil {
		return []byte("denied: the key-value store is disabled")
	}
	delete(h.KV, string(key))
	return nil
}

func platformHTTP(raw []byte) []byte {
	h := TestHost
	var w httpWireRequest
	if err := json.Unmarshal(raw, &w); err != nil {
		return []byte(fmt.Sprintf(`{"error":%q}`, err.Error()))
	}
	if h.Fetch == nil {
		b, _ := json.Marshal(map[string]any{"error": "HTTP is not allowed for this plugin", "denied": true})
		return b
	}
	req := HTTPRequest{Method: w.Method, URL: w.URL, Headers: w.Headers, Body: w.BodyBase64}
	if w.Body != nil {
		req.Body = []byte(*w.Body)
	}
	h.mu.Lock()
	h.Requests++
	if _, ok := req.Headers["Idempotency-Key"]; !ok {
		if req.Headers == nil {
			req.Headers = map[string]string{}
		}
		req.Headers["Idempotency-Key"] = fmt.Sprintf("test-key-%d", h.Requests)
	}
	h.mu.Unlock()
	res, err := h.Fetch(req)
	if err != nil {
		b, _ := json.Marshal(map[string]any{"error": err.Error()})
		return b
	}
	body := string(res.Body)
	b, _ := json.Marshal(map[string]any{"status": res.Status, "headers": res.Headers, "body": body})
	return b
}

// platformIdempotencyKey is the key of the next request: "test-key-" and
// its number, from 1.
func platformIdempotencyKey() []byte {
	h := TestHost
	h.mu.Lock()
	defer h.mu.Unlock()
	return []byte(fmt.Sprintf("test-key-%d", h.Requests+1))
}

func platformWaitEvent(key []byte) []byte {
	h := TestHost
	h.mu.Lock()
	defer h.mu.Unlock()
	v, ok := h.Events[string(key)]
	if !ok {
		return append([]byte{kvError}, fmt.Sprintf("no event %q was posted (TestHost.Events)", key)...)
	}
	return append([]byte{0}, v...)
}

func platformWaitFor(ms int64) []byte {
	h := TestHost
	h.mu.Lock()
	defer h.mu.Unlock()
	h.Waited += time.Duration(ms) * time.Millisecond
	return nil
}
