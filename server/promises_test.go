package server_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/agentichost/agentic/host/eval"
	"github.com/agentichost/agentic/host/hosttest"
	"github.com/agentichost/agentic/host/model"
	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/server"
	"github.com/agentichost/agentic/storage/memory"
)

// Tests of promises the documentation makes that no other test checked.

// TestSessionReplayNothingRecorded: POST /v1/sessions/{id}/replay answers
// 404 for a session that does not exist (saying so) and for one without
// plugin tool calls; a plugin call whose result was recorded without its
// traffic (a ledger written before traffic was recorded) is answered 200,
// the call not_replayable with the reason, and diverged false.
func TestSessionReplayNothingRecorded(t *testing.T) {
	store := memory.New()
	ts := startServer(t, serverSetup{Store: store})
	if code, body := ts.doBytes(t, ts.acme, "PUT", "/v1/plugins/accounts", getAccount(t)); code != 201 {
		t.Fatalf("upload: %d %s", code, body)
	}
	type replayAnswer struct {
		SessionID string `json:"session_id"`
		Replays   []struct {
			CallID  string `json:"call_id"`
			Tool    string
			Verdict string
			Reason  string
		}
		Diverged bool
		Error    struct{ Code, Message string }
	}
	replay := func(session string) (int, replayAnswer, string) {
		t.Helper()
		code, body := ts.do(t, ts.acme, "POST", "/v1/sessions/"+session+"/replay", "")
		return code, decodeJSON[replayAnswer](t, body), body
	}

	if code, a, body := replay("nobody"); code != 404 || a.Error.Code != "not_found" || !strings.Contains(a.Error.Message, `no session "nobody"`) {
		t.Errorf("a session that does not exist: %d %s, want 404 saying there is no such session", code, body)
	}
	if code, body := ts.do(t, ts.acme, "POST", "/v1/sessions/chat/messages?wait=true", `{"text":"hello"}`); code != 200 {
		t.Fatalf("chat: %d %s", code, body)
	}
	if code, a, body := replay("chat"); code != 404 || a.Error.Code != "not_found" || !strings.Contains(a.Error.Message, "has no plugin tool calls") {
		t.Errorf("a session without plugin calls: %d %s, want 404 saying it has none", code, body)
	}

	// A call recorded with its traffic replays; the same ledger without
	// the traffic, as a ledger written before it was recorded, does not.
	if code, body := ts.do(t, ts.acme, "POST", "/v1/sessions/rec/messages?wait=true", `{"text":"get_account account_id=42"}`); code != 200 {
		t.Fatalf("rec: %d %s", code, body)
	}
	if code, a, body := replay("rec"); code != 200 || len(a.Replays) != 1 || a.Replays[0].Verdict != "same" {
		t.Fatalf("the call recorded with its traffic: %d %s", code, body)
	}
	var callID string
	for _, e := range hosttest.Load(t, store, "acme:rec") {
		if e.ToolResult != nil {
			if !strings.HasPrefix(e.ToolResult.Source, "sha256:") {
				t.Fatalf("the call's source %q, want a module's hash", e.ToolResult.Source)
			}
			r := *e.ToolResult
			r.Traffic = nil
			e.ToolResult, callID = &r, r.CallID
		}
		if err := store.Append(context.Background(), "acme:old", e); err != nil {
			t.Fatal(err)
		}
	}
	code, a, body := replay("old")
	if code != 200 || a.SessionID != "old" || a.Diverged || len(a.Replays) != 1 {
		t.Fatalf("a call without its traffic: %d %s, want 200 with one verdict", code, body)
	}
	if r := a.Replays[0]; r.CallID != callID || r.Tool != "get_account" || r.Verdict != "not_replayable" || !strings.Contains(r.Reason, "no traffic was recorded") {
		t.Errorf("a call without its traffic: %+v, want not_replayable saying no traffic was recorded", r)
	}
}

// TestNoCORSHeaders: the server sends no CORS headers — no
// Access-Control-* header — even to a browser's request from another
// origin: a preflight (OPTIONS with Access-Control-Request-Method) of
// every route, and the requests themselves, authenticated or not, the UI
// chat's among them. A browser on another origin cannot read the answers;
// a UI goes through its own backend, which adds the key.
func TestNoCORSHeaders(t *testing.T) {
	ts := startServer(t, serverSetup{})
	const origin = "https://elsewhere.example"
	check := func(what string, h http.Header) {
		t.Helper()
		for name := range h {
			if strings.HasPrefix(strings.ToLower(name), "access-control-") {
				t.Errorf("%s: the answer has %s: %q", what, name, h.Values(name))
			}
		}
	}
	for _, r := range registeredRoutes(t) {
		path := r.Path
		for strings.Contains(path, "{") {
			i, j := strings.Index(path, "{"), strings.Index(path, "}")
			path = path[:i] + "x" + path[j+1:]
		}
		_, h, _ := ts.doHeader(t, "", "OPTIONS", path, "", "Origin", origin, "Access-Control-Request-Method", r.Method,
			"Access-Control-Request-Headers", "authorization, content-type")
		check("a preflight of "+r.String(), h)
	}
	for _, c := range []struct{ key, method, path, body string }{
		{ts.acme, "POST", "/v1/sessions/s/messages?wait=true", `{"text":"hello"}`},
		{ts.acme, "GET", "/v1/sessions", ""},
		{ts.acme, "GET", "/v1/sessions/s/transcript", ""},
		{ts.acme, "GET", "/v1/sessions/nobody", ""},
		{ts.acme, "POST", "/v1/ui/chat", uiBody("u1", "hello")},
		{ts.acme, "GET", "/v1/ui/chat/u1/stream", ""},
		{ts.acme, "GET", "/a2a/default/.well-known/agent-card.json", ""},
		{"", "GET", "/v1/sessions", ""},
		{"ak_wrong", "GET", "/v1/sessions", ""},
		{"", "GET", "/healthz", ""},
	} {
		code, h, _ := ts.doHeader(t, c.key, c.method, c.path, c.body, "Origin", origin, "Content-Type", "application/json")
		check(c.method+" "+c.path+" ("+http.StatusText(code)+")", h)
	}
	// The session's event stream, read until its first event.
	req, _ := newRequest(ts, ts.acme, "GET", "/v1/sessions/s/events", "")
	req.Header.Set("Origin", origin)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if _, ok := newSSEReader(res.Body).next(); res.StatusCode != 200 || !ok {
		t.Fatalf("the event stream: %d", res.StatusCode)
	}
	check("the event stream", res.Header)
}

// TestMCPOAuthTokenHost: an MCP server's OAuth token endpoint must be
// among the tenant's sandbox.allowed_hosts, as the server's URL must: a
// token_url on a host the sandbox does not allow is a configuration error
// naming it, and nothing is asked of it. Allowed, the host gets its token
// with the client-credentials grant (the client's id and secret) and the
// MCP server's tools serve with it.
func TestMCPOAuthTokenHost(t *testing.T) {
	const token, secret = "oauth-tok-never-shown-7", "client-secret-never-shown-3"
	_, docs := mcpDocs(t, token)
	var asked atomic.Int64
	auth := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked.Add(1)
		id, sec, ok := r.BasicAuth()
		if err := r.ParseForm(); err != nil || r.Method != "POST" || r.Form.Get("grant_type") != "client_credentials" {
			http.Error(w, `{"error":"invalid_request"}`, http.StatusBadRequest)
			return
		}
		if !ok {
			id, sec = r.Form.Get("client_id"), r.Form.Get("client_secret")
		}
		if id != "agent" || sec != secret {
			http.Error(w, `{"error":"invalid_client"}`, http.StatusUnauthorized)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"access_token":%q,"token_type":"Bearer","expires_in":3600}`, token)
	}))
	t.Cleanup(auth.Close)
	docsURL, _ := url.Parse(docs.URL)
	authURL, _ := url.Parse(auth.URL)
	tenant := func(allowed ...string) func(*server.Config) {
		return withTenant("acme", func(tc *server.TenantConfig) {
			tc.Sandbox.AllowedHosts, tc.Sandbox.AllowPrivateNetwork = allowed, true
			tc.MCPServers = []server.MCPServerConfig{{Name: "docs", URL: docs.URL,
				OAuth: &server.OAuthConfig{TokenURL: auth.URL + "/token", ClientID: "agent", ClientSecret: secret}}}
		})
	}

	cfg := server.Config{PluginsDir: t.TempDir(), Tenants: map[string]server.TenantConfig{"acme": {Keys: []server.KeyConfig{{Hash: server.HashKey("k")}}, Models: []string{hosttest.DefaultModel}}}}
	tenant(docsURL.Host)(&cfg)
	srv, err := server.New(server.Options{Config: cfg, Storage: memory.New(), Model: hosttest.NewModel()})
	if err == nil {
		srv.Close(t.Context())
	}
	want := "oauth: the host of token_url " + auth.URL + "/token is not among the tenant's sandbox.allowed_hosts"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("a token endpoint outside the sandbox: %v, want a configuration error saying %q", err, want)
	}
	if strings.Contains(err.Error(), secret) {
		t.Errorf("the error shows the client secret: %v", err)
	}
	if n := asked.Load(); n != 0 {
		t.Errorf("the token endpoint outside the sandbox was asked %d times", n)
	}

	ts := startServer(t, serverSetup{Mutate: tenant(docsURL.Host, authURL.Host)})
	waitFor(t, "the MCP server's tools", func() bool {
		l := ts.listMCP(t)
		return len(l.Servers) == 1 && l.Servers[0].Connected && len(l.Servers[0].Tools) == 2
	})
	if asked.Load() == 0 {
		t.Error("the tools serve, but the token endpoint was never asked")
	}
	if _, body := ts.do(t, ts.acme, "GET", "/v1/mcp", ""); strings.Contains(body, token) || strings.Contains(body, secret) {
		t.Errorf("GET /v1/mcp shows a credential: %s", body)
	}
}

// TestA2AStreamsAtRest: how an A2A stream ends when its run comes to rest
// other than completed. message/stream of a run that waits for a person
// ends with a final input-required status-update naming the request, and
// the stream closes while the run stays parked; tasks/resubscribe of that
// task answers at once with the task and that final status-update; a
// decision sent with message/stream streams the task again, its text so
// far and then what follows, to a final completed; a run that fails ends
// its stream with a final failed status-update saying why.
func TestA2AStreamsAtRest(t *testing.T) {
	ts := startServer(t, serverSetup{})
	if code, body := ts.doBytes(t, ts.acme, "PUT", "/v1/plugins/publish_post", publishPost(t)); code != 201 {
		t.Fatalf("upload: %d %s", code, body)
	}
	final := func(events []rpcAnswer) a2aTaskJSON {
		t.Helper()
		if len(events) == 0 {
			t.Fatal("no events")
		}
		return decodeJSON[a2aTaskJSON](t, string(events[len(events)-1].Result))
	}

	_, events := ts.a2aStream(t, "message/stream", map[string]any{"message": userMsg("m-publish", "publish_post title=Hello body=World")})
	if got := kinds(t, events); !strings.HasPrefix(got, "task ") || !strings.HasSuffix(got, " status-update(input-required,final)") {
		t.Fatalf("a run that parks: %s, want the task, then a final input-required status-update", got)
	}
	task := decodeJSON[a2aTaskJSON](t, string(events[0].Result))
	before := streamedText(events) // the first pass's text
	end := final(events)
	if end.Status.Message == nil || len(end.Status.Message.Parts) != 2 {
		t.Fatalf("the final status-update: %+v, want the requests named", end.Status)
	}
	list, _ := end.Status.Message.Parts[1].Data["approvals"].([]any)
	if len(list) != 1 {
		t.Fatalf("the final status-update's requests: %+v", end.Status.Message.Parts[1].Data)
	}
	approvalID, _ := list[0].(map[string]any)["approval_id"].(string)
	if approvalID == "" || !strings.Contains(end.statusText(), approvalID) {
		t.Fatalf("approval %q in %q", approvalID, end.statusText())
	}
	if st := ts.sessionState(t, ts.acme, task.ContextID); st != "approval_required" {
		t.Errorf("after the stream closed, the session is %q, want approval_required", st)
	}

	_, resub := ts.a2aStream(t, "tasks/resubscribe", map[string]any{"id": task.ID})
	if got := kinds(t, resub); got != "task status-update(input-required,final)" {
		t.Errorf("resubscribing to the parked task: %s, want the task and its final status-update at once", got)
	}

	decision := map[string]any{"kind": "message", "messageId": "m-decide", "role": "user", "taskId": task.ID,
		"parts": []any{map[string]any{"kind": "data", "data": map[string]any{"approval_id": approvalID, "approve": true}}}}
	_, events = ts.a2aStream(t, "message/stream", map[string]any{"message": decision})
	if got := kinds(t, events); !strings.HasPrefix(got, "task ") || !strings.HasSuffix(got, " status-update(completed,final)") {
		t.Fatalf("a decision streamed: %s, want the task, then a final completed status-update", got)
	}
	if first := decodeJSON[a2aTaskJSON](t, string(events[0].Result)); first.ID != task.ID || len(first.Artifacts) != 0 {
		t.Errorf("the decision's stream starts with %+v, want the task %s without its artifacts", first, task.ID)
	}
	done := ts.task(t, "tasks/get", map[string]any{"id": task.ID})
	if got := streamedText(events); before == "" || !strings.HasPrefix(got, before) || got != done.text() || !strings.Contains(got, "The publish_post tool returned") {
		t.Errorf("the decision's stream carried %q, want the task's whole text %q: the text before the decision (%q), then the rest", got, done.text(), before)
	}

	ts.model.Enqueue(hosttest.Reply{Err: &model.Error{StatusCode: 402, Message: "no credits"}})
	_, events = ts.a2aStream(t, "message/stream", map[string]any{"message": userMsg("m-fail", "this fails")})
	if got := kinds(t, events); !strings.HasPrefix(got, "task ") || !strings.HasSuffix(got, " status-update(failed,final)") {
		t.Fatalf("a run that fails: %s, want the task, then a final failed status-update", got)
	}
	if end := final(events); !strings.HasPrefix(end.statusText(), "the run failed: ") {
		t.Errorf("the failed run's status message %q, want it to say why", end.statusText())
	}
}

// TestDelegateStatusEightDeep: a run whose sub-agent's call waits for a
// child parked on an approval shows approval_required with the child's
// request, looking down a chain of sub-agents to a depth of 8: the top
// session of a chain whose eighth child waits shows that child's request
// (its session_id the child's); a chain one deeper is past the bound, so
// its top shows running, and the top's first child, eight above the
// waiting one, shows the request.
func TestDelegateStatusEightDeep(t *testing.T) {
	// Agents a0 → a1 → … → a8 and b0 → … → b9, each delegating to the
	// next; the last of each chain calls publish_post, which waits for a
	// person.
	last := map[string]bool{"a8": true, "b9": true}
	next := map[string]string{}
	ts := startServer(t, serverSetup{Mutate: withTenant("acme", func(tc *server.TenantConfig) {
		tc.Models = nil
		tc.Delegation = server.DelegationConfig{MaxDepth: -1}
		tc.Agents = map[string]server.AgentConfig{"default": {Model: hosttest.DefaultModel}}
		for _, chain := range []struct {
			prefix string
			n      int
		}{{"a", 8}, {"b", 9}} {
			for i := 0; i <= chain.n; i++ {
				name := fmt.Sprintf("%s%d", chain.prefix, i)
				ac := server.AgentConfig{Model: "test/" + name, Description: "Agent " + name + "."}
				if i < chain.n {
					next[name] = fmt.Sprintf("%s%d", chain.prefix, i+1)
					ac.DelegateTo = []string{next[name]}
				}
				tc.Agents[name] = ac
			}
		}
	})})
	if code, body := ts.doBytes(t, ts.acme, "PUT", "/v1/plugins/publish_post", publishPost(t)); code != 201 {
		t.Fatalf("upload: %d %s", code, body)
	}
	ts.model.Respond = func(req model.Request) hosttest.Reply {
		for _, m := range req.Messages {
			if m.Role == ledger.RoleTool {
				return hosttest.Reply{Text: "done"}
			}
		}
		name := strings.TrimPrefix(req.Model, "test/")
		switch {
		case last[name]:
			return hosttest.Reply{ToolCalls: []hosttest.ToolCall{{Name: "publish_post", Arguments: `{"title":"Deep","body":"down"}`}}}
		case next[name] != "":
			return hosttest.Reply{ToolCalls: []hosttest.ToolCall{{Name: next[name], Arguments: `{"task":"go on"}`}}}
		}
		return hosttest.DefaultReply(req)
	}
	type status struct {
		State     string
		Approvals []struct {
			ApprovalID string `json:"approval_id"`
			SessionID  string `json:"session_id"`
			Tool       string
		}
	}
	statusOf := func(id string) status {
		t.Helper()
		code, body := ts.do(t, ts.acme, "GET", "/v1/sessions/"+id, "")
		if code != 200 {
			t.Fatalf("GET /v1/sessions/%s: %d %s", id, code, body)
		}
		return decodeJSON[struct{ Status status }](t, body).Status
	}
	// waiting starts the chain from agent top in session id, and returns
	// the request its last child waits on, and that child's session.
	waiting := func(id, top string) (approvalID, child string) {
		t.Helper()
		if code, body := ts.do(t, ts.acme, "POST", "/v1/sessions/"+id+"/messages", `{"text":"go","agent":"`+top+`"}`); code != 202 {
			t.Fatalf("%s: %d %s", id, code, body)
		}
		waitFor(t, "the request of "+id+"'s last child", func() bool {
			_, body := ts.do(t, ts.acme, "GET", "/v1/approvals", "")
			for _, a := range decodeJSON[struct {
				Approvals []struct {
					ApprovalID string `json:"approval_id"`
					SessionID  string `json:"session_id"`
				}
			}](t, body).Approvals {
				if strings.HasPrefix(a.SessionID, id+".") {
					approvalID, child = a.ApprovalID, a.SessionID
					return true
				}
			}
			return false
		})
		return approvalID, child
	}

	approvalID, child := waiting("deep8", "a0")
	if n := strings.Count(child, "."); n != 8 {
		t.Fatalf("the request is in session %s, %d levels down, want 8", child, n)
	}
	st := statusOf("deep8")
	if st.State != "approval_required" || len(st.Approvals) != 1 || st.Approvals[0].ApprovalID != approvalID ||
		st.Approvals[0].SessionID != child || st.Approvals[0].Tool != "publish_post" {
		t.Errorf("the status of a chain whose eighth child waits: %+v, want approval_required with request %s of %s", st, approvalID, child)
	}

	approvalID, child = waiting("deep9", "b0")
	if n := strings.Count(child, "."); n != 9 {
		t.Fatalf("the request is in session %s, %d levels down, want 9", child, n)
	}
	if st := statusOf("deep9"); st.State != "running" || len(st.Approvals) != 0 {
		t.Errorf("the status of a chain whose ninth child waits: %+v, want running: the request is past the depth of 8", st)
	}
	first := child[:len("deep9")+1+strings.Index(child[len("deep9")+1:], ".")]
	if st := statusOf(first); st.State != "approval_required" || len(st.Approvals) != 1 || st.Approvals[0].ApprovalID != approvalID {
		t.Errorf("the status of %s, eight above the waiting child: %+v, want approval_required with request %s", first, st, approvalID)
	}
}

// TestEvalNeverParkedByBudgetAsk: with budget_ask, a run past the tenant's
// budget parks for a person; an evaluation never does — no one would see
// its request. Its candidate's call past the budget is not made: the turn
// fails with candidate_reason budget_exceeded, the replay goes on to report
// the rest, and no request waits in the inbox.
func TestEvalNeverParkedByBudgetAsk(t *testing.T) {
	ts := startServer(t, serverSetup{Mutate: withTenant("acme", func(tc *server.TenantConfig) {
		tc.BudgetUSDPerDay = 1
		tc.BudgetAsk = &server.BudgetAskConfig{RaiseUSD: 0.5}
	})})
	for i := range 4 {
		if code, body := ts.do(t, ts.acme, "POST", "/v1/sessions/src/messages?wait=true", fmt.Sprintf(`{"text":"turn %d"}`, i)); code != 200 {
			t.Fatalf("source: %d %s", code, body)
		}
	}
	// Each of the candidate's calls costs $0.60: the first two spend the
	// budget, the others are past it.
	ts.model.Respond = func(req model.Request) hosttest.Reply { return costing(hosttest.Reply{Text: "candidate"}, 0.6) }
	n := ts.model.RequestCount()
	code, body := ts.do(t, ts.acme, "POST", "/v1/eval", `{"sessions":["src"],"timeout_seconds":60}`)
	if code != 200 {
		t.Fatalf("eval: %d %.600s, want 200: the evaluation ends, its turns past the budget failed", code, body)
	}
	rep := decodeJSON[eval.Report](t, body)
	if len(rep.Sessions) != 1 || len(rep.Sessions[0].Turns) != 4 {
		t.Fatalf("eval: %.600s, want the four turns reported", body)
	}
	stopped := 0
	for _, turn := range rep.Sessions[0].Turns {
		switch {
		case strings.Contains(turn.CandidateReason, "budget_exceeded"):
			stopped++
			if turn.Candidate.Status != ledger.RunFailed {
				t.Errorf("turn %d stopped by the budget ended %s, want failed", turn.Index, turn.Candidate.Status)
			}
		case turn.Candidate.Status != ledger.RunCompleted:
			t.Errorf("turn %d ended %s (%s), want completed or failed past the budget", turn.Index, turn.Candidate.Status, turn.CandidateReason)
		}
	}
	if stopped != 2 {
		t.Errorf("%d turns stopped by the budget, want 2: %.600s", stopped, body)
	}
	if made := ts.model.RequestCount() - n; made != 2 {
		t.Errorf("the candidate's model was called %d times, want 2: a call past the budget is not made", made)
	}
	if _, body := ts.do(t, ts.acme, "GET", "/v1/approvals", ""); strings.Contains(body, "approval_id") {
		t.Errorf("the inbox after the evaluation: %s, want no request", body)
	}
}
