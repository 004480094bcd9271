package server_test

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentichost/agentic/host/hosttest"
	"github.com/agentichost/agentic/host/model"
	"github.com/agentichost/agentic/server"
	"github.com/agentichost/agentic/storage/memory"
)

// uiBody is a DefaultChatTransport body whose last message is the user's
// text.
func uiBody(session, text string) string {
	b, _ := json.Marshal(map[string]any{"id": session, "trigger": "submit-message", "messageId": nil,
		"messages": []any{map[string]any{"id": "m-" + text, "role": "user", "parts": []any{map[string]any{"type": "text", "text": text}}}}})
	return string(b)
}

// uiChunks posts body to /v1/ui/chat and returns the response's headers
// and its data lines: each chunk's JSON, then [DONE].
func (ts *testServer) uiChunks(t *testing.T, method, path, body string) (*http.Response, []string) {
	t.Helper()
	req, err := http.NewRequest(method, ts.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+ts.acme)
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var data []string
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			data = append(data, d)
		}
	}
	return res, data
}

// types returns the chunks' types, space-separated, a run of text-delta
// written once: how many deltas a text takes depends on whether the stream
// followed the run live or replayed it ended.
func types(t *testing.T, data []string) string {
	t.Helper()
	var out []string
	for _, d := range data {
		if d == "[DONE]" {
			out = append(out, d)
			continue
		}
		var ch struct{ Type string }
		if err := json.Unmarshal([]byte(d), &ch); err != nil || ch.Type == "" {
			t.Fatalf("a chunk that is not a typed JSON object: %q", d)
		}
		if ch.Type == "text-delta" && len(out) > 0 && out[len(out)-1] == ch.Type {
			continue
		}
		out = append(out, ch.Type)
	}
	return strings.Join(out, " ")
}

// TestUIChatStream: POST /v1/ui/chat answers with the UI message stream
// (its header, chunks, [DONE]) of the run the message starts; the same
// message again (a retried request: its id) is not appended twice; a
// retried model pass is taken back with reset-step; a failed run ends with
// an error chunk; GET …/stream answers 204 once no run is in flight.
func TestUIChatStream(t *testing.T) {
	ts := newTestServer(t)
	res, data := ts.uiChunks(t, "POST", "/v1/ui/chat", uiBody("u1", "hello"))
	if res.StatusCode != 200 || res.Header.Get("x-vercel-ai-ui-message-stream") != "v1" || res.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("%d %v", res.StatusCode, res.Header)
	}
	if got, want := types(t, data), "start start-step text-start text-delta text-end finish-step finish [DONE]"; got != want {
		t.Fatalf("chunks %s, want %s\n%s", got, want, strings.Join(data, "\n"))
	}
	var text strings.Builder
	for _, d := range data {
		var ch struct{ Type, Delta string }
		json.Unmarshal([]byte(d), &ch)
		text.WriteString(ch.Delta)
	}
	var start, finish struct {
		Type, FinishReason string
		MessageMetadata    struct{ SessionID, RunID, TraceID string }
	}
	json.Unmarshal([]byte(data[0]), &start)
	json.Unmarshal([]byte(data[len(data)-2]), &finish)
	if text.String() != "You said: hello" || finish.FinishReason != "stop" {
		t.Errorf("text %q, end %s", text.String(), data[len(data)-2])
	}
	// The message names its session and run (and no trace: this server
	// does not trace).
	for _, ch := range []any{start, finish} {
		md := ch.(struct {
			Type, FinishReason string
			MessageMetadata    struct{ SessionID, RunID, TraceID string }
		}).MessageMetadata
		if md.SessionID != "u1" || !strings.HasPrefix(md.RunID, "run_") || md.TraceID != "" {
			t.Errorf("the message's metadata %+v", md)
		}
	}
	ts.uiChunks(t, "POST", "/v1/ui/chat", uiBody("u1", "hello"))
	if _, body := ts.do(t, ts.acme, "GET", "/v1/sessions/u1/transcript", ""); strings.Count(body, `"kind":"user"`) != 1 {
		t.Errorf("a retried request appended its message again: %s", body)
	}

	// The retry waits: the run is still in flight when the stream
	// attaches, and the stream follows it from its start.
	ts.model.Enqueue(hosttest.Reply{Text: "half", Err: model.ErrStalled}, hosttest.Reply{Text: "whole", Wait: time.Second})
	_, data = ts.uiChunks(t, "POST", "/v1/ui/chat", uiBody("u2", "retry"))
	if got, want := types(t, data), "start start-step text-start text-delta reset-step text-start text-delta text-end finish-step finish [DONE]"; got != want {
		t.Errorf("a retried pass: %s, want %s\n%s", got, want, strings.Join(data, "\n"))
	}

	ts.model.Enqueue(hosttest.Reply{Err: &model.Error{StatusCode: 402, Message: "no credits"}})
	_, data = ts.uiChunks(t, "POST", "/v1/ui/chat", uiBody("u3", "fail"))
	if got := strings.Join(data, "\n"); !strings.Contains(got, `{"type":"error","errorText":"the run failed: `) || !strings.Contains(got, `{"type":"finish","finishReason":"error","messageMetadata":{"sessionId":"u3","runId":"run_`) || !strings.HasSuffix(got, "\n[DONE]") {
		t.Errorf("a failed run:\n%s", got)
	}

	for _, id := range []string{"u1", "never-used"} {
		if code, body := ts.do(t, ts.acme, "GET", "/v1/ui/chat/"+id+"/stream", ""); code != http.StatusNoContent || body != "" {
			t.Errorf("resume %s with no run in flight: %d %q, want 204", id, code, body)
		}
	}
}

// TestUIChatFiles: a user message's file parts (data: URLs, http(s) URLs)
// reach the ledger with the text.
func TestUIChatFiles(t *testing.T) {
	ts := newTestServer(t)
	png := base64.StdEncoding.EncodeToString([]byte("\x89PNG fake"))
	body := `{"id":"f1","trigger":"submit-message","messages":[{"id":"m1","role":"user","parts":[` +
		`{"type":"file","mediaType":"image/png","filename":"a.png","url":"data:image/png;base64,` + png + `"},` +
		`{"type":"file","mediaType":"application/pdf","url":"https://example.com/r.pdf"},` +
		`{"type":"text","text":"what is this?"}]}]}`
	if res, data := ts.uiChunks(t, "POST", "/v1/ui/chat", body); res.StatusCode != 200 || !strings.Contains(types(t, data), "finish") {
		t.Fatalf("%d %v", res.StatusCode, data)
	}
	_, tr := ts.do(t, ts.acme, "GET", "/v1/sessions/f1/transcript", "")
	for _, want := range []string{`"text":"what is this?"`, `"type":"image"`, `"mime":"image/png"`, `"name":"a.png"`, `"data":"` + png + `"`, `"url":"https://example.com/r.pdf"`} {
		if !strings.Contains(tr, want) {
			t.Errorf("transcript lacks %s: %s", want, tr)
		}
	}
}

// TestUIChatRefusals: every request the routes cannot serve is refused
// with a JSON error that says why; nothing is appended.
func TestUIChatRefusals(t *testing.T) {
	ts := newTestServer(t)
	user := func(extra string) string {
		return `{"id":"r1","trigger":"submit-message","messages":[{"id":"m1","role":"user","parts":[` + extra + `]}]}`
	}
	for _, tc := range []struct {
		name, key, body string
		code            int
		want            string
	}{
		{"no key", "", uiBody("r1", "hi"), 401, "a valid API key is required"},
		{"not JSON", ts.acme, `{"id":`, 400, "not the JSON of a chat request"},
		{"an empty body", ts.acme, ``, 400, "the body is empty"},
		{"messages of the wrong type", ts.acme, `{"id":"r1","messages":"hi"}`, 400, `field \"messages\": want an array, got a JSON string`},
		{"no id", ts.acme, `{"messages":[]}`, 400, `field \"id\" \"\": want the chat's id`},
		{"a bad id", ts.acme, `{"id":"../x","messages":[]}`, 400, `field \"id\" \"../x\"`},
		{"regenerate", ts.acme, strings.Replace(uiBody("r1", "hi"), "submit-message", "regenerate-message", 1), 400, "regenerate-message is not supported"},
		{"an unknown trigger", ts.acme, strings.Replace(uiBody("r1", "hi"), "submit-message", "resume-stream", 1), 400, `field \"trigger\" \"resume-stream\": want submit-message`},
		{"no messages", ts.acme, `{"id":"r1","trigger":"submit-message","messages":[]}`, 400, `field \"messages\" is empty`},
		{"an edited message", ts.acme, strings.Replace(uiBody("r1", "hi"), `"messageId":null`, `"messageId":"m-hi"`, 1), 400, "editing a sent message is not supported"},
		{"a system message last", ts.acme, `{"id":"r1","messages":[{"id":"s","role":"system","parts":[{"type":"text","text":"x"}]}]}`, 400, `role \"system\"`},
		{"no text", ts.acme, user(`{"type":"step-start"}`), 400, "has no text part and no file part"},
		{"a file without a type", ts.acme, user(`{"type":"file","url":"data:,x"}`), 400, "parts[0] (file): mediaType is empty"},
		{"a file URL of another scheme", ts.acme, user(`{"type":"file","mediaType":"image/png","url":"file:///etc/passwd"}`), 400, "want a data: URL or an http(s) URL"},
		{"audio by URL", ts.acme, user(`{"type":"file","mediaType":"audio/wav","url":"https://example.com/a.wav"}`), 400, "audio must be sent inline"},
		{"bad base64", ts.acme, user(`{"type":"file","mediaType":"image/png","url":"data:image/png;base64,%%%"}`), 400, "the data: URL's data"},
		{"an unknown agent", ts.acme, strings.Replace(uiBody("r1", "hi"), `"id":"r1"`, `"id":"r1","agent":"nope"`, 1), 400, `has no agent \"nope\"`},
		{"an assistant message without answers", ts.acme, `{"id":"r1","trigger":"submit-message","messages":[{"id":"a","role":"assistant","parts":[{"type":"tool-x","toolCallId":"c","state":"approval-requested","approval":{"id":"ap"}}]}]}`, 400, "answers no approval"},
		{"an unknown approval", ts.acme, `{"id":"r1","trigger":"submit-message","messages":[{"id":"a","role":"assistant","parts":[{"type":"tool-x","toolCallId":"c","state":"approval-responded","approval":{"id":"ap_nope","approved":true}}]}]}`, 404, `approval \"ap_nope\": no such request in session r1`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := ts.do(t, tc.key, "POST", "/v1/ui/chat", tc.body, "Content-Type", "application/json")
			if code != tc.code || !strings.Contains(body, tc.want) || !strings.HasPrefix(body, `{"error":{"code":`) {
				t.Errorf("%d %s, want %d saying %s", code, body, tc.code, tc.want)
			}
		})
	}
	if code, body := ts.do(t, ts.acme, "GET", "/v1/sessions/r1", ""); code != 404 {
		t.Errorf("a refused request left a session: %d %s", code, body)
	}
	if code, body := ts.do(t, ts.acme, "GET", "/v1/ui/chat/.x/stream", ""); code != 400 || !strings.Contains(body, "session id") {
		t.Errorf("resume with a bad id: %d %s", code, body)
	}
	if code, _ := ts.do(t, "", "GET", "/v1/ui/chat/r1/stream", ""); code != 401 {
		t.Errorf("resume without a key: %d", code)
	}

	small := newTestServer(t, func(c *server.Config) { c.MaxRequestBytes = 256 })
	if code, body := small.do(t, small.acme, "POST", "/v1/ui/chat", uiBody("r1", strings.Repeat("long history ", 40))); code != 413 ||
		!strings.Contains(body, "larger than 256 bytes") || !strings.Contains(body, "send only it") {
		t.Errorf("a body past the limit: %d %s", code, body)
	}
}

// TestSmoothStreams: an agent whose text is paced (smooth, by line here)
// streams it to the UI message stream a line at a time, and to the SSE
// progress stream the same, a chunk that completes no event without an
// id; the tool call is not held back; the ledger keeps the model's own
// deltas (the transcript's text is whole).
func TestSmoothStreams(t *testing.T) {
	ts := startServer(t, serverSetup{Mutate: withTenant("acme", func(tc *server.TenantConfig) {
		tc.Agents = map[string]server.AgentConfig{"default": {Model: hosttest.DefaultModel,
			Smooth: &server.SmoothConfig{Delay: server.Duration(time.Millisecond), Chunking: "line"}}}
	})})
	// The model streams a word at a time: "one ", "two\nthree ",
	// "four\nfive"; the end lets out what waits, a line at a time too.
	// It starts once the stream follows the run live (a stream that
	// attaches after the text gets it whole, from the snapshot).
	gate := make(chan struct{})
	ts.model.Respond = func(model.Request) hosttest.Reply {
		<-gate
		return hosttest.Reply{Text: "one two\nthree four\nfive"}
	}
	lines := make(chan string)
	go func() {
		defer close(lines)
		req, _ := http.NewRequest("POST", ts.URL+"/v1/ui/chat", strings.NewReader(uiBody("sm", "hi")))
		req.Header.Set("Authorization", "Bearer "+ts.acme)
		req.Header.Set("Content-Type", "application/json")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			return
		}
		defer res.Body.Close()
		sc := bufio.NewScanner(res.Body)
		for sc.Scan() {
			if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				lines <- d
			}
		}
	}()
	data := []string{<-lines} // start: the stream follows the run
	close(gate)
	for d := range lines {
		data = append(data, d)
	}
	var deltas []string
	for _, d := range data {
		var ch struct{ Type, Delta string }
		json.Unmarshal([]byte(d), &ch)
		if ch.Type == "text-delta" {
			deltas = append(deltas, ch.Delta)
		}
	}
	if got := strings.Join(deltas, "|"); got != "one two\n|three four\n|five" {
		t.Errorf("the UI stream's text deltas %q, want a line at a time", got)
	}
	if _, body := ts.do(t, ts.acme, "GET", "/v1/sessions/sm/transcript", ""); !strings.Contains(body, `"text":"one two\nthree four\nfive"`) {
		t.Errorf("the transcript: %s", body)
	}
	if code, body := ts.do(t, ts.acme, "GET", "/v1/sessions/sm", ""); code != 200 || !strings.Contains(body, `"agent":"default"`) {
		t.Errorf("the status names no agent: %d %s", code, body)
	}
	// A bad pattern is a configuration error.
	cfg := server.Config{Tenants: map[string]server.TenantConfig{"acme": {Keys: []server.KeyConfig{{Hash: server.HashKey("k")}}, Models: []string{hosttest.DefaultModel},
		Agents: map[string]server.AgentConfig{"default": {Model: hosttest.DefaultModel, Smooth: &server.SmoothConfig{Chunking: "("}}}}}}
	if _, err := server.New(server.Options{Config: cfg, Storage: memory.New(), Model: hosttest.NewModel()}); err == nil || !strings.Contains(err.Error(), "agents.default: smooth:") {
		t.Errorf("a bad chunking: %v", err)
	}
}

// TestSmoothProgressStream: with smooth pacing, the SSE progress stream
// (GET /v1/sessions/{id}/events) sends the text a line at a time too, and a
// chunk that completes no progress event carries no id: (a client that
// comes back resumes from the event before, the offset making the repeat
// harmless); the chunk that completes one carries its id.
func TestSmoothProgressStream(t *testing.T) {
	ts := startServer(t, serverSetup{Mutate: withTenant("acme", func(tc *server.TenantConfig) {
		tc.Agents = map[string]server.AgentConfig{"default": {Model: hosttest.DefaultModel,
			Smooth: &server.SmoothConfig{Delay: server.Duration(time.Millisecond), Chunking: "line"}}}
	})})
	// Two model deltas: "alpha\nbeta\ngamma " (three lines' worth, two of
	// them whole) and "delta".
	gate := make(chan struct{})
	ts.model.Respond = func(model.Request) hosttest.Reply {
		<-gate
		return hosttest.Reply{Text: "alpha\nbeta\ngamma delta"}
	}
	if code, body := ts.do(t, ts.acme, "POST", "/v1/sessions/sp/messages", `{"text":"hi"}`); code != 202 {
		t.Fatalf("%d %s", code, body)
	}
	req, _ := newRequest(ts, ts.acme, "GET", "/v1/sessions/sp/events", "")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	r := newSSEReader(res.Body)
	if e, ok := r.next(); !ok || e.Name != "snapshot" {
		t.Fatalf("the stream's first event: %+v", e)
	}
	close(gate) // the stream follows the run live: the text is to come
	type frame struct{ id, delta string }
	var text []frame
	for {
		e, ok := r.next()
		if !ok {
			t.Fatal("the stream ended before the run")
		}
		var p struct{ Type, Delta string }
		json.Unmarshal([]byte(e.Data), &p)
		if p.Type == "text" {
			text = append(text, frame{e.ID, p.Delta})
		}
		if p.Type == "run-end" {
			break
		}
	}
	var got []string
	for _, f := range text {
		_, seq, _ := strings.Cut(f.id, ":")
		got = append(got, fmt.Sprintf("%q id=%s", f.delta, seq))
	}
	// The first model delta's text progress event is seq 2 (after
	// run-start); its first two lines complete nothing, its last part
	// completes it only with the second delta, at the end.
	if len(text) != 3 || text[0].delta != "alpha\n" || text[1].delta != "beta\n" || text[2].delta != "gamma delta" ||
		text[0].id != "" || text[1].id != "" || text[2].id == "" {
		t.Fatalf("the progress stream's text frames: %s", strings.Join(got, ", "))
	}
}
