package server_test

// An agent's models in order (models: [a, b]) and its retry policy,
// through the configuration and the API.

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
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

// TestServeExtraBody: an agent's extra_body goes into each of its model
// requests, so that OpenRouter's "models" routing is one setting; an
// evaluation that names its model asks that model alone (extra_body's
// models dropped, its other fields kept).
func TestServeExtraBody(t *testing.T) {
	cfg, err := server.LoadConfig(writeFile(t, t.TempDir(), "extra.yaml", `
tenants:
  acme:
    models: [acme/a, acme/b]
    agents:
      default:
        model: acme/a
        extra_body:
          models: [acme/b]
          provider: {order: [p1], allow_fallbacks: false}
`))
	if err != nil {
		t.Fatal(err)
	}
	m := hosttest.NewModel()
	ts := startServer(t, serverSetup{Mutate: func(c *server.Config) {
		acme := c.Tenants["acme"]
		acme.Models, acme.Agents = cfg.Tenants["acme"].Models, cfg.Tenants["acme"].Agents
		c.Tenants["acme"] = acme
	}, Options: func(o *server.Options) { o.Model = m }})
	if code, body := ts.do(t, ts.acme, "POST", "/v1/sessions/x/messages?wait=true", `{"text":"hello"}`); code != 200 {
		t.Fatalf("POST: %d %s", code, body)
	}
	if code, body := ts.do(t, ts.acme, "POST", "/v1/eval", `{"sessions":["x"],"model":"acme/b"}`); code != 200 {
		t.Fatalf("eval: %d %s", code, body)
	}
	reqs := m.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d model requests, want 2", len(reqs))
	}
	extra := func(i int) string {
		b, err := json.Marshal(reqs[i].Extra)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	if got, want := extra(0), `{"models":["acme/b"],"provider":{"allow_fallbacks":false,"order":["p1"]}}`; reqs[0].Model != "acme/a" || got != want {
		t.Errorf("the run asked %s with %s, want acme/a with %s", reqs[0].Model, got, want)
	}
	if got, want := extra(1), `{"provider":{"allow_fallbacks":false,"order":["p1"]}}`; reqs[1].Model != "acme/b" || got != want {
		t.Errorf("the evaluation asked %s with %s, want acme/b with %s", reqs[1].Model, got, want)
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
      extra: {model: acme/a, extra_body: {model: acme/b, models: [acme/b, other/x], route: fallback, max_tokens: 9}}
      extraform: {model: acme/a, extra_body: {models: acme/b}}
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
		"agents.extra: extra_body: max_tokens: the host writes that field itself",
		"agents.extra: extra_body: model: the host writes that field itself",
		"agents.extra: extra_body: models[1]: other/x is not among the tenant's models",
		"agents.extra: extra_body: route: it lets the endpoint pick a model outside the tenant's models",
		"agents.extraform: extra_body: models: want a list of model ids",
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
	m := hosttest.StallingModel("stall", "thinking")
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

// TestServeRunQueue: past rate_limit.concurrent_runs, new runs wait in the
// tenant's queue (queue_runs) instead of being refused, first come first
// served, and start as places free; past the queue's length a request is
// refused (429) as without a queue, and so is one whose wait outlasts
// queue_timeout. /metrics shows the queue's length and its waits.
func TestServeRunQueue(t *testing.T) {
	m := hosttest.StallingModel("stall", "thinking")
	ts := startServer(t, serverSetup{Options: func(o *server.Options) { o.Model = m }, Mutate: func(c *server.Config) {
		acme := c.Tenants["acme"]
		acme.RateLimit.ConcurrentRuns, acme.RateLimit.QueueRuns, acme.RateLimit.QueueTimeout = 1, 2, server.Duration(time.Minute)
		c.Tenants["acme"] = acme
	}})
	if code, body := ts.do(t, ts.acme, "POST", "/v1/sessions/busy/messages", `{"text":"stall please"}`); code != 202 {
		t.Fatalf("the first run: %d %s", code, body)
	}
	type answer struct {
		code int
		body string
	}
	answers := map[string]chan answer{}
	for _, id := range []string{"q1", "q2"} {
		answers[id] = make(chan answer, 1)
		go func(id string) {
			code, body := ts.do(t, ts.acme, "POST", "/v1/sessions/"+id+"/messages?wait=true", `{"text":"hello `+id+`"}`)
			answers[id] <- answer{code, body}
		}(id)
		// Each waits in the queue before the next comes: first come, first
		// served is then the order of the ids.
		waitFor(t, fmt.Sprintf("%d in the queue", len(answers)), func() bool {
			return metricLine(ts, t, "agentic_admission_queue_length{") == fmt.Sprintf(`agentic_admission_queue_length{otel_scope_name="github.com/agentichost/agentic/server",otel_scope_schema_url="",otel_scope_version="",tenant="acme"} %d`, len(answers))
		})
	}
	// The queue is full: refused at once.
	if code, body := ts.do(t, ts.acme, "POST", "/v1/sessions/q3/messages", `{"text":"hello q3"}`); code != 429 || !strings.Contains(body, "2 requests wait already (rate_limit.queue_runs)") {
		t.Errorf("past the queue: %d %s", code, body)
	}
	// The stalled run ends: the first waiting starts, then the second.
	if code, body := ts.do(t, ts.acme, "POST", "/v1/sessions/busy/cancel", `{}`); code != 200 {
		t.Fatalf("cancel: %d %s", code, body)
	}
	var ends []time.Time
	for _, id := range []string{"q1", "q2"} {
		a := <-answers[id]
		if a.code != 200 || !strings.Contains(a.body, `"text":"You said: hello `+id+`"`) {
			t.Fatalf("%s: %d %s", id, a.code, a.body)
		}
		acme, _ := storage.Prefix(ts.store, "acme:")
		var start, end time.Time
		for _, e := range hosttest.Load(t, acme, id) {
			if e.RunStart != nil {
				start = e.Time
			}
			if e.RunEnd != nil {
				end = e.Time
			}
		}
		if len(ends) > 0 && start.Before(ends[0]) {
			t.Errorf("%s's run started before q1's ended: the bound of one run was passed", id)
		}
		ends = append(ends, end)
	}
	if line := metricWith(ts, t, "agentic_admission_queue_wait_seconds_count{", `outcome="admitted"`); !strings.HasSuffix(line, " 2") {
		t.Errorf("/metrics' admitted waits: %q", line)
	}
	if line := metricWith(ts, t, "agentic_admission_queue_wait_seconds_count{", `outcome="full"`); !strings.HasSuffix(line, " 1") {
		t.Errorf("/metrics' refusals of a full queue: %q", line)
	}
	if line := metricLine(ts, t, "agentic_admission_queue_length{"); !strings.HasSuffix(line, " 0") {
		t.Errorf("/metrics' queue after: %q", line)
	}
}

// TestServeRunQueueTimeout: a wait past queue_timeout is refused (429),
// and its place in the queue given up.
func TestServeRunQueueTimeout(t *testing.T) {
	m := hosttest.StallingModel("", "thinking")
	ts := startServer(t, serverSetup{Options: func(o *server.Options) { o.Model = m }, Mutate: func(c *server.Config) {
		acme := c.Tenants["acme"]
		acme.RateLimit.ConcurrentRuns, acme.RateLimit.QueueRuns, acme.RateLimit.QueueTimeout = 1, 1, server.Duration(time.Millisecond)
		c.Tenants["acme"] = acme
	}})
	if code, body := ts.do(t, ts.acme, "POST", "/v1/sessions/busy/messages", `{"text":"stall"}`); code != 202 {
		t.Fatalf("the first run: %d %s", code, body)
	}
	for range 2 { // the place given up is there for the next
		if code, body := ts.do(t, ts.acme, "POST", "/v1/sessions/late/messages", `{"text":"hello"}`); code != 429 || !strings.Contains(body, "in the queue (rate_limit.queue_timeout)") {
			t.Errorf("a wait past the timeout: %d %s", code, body)
		}
	}
	if line := metricWith(ts, t, "agentic_admission_queue_wait_seconds_count{", `outcome="timeout"`); !strings.HasSuffix(line, " 2") {
		t.Errorf("/metrics' waits: %q", line)
	}
	ts.do(t, ts.acme, "POST", "/v1/sessions/busy/cancel", `{}`)
}

// metricWith returns the line of the server's /metrics that starts with
// prefix and holds label, "" when none does.
func metricWith(ts *testServer, t *testing.T, prefix, label string) string {
	t.Helper()
	_, body := ts.do(t, "", "GET", "/metrics", "")
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, prefix) && strings.Contains(l, label) {
			return l
		}
	}
	return ""
}

// asUser sends a request for the end user u (X-Agentic-User).
func asUser(t *testing.T, ts *testServer, u, method, path, body string) (int, string) {
	t.Helper()
	return withKeyAs(t, ts, ts.acme, u, method, path, body)
}

// withKeyAs sends a request with key, for the end user u ("": no
// X-Agentic-User).
func withKeyAs(t *testing.T, ts *testServer, key, u, method, path, body string) (int, string) {
	t.Helper()
	req, err := newRequest(ts, key, method, path, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if u != "" {
		req.Header.Set("X-Agentic-User", u)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// TestServePerUserQuota: rate_limit.per_user bounds each end user a
// request names (X-Agentic-User) beside the tenant: one person's runs in
// flight and requests, not another's; a message that joins a run in
// flight needs no place; a name that cannot be one is refused.
func TestServePerUserQuota(t *testing.T) {
	m := hosttest.StallingModel("", "thinking")
	ts := startServer(t, serverSetup{Options: func(o *server.Options) { o.Model = m }, Mutate: func(c *server.Config) {
		acme := c.Tenants["acme"]
		acme.RateLimit.PerUser = &server.PerUserConfig{ConcurrentRuns: 1, RequestsPerSecond: 0.001, Burst: 2}
		c.Tenants["acme"] = acme
	}})
	defer func() {
		for _, id := range []string{"a1", "b1"} {
			ts.do(t, ts.acme, "POST", "/v1/sessions/"+id+"/cancel", `{}`)
		}
	}()
	if code, body := asUser(t, ts, "alice@example.com", "POST", "/v1/sessions/a1/messages", `{"text":"one"}`); code != 202 {
		t.Fatalf("alice's first run: %d %s", code, body)
	}
	waitFor(t, "alice's run in flight", func() bool { return ts.sessionState(t, ts.acme, "a1") == "running" })
	if code, body := asUser(t, ts, "alice@example.com", "POST", "/v1/sessions/a2/messages", `{"text":"two"}`); code != 429 ||
		!strings.Contains(body, "user alice@example.com of tenant acme has 1 runs in flight, its limit (rate_limit.per_user.concurrent_runs)") {
		t.Errorf("alice's second run: %d %s", code, body)
	}
	if code, body := asUser(t, ts, "bob", "POST", "/v1/sessions/b1/messages", `{"text":"one"}`); code != 202 {
		t.Errorf("bob's run beside alice's: %d %s", code, body)
	}
	// Alice's third request: past her bucket of 2 (the rate is all but
	// zero), whatever it asks.
	if code, body := asUser(t, ts, "alice@example.com", "GET", "/v1/sessions/a1", ""); code != 429 || !strings.Contains(body, "rate_limit.per_user.requests_per_second") {
		t.Errorf("alice past her rate: %d %s", code, body)
	}
	if code, _ := asUser(t, ts, "bob", "GET", "/v1/sessions/b1", ""); code != 200 {
		t.Errorf("bob within his rate: %d", code)
	}
	if code, body := ts.do(t, ts.acme, "POST", "/v1/sessions/a3/messages", `{"text":"no user"}`); code != 202 {
		t.Errorf("a request naming no user: %d %s", code, body)
	}
	ts.do(t, ts.acme, "POST", "/v1/sessions/a3/cancel", `{}`)
	if code, body := asUser(t, ts, "has space", "GET", "/v1/sessions", ""); code != 400 || !strings.Contains(body, "X-Agentic-User") {
		t.Errorf("a bad user name: %d %s", code, body)
	}
}

// TestServeRequestQueue: with rate_limit.queue_requests, requests past
// requests_per_second wait for their token instead of being refused; one
// whose turn would come past queue_timeout is refused at once, saying so.
func TestServeRequestQueue(t *testing.T) {
	ts := startServer(t, serverSetup{Mutate: func(c *server.Config) {
		acme := c.Tenants["acme"]
		acme.RateLimit.RequestsPerSecond, acme.RateLimit.Burst, acme.RateLimit.QueueRequests, acme.RateLimit.QueueTimeout = 20, 1, 4, server.Duration(time.Minute)
		c.Tenants["acme"] = acme
		beta := c.Tenants["beta"]
		beta.RateLimit.RequestsPerSecond, beta.RateLimit.Burst, beta.RateLimit.QueueRequests, beta.RateLimit.QueueTimeout = 0.001, 1, 4, server.Duration(time.Second)
		c.Tenants["beta"] = beta
	}})
	// Five requests at once against a bucket of one token, a token each
	// 50ms: each waits its turn; none is refused.
	codes := make(chan int, 5)
	for range 5 {
		go func() {
			code, _ := ts.do(t, ts.acme, "GET", "/v1/sessions", "")
			codes <- code
		}()
	}
	for range 5 {
		if code := <-codes; code != 200 {
			t.Errorf("a request that waited its turn: %d", code)
		}
	}
	if line := metricWith(ts, t, "agentic_admission_queue_wait_seconds_count{", `queue="requests"`); line == "" {
		t.Error("/metrics shows no request waits")
	}
	// Beta's next token is a thousand seconds away: past its timeout.
	if code, body := ts.do(t, ts.beta, "GET", "/v1/sessions", ""); code != 200 {
		t.Fatalf("beta's first request: %d %s", code, body)
	}
	if code, body := ts.do(t, ts.beta, "GET", "/v1/sessions", ""); code != 429 || !strings.Contains(body, "its turn would come past rate_limit.queue_timeout (1s)") {
		t.Errorf("a turn past the timeout: %d %s", code, body)
	}
}
