package ledger

import (
	"fmt"
	"strings"
)

// ToolTraffic is what a plugin's tool call did through the host's
// functions: its HTTP requests and its key-value store accesses, in the
// order they happened (Seq), as a bounded record kept beside the call's
// result. A plugin tool's result always carries one (empty when the call
// did nothing through them), so that a result without it tells a call
// recorded before the host recorded traffic, or a tool that is not a
// plugin.
//
// The record is made to be replayed (package plugins, ReplayCall): every
// request with its method, URL, the names of its headers and its body's
// digest, every response with its status, headers and body, every value a
// read returned. Nothing of what the host adds at egress (a secret
// header), and no request header's value, is in it. A call that did more
// than the record keeps is marked: Truncated when entries were dropped,
// an entry's BodyOmitted or ValueOmitted when its bytes were not kept
// (their digest and size still are). [ToolTraffic.Replayable] says
// whether the record is whole.
type ToolTraffic struct {
	// HTTP are the call's requests (http_request), redirects followed
	// within one.
	HTTP []HTTPExchange `json:"http,omitempty"`
	// KV are the call's key-value store accesses (kv_get, kv_set,
	// kv_delete).
	KV []KVAccess `json:"kv,omitempty"`
	// Truncated tells that the call made more accesses than the record
	// keeps: Dropped of them are not in it.
	Truncated bool `json:"truncated,omitempty"`
	// Dropped counts the accesses left out of the record.
	Dropped int `json:"dropped,omitempty"`
}

// HTTPExchange is one http_request of a plugin's call: the request as the
// plugin made it (never the headers' values, never a secret the host
// added) and the answer it got.
type HTTPExchange struct {
	// Seq is the access's place in the call's traffic, from 0.
	Seq int `json:"seq,omitempty"`
	// Method is the request's method, upper case ("GET" when the plugin
	// gave none).
	Method string `json:"method"`
	// URL is the URL the plugin asked for, query included (the host
	// refuses credentials in a URL). One longer than the record keeps is
	// cut, and URLDigest is then the digest of the whole of it.
	URL string `json:"url"`
	// URLDigest is "sha256:" and the hex SHA-256 of the URL, set when the
	// URL is cut.
	URLDigest string `json:"url_digest,omitempty"`
	// RequestHeaders are the names (lower case, sorted) of the headers the
	// plugin set; their values are never recorded.
	RequestHeaders []string `json:"request_headers,omitempty"`
	// RequestBytes and RequestDigest are the request body's size and
	// "sha256:…" digest (none without a body).
	RequestBytes  int64  `json:"request_bytes,omitempty"`
	RequestDigest string `json:"request_digest,omitempty"`
	// Status is the response's HTTP status; 0 when the request failed.
	Status int `json:"status,omitempty"`
	// ResponseHeaders are the response's headers as the plugin got them,
	// "name: value" (lower-case names, sorted; a set-cookie's value is not
	// recorded).
	ResponseHeaders []string `json:"response_headers,omitempty"`
	// ResponseBytes and ResponseDigest are the response body's size and
	// digest.
	ResponseBytes  int64  `json:"response_bytes,omitempty"`
	ResponseDigest string `json:"response_digest,omitempty"`
	// ResponseBody is the response body when it is UTF-8 text, and
	// ResponseBodyBase64 when it is not; neither when BodyOmitted.
	ResponseBody       string `json:"response_body,omitempty"`
	ResponseBodyBase64 []byte `json:"response_body_base64,omitempty"`
	// BodyOmitted tells that the response body was not kept: the call's
	// record had no room left for it.
	BodyOmitted bool `json:"body_omitted,omitempty"`
	// Error is what the plugin was told when the request failed or was
	// refused; Denied marks a refusal by the sandbox.
	Error  string `json:"error,omitempty"`
	Denied bool   `json:"denied,omitempty"`
	// DurationMS is how long the request took, in milliseconds.
	DurationMS int64 `json:"duration_ms,omitempty"`
}

// The key-value operations of a [KVAccess].
const (
	KVGet    = "get"
	KVSet    = "set"
	KVDelete = "delete"
)

// KVAccess is one access of a plugin's call to its tenant's key-value
// store.
type KVAccess struct {
	// Seq is the access's place in the call's traffic, from 0.
	Seq int `json:"seq,omitempty"`
	// Op is KVGet, KVSet or KVDelete.
	Op string `json:"op"`
	// Key is the key when it is UTF-8 text, KeyBase64 when it is not.
	Key       string `json:"key,omitempty"`
	KeyBase64 []byte `json:"key_base64,omitempty"`
	// Found tells that a get found the key.
	Found bool `json:"found,omitempty"`
	// ValueBytes and ValueDigest are the size and digest of the value a
	// get found or a set wrote.
	ValueBytes  int64  `json:"value_bytes,omitempty"`
	ValueDigest string `json:"value_digest,omitempty"`
	// Value is the value a get found, when it is UTF-8 text, ValueBase64
	// when it is not; neither when ValueOmitted (the record had no room
	// left) nor for a set (its digest is enough to compare).
	Value        string `json:"value,omitempty"`
	ValueBase64  []byte `json:"value_base64,omitempty"`
	ValueOmitted bool   `json:"value_omitted,omitempty"`
	// Error is what the plugin was told when the access failed or was
	// refused.
	Error string `json:"error,omitempty"`
}

// Replayable reports whether the record holds everything a replay needs:
// every access, every response body and every value read. When it does
// not, why says what is missing.
func (t *ToolTraffic) Replayable() (ok bool, why string) {
	if t == nil {
		return false, "no traffic was recorded with the call (a tool that is not a plugin, or a ledger written before traffic was recorded)"
	}
	if t.Truncated {
		return false, fmt.Sprintf("the call made more host-function calls than the record keeps (%d not recorded)", t.Dropped)
	}
	for _, x := range t.HTTP {
		if x.BodyOmitted {
			return false, fmt.Sprintf("response bodies not recorded in full (that of %s %s)", x.Method, x.URL)
		}
	}
	for _, a := range t.KV {
		if a.ValueOmitted {
			return false, fmt.Sprintf("values read not recorded in full (that of key %q)", a.KeyText())
		}
	}
	return true, ""
}

// Empty reports whether the call did nothing through the host's
// functions.
func (t *ToolTraffic) Empty() bool {
	return t == nil || len(t.HTTP) == 0 && len(t.KV) == 0 && t.Dropped == 0
}

// Summary describes the traffic in a few words: "2 HTTP requests, 3 KV
// accesses (1 written)", "" when there is none.
func (t *ToolTraffic) Summary() string {
	if t.Empty() {
		return ""
	}
	var parts []string
	if n := len(t.HTTP); n > 0 {
		parts = append(parts, plural(n, "HTTP request"))
	}
	if n := len(t.KV); n > 0 {
		w := 0
		for _, a := range t.KV {
			if a.Op != KVGet {
				w++
			}
		}
		s := plural(n, "KV access")
		if w > 0 {
			s += fmt.Sprintf(" (%d written)", w)
		}
		parts = append(parts, s)
	}
	if t.Truncated {
		parts = append(parts, fmt.Sprintf("%d more not recorded", t.Dropped))
	}
	return strings.Join(parts, ", ")
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	if strings.HasSuffix(what, "s") {
		return fmt.Sprintf("%d %ses", n, what)
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// KeyText is the access's key as text: Key, or its bytes quoted when they
// are not UTF-8.
func (a KVAccess) KeyText() string {
	if a.KeyBase64 != nil {
		return fmt.Sprintf("%q", a.KeyBase64)
	}
	return a.Key
}

// withoutBodies returns a copy of t without the recorded response bodies
// and values (their sizes and digests stay), for a transcript a client
// renders.
func (t *ToolTraffic) withoutBodies() *ToolTraffic {
	if t == nil {
		return nil
	}
	out := *t
	if t.HTTP != nil {
		out.HTTP = make([]HTTPExchange, len(t.HTTP))
		for i, x := range t.HTTP {
			x.ResponseBody, x.ResponseBodyBase64 = "", nil
			out.HTTP[i] = x
		}
	}
	if t.KV != nil {
		out.KV = make([]KVAccess, len(t.KV))
		for i, a := range t.KV {
			a.Value, a.ValueBase64 = "", nil
			out.KV[i] = a
		}
	}
	return &out
}

// RecordedCall is a tool call of a session with its recorded result.
type RecordedCall struct {
	// RunID is the run that made the call.
	RunID string
	// Call is the model's call (its id, tool and arguments), Result what
	// the ledger recorded of it.
	Call   ToolCall
	Result ToolResult
}

// RecordedCalls returns the tool calls of a session that have a result, in
// the order of their results. A result answers the first call with its id,
// among those of its run's last pass, that has none yet (as
// [ProjectSession] pairs them). It is a pure function of the events.
func RecordedCalls(events []Event) []RecordedCall {
	var out []RecordedCall
	open := map[string][]ToolCall{} // run → its last pass's calls without a result
	for _, e := range events {
		switch {
		case e.Step != nil:
			open[e.RunID] = append([]ToolCall(nil), e.Step.ToolCalls...)
		case e.ToolResult != nil:
			calls := open[e.RunID]
			for i, c := range calls {
				if c.ID == e.ToolResult.CallID {
					out = append(out, RecordedCall{RunID: e.RunID, Call: c, Result: *e.ToolResult})
					open[e.RunID] = append(calls[:i:i], calls[i+1:]...)
					break
				}
			}
		}
	}
	return out
}
