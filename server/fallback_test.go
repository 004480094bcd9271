package server_test

// An agent's models in order (models: [a, b]) and its retry policy,
// through the configuration and the API.

import (
	"strings"
	"testing"
	"time"

	"github.com/agentichost/agentic/host/hosttest"
	"github.com/agentichost/agentic/host/model"
	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/server"
	"github.com/agentichost/agentic/storage"
	"github.com/agentichost/agentic/storage/file"
)

const fallbackConfig = `
tenants:
  acme:
    models: [acme/a, acme/b, acme/c]
    agents:
      default:
        models: [acme/a, acme/b]
        retry:
          attempts: 2
          base: 1ms
          cap: 2ms
          jitter: none
          max_elapsed: 1m
          by_cause:
            rate_limit: {attempts: 5, base: 2ms}
`

// TestServeModelFallback: a tenant's agent whose first model is not
// served answers with the next; the transcript says which model answered,
// the ledger why the first was left; the configuration's retry policy is
// the agent's.
func TestServeModelFallback(t *testing.T) {
	cfg, err := server.LoadConfig(writeFile(t, t.TempDir(), "fallback.yaml", fallbackConfig))
	if err != nil {
		t.Fatal(err)
	}
	agent := cfg.Tenants["acme"].Agents["default"]
	if agent.Retry == nil || agent.Retry.Attempts != 2 || agent.Retry.Jitter != "none" || time.Duration(agent.Retry.MaxElapsed) != time.Minute ||
		agent.Retry.ByCause["rate_limit"].Attempts != 5 || time.Duration(agent.Retry.ByCause["rate_limit"].Base) != 2*time.Millisecond {
		t.Fatalf("retry read as %+v", agent.Retry)
	}
	store, err := file.Open(t.TempDir(), file.Options{})
	if err != nil {
		t.Fatal(err)
	}
	m := hosttest.NewModel()
	m.Respond = func(req model.Request) hosttest.Reply {
		if req.Model == "acme/a" {
			return hosttest.Reply{Err: &model.Error{StatusCode: 404, Code: "404", Message: "No endpoints found for acme/a."}}
		}
		return hosttest.Reply{Text: "answered by " + req.Model}
	}
	ts := startServer(t, serverSetup{Store: store, Mutate: func(c *server.Config) {
		acme := c.Tenants["acme"]
		acme.Models, acme.Agents = cfg.Tenants["acme"].Models, cfg.Tenants["acme"].Agents
		c.Tenants["acme"] = acme
	}, Options: func(o *server.Options) { o.Model = m }})

	code, body := ts.do(t, ts.acme, "POST", "/v1/sessions/fb/messages?wait=true", `{"text":"hello"}`)
	if code != 200 || !strings.Contains(body, `"text":"answered by acme/b"`) {
		t.Fatalf("POST: %d %s", code, body)
	}
	_, transcript := ts.do(t, ts.acme, "GET", "/v1/sessions/fb/transcript", "")
	if !strings.Contains(transcript, `"model":"acme/b"`) || strings.Contains(transcript, `"model":"acme/a"`) {
		t.Errorf("the transcript does not say acme/b answered: %s", transcript)
	}
	acme, err := storage.Prefix(store, "acme:")
	if err != nil {
		t.Fatal(err)
	}
	var reasons []string
	for _, e := range hosttest.Load(t, acme, "fb") {
		if e.Kind == ledger.KindRetry {
			reasons = append(reasons, e.Retry.Reason)
		}
	}
	if len(reasons) != 1 || !strings.Contains(reasons[0], "model acme/a: HTTP 404, the model is not served") || !strings.HasSuffix(reasons[0], "falling back to acme/b (it is not served)") {
		t.Errorf("retries recorded: %q", reasons)
	}
	_, usage := ts.do(t, ts.acme, "GET", "/v1/usage", "")
	u := decodeJSON[struct {
		Models []struct {
			Model string
			Steps int
		}
	}](t, usage)
	if len(u.Models) != 1 || u.Models[0].Model != "acme/b" || u.Models[0].Steps != 1 {
		t.Errorf("usage per model: %+v, want acme/b's one step alone", u.Models)
	}
	var asked []string
	for _, r := range m.Requests() {
		asked = append(asked, r.Model)
	}
	if got := strings.Join(asked, " "); got != "acme/a acme/b" {
		t.Errorf("the model was asked for %q", got)
	}
}

// TestServeModelFallbackRefusals: models and retry that cannot be are
// refused at start, each problem named in the configuration's words.
func TestServeModelFallbackRefusals(t *testing.T) {
	cfg, err := server.LoadConfig(writeFile(t, t.TempDir(), "bad.yaml", `
tenants:
  acme:
    models: [acme/a, acme/b]
    agents:
      disagree: {model: acme/b, models: [acme/a, acme/b]}
      outside: {models: [acme/a, other/x]}
      twice: {models: [acme/a, acme/b, acme/a]}
      policy:
        model: acme/a
        retry: {attempts: -1, jitter: wild, by_cause: {weather: {}, server: {max_elapsed: -1s}}}
`))
	if err != nil {
		t.Fatal(err)
	}
	_, err = server.New(server.Options{Config: cfg, Storage: ts0(t), Model: hosttest.NewModel()})
	for _, want := range []string{
		"agents.disagree: model acme/b and models [acme/a acme/b] disagree",
		"agents.outside: models: other/x is not among the tenant's models",
		`agents.twice: models: "acme/a" is empty or named twice`,
		"agents.policy: retry: attempts is negative",
		`agents.policy: retry: jitter "wild"`,
		`unknown cause "weather"`,
		"by_cause.server: max_elapsed is negative",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("New: %v\nwant %q in it", err, want)
		}
	}
}

// ts0 is a storage for a server that is never started.
func ts0(t *testing.T) storage.Storage {
	store, err := file.Open(t.TempDir(), file.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return store
}

// TestServeDecideEditRespond: POST /v1/approvals/{id} edits a call's input
// (checked against the tool's schema: 400 when it breaks it) or answers it
// in the tool's place; the transcript shows both; bodies that mix them are
// refused with what is wrong.
func TestServeDecideEditRespond(t *testing.T) {
	ts := newTestServer(t)
	if code, body := ts.doBytes(t, ts.acme, "PUT", "/v1/plugins/publish_post", publishPost(t)); code != 201 {
		t.Fatalf("upload: %d %s", code, body)
	}
	park := func(session string) string {
		t.Helper()
		code, body := ts.do(t, ts.acme, "POST", "/v1/sessions/"+session+"/messages?wait=true", `{"text":"publish_post title=Frday body=b"}`)
		if code != 200 || !strings.Contains(body, "approval_required") {
			t.Fatalf("park: %d %s", code, body)
		}
		res := decodeJSON[struct {
			Approvals []struct {
				ApprovalID string `json:"approval_id"`
			}
		}](t, body)
		if len(res.Approvals) != 1 {
			t.Fatalf("approvals: %s", body)
		}
		return res.Approvals[0].ApprovalID
	}
	edit := park("edit")
	for _, bad := range []struct{ body, want string }{
		{`{"approve":true,"input":{"title":7}}`, "does not match tool publish_post's schema"},
		{`{"approve":false,"input":{"title":"Friday","body":"b"}}`, `an edited input comes with \"approve\": true`},
		{`{"approve":true,"response":"done"}`, `give one of them`},
		{`{}`, `field \"approve\" is required`},
	} {
		if code, body := ts.do(t, ts.acme, "POST", "/v1/approvals/"+edit, bad.body); code != 400 || !strings.Contains(body, bad.want) {
			t.Errorf("%s: %d %s, want 400 saying %s", bad.body, code, body, bad.want)
		}
	}
	if code, body := ts.do(t, ts.acme, "POST", "/v1/approvals/"+edit, `{"approve":true,"input":{"title":"Friday","body":"b"},"by":"alice"}`); code != 200 {
		t.Fatalf("edit: %d %s", code, body)
	}
	ts.waitState(t, ts.acme, "edit", "completed")
	_, tr := ts.do(t, ts.acme, "GET", "/v1/sessions/edit/transcript", "")
	if !strings.Contains(tr, `"edited_input":{"title":"Friday","body":"b"}`) || !strings.Contains(tr, `"decided_by":"alice"`) || !strings.Contains(tr, `"title":"Frday"`) {
		t.Errorf("the edit's transcript: %s", tr)
	}

	respond := park("respond")
	if code, body := ts.do(t, ts.acme, "POST", "/v1/approvals/"+respond, `{"response":"posted by hand"}`); code != 200 {
		t.Fatalf("respond: %d %s", code, body)
	}
	ts.waitState(t, ts.acme, "respond", "completed")
	_, tr = ts.do(t, ts.acme, "GET", "/v1/sessions/respond/transcript", "")
	if !strings.Contains(tr, `"approval":"responded"`) || !strings.Contains(tr, `"output":"posted by hand"`) {
		t.Errorf("the response's transcript: %s", tr)
	}
}

// TestServeOverlapInterrupt: a message with "overlap": "rollback" sent
// while a run stalls stops it and is answered by a run of its own; the
// cancelled run's end says so; a bad overlap is refused.
func TestServeOverlapInterrupt(t *testing.T) {
	m := hosttest.NewModel()
	m.Respond = func(req model.Request) hosttest.Reply {
		if last := req.Messages[len(req.Messages)-1]; strings.HasPrefix(last.Text(), "stall") {
			return hosttest.Reply{Text: "thinking", Stall: time.Hour}
		}
		return hosttest.DefaultReply(req)
	}
	ts := startServer(t, serverSetup{Options: func(o *server.Options) { o.Model = m }})
	if code, body := ts.do(t, ts.acme, "POST", "/v1/sessions/ov/messages", `{"text":"x","overlap":"drop"}`); code != 400 || !strings.Contains(body, `is not queue, reject, interrupt or rollback`) {
		t.Errorf("a bad overlap: %d %s", code, body)
	}
	code, body := ts.do(t, ts.acme, "POST", "/v1/sessions/ov/messages", `{"text":"stall please"}`)
	if code != 202 {
		t.Fatalf("the first message: %d %s", code, body)
	}
	first := decodeJSON[struct {
		RunID string `json:"run_id"`
	}](t, body).RunID
	waitFor(t, "the model to be asked", func() bool { return m.RequestCount() >= 1 })
	code, body = ts.do(t, ts.acme, "POST", "/v1/sessions/ov/messages?wait=true", `{"text":"second","overlap":"rollback"}`)
	if code != 200 || !strings.Contains(body, `"text":"You said: second"`) || !strings.Contains(body, `"status":"completed"`) {
		t.Fatalf("the interrupting message: %d %s", code, body)
	}
	acme, err := storage.Prefix(ts.store, "acme:")
	if err != nil {
		t.Fatal(err)
	}
	var end *ledger.RunEnd
	for _, e := range hosttest.Load(t, acme, "ov") {
		if e.RunID == first && e.RunEnd != nil {
			end = e.RunEnd
		}
	}
	if end == nil || end.Status != ledger.RunCancelled || !end.RolledBack || !strings.HasPrefix(end.Reason, "rolled back by message ") {
		t.Errorf("the first run's end: %+v", end)
	}
}
