package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentichost/agentic/host/hosttest"
	"github.com/agentichost/agentic/server"
)

// smallSendBuffers makes the server's connections' send buffers small, so
// that a client that stops reading holds the server's writes up soon.
type smallSendBuffers struct{ net.Listener }

func (l smallSendBuffers) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetWriteBuffer(4096)
	}
	return c, err
}

// smallReceiveClient is an HTTP client whose connections' receive buffers
// are small, set before they connect.
func smallReceiveClient() *http.Client {
	d := &net.Dialer{Control: func(network, address string, c syscall.RawConn) error {
		return c.Control(func(fd uintptr) { syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
	}}
	return &http.Client{Transport: &http.Transport{DialContext: d.DialContext}}
}

// TestSlowEventClient: a client that stops reading a session's events
// holds no run up — the run completes meanwhile — and is dropped; it
// reconnects with its Last-Event-ID and gets the rest, ending with the
// transcript's text.
func TestSlowEventClient(t *testing.T) {
	ts := startServer(t, serverSetup{
		Mutate:   func(c *server.Config) { c.StreamWriteTimeout = server.Duration(300 * time.Millisecond) },
		Listener: func(l net.Listener) net.Listener { return smallSendBuffers{l} },
	})
	var words strings.Builder
	for i := range 2500 {
		fmt.Fprintf(&words, "word%d ", i)
	}
	ts.model.Delay = 100 * time.Microsecond
	ts.model.Enqueue(hosttest.Reply{Text: words.String()})
	if code, body := ts.do(t, ts.acme, "POST", "/v1/sessions/s1/messages", `{"text":"talk a lot"}`); code != 202 {
		t.Fatalf("%d %s", code, body)
	}
	req, _ := newRequest(ts, ts.acme, "GET", "/v1/sessions/s1/events", "")
	res, err := smallReceiveClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	events := newSSEReader(res.Body)
	var lastID string
	var text strings.Builder
	for range 5 {
		e, ok := events.next()
		if !ok {
			t.Fatal("the stream ended at once")
		}
		lastID = e.ID
		readEvent(t, e, &text)
	}
	// The client stops reading: the run completes all the same.
	start := time.Now()
	ts.waitState(t, ts.acme, "s1", "completed")
	t.Logf("the run completed %v after the client stopped reading", time.Since(start))
	time.Sleep(500 * time.Millisecond) // past the stream's write timeout

	// The client reads on: what the connection held, then the end — no
	// run-end: the server dropped it rather than wait.
	ended := make(chan bool, 1)
	go func() {
		for {
			e, ok := events.next()
			if !ok {
				ended <- false
				return
			}
			if e.Name == "progress" && strings.Contains(e.Data, `"type":"run-end"`) {
				ended <- true
				return
			}
			if e.ID != "" {
				lastID = e.ID
			}
			readEvent(t, e, &text)
		}
	}()
	select {
	case gotEnd := <-ended:
		if gotEnd {
			t.Fatal("the slow client got the whole run: the server waited for it rather than drop it")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the slow client's stream was not closed")
	}
	waitFor(t, "the dropped stream's handler to end", func() bool {
		_, body := ts.do(t, "", "GET", "/metrics", "")
		return metricValue(body, "agentic_http_event_streams") == "0"
	})

	// Reconnecting with the last id gives the rest: the run ended, so a
	// snapshot with the whole text.
	req, _ = newRequest(ts, ts.acme, "GET", "/v1/sessions/s1/events", "")
	req.Header.Set("Last-Event-ID", lastID)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res2, err := http.DefaultClient.Do(req.WithContext(ctx))
	if err != nil {
		t.Fatal(err)
	}
	defer res2.Body.Close()
	e, ok := newSSEReader(res2.Body).next()
	if !ok || e.Name != "snapshot" {
		t.Fatalf("after reconnecting: %+v, want a snapshot", e)
	}
	snap := decodeJSON[struct {
		Transcript struct{ Items []struct{ Kind, Text string } }
	}](t, e.Data)
	got := ""
	for _, it := range snap.Transcript.Items {
		if it.Kind == "response" {
			got = it.Text
		}
	}
	if got != words.String() {
		t.Errorf("the snapshot's text has %d bytes, want the run's %d", len(got), words.Len())
	}
	if !strings.HasPrefix(words.String(), text.String()) || text.Len() == 0 {
		t.Errorf("the slow client read %q, not a start of the text", text.String()[:min(80, text.Len())])
	}
}

// metricValue returns the value of the first sample of the metric name in
// a Prometheus text exposition, "" when there is none.
func metricValue(exposition, name string) string {
	for _, line := range strings.Split(exposition, "\n") {
		if rest, ok := strings.CutPrefix(line, name); ok && (strings.HasPrefix(rest, " ") || strings.HasPrefix(rest, "{")) {
			return line[strings.LastIndexByte(line, ' ')+1:]
		}
	}
	return ""
}

// readEvent takes a snapshot's text (of its last response), or adds a
// progress event's text delta to text.
func readEvent(t *testing.T, e sseEvent, text *strings.Builder) {
	t.Helper()
	if e.Name == "snapshot" {
		snap := decodeJSON[struct {
			Transcript struct{ Items []struct{ Kind, Text string } }
		}](t, e.Data)
		text.Reset()
		for _, it := range snap.Transcript.Items {
			if it.Kind == "response" {
				text.Reset()
				text.WriteString(it.Text)
			}
		}
		return
	}
	if e.Name != "progress" {
		return
	}
	var p struct {
		Type, Delta string
		Offset      int
	}
	if err := json.Unmarshal([]byte(e.Data), &p); err != nil {
		t.Fatalf("%v: %s", err, e.Data)
	}
	if p.Type == "text" {
		if have := len([]rune(text.String())); have != p.Offset {
			t.Fatalf("text at offset %d, the client has %d characters", p.Offset, have)
		}
		text.WriteString(p.Delta)
	}
}

// TestRevokedKeyClosesStream: an event stream opened with a stored key
// closes, with an error event, once the key is revoked. The stream's
// connection is the stream's own (HTTP/1.1, chunked, "Connection: close":
// its relay took it over from net/http) and closes with it; the client's
// next request is served on another.
func TestRevokedKeyClosesStream(t *testing.T) {
	ts := startServer(t, serverSetup{Mutate: func(c *server.Config) {
		c.Heartbeat = server.Duration(50 * time.Millisecond)
		c.StreamWriteTimeout = server.Duration(100 * time.Millisecond)
	}})
	key, rec, err := server.CreateKey(context.Background(), ts.kv(t), "acme", server.KeyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if code, body := ts.do(t, key, "POST", "/v1/sessions/s1/messages?wait=true", `{"text":"hi"}`); code != 200 {
		t.Fatalf("%d %s", code, body)
	}
	client := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 1}, Timeout: 10 * time.Second}
	var conns []bool // reused, per request
	traced := func(req *http.Request) *http.Request {
		return req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
			GotConn: func(i httptrace.GotConnInfo) { conns = append(conns, i.Reused) }}))
	}
	req, _ := newRequest(ts, key, "GET", "/v1/sessions/s1/events", "")
	res, err := client.Do(traced(req))
	if err != nil {
		t.Fatal(err)
	}
	if !res.Close || !slices.Equal(res.TransferEncoding, []string{"chunked"}) || res.Header.Get("Content-Type") != "text/event-stream" {
		t.Errorf("the stream's head: close %v, transfer encoding %v, header %v", res.Close, res.TransferEncoding, res.Header)
	}
	events := newSSEReader(res.Body)
	if e, ok := events.next(); !ok || e.Name != "snapshot" {
		t.Fatalf("first event %+v", e)
	}
	if _, err := server.RevokeKey(context.Background(), ts.kv(t), rec.ID); err != nil {
		t.Fatal(err)
	}
	e, ok := events.next()
	if !ok || e.Name != "error" || !strings.Contains(e.Data, `"code":"unauthorized"`) {
		t.Fatalf("after revoking the key: %+v, want an error event", e)
	}
	if _, ok := events.next(); ok {
		t.Fatal("the stream goes on after the error")
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()

	// The client's next request: on another connection.
	req, _ = newRequest(ts, ts.acme, "POST", "/v1/sessions/nobody/cancel", "")
	res, err = client.Do(traced(req))
	if err != nil {
		t.Fatalf("the next request on the stream's connection: %v", err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 404 {
		t.Errorf("%d %s", res.StatusCode, body)
	}
	if len(conns) != 2 || conns[1] {
		t.Errorf("connections reused: %v, want the stream's closed with it", conns)
	}
	if code, _ := ts.do(t, key, "GET", "/v1/sessions", ""); code != 401 {
		t.Errorf("the revoked key: %d", code)
	}
}

// TestIdempotencyKey: a message retried with its Idempotency-Key is
// appended once, and answered as the first time — also with ?wait=true,
// and also when the tenant could start no new run now; the same key with
// another message is refused (422), and so is a key that is too long;
// keys are the session's: another session's same key is another message.
func TestIdempotencyKey(t *testing.T) {
	ts := startServer(t, serverSetup{Mutate: withTenant("acme", func(tc *server.TenantConfig) { tc.BudgetUSDPerDay = 1 })})
	ts.model.Enqueue(costing(hosttest.Reply{Text: "first answer"}, 1))
	send := func(session, key, body, query string) (int, map[string]any) {
		t.Helper()
		code, b := ts.do(t, ts.acme, "POST", "/v1/sessions/"+session+"/messages"+query, body, "Idempotency-Key", key)
		return code, decodeJSON[map[string]any](t, b)
	}
	code, first := send("s1", "k1", `{"text":"hello"}`, "?wait=true")
	if code != 200 || first["text"] != "first answer" {
		t.Fatalf("%d %v", code, first)
	}
	// The budget is spent: no new run may start, but a retry is no new
	// run.
	for _, query := range []string{"?wait=true", ""} {
		code, again := send("s1", "k1", `{"text":"hello"}`, query)
		if want := map[string]int{"": 202, "?wait=true": 200}[query]; code != want || again["message_id"] != first["message_id"] || again["run_id"] != first["run_id"] {
			t.Errorf("retry %q: %d %v, want %d with message %v of run %v", query, code, again, want, first["message_id"], first["run_id"])
		}
		if query == "?wait=true" && again["text"] != "first answer" {
			t.Errorf("a waited retry answers %v, want the first answer", again["text"])
		}
	}
	if code, body := ts.do(t, ts.acme, "POST", "/v1/sessions/s1/messages", `{"text":"hello"}`); code != 402 {
		t.Errorf("a new message past the budget: %d %s", code, body)
	}
	code, other := send("s1", "k1", `{"text":"something else"}`, "")
	if code != 422 || !strings.Contains(fmt.Sprint(other), "Idempotency-Key") {
		t.Errorf("the key with another message: %d %v, want 422", code, other)
	}
	code, long := send("s1", strings.Repeat("k", 300), `{"text":"hello"}`, "")
	if code != 400 || !strings.Contains(fmt.Sprint(long), "Idempotency-Key") {
		t.Errorf("a key of 300 bytes: %d %v, want 400", code, long)
	}
	_, body := ts.do(t, ts.acme, "GET", "/v1/sessions/s1/transcript", "")
	if n := strings.Count(body, `"kind":"user"`); n != 1 {
		t.Errorf("the session has %d messages, want 1: %s", n, body)
	}
	// Beta's same key, in a session of the same name, is beta's own.
	if code, body := ts.do(t, ts.beta, "POST", "/v1/sessions/s1/messages?wait=true", `{"text":"hello"}`, "Idempotency-Key", "k1"); code != 200 || strings.Contains(body, fmt.Sprint(first["message_id"])) {
		t.Errorf("beta's key: %d %s", code, body)
	}
}

// TestWait: ?wait=true answers with the run's result, without it 202 with
// the ids; a bad value is a 400; a waiting client that leaves leaves the
// run going.
func TestWait(t *testing.T) {
	ts := startServer(t, serverSetup{})
	stallModel(ts.model)
	code, body := ts.do(t, ts.acme, "POST", "/v1/sessions/w/messages?wait=true", `{"text":"hi"}`)
	if code != 200 || !strings.Contains(body, `"status":"completed"`) || !strings.Contains(body, `"text":"You said: hi"`) || !strings.Contains(body, `"usage"`) {
		t.Errorf("wait=true: %d %s", code, body)
	}
	for _, q := range []string{"", "?wait=false", "?wait=0"} {
		if code, body := ts.do(t, ts.acme, "POST", "/v1/sessions/w/messages"+q, `{"text":"hi"}`); code != 202 || !strings.Contains(body, `"run_id"`) {
			t.Errorf("%q: %d %s", q, code, body)
		}
	}
	if code, body := ts.do(t, ts.acme, "POST", "/v1/sessions/w2/messages?wait=maybe", `{"text":"hi"}`); code != 400 || !strings.Contains(body, "wait") {
		t.Errorf("wait=maybe: %d %s, want 400", code, body)
	}
	if code, _ := ts.do(t, ts.acme, "GET", "/v1/sessions/w2", ""); code != 404 {
		t.Errorf("a refused message made a session: %d", code)
	}
	// A client that gives up waiting leaves the run going.
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	req, _ := newRequest(ts, ts.acme, "POST", "/v1/sessions/long/messages?wait=true", `{"text":"stall"}`)
	if _, err := http.DefaultClient.Do(req.WithContext(ctx)); err == nil {
		t.Fatal("the wait did not outlast the client")
	}
	time.Sleep(100 * time.Millisecond)
	if st := ts.sessionState(t, ts.acme, "long"); st != "running" {
		t.Errorf("the run after its waiting client left: %q, want running", st)
	}
	ts.do(t, ts.acme, "POST", "/v1/sessions/long/cancel", "")
	ts.waitState(t, ts.acme, "long", "cancelled")
}

// TestListSessionsPages: GET /v1/sessions pages in id order: ?limit, then
// ?after the last id (next, while there are more); bad values are 400.
func TestListSessionsPages(t *testing.T) {
	ts := startServer(t, serverSetup{})
	ids := []string{"a1", "a2", "b1", "b2", "c1", "c2", "d1"}
	for _, id := range ids {
		if code, body := ts.do(t, ts.acme, "POST", "/v1/sessions/"+id+"/messages?wait=true", `{"text":"hi"}`); code != 200 {
			t.Fatalf("%d %s", code, body)
		}
	}
	type page struct {
		Sessions []struct {
			ID     string
			Status struct{ State string }
		}
		Next string
	}
	var got []string
	after, pages := "", 0
	for {
		code, body := ts.do(t, ts.acme, "GET", "/v1/sessions?limit=3&after="+after, "")
		if code != 200 {
			t.Fatalf("%d %s", code, body)
		}
		p := decodeJSON[page](t, body)
		pages++
		for _, s := range p.Sessions {
			got = append(got, s.ID)
			if s.Status.State != "completed" {
				t.Errorf("session %s: %q", s.ID, s.Status.State)
			}
		}
		if len(p.Sessions) > 3 {
			t.Errorf("a page of %d", len(p.Sessions))
		}
		if p.Next == "" {
			break
		}
		if p.Next != p.Sessions[len(p.Sessions)-1].ID {
			t.Errorf("next %q is not the page's last id", p.Next)
		}
		after = p.Next
	}
	if strings.Join(got, ",") != strings.Join(ids, ",") || pages != 3 {
		t.Errorf("pages gave %v in %d pages, want %v in 3", got, pages, ids)
	}
	for q, want := range map[string]string{"?after=b": "b1,b2,c1,c2,d1", "?after=d1": "", "?limit=1&after=a1": "a2", "?limit=200": strings.Join(ids, ",")} {
		_, body := ts.do(t, ts.acme, "GET", "/v1/sessions"+q, "")
		var list []string
		for _, s := range decodeJSON[page](t, body).Sessions {
			list = append(list, s.ID)
		}
		if strings.Join(list, ",") != want {
			t.Errorf("%s: %v, want %s", q, list, want)
		}
	}
	for _, q := range []string{"?limit=0", "?limit=201", "?limit=x", "?limit=-1", "?after=bad%20id"} {
		if code, body := ts.do(t, ts.acme, "GET", "/v1/sessions"+q, ""); code != 400 || !strings.Contains(body, `"code":"invalid_request"`) {
			t.Errorf("%s: %d %s, want 400", q, code, body)
		}
	}
}

// TestBadRequests: malformed JSON, unknown fields and wrong types answer
// 400 naming the field, bodies past the limit 413, unknown routes 404 and
// wrong methods 405 — all as JSON errors — and none of them records
// anything.
func TestBadRequests(t *testing.T) {
	ts := startServer(t, serverSetup{Mutate: func(c *server.Config) { c.MaxRequestBytes = 1024 }})
	for _, c := range []struct {
		method, path, body string
		code               int
		want               string
	}{
		{"POST", "/v1/sessions/s/messages", `{"text":"x","colour":"red"}`, 400, `unknown field \"colour\"`},
		{"POST", "/v1/sessions/s/messages", `{"text":"x","parts":[{"type":"text","text":"y","bogus":1}]}`, 400, `\"bogus\"`},
		{"POST", "/v1/sessions/s/messages", `{"text":5}`, 400, `field \"text\"`},
		{"POST", "/v1/sessions/s/messages", `{"text":"x","parts":[{"type":5}]}`, 400, `field \"parts.type\"`},
		{"POST", "/v1/sessions/s/messages", `{"text":"x"`, 400, "not JSON"},
		{"POST", "/v1/sessions/s/messages", `{"text":"x"} {"text":"y"}`, 400, "more than one JSON value"},
		{"POST", "/v1/sessions/s/messages", `["text"]`, 400, "want a JSON object"},
		{"POST", "/v1/sessions/s/messages", `null`, 400, "want a JSON object"},
		{"POST", "/v1/sessions/s/messages", `{"text":"` + strings.Repeat("x", 2000) + `"}`, 413, "larger than 1024 bytes"},
		{"POST", "/v1/sessions/.bad/messages", `{"text":"x"}`, 400, "session id"},
		{"POST", "/v1/sessions/s/cancel", `{"reason":5}`, 400, `field \"reason\"`},
		{"POST", "/v1/tasks", `{"prompt":"x","schema":{},"maxpokes":1}`, 400, `unknown field \"maxpokes\"`},
		{"POST", "/v1/approvals/a1", `{"approve":true,"by":["x"]}`, 400, `field \"by\"`},
		{"GET", "/v1/nothing", ``, 404, "no route"},
		{"PATCH", "/v1/sessions/s", ``, 405, "GET"},
		{"DELETE", "/v1/sessions", ``, 405, "GET"},
	} {
		code, body := ts.do(t, ts.acme, c.method, c.path, c.body)
		if code != c.code || !strings.Contains(body, c.want) || !strings.Contains(body, `"error":{"code":"`) {
			t.Errorf("%s %s %.60s: %d %s, want %d saying %s", c.method, c.path, c.body, code, body, c.code, c.want)
		}
	}
	if _, body := ts.do(t, ts.acme, "GET", "/v1/sessions", ""); body != "{\"sessions\":[]}\n" {
		t.Errorf("bad requests recorded something: %s", body)
	}
}

// FuzzRequestBodies: whatever the body of a message, a decision or a
// schedule, the answer is a success or a JSON error of the 4xx kind —
// never a 5xx, a panic, or a body of another shape.
func FuzzRequestBodies(f *testing.F) {
	for _, seed := range []string{`{"text":"hi"}`, `{"text":"x","parts":[{"type":"text","text":"y"}]}`, `{"approve":true}`,
		`{"text":5}`, `{"text":"x","colour":1}`, `[]`, `null`, `{`, `{"text":"x"} 1`, "", `{"parts":[{"type":"image","data":"!!"}]}`,
		`{"approve":true,"token":"a.b"}`, `{"text":"\u0000"}`, `{"text":"x","agent":""}`, "\xff\xfe",
		`{"id":"f","session":"s","cron":"@every 1h","text":"x"}`, `{"id":"f","session":"s","cron":"0 0 30 2 *","text":"x"}`} {
		f.Add(seed)
	}
	ts := startServer(f, serverSetup{})
	f.Fuzz(func(t *testing.T, body string) {
		for _, path := range []string{"/v1/sessions/fuzz/messages", "/v1/approvals/appr_x", "/v1/sessions/fuzz/cancel", "/v1/schedules"} {
			code, answer := ts.do(t, ts.acme, "POST", path, body)
			if code >= 500 {
				t.Fatalf("POST %s %q: %d %s", path, body, code, answer)
			}
			if code >= 400 {
				var e struct {
					Error struct{ Code, Message string }
				}
				if err := json.Unmarshal([]byte(answer), &e); err != nil || e.Error.Code == "" || e.Error.Message == "" {
					t.Fatalf("POST %s %q: %d %s, not a JSON error", path, body, code, answer)
				}
			}
		}
	})
}

// TestEventStreamViewerLeaves: a viewer that leaves gives its stream's
// slot back at once (net/http sees the connection close and ends the
// request's context), not at the stream's next heartbeat (here an hour):
// a viewer that reconnects at once is not refused for its own stream that
// is gone.
func TestEventStreamViewerLeaves(t *testing.T) {
	ts := startServer(t, serverSetup{Mutate: func(c *server.Config) {
		c.Heartbeat = server.Duration(time.Hour)
		acme := c.Tenants["acme"]
		acme.RateLimit.StreamsPerKey = 1
		c.Tenants["acme"] = acme
	}})
	if code, body := ts.do(t, ts.acme, "POST", "/v1/sessions/s/messages?wait=true", `{"text":"hi"}`); code != 200 {
		t.Fatalf("%d %s", code, body)
	}
	open := func() (*http.Response, error) {
		req, _ := newRequest(ts, ts.acme, "GET", "/v1/sessions/s/events", "")
		return http.DefaultClient.Do(req)
	}
	res, err := open()
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("the first viewer: %v %v", res, err)
	}
	if e, ok := newSSEReader(res.Body).next(); !ok || e.Name != "snapshot" {
		t.Fatalf("first event %+v", e)
	}
	if again, err := open(); err != nil || again.StatusCode != 429 {
		t.Fatalf("a second viewer past streams_per_key 1: %v %v", again, err)
	} else {
		again.Body.Close()
	}
	res.Body.Close() // the viewer leaves
	waitFor(t, "the slot given back", func() bool {
		again, err := open()
		if err != nil {
			t.Fatal(err)
		}
		defer again.Body.Close()
		return again.StatusCode == 200
	})
}

// TestEventStreamPastReadTimeout: a session's event stream, whose relay
// took its connection over from net/http, outlives the http.Server's
// ReadTimeout (the read deadline net/http left on the connection is not
// taken for the client's leaving at a heartbeat).
func TestEventStreamPastReadTimeout(t *testing.T) {
	const readTimeout = 100 * time.Millisecond
	ts := startServer(t, serverSetup{
		Mutate: func(c *server.Config) { c.Heartbeat = server.Duration(10 * time.Millisecond) },
		HTTP:   func(hs *http.Server) { hs.ReadTimeout = readTimeout },
	})
	if code, body := ts.do(t, ts.acme, "POST", "/v1/sessions/s/messages?wait=true", `{"text":"one"}`); code != 200 {
		t.Fatalf("%d %s", code, body)
	}
	req, _ := newRequest(ts, ts.acme, "GET", "/v1/sessions/s/events", "")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	events := newSSEReader(res.Body)
	if e, ok := events.next(); !ok || e.Name != "snapshot" {
		t.Fatalf("first event %+v", e)
	}
	time.Sleep(3 * readTimeout) // past the request's read deadline, heartbeats meanwhile
	if code, body := ts.do(t, ts.acme, "POST", "/v1/sessions/s/messages", `{"text":"two"}`); code != 202 {
		t.Fatalf("%d %s", code, body)
	}
	for {
		e, ok := events.next()
		if !ok {
			t.Fatal("the stream ended past the server's read timeout")
		}
		if strings.Contains(e.Data, `"type":"run-end"`) || strings.Contains(e.Data, "You said: two") {
			return
		}
	}
}
