package server_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentichost/agentic/host/hosttest"
	"github.com/agentichost/agentic/plugins/plugintest"
	"github.com/agentichost/agentic/server"
	"github.com/agentichost/agentic/storage"
	"github.com/agentichost/agentic/storage/memory"
)

// testServer is a server over a memory store and a scripted model, with
// tenants acme and beta, each with a key.
type testServer struct {
	*httptest.Server
	srv        *server.Server
	store      storage.Storage
	model      *hosttest.Model
	acme, beta string // their API keys
}

func newTestServer(t *testing.T, mutate ...func(*server.Config)) *testServer {
	t.Helper()
	ts := &testServer{store: memory.New(), model: hosttest.NewModel(), acme: "ak_test_acme", beta: "ak_test_beta"}
	// The compiled plugins are cached where plugintest caches them: a
	// plugin is compiled once per machine, not in a race-built compiler
	// process per test.
	cfg := server.Config{PluginsDir: t.TempDir(), PluginCacheDir: filepath.Join(plugintest.CacheDir(), "wazero"), Tenants: map[string]server.TenantConfig{
		"acme": {Keys: []server.KeyConfig{{Hash: server.HashKey(ts.acme)}}, Models: []string{hosttest.DefaultModel}},
		"beta": {Keys: []server.KeyConfig{{Hash: server.HashKey(ts.beta)}}, Models: []string{hosttest.DefaultModel}},
	}}
	for _, m := range mutate {
		m(&cfg)
	}
	srv, err := server.New(server.Options{Config: cfg, Storage: ts.store, Model: ts.model})
	if err != nil {
		t.Fatal(err)
	}
	ts.srv = srv
	ts.Server = httptest.NewServer(srv)
	t.Cleanup(func() {
		ts.Server.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		srv.Close(ctx)
	})
	return ts
}

// do sends a request with key and returns the status and the body.
func (ts *testServer) do(t *testing.T, key, method, path, body string, header ...string) (int, string) {
	t.Helper()
	code, _, b := ts.doHeader(t, key, method, path, body, header...)
	return code, b
}

// doHeader is do that also returns the response's headers.
func (ts *testServer) doHeader(t *testing.T, key, method, path, body string, header ...string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest(method, ts.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, res.Header, string(b)
}

// TestMessagesAndTranscript: a message is accepted (202 with its ids), a
// waited one answers with the run's result, the transcript and the status
// follow, and errors are JSON with a code.
func TestMessagesAndTranscript(t *testing.T) {
	ts := newTestServer(t)
	code, body := ts.do(t, ts.acme, "POST", "/v1/sessions/s1/messages?wait=true", `{"text":"hello"}`)
	if code != 200 || !strings.Contains(body, `"status":"completed"`) || !strings.Contains(body, `"text":"You said: hello"`) {
		t.Fatalf("wait: %d %s", code, body)
	}
	code, body = ts.do(t, ts.acme, "POST", "/v1/sessions/s1/messages", `{"text":"again"}`, "Idempotency-Key", "k1")
	if code != 202 || !strings.Contains(body, `"message_id"`) || !strings.Contains(body, `"run_id"`) {
		t.Fatalf("accept: %d %s", code, body)
	}
	var first map[string]string
	json.Unmarshal([]byte(body), &first)
	code, body = ts.do(t, ts.acme, "POST", "/v1/sessions/s1/messages", `{"text":"again"}`, "Idempotency-Key", "k1")
	var second map[string]string
	json.Unmarshal([]byte(body), &second)
	if code != 202 || second["message_id"] != first["message_id"] {
		t.Fatalf("a retried request: %d %s, want the first message %s", code, body, first["message_id"])
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, body = ts.do(t, ts.acme, "GET", "/v1/sessions/s1", "")
		if strings.Contains(body, `"state":"completed"`) || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if code != 200 || !strings.Contains(body, `"usage"`) {
		t.Fatalf("session: %d %s", code, body)
	}
	code, body = ts.do(t, ts.acme, "GET", "/v1/sessions/s1/transcript", "")
	if code != 200 || strings.Count(body, `"kind":"user"`) != 2 || !strings.Contains(body, "You said: again") {
		t.Fatalf("transcript: %d %s", code, body)
	}
	code, body = ts.do(t, ts.acme, "GET", "/v1/sessions", "")
	if code != 200 || !strings.Contains(body, `"id":"s1"`) {
		t.Fatalf("list: %d %s", code, body)
	}
	for _, c := range []struct {
		body, want string
	}{
		{`{"text":"x","colour":"red"}`, `unknown field \"colour\"`},
		{`{"text":5}`, `field \"text\"`},
		{`not json`, "not JSON"},
		{``, "empty"},
		{`{"text":"x","agent":"nobody"}`, `no agent \"nobody\"`},
		{`{"text":""}`, "invalid input"},
	} {
		code, body := ts.do(t, ts.acme, "POST", "/v1/sessions/s2/messages", c.body)
		if code != 400 || !strings.Contains(body, `"code":"invalid_request"`) || !strings.Contains(body, c.want) {
			t.Errorf("body %q: %d %s, want 400 saying %q", c.body, code, body, c.want)
		}
	}
	if code, body := ts.do(t, ts.acme, "POST", "/v1/sessions/s2/messages", `{"text":"`+strings.Repeat("x", 2<<20)+`"}`); code != 413 {
		t.Errorf("a 2 MiB body: %d %s", code, body)
	}
}

// TestTenantsAreIsolated: another tenant's session answers 404, exactly as
// a missing one; no key or a bad key answers 401.
func TestTenantsAreIsolated(t *testing.T) {
	ts := newTestServer(t)
	if code, body := ts.do(t, ts.acme, "POST", "/v1/sessions/s1/messages?wait=true", `{"text":"secret"}`); code != 200 {
		t.Fatalf("%d %s", code, body)
	}
	missing, _ := ts.do(t, ts.beta, "GET", "/v1/sessions/nope/transcript", "")
	_, missingBody := ts.do(t, ts.beta, "GET", "/v1/sessions/nope", "")
	for _, path := range []string{"/v1/sessions/s1", "/v1/sessions/s1/transcript", "/v1/sessions/s1/events"} {
		code, body := ts.do(t, ts.beta, "GET", path, "")
		if code != 404 || code != missing || strings.Contains(body, "secret") {
			t.Errorf("beta GET %s: %d %s, want 404 as for a missing session", path, code, body)
		}
	}
	if _, body := ts.do(t, ts.beta, "GET", "/v1/sessions/s1", ""); strings.ReplaceAll(body, "s1", "nope") != missingBody {
		t.Errorf("another tenant's session %q differs from a missing one %q", body, missingBody)
	}
	if code, body := ts.do(t, ts.beta, "POST", "/v1/sessions/s1/cancel", ""); code != 404 {
		t.Errorf("beta cancels acme's session: %d %s", code, body)
	}
	if code, body := ts.do(t, ts.beta, "GET", "/v1/sessions", ""); code != 200 || strings.Contains(body, "s1") {
		t.Errorf("beta lists: %d %s", code, body)
	}
	for _, key := range []string{"", "ak_wrong"} {
		if code, body := ts.do(t, key, "GET", "/v1/sessions", ""); code != 401 || !strings.Contains(body, `"code":"unauthorized"`) {
			t.Errorf("key %q: %d %s, want 401", key, code, body)
		}
	}
	// The key in X-API-Key, or after a Bearer scheme spelt in any case,
	// serves as well; a wrong one in X-API-Key answers 401.
	for _, h := range [][]string{{"X-API-Key", ts.acme}, {"Authorization", "bearer " + ts.acme}, {"Authorization", "BEARER " + ts.acme}} {
		if code, body := ts.do(t, "", "GET", "/v1/sessions", "", h...); code != 200 || !strings.Contains(body, "s1") {
			t.Errorf("%s: %s: %d %s, want acme's sessions", h[0], h[1][:min(len(h[1]), 7)], code, body)
		}
	}
	if code, _ := ts.do(t, "", "GET", "/v1/sessions", "", "X-API-Key", "ak_wrong"); code != 401 {
		t.Errorf("a wrong key in X-API-Key: %d, want 401", code)
	}
}

// TestEventStream: a client reads the session's events over SSE — a
// snapshot, then the run's progress — leaves mid-stream, comes back with
// Last-Event-ID, and ends with exactly the transcript's text.
func TestEventStream(t *testing.T) {
	ts := newTestServer(t)
	ts.model.Delay = 3 * time.Millisecond
	ts.model.Enqueue(hosttest.Reply{Text: strings.Repeat("word ", 80)})
	if code, body := ts.do(t, ts.acme, "POST", "/v1/sessions/s1/messages", `{"text":"talk"}`); code != 202 {
		t.Fatalf("%d %s", code, body)
	}
	text := map[string]string{}
	read := func(lastID string, n int) (string, bool) {
		req, _ := http.NewRequest("GET", ts.URL+"/v1/sessions/s1/events", nil)
		req.Header.Set("Authorization", "Bearer "+ts.acme)
		if lastID != "" {
			req.Header.Set("Last-Event-ID", lastID)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		if ct := res.Header.Get("Content-Type"); ct != "text/event-stream" {
			t.Fatalf("content type %q", ct)
		}
		sc := bufio.NewScanner(res.Body)
		sc.Buffer(nil, 1<<20)
		var event, id string
		for seen := 0; sc.Scan(); {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "event: "):
				event = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "id: "):
				id = strings.TrimPrefix(line, "id: ")
			case strings.HasPrefix(line, "data: "):
				data := strings.TrimPrefix(line, "data: ")
				switch event {
				case "snapshot":
					var s struct {
						Transcript struct {
							Items []struct{ ID, Kind, Text string }
						}
					}
					json.Unmarshal([]byte(data), &s)
					text = map[string]string{}
					for _, it := range s.Transcript.Items {
						if it.Kind == "response" {
							text[it.ID] = it.Text
						}
					}
				case "progress":
					var p struct {
						Type, ResponseID, Delta string
						Offset                  int
					}
					json.Unmarshal([]byte(data), &p)
					if p.Type == "text" {
						if have := len([]rune(text[p.ResponseID])); have != p.Offset {
							t.Fatalf("text at offset %d, the client has %d characters", p.Offset, have)
						}
						text[p.ResponseID] += p.Delta
					}
					if p.Type == "run-end" {
						return id, true
					}
					seen++
					if seen == n {
						return id, false
					}
				}
			}
		}
		return id, false
	}
	last, ended := read("", 10)
	for !ended {
		last, ended = read(last, 15)
	}
	_, body := ts.do(t, ts.acme, "GET", "/v1/sessions/s1/transcript", "")
	var tr struct {
		Items []struct{ ID, Kind, Text string }
	}
	json.Unmarshal([]byte(body), &tr)
	for _, it := range tr.Items {
		if it.Kind == "response" && text[it.ID] != it.Text {
			t.Errorf("item %s: the client has %q, the transcript %q", it.ID, text[it.ID], it.Text)
		}
	}
}

// TestTranscriptPages: ?limit, ?before and ?after page a transcript: the
// last items first, then the earlier ones page by page, or the later ones
// after an item; walked back to the start, the pages are the whole
// transcript in order. Without them the transcript is whole, as before;
// a bad page is refused naming what is wrong.
func TestTranscriptPages(t *testing.T) {
	ts := newTestServer(t)
	for i := range 5 {
		if code, body := ts.do(t, ts.acme, "POST", "/v1/sessions/p/messages?wait=true", fmt.Sprintf(`{"text":"turn %d"}`, i)); code != 200 {
			t.Fatalf("turn %d: %d %s", i, code, body)
		}
	}
	type page struct {
		Items []struct{ ID, Kind, Text string }
		Page  *struct {
			HasEarlier bool `json:"has_earlier"`
			HasLater   bool `json:"has_later"`
		}
	}
	get := func(query string) page {
		t.Helper()
		code, body := ts.do(t, ts.acme, "GET", "/v1/sessions/p/transcript"+query, "")
		if code != 200 {
			t.Fatalf("%s: %d %s", query, code, body)
		}
		return decodeJSON[page](t, body)
	}
	whole := get("")
	if len(whole.Items) != 10 || whole.Page != nil {
		t.Fatalf("the whole transcript: %d items, page %+v", len(whole.Items), whole.Page)
	}
	var ids []string
	for _, it := range whole.Items {
		ids = append(ids, it.ID)
	}
	// Backwards from the end, four at a time.
	var back []string
	p := get("?limit=4")
	for n := 0; ; n++ {
		if n > 5 {
			t.Fatal("the pages never reach the start")
		}
		var got []string
		for _, it := range p.Items {
			got = append(got, it.ID)
		}
		back = append(got, back...)
		if p.Page == nil || p.Page.HasLater != (n > 0) || len(p.Items) == 0 {
			t.Fatalf("page %d: %+v", n, p)
		}
		if !p.Page.HasEarlier {
			break
		}
		p = get("?limit=4&before=" + p.Items[0].ID)
	}
	if !slices.Equal(back, ids) {
		t.Errorf("the pages walked back: %v, want %v", back, ids)
	}
	// Forwards after an item.
	p = get("?limit=3&after=" + ids[2])
	if len(p.Items) != 3 || p.Items[0].ID != ids[3] || p.Items[2].ID != ids[5] || !p.Page.HasEarlier || !p.Page.HasLater {
		t.Errorf("three after the third: %+v", p)
	}
	if p = get("?after=" + ids[9]); len(p.Items) != 0 || !p.Page.HasEarlier || p.Page.HasLater {
		t.Errorf("after the last: %+v", p)
	}
	for _, tc := range []struct{ query, want string }{
		{"?after=nope", "after: no item nope in the transcript"},
		{"?before=nope", "before: no item nope in the transcript"},
		{"?after=" + ids[0] + "&before=" + ids[3], "after and before: give one of them"},
		{"?limit=0", `limit: want 1 to 1000, got \"0\"`},
		{"?limit=1001", `limit: want 1 to 1000, got \"1001\"`},
		{"?limit=x", `limit: want 1 to 1000, got \"x\"`},
	} {
		if code, body := ts.do(t, ts.acme, "GET", "/v1/sessions/p/transcript"+tc.query, ""); code != 400 || !strings.Contains(body, tc.want) {
			t.Errorf("%s: %d %s, want 400 and %q", tc.query, code, body, tc.want)
		}
	}
}
