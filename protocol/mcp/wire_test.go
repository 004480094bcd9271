package mcp_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentichost/agentic/plugins"
	"github.com/agentichost/agentic/protocol/mcp"
)

// wireMessage is any JSON-RPC message, as read off the wire.
type wireMessage struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Method  string          `json:"method"`
	Params  json.RawMessage `json:"params"`
	Result  json.RawMessage `json:"result"`
	Error   *struct {
		Code    int64  `json:"code"`
		Message string `json:"message"`
	} `json:"error"`

	raw string // the line as it was read
}

// rawStdio talks to ServeStdio in raw bytes.
type rawStdio struct {
	t    *testing.T
	in   io.Writer
	out  *bufio.Reader
	done chan error
}

func startRawStdio(t *testing.T, srv *mcp.Server) *rawStdio {
	serverIn, in := io.Pipe()
	outR, serverOut := io.Pipe()
	r := &rawStdio{t: t, in: in, out: bufio.NewReaderSize(outR, 1<<20), done: make(chan error, 1)}
	go func() { r.done <- srv.ServeStdio(context.Background(), serverIn, serverOut) }()
	t.Cleanup(func() {
		in.Close()
		select {
		case err := <-r.done:
			if err != nil {
				t.Errorf("ServeStdio: %v", err)
			}
		case <-time.After(time.Minute):
			t.Error("ServeStdio did not return when its input ended (a guard against a hang)")
		}
		outR.Close()
	})
	return r
}

func (r *rawStdio) send(line string) {
	r.t.Helper()
	if _, err := io.WriteString(r.in, line+"\n"); err != nil {
		r.t.Fatalf("write: %v", err)
	}
}

// next reads the next message (a guard of a minute against a hang).
func (r *rawStdio) next() wireMessage {
	r.t.Helper()
	got := make(chan string, 1)
	go func() {
		line, _ := r.out.ReadString('\n')
		got <- line
	}()
	select {
	case line := <-got:
		var m wireMessage
		if err := json.Unmarshal([]byte(line), &m); err != nil || m.JSONRPC != "2.0" {
			r.t.Fatalf("the server wrote %q: not a JSON-RPC message (%v)", line, err)
		}
		m.raw = strings.TrimSuffix(line, "\n")
		return m
	case <-time.After(time.Minute):
		r.t.Fatal("no answer (a guard against a hang)")
	}
	return wireMessage{}
}

// answer reads messages until the response to id, skipping notifications.
func (r *rawStdio) answer(id string) wireMessage {
	r.t.Helper()
	for {
		m := r.next()
		if m.Method == "" && string(m.ID) == id {
			return m
		}
	}
}

// malformed are messages no JSON-RPC peer may send, with the error code
// and the id of the answer.
type badMessage struct {
	name, body string
	code       int64
	id, text   string
}

var malformed = []badMessage{
	{"not JSON", "hello, server", -32700, "null", "Parse error"},
	{"cut short", `{"jsonrpc":"2.0","id":1,"method":"tools/list"`, -32700, "null", "Parse error"},
	{"not an object", `42`, -32600, "null", "a JSON-RPC message is an object"},
	{"empty batch", `[]`, -32600, "null", "batch"},
	{"wrong version", `{"jsonrpc":"1.0","id":3,"method":"ping"}`, -32600, "3", "version"},
	{"bad id", `{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}`, -32600, "null", "Invalid Request"},
	{"neither request nor response", `{"jsonrpc":"2.0","params":{}}`, -32600, "null", "Invalid Request"},
}

// TestMalformedStdio: every line that is not a JSON-RPC message gets a
// JSON-RPC error (with the request's id when it has one), a line longer
// than MaxMessageBytes too, and the server goes on serving the session:
// the handshake, a listing, a protocol error for an unknown tool.
func TestMalformedStdio(t *testing.T) {
	e := newEnv(t, map[string][]byte{"get_account.wasm": getAccountWasm(t)}, plugins.Limits{}, mcp.Options{})
	r := startRawStdio(t, e.srv)
	cases := append(slices.Clone(malformed), badMessage{"batch", `[{"jsonrpc":"2.0","id":9,"method":"ping"}]`, -32600, "null", "batches are not supported"},
		badMessage{"too long", `{"jsonrpc":"2.0","id":4,"method":"ping","params":{"pad":"` + strings.Repeat("x", mcp.MaxMessageBytes) + `"}}`, -32600, "null", "longer than"})
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r.t = t
			r.send(tc.body)
			m := r.next()
			if m.Error == nil || m.Error.Code != tc.code || string(m.ID) != tc.id || !strings.Contains(m.Error.Message, tc.text) {
				t.Errorf("answer %+v (id %s), want code %d, id %s, saying %q", m.Error, m.ID, tc.code, tc.id, tc.text)
			}
		})
	}
	r.t = t
	r.send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
	if m := r.answer("1"); m.Error != nil || !strings.Contains(string(m.Result), `"listChanged":true`) {
		t.Fatalf("initialize: %s %+v", m.Result, m.Error)
	}
	r.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	r.send(`not JSON in the middle of a session`)
	if m := r.next(); m.Error == nil || m.Error.Code != -32700 {
		t.Fatalf("garbage in a session: %+v", m)
	}
	r.send(`{"jsonrpc":"2.0","id":2,"method":"tools/list"}`)
	if m := r.answer("2"); m.Error != nil || !strings.Contains(string(m.Result), `"get_account"`) {
		t.Fatalf("tools/list: %s %+v", m.Result, m.Error)
	}
	r.send(`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"nope","arguments":{}}}`)
	if m := r.answer("3"); m.Error == nil || m.Error.Code != -32602 {
		t.Fatalf("an unknown tool: %s %+v, want a JSON-RPC invalid-params error", m.Result, m.Error)
	}
	r.send(`{"jsonrpc":"2.0","id":4,"method":"tools/call","params":"not params"}`)
	if m := r.answer("4"); m.Error == nil {
		t.Fatalf("params that are not an object: %s, want a JSON-RPC error", m.Result)
	}
	r.send(`{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"get_account","arguments":{"account_id":"42"}}}`)
	if m := r.answer("5"); m.Error != nil || !strings.Contains(string(m.Result), `Katherine Johnson`) {
		t.Fatalf("a call after all that: %s %+v", m.Result, m.Error)
	}
}

// TestElicitationOverTheWire: a client of protocol 2025-06-18 that
// supports elicitation is asked, during the call, with an
// elicitation/create request; the call runs only once it answers accept.
func TestElicitationOverTheWire(t *testing.T) {
	web := newSite(t)
	e := newEnv(t, map[string][]byte{"hostile.wasm": hostileWasm(t)}, web.limits(), mcp.Options{})
	r := startRawStdio(t, e.srv)
	r.send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{"elicitation":{}},"clientInfo":{"name":"raw","version":"1"}}}`)
	r.answer("1")
	r.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	for i, action := range []string{"decline", "accept"} {
		id := fmt.Sprint(10 + i)
		r.send(`{"jsonrpc":"2.0","id":` + id + `,"method":"tools/call","params":{"name":"fetch","arguments":{"url":"` + web.URL + `/wire","method":"GET"}}}`)
		ask := r.next()
		if ask.Method != "elicitation/create" || !strings.Contains(string(ask.Params), "/wire") || !strings.Contains(string(ask.Params), "Approve") {
			t.Fatalf("%s: want an elicitation request, got %+v %s", action, ask, ask.Params)
		}
		if web.hits.Load() != 0 {
			t.Fatalf("%s: the call ran before the answer", action)
		}
		r.send(`{"jsonrpc":"2.0","id":` + string(ask.ID) + `,"result":{"action":"` + action + `"}}`)
		res := r.answer(id)
		var result struct {
			IsError bool `json:"isError"`
			Content []struct {
				Text string `json:"text"`
			} `json:"content"`
		}
		json.Unmarshal(res.Result, &result)
		if action == "accept" && (result.IsError || web.hits.Load() != 1) || action == "decline" && (!result.IsError || web.hits.Load() != 0) {
			t.Errorf("%s: %s, %d fetches", action, res.Result, web.hits.Load())
		}
	}
}

// TestMalformedHTTP: a POST whose body is not a JSON-RPC message gets a
// JSON-RPC error with HTTP 400 (413 past MaxMessageBytes); the endpoint
// then serves a session as usual.
func TestMalformedHTTP(t *testing.T) {
	e := newEnv(t, map[string][]byte{"get_account.wasm": getAccountWasm(t)}, plugins.Limits{}, mcp.Options{})
	hs := httptest.NewServer(e.srv.Handler(mcp.HTTPOptions{}))
	defer hs.Close()
	cases := append(slices.Clone(malformed), badMessage{"empty body", "", -32700, "null", "no message"},
		badMessage{"batch with a bad message", `[{"jsonrpc":"2.0","id":9,"method":"ping"},{"jsonrpc":"1.0"}]`, -32600, "null", "version"},
		badMessage{"too long", `{"jsonrpc":"2.0","id":4,"method":"ping","params":{"pad":"` + strings.Repeat("x", mcp.MaxMessageBytes) + `"}}`, -32600, "null", "longer than"})
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			status, m, _ := post(t, hs.URL, "", "", tc.body)
			want := http.StatusBadRequest
			if tc.name == "too long" {
				want = http.StatusRequestEntityTooLarge
			}
			if status != want || m.Error == nil || m.Error.Code != tc.code || string(m.ID) != tc.id || !strings.Contains(m.Error.Message, tc.text) {
				t.Errorf("HTTP %d, %+v (id %s): want %d with code %d, id %s, saying %q", status, m.Error, m.ID, want, tc.code, tc.id, tc.text)
			}
		})
	}
	status, m, _ := post(t, hs.URL, "", "", initialize)
	if status != http.StatusOK || m.Error != nil || !strings.Contains(string(m.Result), "agentic-host") {
		t.Errorf("initialize after the malformed requests: HTTP %d, %+v", status, m)
	}
}

const initialize = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`

// post sends one JSON-RPC POST and reads the answer (JSON, or the first
// message of an event stream).
func post(t *testing.T, url, auth, session, body string) (int, wireMessage, http.Header) {
	t.Helper()
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	if session != "" {
		req.Header.Set("Mcp-Session-Id", session)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	resp, err := http.DefaultClient.Do(req.WithContext(ctx))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m wireMessage
	br := bufio.NewReader(resp.Body)
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		for {
			line, err := br.ReadString('\n')
			if data, ok := strings.CutPrefix(line, "data: "); ok {
				json.Unmarshal([]byte(data), &m)
				break
			}
			if err != nil {
				break
			}
		}
	} else {
		b, _ := io.ReadAll(br)
		if err := json.Unmarshal(b, &m); err != nil {
			m.Error = &struct {
				Code    int64  `json:"code"`
				Message string `json:"message"`
			}{0, "not JSON: " + string(b)}
		}
	}
	return resp.StatusCode, m, resp.Header
}

// TestBearerKey: with an API key, a request without the right bearer
// token is refused with 401 before anything reads it; the right one (the
// scheme in any case) is served.
func TestBearerKey(t *testing.T) {
	e := newEnv(t, map[string][]byte{"get_account.wasm": getAccountWasm(t)}, plugins.Limits{}, mcp.Options{})
	hs := httptest.NewServer(e.srv.Handler(mcp.HTTPOptions{APIKey: "s3cret-key"}))
	defer hs.Close()
	for _, tc := range []struct {
		name, auth, body string
		status           int
	}{
		{"no key", "", initialize, http.StatusUnauthorized},
		{"wrong key", "Bearer s3cret-kez", initialize, http.StatusUnauthorized},
		{"a prefix of the key", "Bearer s3cret", initialize, http.StatusUnauthorized},
		{"another scheme", "Basic s3cret-key", initialize, http.StatusUnauthorized},
		{"no key, garbage", "", "garbage", http.StatusUnauthorized},
		{"the key, garbage", "Bearer s3cret-key", "garbage", http.StatusBadRequest},
		{"the key", "Bearer s3cret-key", initialize, http.StatusOK},
		{"the key, lower-case scheme", "bearer s3cret-key", initialize, http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, m, h := post(t, hs.URL, tc.auth, "", tc.body)
			if status != tc.status {
				t.Errorf("HTTP %d, want %d (%+v)", status, tc.status, m.Error)
			}
			if status == http.StatusUnauthorized && (h.Get("WWW-Authenticate") == "" || m.Error == nil || !strings.Contains(m.Error.Message, "Unauthorized")) {
				t.Errorf("a 401 without a challenge or a reason: %v %+v", h, m.Error)
			}
		})
	}
	// Every request of a session needs the key, not only the first.
	_, _, h := post(t, hs.URL, "Bearer s3cret-key", "", initialize)
	if status, _, _ := post(t, hs.URL, "", h.Get("Mcp-Session-Id"), `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`); status != http.StatusUnauthorized {
		t.Errorf("a session's request without the key: HTTP %d", status)
	}
}

// TestIdleSessionsClosed: a session that sends nothing for its
// SessionTimeout (30 minutes unless set; here a second) is closed: its id
// then answers 404, and a client starts a new session.
func TestIdleSessionsClosed(t *testing.T) {
	e := newEnv(t, map[string][]byte{"get_account.wasm": getAccountWasm(t)}, plugins.Limits{}, mcp.Options{})
	hs := httptest.NewServer(e.srv.Handler(mcp.HTTPOptions{SessionTimeout: time.Second}))
	defer hs.Close()
	status, _, h := post(t, hs.URL, "", "", initialize)
	session := h.Get("Mcp-Session-Id")
	if status != http.StatusOK || session == "" {
		t.Fatalf("initialize: HTTP %d, session %q", status, session)
	}
	post(t, hs.URL, "", session, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	if status, m, _ := post(t, hs.URL, "", session, `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`); status != http.StatusOK || m.Error != nil {
		t.Fatalf("tools/list in the new session: HTTP %d %+v", status, m.Error)
	}
	// Silences longer each time (a request ends one): a loaded machine
	// that is late to close the session after one gets a longer next.
	for silence := 1500 * time.Millisecond; ; silence *= 2 {
		time.Sleep(silence)
		status, _, _ := post(t, hs.URL, "", session, `{"jsonrpc":"2.0","id":3,"method":"tools/list"}`)
		if status == http.StatusNotFound {
			break
		}
		if status != http.StatusOK {
			t.Fatalf("the idle session's request: HTTP %d", status)
		}
		if silence > 20*time.Second { // a guard: the bound is a second of silence
			t.Fatalf("the session was still open after %s of silence", silence)
		}
	}
	if status, _, h := post(t, hs.URL, "", "", initialize); status != http.StatusOK || h.Get("Mcp-Session-Id") == session {
		t.Errorf("a new session after: HTTP %d, id %q", status, h.Get("Mcp-Session-Id"))
	}
}
