package server_test

import (
	"strings"
	"sync"
	"testing"

	"github.com/agentichost/agentic/server"
)

// taskSchema is the deliverable of the tasks in these tests.
const taskSchema = `{"type":"object","properties":{"title":{"type":"string"},"count":{"type":"integer"}},"required":["title","count"],"additionalProperties":false}`

// taskAnswer is GET /v1/tasks/{id}'s answer.
type taskAnswer struct {
	TaskID string `json:"task_id"`
	Status string
	RunID  string `json:"run_id"`
	Value  map[string]any
	Reason string
}

// TestTasks: POST /v1/tasks starts a task that runs to a submitted
// deliverable, read by GET /v1/tasks/{id}; a session that is no task, and
// a task nobody has, answer 404; bad bodies answer 400 naming the field.
func TestTasks(t *testing.T) {
	ts := startServer(t, serverSetup{})
	code, body := ts.do(t, ts.acme, "POST", "/v1/tasks", `{"prompt":"submit_deliverable title=Hello count=3","schema":`+taskSchema+`,"name":"note"}`)
	if code != 202 {
		t.Fatalf("%d %s", code, body)
	}
	started := decodeJSON[taskAnswer](t, body)
	if !strings.HasPrefix(started.TaskID, "task_") || started.RunID == "" {
		t.Fatalf("started: %s", body)
	}
	var got taskAnswer
	waitFor(t, "the task to end", func() bool {
		code, body := ts.do(t, ts.acme, "GET", "/v1/tasks/"+started.TaskID, "")
		if code != 200 {
			t.Fatalf("%d %s", code, body)
		}
		got = decodeJSON[taskAnswer](t, body)
		return got.Status != "running"
	})
	if got.Status != "submitted" || got.Value["title"] != "Hello" || got.Value["count"] != 3.0 || got.RunID != started.RunID {
		t.Errorf("outcome %+v, want submitted {title: Hello, count: 3} by run %s", got, started.RunID)
	}
	// The task's session is a session too.
	if code, body := ts.do(t, ts.acme, "GET", "/v1/sessions/"+started.TaskID+"/transcript", ""); code != 200 || !strings.Contains(body, "submit_deliverable") {
		t.Errorf("the task's transcript: %d %s", code, body)
	}

	// A session that is not a task is no task.
	if code, body := ts.do(t, ts.acme, "POST", "/v1/sessions/chat/messages?wait=true", `{"text":"hi"}`); code != 200 {
		t.Fatalf("%d %s", code, body)
	}
	for _, id := range []string{"chat", "task_nobody"} {
		if code, body := ts.do(t, ts.acme, "GET", "/v1/tasks/"+id, ""); code != 404 || !strings.Contains(body, `"code":"not_found"`) {
			t.Errorf("GET /v1/tasks/%s: %d %s, want 404", id, code, body)
		}
	}
	if code, body := ts.do(t, ts.acme, "GET", "/v1/tasks/bad%20id", ""); code != 400 {
		t.Errorf("a bad task id: %d %s", code, body)
	}

	for _, c := range []struct{ body, want string }{
		{`{"schema":` + taskSchema + `}`, `field \"prompt\"`},
		{`{"prompt":"x"}`, `field \"schema\"`},
		{`{"prompt":"x","schema":5}`, `field \"schema\"`},
		{`{"prompt":"x","schema":{"type":"nonsense"}}`, `field \"schema\"`},
		{`{"prompt":"x","schema":` + taskSchema + `,"validator":"nobody"}`, `field \"validator\"`},
		{`{"prompt":"x","schema":` + taskSchema + `,"agent":"nobody"}`, `field \"agent\"`},
		{`{"prompt":"x","schema":` + taskSchema + `,"max_pokes":-1}`, `field \"max_pokes\"`},
		{`{"prompt":"x","schema":` + taskSchema + `,"colour":"red"}`, `unknown field \"colour\"`},
		{`{"prompt":7}`, `field \"prompt\"`},
	} {
		code, body := ts.do(t, ts.acme, "POST", "/v1/tasks", c.body)
		if code != 400 || !strings.Contains(body, `"code":"invalid_request"`) || !strings.Contains(body, c.want) {
			t.Errorf("POST /v1/tasks %s: %d %s, want 400 naming %s", c.body, code, body, c.want)
		}
	}
	// None of the refused tasks left a session behind.
	if _, body := ts.do(t, ts.acme, "GET", "/v1/sessions", ""); strings.Count(body, `"id":"task_`) != 1 {
		t.Errorf("sessions after refused tasks: %s", body)
	}
}

// approval is an entry of GET /v1/approvals.
type approval struct {
	SessionID  string `json:"session_id"`
	RunID      string `json:"run_id"`
	ApprovalID string `json:"approval_id"`
	Tool       string
	Effect     string
	Token      string
}

// parkRun sends a message whose run calls publish_post, an external tool
// that waits for a person under the default policy, and returns the
// approval it waits on.
func parkRun(t *testing.T, ts *testServer, session string) approval {
	t.Helper()
	code, body := ts.do(t, ts.acme, "POST", "/v1/sessions/"+session+"/messages?wait=true", `{"text":"publish_post title=Launch body=Today"}`)
	res := decodeJSON[struct {
		Status    string
		Approvals []approval
	}](t, body)
	if code != 200 || res.Status != "approval_required" || len(res.Approvals) != 1 {
		t.Fatalf("%d %s, want the run parked on one approval", code, body)
	}
	return res.Approvals[0]
}

// TestApprovals: a parked run's request is in GET /v1/approvals; POST
// /v1/approvals/{id} approves or denies it and the run goes on to its end;
// a second decision answers 409, and bad decisions 400 or 404, changing
// nothing.
func TestApprovals(t *testing.T) {
	ts := startServer(t, serverSetup{Mutate: func(c *server.Config) {
		acme := c.Tenants["acme"]
		acme.Sandbox.KV = true // publish_post keeps its idempotency records there
		c.Tenants["acme"] = acme
	}})
	if code, body := ts.doBytes(t, ts.acme, "PUT", "/v1/plugins/publish_post", publishPost(t)); code != 201 {
		t.Fatalf("%d %s", code, body)
	}
	denied, approved := parkRun(t, ts, "deny-me"), parkRun(t, ts, "approve-me")
	code, body := ts.do(t, ts.acme, "GET", "/v1/approvals", "")
	list := decodeJSON[struct{ Approvals []approval }](t, body).Approvals
	if code != 200 || len(list) != 2 {
		t.Fatalf("%d %s", code, body)
	}
	for _, a := range list {
		if a.Tool != "publish_post" || a.Effect != "external" || a.Token == "" || (a.ApprovalID != denied.ApprovalID && a.ApprovalID != approved.ApprovalID) {
			t.Errorf("listed %+v", a)
		}
	}
	if _, body := ts.do(t, ts.beta, "GET", "/v1/approvals", ""); strings.Contains(body, denied.ApprovalID) {
		t.Errorf("beta lists acme's approvals: %s", body)
	}

	// Bad decisions change nothing.
	for _, c := range []struct {
		id, body string
		code     int
		want     string
	}{
		{denied.ApprovalID, `{"approve":"yes"}`, 400, `field \"approve\"`},
		{denied.ApprovalID, `{"approve":true,"colour":"red"}`, 400, `unknown field \"colour\"`},
		{denied.ApprovalID, `{}`, 400, `field \"approve\"`},
		{denied.ApprovalID, ``, 400, "empty"},
		{denied.ApprovalID, `{"approve":true,"token":"` + approved.Token + `"}`, 400, "token"},
		{denied.ApprovalID, `{"approve":true,"token":"forged"}`, 400, "token"},
		{"appr_nobody", `{"approve":true}`, 404, "not_found"},
	} {
		code, body := ts.do(t, ts.acme, "POST", "/v1/approvals/"+c.id, c.body)
		if code != c.code || !strings.Contains(body, c.want) {
			t.Errorf("decide %s with %s: %d %s, want %d saying %s", c.id, c.body, code, body, c.code, c.want)
		}
	}
	if code, body := ts.do(t, ts.acme, "GET", "/v1/approvals", ""); code != 200 || strings.Count(body, `"approval_id"`) != 2 {
		t.Fatalf("after bad decisions: %d %s", code, body)
	}

	// Deny one; approve the other with its token; each run goes on.
	code, body = ts.do(t, ts.acme, "POST", "/v1/approvals/"+denied.ApprovalID, `{"approve":false,"reason":"not today","by":"ops"}`)
	if code != 200 || !strings.Contains(body, `"run_id":"`+denied.RunID+`"`) || !strings.Contains(body, `"session_id":"deny-me"`) {
		t.Fatalf("deny: %d %s", code, body)
	}
	code, body = ts.do(t, ts.acme, "POST", "/v1/approvals/"+approved.ApprovalID, `{"approve":true,"token":"`+approved.Token+`"}`)
	if code != 200 {
		t.Fatalf("approve with the token: %d %s", code, body)
	}
	ts.waitState(t, ts.acme, "deny-me", "completed")
	ts.waitState(t, ts.acme, "approve-me", "completed")
	_, body = ts.do(t, ts.acme, "GET", "/v1/sessions/deny-me/transcript", "")
	if !strings.Contains(body, "not today") {
		t.Errorf("the denied run's transcript does not tell the reason: %s", body)
	}
	_, body = ts.do(t, ts.acme, "GET", "/v1/sessions/approve-me/transcript", "")
	if !strings.Contains(body, "publish_post is not configured") { // the call ran: the plugin asks for its endpoint
		t.Errorf("the approved call did not run: %s", body)
	}
	if code, body := ts.do(t, ts.acme, "GET", "/v1/approvals", ""); code != 200 || strings.Contains(body, "approval_id") {
		t.Errorf("after the decisions: %d %s", code, body)
	}

	// A second decision, either way, is a conflict; and it stays one
	// for beta's 404.
	for _, a := range []approval{denied, approved} {
		for _, d := range []string{`{"approve":true}`, `{"approve":false}`} {
			if code, body := ts.do(t, ts.acme, "POST", "/v1/approvals/"+a.ApprovalID, d); code != 409 || !strings.Contains(body, `"code":"conflict"`) {
				t.Errorf("decide %s again with %s: %d %s, want 409", a.ApprovalID, d, code, body)
			}
		}
		if code, body := ts.do(t, ts.beta, "POST", "/v1/approvals/"+a.ApprovalID, `{"approve":true}`); code != 404 {
			t.Errorf("beta decides acme's decided approval: %d %s, want 404", code, body)
		}
	}
}

// TestApprovalRace: of several decisions at once on one request, with its
// token and without, one wins and each other one answers 409 — never
// dropped: a decision that lost the race after its checks passed reports
// the conflict the host returned. The run goes on once, denied once.
func TestApprovalRace(t *testing.T) {
	for _, withToken := range []bool{true, false} {
		ts := startServer(t, serverSetup{})
		if code, body := ts.doBytes(t, ts.acme, "PUT", "/v1/plugins/publish_post", publishPost(t)); code != 201 {
			t.Fatalf("%d %s", code, body)
		}
		a := parkRun(t, ts, "race")
		decision := `{"approve":false,"reason":"no"}`
		if withToken {
			decision = `{"approve":false,"reason":"no","token":"` + a.Token + `"}`
		}
		codes := make([]int, 8)
		var wg sync.WaitGroup
		for i := range codes {
			wg.Go(func() { codes[i], _ = ts.do(t, ts.acme, "POST", "/v1/approvals/"+a.ApprovalID, decision) })
		}
		wg.Wait()
		ok, conflicts := 0, 0
		for _, c := range codes {
			switch c {
			case 200:
				ok++
			case 409:
				conflicts++
			}
		}
		if ok != 1 || conflicts != len(codes)-1 {
			t.Errorf("token %v: answers %v, want one 200 and the others 409", withToken, codes)
		}
		ts.waitState(t, ts.acme, "race", "completed")
		if _, body := ts.do(t, ts.acme, "GET", "/v1/sessions/race/transcript", ""); strings.Count(body, `"approval":"denied"`) != 1 {
			t.Errorf("token %v: transcript %s", withToken, body)
		}
	}
}
