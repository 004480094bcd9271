package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentichost/agentic/host/hosttest"
	"github.com/agentichost/agentic/host/model"
	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/server"
)

// rpcAnswer is a JSON-RPC response.
type rpcAnswer struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Result  json.RawMessage `json:"result"`
	Error   *struct {
		Code    int            `json:"code"`
		Message string         `json:"message"`
		Data    map[string]any `json:"data"`
	} `json:"error"`
}

// a2aTaskJSON is what the tests read of a task.
type a2aTaskJSON struct {
	Kind      string `json:"kind"`
	ID        string `json:"id"`
	ContextID string `json:"contextId"`
	Status    struct {
		State   string `json:"state"`
		Message *struct {
			Parts []struct {
				Kind string         `json:"kind"`
				Text string         `json:"text"`
				Data map[string]any `json:"data"`
			} `json:"parts"`
		} `json:"message"`
	} `json:"status"`
	Artifacts []struct {
		ArtifactID string `json:"artifactId"`
		Parts      []struct {
			Text string `json:"text"`
		} `json:"parts"`
	} `json:"artifacts"`
	History []struct {
		Role  string `json:"role"`
		Parts []struct {
			Text string `json:"text"`
		} `json:"parts"`
	} `json:"history"`
}

// text is the task's artifacts' text.
func (tk a2aTaskJSON) text() string {
	var b strings.Builder
	for _, a := range tk.Artifacts {
		for _, p := range a.Parts {
			b.WriteString(p.Text)
		}
	}
	return b.String()
}

// statusText is the status message's text.
func (tk a2aTaskJSON) statusText() string {
	if tk.Status.Message == nil || len(tk.Status.Message.Parts) == 0 {
		return ""
	}
	return tk.Status.Message.Parts[0].Text
}

// rpc calls method at agent's endpoint with key, and returns the HTTP
// status and the answer.
func (ts *testServer) rpc(t *testing.T, key, agent, method string, params any) (int, rpcAnswer) {
	t.Helper()
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
	code, body := ts.do(t, key, "POST", "/a2a/"+agent, string(b))
	var ans rpcAnswer
	if err := json.Unmarshal([]byte(body), &ans); err != nil {
		t.Fatalf("%s: %d %s", method, code, body)
	}
	return code, ans
}

// task calls a method that answers a task, failing on an error.
func (ts *testServer) task(t *testing.T, method string, params any) a2aTaskJSON {
	t.Helper()
	code, ans := ts.rpc(t, ts.acme, "default", method, params)
	if code != 200 || ans.Error != nil {
		t.Fatalf("%s: %d %+v", method, code, ans.Error)
	}
	return decodeJSON[a2aTaskJSON](t, string(ans.Result))
}

// rpcError calls a method that must fail with code.
func (ts *testServer) rpcError(t *testing.T, key, method string, params any, code int, want string) {
	t.Helper()
	status, ans := ts.rpc(t, key, "default", method, params)
	if status != 200 || ans.Error == nil || ans.Error.Code != code || !strings.Contains(ans.Error.Message, want) {
		t.Fatalf("%s: %d %s %+v, want error %d saying %q", method, status, ans.Result, ans.Error, code, want)
	}
}

func userMsg(id, text string, extra ...any) map[string]any {
	m := map[string]any{"kind": "message", "messageId": id, "role": "user", "parts": []any{map[string]any{"kind": "text", "text": text}}}
	for i := 0; i+1 < len(extra); i += 2 {
		m[extra[i].(string)] = extra[i+1]
	}
	return m
}

// a2aStream posts a streaming method and returns its events' results (or
// errors), in order. A stream that does not end within a minute fails the
// test instead of hanging it.
func (ts *testServer) a2aStream(t *testing.T, method string, params any) (*http.Response, []rpcAnswer) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": "s1", "method": method, "params": params})
	req, _ := newRequest(ts, ts.acme, "POST", "/a2a/default", string(b))
	req.Header.Set("Accept", "text/event-stream")
	res, err := http.DefaultClient.Do(req.WithContext(ctx))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var out []rpcAnswer
	r := newSSEReader(res.Body)
	for {
		e, ok := r.next()
		if !ok {
			break
		}
		out = append(out, decodeJSON[rpcAnswer](t, e.Data))
	}
	if ctx.Err() != nil {
		t.Fatalf("%s: the stream did not end within a minute; it sent %s", method, kinds(t, out))
	}
	return res, out
}

// kinds lists the events' kinds, with a status-update's state.
func kinds(t *testing.T, events []rpcAnswer) string {
	var ks []string
	for _, e := range events {
		if e.Error != nil {
			ks = append(ks, fmt.Sprintf("error(%d)", e.Error.Code))
			continue
		}
		var ev struct {
			Kind   string
			Final  bool
			Status struct{ State string }
		}
		json.Unmarshal(e.Result, &ev)
		k := ev.Kind
		if ev.Kind == "status-update" {
			k += "(" + ev.Status.State
			if ev.Final {
				k += ",final"
			}
			k += ")"
		}
		ks = append(ks, k)
	}
	return strings.Join(ks, " ")
}

// streamedText joins the text of the artifact-update events, replacing an
// artifact when an update does not append.
func streamedText(events []rpcAnswer) string {
	texts := map[string]string{}
	var order []string
	for _, e := range events {
		var ev struct {
			Kind     string
			Append   bool
			Artifact struct {
				ArtifactID string
				Parts      []struct{ Text string }
			}
		}
		json.Unmarshal(e.Result, &ev)
		if ev.Kind != "artifact-update" {
			continue
		}
		id := ev.Artifact.ArtifactID
		if _, ok := texts[id]; !ok {
			order = append(order, id)
		}
		var s string
		for _, p := range ev.Artifact.Parts {
			s += p.Text
		}
		if ev.Append {
			texts[id] += s
		} else {
			texts[id] = s
		}
	}
	var b strings.Builder
	for _, id := range order {
		b.WriteString(texts[id])
	}
	return b.String()
}

// TestA2A drives the A2A routes over the server: the card, message/send
// blocking and not, a retried message, message/stream, a run that waits
// for approval (input-required) and a decision sent as a data part,
// tasks/cancel, tasks/resubscribe, and the errors — each of which changes
// nothing.
func TestA2A(t *testing.T) {
	ts := startServer(t, serverSetup{})
	ts.model.Respond = func(req model.Request) hosttest.Reply {
		if m := req.Messages[len(req.Messages)-1]; m.Role == ledger.RoleUser && strings.Contains(m.Text(), "stall") {
			return hosttest.Reply{Text: "thinking about it ", Stall: time.Hour}
		}
		return hosttest.DefaultReply(req)
	}
	if code, body := ts.doBytes(t, ts.acme, "PUT", "/v1/plugins/publish_post", publishPost(t)); code != 201 {
		t.Fatalf("upload: %d %s", code, body)
	}

	t.Run("card", func(t *testing.T) {
		code, body := ts.do(t, ts.acme, "GET", "/a2a/default/.well-known/agent-card.json", "")
		card := decodeJSON[struct {
			Name, URL, PreferredTransport, ProtocolVersion string
			Capabilities                                   struct{ Streaming bool }
			SecuritySchemes                                map[string]struct{ Type, Scheme string }
		}](t, body)
		if code != 200 || card.Name != "default" || card.URL != ts.URL+"/a2a/default" || card.PreferredTransport != "JSONRPC" ||
			card.ProtocolVersion != "0.3.0" || !card.Capabilities.Streaming || card.SecuritySchemes["bearer"].Scheme != "bearer" {
			t.Fatalf("%d %s", code, body)
		}
		if code, _ := ts.do(t, "", "GET", "/a2a/default/.well-known/agent-card.json", ""); code != 401 {
			t.Errorf("the card without a key: %d, want 401", code)
		}
		if code, body := ts.do(t, ts.acme, "GET", "/a2a/nobody/.well-known/agent-card.json", ""); code != 404 {
			t.Errorf("another agent's card: %d %s, want 404", code, body)
		}
	})

	var first a2aTaskJSON
	t.Run("send blocking", func(t *testing.T) {
		first = ts.task(t, "message/send", map[string]any{"message": userMsg("m-hello", "hello"), "configuration": map[string]any{"blocking": true}})
		if first.Kind != "task" || first.Status.State != "completed" || first.text() != "You said: hello" || !strings.HasPrefix(first.ContextID, "a2a_") ||
			len(first.History) != 1 || first.History[0].Parts[0].Text != "hello" {
			t.Fatalf("%+v", first)
		}
		got := ts.task(t, "tasks/get", map[string]any{"id": first.ID})
		if got.ID != first.ID || got.Status.State != "completed" || got.text() != first.text() {
			t.Errorf("tasks/get: %+v", got)
		}
		// The same message again (a retry) is the same task, appended once.
		again := ts.task(t, "message/send", map[string]any{"message": userMsg("m-hello", "hello"), "configuration": map[string]any{"blocking": true}})
		if again.ID != first.ID || again.ContextID != first.ContextID {
			t.Errorf("a retry: task %s in %s, want %s in %s", again.ID, again.ContextID, first.ID, first.ContextID)
		}
		if _, body := ts.do(t, ts.acme, "GET", "/v1/sessions/"+first.ContextID+"/transcript", ""); strings.Count(body, `"kind":"user"`) != 1 {
			t.Errorf("the retry appended: %s", body)
		}
	})

	t.Run("send on the context", func(t *testing.T) {
		next := ts.task(t, "message/send", map[string]any{"message": userMsg("m-again", "again", "contextId", first.ContextID)})
		if next.ContextID != first.ContextID || next.ID == first.ID {
			t.Fatalf("%+v", next)
		}
		waitFor(t, "the second task to complete", func() bool {
			return ts.task(t, "tasks/get", map[string]any{"id": next.ID}).Status.State == "completed"
		})
		got := ts.task(t, "tasks/get", map[string]any{"id": next.ID, "historyLength": 0})
		if got.text() != "You said: again" || len(got.History) != 0 {
			t.Errorf("%+v", got)
		}
		// A task that ended takes no more messages.
		ts.rpcError(t, ts.acme, "message/send", map[string]any{"message": userMsg("m-late", "late", "taskId", next.ID)}, -32600, "takes no more messages")
	})

	t.Run("stream", func(t *testing.T) {
		res, events := ts.a2aStream(t, "message/stream", map[string]any{"message": userMsg("m-stream", "one two three four five")})
		if ct := res.Header.Get("Content-Type"); ct != "text/event-stream" {
			t.Fatalf("content type %s", ct)
		}
		if got := kinds(t, events); !strings.HasPrefix(got, "task artifact-update") || !strings.HasSuffix(got, "artifact-update status-update(completed,final)") {
			t.Fatalf("events: %s", got)
		}
		if got := streamedText(events); got != "You said: one two three four five" {
			t.Errorf("streamed %q", got)
		}
	})

	var parked a2aTaskJSON
	var approvalID string
	t.Run("input required", func(t *testing.T) {
		parked = ts.task(t, "message/send", map[string]any{"message": userMsg("m-publish", "publish_post title=Hello body=World"),
			"configuration": map[string]any{"blocking": true}})
		if parked.Status.State != "input-required" || !strings.Contains(parked.statusText(), "publish_post waits for a person's approval") ||
			len(parked.Status.Message.Parts) != 2 {
			t.Fatalf("%+v", parked)
		}
		list, _ := parked.Status.Message.Parts[1].Data["approvals"].([]any)
		if len(list) != 1 {
			t.Fatalf("approvals %+v", parked.Status.Message.Parts[1].Data)
		}
		approvalID, _ = list[0].(map[string]any)["approval_id"].(string)
		if approvalID == "" || !strings.Contains(parked.statusText(), approvalID) {
			t.Fatalf("approval %q in %q", approvalID, parked.statusText())
		}
		decide := func(id string, extra ...any) map[string]any {
			d := map[string]any{"approval_id": id, "approve": true}
			for i := 0; i+1 < len(extra); i += 2 {
				d[extra[i].(string)] = extra[i+1]
			}
			return map[string]any{"kind": "message", "messageId": "m-decide-" + id, "role": "user", "taskId": parked.ID,
				"parts": []any{map[string]any{"kind": "data", "data": d}}}
		}
		// Bad decisions change nothing.
		ts.rpcError(t, ts.acme, "message/send", map[string]any{"message": decide("apr_nope")}, -32602, "has no such request")
		noTask := decide(approvalID)
		delete(noTask, "taskId")
		ts.rpcError(t, ts.acme, "message/send", map[string]any{"message": noTask}, -32602, "message.taskId is required")
		ts.rpcError(t, ts.acme, "message/send", map[string]any{"message": decide(approvalID, "by", "me")}, -32602, `unknown field "by"`)
		if got := ts.task(t, "tasks/get", map[string]any{"id": parked.ID}); got.Status.State != "input-required" {
			t.Fatalf("after bad decisions: %s", got.Status.State)
		}
		ts.rpcError(t, ts.acme, "message/send", map[string]any{"message": decide(approvalID, "input", map[string]any{"title": 7, "body": "World"})}, -32602, "does not match tool publish_post's schema")
		if got := ts.task(t, "tasks/get", map[string]any{"id": parked.ID}); got.Status.State != "input-required" {
			t.Fatalf("after a bad edit: %s", got.Status.State)
		}
		// An edit: the call runs with the person's input.
		done := ts.task(t, "message/send", map[string]any{"message": decide(approvalID, "reason", "fine", "input", map[string]any{"title": "Hello, edited", "body": "World"}),
			"configuration": map[string]any{"blocking": true}})
		if done.ID != parked.ID || done.Status.State != "completed" || !strings.Contains(done.text(), "The publish_post tool returned") {
			t.Fatalf("after the decision: %+v", done)
		}
		if _, tr := ts.do(t, ts.acme, "GET", "/v1/sessions/"+parked.ContextID+"/transcript", ""); !strings.Contains(tr, `"edited_input":{"body":"World","title":"Hello, edited"}`) {
			t.Errorf("the edit's transcript: %s", tr)
		}
		ts.rpcError(t, ts.acme, "message/send", map[string]any{"message": decide(approvalID)}, -32600, "decided already")
	})

	t.Run("cancel", func(t *testing.T) {
		live := ts.task(t, "message/send", map[string]any{"message": userMsg("m-stall", "stall please")})
		waitFor(t, "the run to stream", func() bool {
			return ts.task(t, "tasks/get", map[string]any{"id": live.ID}).text() == "thinking about it "
		})
		got := ts.task(t, "tasks/cancel", map[string]any{"id": live.ID})
		if got.Status.State != "canceled" || !strings.Contains(got.statusText(), "tasks/cancel") {
			t.Fatalf("%+v", got)
		}
		ts.rpcError(t, ts.acme, "tasks/cancel", map[string]any{"id": live.ID}, -32002, "canceled")
		ts.rpcError(t, ts.acme, "tasks/cancel", map[string]any{"id": first.ID}, -32002, "completed")
	})

	t.Run("resubscribe", func(t *testing.T) {
		live := ts.task(t, "message/send", map[string]any{"message": userMsg("m-stall-2", "stall again")})
		waitFor(t, "the run to stream", func() bool {
			return ts.task(t, "tasks/get", map[string]any{"id": live.ID}).text() == "thinking about it "
		})
		b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": "s1", "method": "tasks/resubscribe", "params": map[string]any{"id": live.ID}})
		req, _ := newRequest(ts, ts.acme, "POST", "/a2a/default", string(b))
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		r := newSSEReader(res.Body)
		e, ok := r.next()
		if !ok {
			t.Fatal("no first event")
		}
		events := []rpcAnswer{decodeJSON[rpcAnswer](t, e.Data)}
		ts.rpc(t, ts.acme, "default", "tasks/cancel", map[string]any{"id": live.ID})
		for {
			e, ok := r.next()
			if !ok {
				break
			}
			events = append(events, decodeJSON[rpcAnswer](t, e.Data))
		}
		if got := kinds(t, events); !strings.HasPrefix(got, "task") || !strings.HasSuffix(got, "status-update(canceled,final)") {
			t.Fatalf("events: %s", got)
		}
		tk := decodeJSON[a2aTaskJSON](t, string(events[0].Result))
		if tk.text() != "thinking about it " || tk.Status.State != "working" {
			t.Errorf("the first task: %+v", tk)
		}
		// A finished task: the task, its end, and the stream ends.
		_, events = ts.a2aStream(t, "tasks/resubscribe", map[string]any{"id": first.ID})
		if got := kinds(t, events); got != "task status-update(completed,final)" {
			t.Errorf("a finished task's stream: %s", got)
		}
	})

	t.Run("errors", func(t *testing.T) {
		sessions := func() string { _, body := ts.do(t, ts.acme, "GET", "/v1/sessions", ""); return body }
		before := sessions()
		ts.rpcError(t, ts.acme, "tasks/get", map[string]any{"id": "run_nobody"}, -32001, "not found")
		ts.rpcError(t, ts.acme, "tasks/get", map[string]any{"id": strings.Repeat("x", 300)}, -32602, "255")
		ts.rpcError(t, ts.acme, "tasks/cancel", map[string]any{"id": "run_nobody"}, -32001, "not found")
		ts.rpcError(t, ts.acme, "tasks/resubscribe", map[string]any{"id": "run_nobody"}, -32001, "not found")
		ts.rpcError(t, ts.acme, "tasks/list", map[string]any{}, -32601, "not found")
		ts.rpcError(t, ts.acme, "tasks/pushNotificationConfig/set", map[string]any{}, -32003, "push notifications")
		ts.rpcError(t, ts.acme, "message/send", map[string]any{"message": userMsg("m-x", "x", "taskId", "run_nobody")}, -32001, "not found")
		ts.rpcError(t, ts.acme, "message/send", map[string]any{"message": userMsg("m-x", "x", "contextId", "../etc")}, -32602, "contextId")
		ts.rpcError(t, ts.acme, "message/send", map[string]any{"message": userMsg("m-x", "x", "taskId", first.ID, "contextId", "other")}, -32602, "not the context")
		// Another tenant's task is not found.
		ts.rpcError(t, ts.beta, "tasks/get", map[string]any{"id": first.ID}, -32001, "not found")
		for _, c := range []struct{ body, want string }{
			{`{"jsonrpc":"2.0","id":1,`, `"code":-32700`},
			{`{"id":1,"method":"tasks/get"}`, `"code":-32600`},
			{`[]`, `"code":-32600`},
		} {
			code, body := ts.do(t, ts.acme, "POST", "/a2a/default", c.body)
			if code != 200 || !strings.Contains(body, c.want) {
				t.Errorf("%s: %d %s", c.body, code, body)
			}
		}
		code, body := ts.do(t, ts.acme, "POST", "/a2a/nobody", `{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"id":"x"}}`)
		if code != 404 || !strings.Contains(body, `no agent \"nobody\"`) {
			t.Errorf("an unknown agent: %d %s", code, body)
		}
		if code, _ := ts.do(t, "ak_wrong", "POST", "/a2a/default", `{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"id":"x"}}`); code != 401 {
			t.Errorf("a wrong key: %d, want 401", code)
		}
		if after := sessions(); after != before {
			t.Errorf("the refused requests changed the sessions:\n%s\n%s", before, after)
		}
	})

	t.Run("listing", func(t *testing.T) {
		code, body := ts.do(t, ts.acme, "GET", "/v1/a2a/tasks", "")
		list := decodeJSON[struct {
			Tasks []struct {
				TaskID    string `json:"task_id"`
				ContextID string `json:"context_id"`
				MessageID string `json:"message_id"`
				Agent     string
				State     string
			}
		}](t, body)
		// A decision on a task keeps the entry of the message that
		// started it.
		for _, tk := range list.Tasks {
			if tk.TaskID == parked.ID && (tk.MessageID == "" || tk.State != "completed") {
				t.Errorf("the task decided through A2A: %+v", tk)
			}
		}
		if code != 200 || len(list.Tasks) < 6 {
			t.Fatalf("%d %s", code, body)
		}
		last := list.Tasks[len(list.Tasks)-1]
		if last.TaskID != first.ID || last.ContextID != first.ContextID || last.Agent != "default" || last.State != "completed" {
			t.Errorf("the oldest task %+v, want %s", last, first.ID)
		}
		if _, body := ts.do(t, ts.beta, "GET", "/v1/a2a/tasks", ""); body != "{\"tasks\":[]}\n" {
			t.Errorf("beta lists %s", body)
		}
	})
}

// TestA2AExtendedCard: agent/getAuthenticatedExtendedCard is not offered
// (the card is already behind the key): it answers the HTTP status 200
// with a JSON-RPC error -32007 (no extended card) carrying the request's
// id and no result, with params or without, and changes nothing.
func TestA2AExtendedCard(t *testing.T) {
	ts := startServer(t, serverSetup{})
	_, before := ts.do(t, ts.acme, "GET", "/v1/sessions", "")
	code, ans := ts.rpc(t, ts.acme, "default", "agent/getAuthenticatedExtendedCard", nil)
	if code != 200 || ans.Error == nil || ans.Error.Code != -32007 || !strings.Contains(ans.Error.Message, "no extended card") {
		t.Fatalf("the extended card: %d %+v, want 200 with error -32007 saying there is no extended card", code, ans.Error)
	}
	if string(ans.ID) != "1" || ans.Result != nil {
		t.Errorf("the answer's id %s and result %s, want the request's id 1 and no result", ans.ID, ans.Result)
	}
	ts.rpcError(t, ts.acme, "agent/getAuthenticatedExtendedCard", map[string]any{}, -32007, "no extended card")
	if _, after := ts.do(t, ts.acme, "GET", "/v1/sessions", ""); after != before {
		t.Errorf("asking for the extended card changed the sessions:\n%s\n%s", before, after)
	}
}

// TestA2AStreamLimits: message/stream and tasks/resubscribe hold stream
// slots like every stream: past the key's bound they are refused (429,
// a JSON-RPC error), and a refused message/stream starts no run.
func TestA2AStreamLimits(t *testing.T) {
	ts := startServer(t, serverSetup{Mutate: func(c *server.Config) {
		tc := c.Tenants["acme"]
		tc.RateLimit.StreamsPerKey = 1
		c.Tenants["acme"] = tc
	}})
	ts.model.Respond = func(req model.Request) hosttest.Reply {
		return hosttest.Reply{Text: "thinking ", Stall: time.Hour}
	}
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": "message/stream", "params": map[string]any{"message": userMsg("m-1", "one")}})
	req, _ := newRequest(ts, ts.acme, "POST", "/a2a/default", string(b))
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	r := newSSEReader(res.Body)
	e, ok := r.next()
	if !ok || !strings.Contains(e.Data, `"kind":"task"`) {
		t.Fatalf("the first stream: %+v", e)
	}
	_, before := ts.do(t, ts.acme, "GET", "/v1/sessions", "")
	code, ans := ts.rpc(t, ts.acme, "default", "message/stream", map[string]any{"message": userMsg("m-2", "two")})
	if code != 429 || ans.Error == nil || ans.Error.Data["code"] != "rate_limited" {
		t.Fatalf("a second stream: %d %+v", code, ans.Error)
	}
	if _, after := ts.do(t, ts.acme, "GET", "/v1/sessions", ""); after != before {
		t.Errorf("the refused stream started a run:\n%s\n%s", before, after)
	}
	// The client leaving ends the stream, not the run.
	res.Body.Close()
	task := decodeJSON[rpcAnswer](t, e.Data)
	id := decodeJSON[a2aTaskJSON](t, string(task.Result)).ID
	waitFor(t, "the slot to be given back", func() bool {
		code, _ := ts.rpc(t, ts.acme, "default", "tasks/get", map[string]any{"id": id})
		_, body := ts.do(t, ts.acme, "GET", "/v1/a2a/tasks", "")
		return code == 200 && strings.Contains(body, `"state":"working"`) && ts.streamFree(t)
	})
	if got := ts.task(t, "tasks/cancel", map[string]any{"id": id}); got.Status.State != "canceled" {
		t.Errorf("the run the client left, cancelled: %s", got.Status.State)
	}
}

// streamFree tells whether acme's key may open a stream now (the feed,
// closed at once).
func (ts *testServer) streamFree(t *testing.T) bool {
	req, _ := newRequest(ts, ts.acme, "GET", "/v1/feed", "")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	res.Body.Close()
	return res.StatusCode == 200
}

// TestA2AShuttingDown: once the server drains, an A2A message is refused
// with the HTTP status 503 and a JSON-RPC error -32000 whose data.code is
// the API's, unavailable — the client sends to another host — and no run
// starts; reading a task still answers.
func TestA2AShuttingDown(t *testing.T) {
	ts := startServer(t, serverSetup{})
	done := ts.task(t, "message/send", map[string]any{"message": userMsg("m-1", "before the drain"), "configuration": map[string]any{"blocking": true}})
	ts.srv.Drain()
	_, before := ts.do(t, ts.acme, "GET", "/v1/sessions", "")
	for _, method := range []string{"message/send", "message/stream"} {
		code, ans := ts.rpc(t, ts.acme, "default", method, map[string]any{"message": userMsg("m-"+method, "after the drain")})
		if code != 503 || ans.Error == nil || ans.Error.Code != -32000 || ans.Error.Data["code"] != "unavailable" {
			t.Errorf("%s while draining: %d %+v, want 503 with -32000 unavailable", method, code, ans.Error)
		}
	}
	if _, after := ts.do(t, ts.acme, "GET", "/v1/sessions", ""); after != before {
		t.Errorf("a refused message started a run:\n%s\n%s", before, after)
	}
	if got := ts.task(t, "tasks/get", map[string]any{"id": done.ID}); got.ID != done.ID {
		t.Errorf("tasks/get while draining: %+v", got)
	}
}
