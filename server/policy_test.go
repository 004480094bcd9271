package server_test

// An agent's restart policy (on_interrupted) and overlap rule, through the
// API: a run left interrupted shows so in the status, the event stream and
// the UI message stream until the next message or POST …/resume; a
// message that would overlap a rejecting agent's run is refused with 409.

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/host/hosttest"
	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/server"
	"github.com/agentichost/agentic/storage"
	"github.com/agentichost/agentic/storage/memory"
)

// leftSession records in acme's ledger of store a run that a host which
// died mid-pass left, and returns its id.
func leftSession(t *testing.T, store storage.Storage, id, text string) string {
	t.Helper()
	acme, err := storage.Prefix(store, "acme:")
	if err != nil {
		t.Fatal(err)
	}
	runID, msgID := ledger.NewID("run"), ledger.NewID("msg")
	now := time.Now().UTC()
	if err := acme.Append(context.Background(), id,
		ledger.Event{ID: ledger.NewID("evt"), Kind: ledger.KindInput, Time: now, RunID: runID,
			Input: &ledger.Input{MessageID: msgID, Parts: []ledger.Part{ledger.TextPart(text)}}},
		ledger.Event{ID: ledger.NewID("evt"), Kind: ledger.KindRunStart, Time: now, RunID: runID,
			RunStart: &ledger.RunStart{Inputs: []string{msgID}, ResponseID: ledger.NewID("resp"), Agent: "default", Model: hosttest.DefaultModel, MaxSteps: 16}},
	); err != nil {
		t.Fatal(err)
	}
	return runID
}

// TestServeOnInterruptedLeave: a tenant's agent with on_interrupted: leave
// keeps the runs a host left interrupted as they are at boot (the sweep
// runs nothing): GET /v1/sessions/{id} says interrupted, so does the event
// stream's snapshot, and the UI message stream ends the run's message with
// finish reason interrupted. The next message is answered by a run of its
// own (the left run ends interrupted); POST …/resume continues another.
func TestServeOnInterruptedLeave(t *testing.T) {
	store := memory.New()
	left := leftSession(t, store, "left", "dead")
	resumable := leftSession(t, store, "resumable", "dead too")
	ts := startServer(t, serverSetup{Store: store, Mutate: func(c *server.Config) {
		acme := c.Tenants["acme"]
		acme.Agents = map[string]server.AgentConfig{"default": {OnInterrupted: "leave"}}
		c.Tenants["acme"] = acme
	}})
	for _, id := range []string{"left", "resumable"} {
		code, body := ts.do(t, ts.acme, "GET", "/v1/sessions/"+id, "")
		if code != 200 || !strings.Contains(body, `"state":"interrupted"`) {
			t.Fatalf("session %s: %d %s", id, code, body)
		}
	}
	// The event stream's snapshot.
	req, _ := newRequest(ts, ts.acme, "GET", "/v1/sessions/left/events", "")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	first, ok := newSSEReader(res.Body).next()
	res.Body.Close()
	if !ok || first.Name != "snapshot" || !strings.Contains(first.Data, `"state":"interrupted"`) || !strings.Contains(first.Data, `"run_id":"`+left+`"`) {
		t.Errorf("the event stream's first event: %+v", first)
	}
	// The UI message stream.
	_, data := ts.uiChunks(t, "GET", "/v1/ui/chat/left/stream", "")
	md := `"messageMetadata":{"sessionId":"left","runId":"` + left + `"}`
	if got := strings.Join(data, "\n"); !strings.HasPrefix(got, `{"type":"start","messageId":"`+left+`",`+md+`}`) ||
		!strings.HasSuffix(got, `{"type":"finish","finishReason":"interrupted",`+md+`}`+"\n[DONE]") {
		t.Errorf("the UI message stream of a left run:\n%s", got)
	}
	if n := ts.model.RequestCount(); n != 0 {
		t.Errorf("%d model requests: a left run was run", n)
	}

	// The next message: a run of its own.
	code, body := ts.do(t, ts.acme, "POST", "/v1/sessions/left/messages?wait=true", `{"text":"next"}`)
	if code != 200 || !strings.Contains(body, `"text":"You said: next"`) || strings.Contains(body, left) {
		t.Fatalf("the next message: %d %s", code, body)
	}
	_, body = ts.do(t, ts.acme, "GET", "/v1/sessions/left/transcript", "")
	if !strings.Contains(body, `"status":"interrupted"`) || strings.Count(body, `"kind":"response"`) != 2 {
		t.Errorf("the transcript: %s", body)
	}

	// An explicit resume goes on with the run, where it stopped.
	for _, tc := range []struct {
		path, body string
		code       int
		want       string
	}{
		{"/v1/sessions/resumable/resume", `{"action":"again"}`, 400, "want resume, restart or fail"},
		{"/v1/sessions/missing/resume", "", 404, "not_found"},
		{"/v1/sessions/resumable/resume?wait=true", "", 200, `"text":"You said: dead too"`},
		{"/v1/sessions/resumable/resume", "", 409, "no interrupted run"},
	} {
		code, body := ts.do(t, ts.acme, "POST", tc.path, tc.body)
		if code != tc.code || !strings.Contains(body, tc.want) {
			t.Errorf("POST %s %s: %d %s, want %d with %s", tc.path, tc.body, code, body, tc.code, tc.want)
		}
	}
	if code, body := ts.do(t, ts.acme, "GET", "/v1/sessions/resumable", ""); code != 200 || !strings.Contains(body, `"run_id":"`+resumable+`"`) ||
		!strings.Contains(body, `"state":"completed"`) {
		t.Errorf("the resumed session: %d %s", code, body)
	}
}

// TestServeOverlapReject: a message naming an agent with overlap: reject,
// while the session's run works, answers 409 naming the run (through the
// messages route and the UI chat route); nothing is appended. A message
// naming a queueing agent joins the run.
func TestServeOverlapReject(t *testing.T) {
	ts := startServer(t, serverSetup{Mutate: func(c *server.Config) {
		acme := c.Tenants["acme"]
		acme.Agents = map[string]server.AgentConfig{"default": {Overlap: "reject"}, "chatty": {}}
		c.Tenants["acme"] = acme
	}})
	ts.model.Enqueue(hosttest.Reply{Text: "slow", Wait: time.Minute})
	code, body := ts.do(t, ts.acme, "POST", "/v1/sessions/o/messages", `{"text":"work"}`)
	if code != 202 {
		t.Fatalf("%d %s", code, body)
	}
	runID := decodeJSON[struct {
		RunID string `json:"run_id"`
	}](t, body).RunID
	ts.waitState(t, ts.acme, "o", "running")
	_, before := ts.do(t, ts.acme, "GET", "/v1/sessions/o/transcript", "")
	code, body = ts.do(t, ts.acme, "POST", "/v1/sessions/o/messages", `{"text":"meanwhile"}`)
	busy := decodeJSON[struct {
		Error struct {
			Code, Message string
			RunID         string `json:"run_id"`
		}
	}](t, body)
	if code != http.StatusConflict || busy.Error.Code != "conflict" || busy.Error.RunID != runID || !strings.Contains(busy.Error.Message, "overlap: reject") {
		t.Errorf("a message overlapping the run: %d %s", code, body)
	}
	res, _ := ts.uiChunks(t, "POST", "/v1/ui/chat", uiBody("o", "meanwhile"))
	if res.StatusCode != http.StatusConflict {
		t.Errorf("the UI chat route: %d", res.StatusCode)
	}
	if _, after := ts.do(t, ts.acme, "GET", "/v1/sessions/o/transcript", ""); after != before {
		t.Errorf("a refused message was appended:\n%s\n%s", before, after)
	}
	code, body = ts.do(t, ts.acme, "POST", "/v1/sessions/o/messages", `{"text":"joins","agent":"chatty"}`)
	if code != 202 || !strings.Contains(body, runID) {
		t.Errorf("a queueing agent's message: %d %s", code, body)
	}
	ts.do(t, ts.acme, "POST", "/v1/sessions/o/cancel", "")
	ts.waitState(t, ts.acme, "o", string(host.StateCompleted))
}
