package server_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/agentichost/agentic/host/hosttest"
	"github.com/agentichost/agentic/host/model"
	"github.com/agentichost/agentic/internal/redistest"
	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/server"
	"github.com/agentichost/agentic/storage"
	"github.com/agentichost/agentic/storage/redis"
)

// The isolation suite: every route the server registers, asked by tenant
// beta with tenant acme's ids, answers exactly what it answers for ids
// nobody has (status and body, the ids aside), and asked without a valid
// key — none, a wrong one, a revoked one, one of a tenant the server does
// not serve — answers 401; acme's sessions, runs, approvals, tasks and
// plugins are the same afterwards. A route without a row fails the suite.

// isoIDs are the ids the suite's requests name.
type isoIDs struct {
	Session  string // a session whose run completed
	Live     string // a session whose run is in flight
	Parked   string // a session whose run waits for an approval
	Run      string // the live session's run
	Approval string // the parked run's approval request
	Token    string // its token
	Task     string // a task that submitted its deliverable
	Plugin   string // a plugin module
	Hash     string // a version of it (its content hash)
	A2A      string // a task started through A2A
	Schedule string // a schedule made through the API
	Blob     string // an attachment of the completed session, kept by reference
}

// missingIDs are ids no tenant has.
var missingIDs = isoIDs{Session: "nobody-done", Live: "nobody-live", Parked: "nobody-parked", Run: "run_nobody",
	Approval: "apr_nobody", Token: "tok_nobody", Task: "task_nobody", Plugin: "nobody_plugin",
	Hash: "sha256:0000000000000000000000000000000000000000000000000000000000000000", A2A: "run_a2a_nobody",
	Schedule: "nobody-schedule", Blob: "sha256:1111111111111111111111111111111111111111111111111111111111111111"}

// mask replaces the ids in body by their field names.
func (ids isoIDs) mask(body string) string {
	pairs := [][2]string{{ids.Token, "<token>"}, {ids.Session, "<session>"}, {ids.Live, "<live>"}, {ids.Parked, "<parked>"},
		{ids.Run, "<run>"}, {ids.Approval, "<approval>"}, {ids.Task, "<task>"}, {ids.Plugin, "<plugin>"}, {ids.Hash, "<hash>"}, {ids.A2A, "<a2a>"}, {ids.Schedule, "<schedule>"}, {ids.Blob, "<blob>"}}
	sort.Slice(pairs, func(i, j int) bool { return len(pairs[i][0]) > len(pairs[j][0]) })
	for _, p := range pairs {
		body = strings.ReplaceAll(body, p[0], p[1])
	}
	return body
}

// isoRequest is one request of the suite.
type isoRequest struct {
	method, path, body string
	header             []string
}

// isoRow asks one route.
type isoRow struct {
	route string // as registered: "METHOD /path"
	name  string // what the variant asks
	req   func(isoIDs) isoRequest
	// creates: the route makes something of the caller's own (a session,
	// a task, a plugin) whatever ids it names, and answers with ids
	// minted for it: the answers are compared by status only.
	creates bool
	// list: the route lists the caller's things; beta's answer must name
	// nothing of acme's.
	list bool
	// public: the route takes no tenant key.
	public bool
	// stream: the route streams the caller's changes for as long as it is
	// connected; only the keys are checked here (TestFeedIsolation
	// checks what beta's stream shows).
	stream bool
	// undo, when set, takes back what a creating request made (before
	// the same request with other ids).
	undo func(isoIDs) isoRequest
}

func get(path string) func(isoIDs) isoRequest {
	return func(isoIDs) isoRequest { return isoRequest{method: "GET", path: path} }
}

// isolationRows has a row for every route, some with several variants.
var isolationRows = []isoRow{
	{route: "GET /v1/sessions", name: "list", list: true, req: get("/v1/sessions")},
	{route: "GET /v1/sessions", name: "list after", list: true, req: func(ids isoIDs) isoRequest {
		return isoRequest{method: "GET", path: "/v1/sessions?limit=200&after=" + ids.Session}
	}},
	{route: "GET /v1/sessions/{id}", name: "completed", req: func(ids isoIDs) isoRequest { return isoRequest{method: "GET", path: "/v1/sessions/" + ids.Session} }},
	{route: "GET /v1/sessions/{id}", name: "live", req: func(ids isoIDs) isoRequest { return isoRequest{method: "GET", path: "/v1/sessions/" + ids.Live} }},
	{route: "GET /v1/sessions/{id}", name: "parked", req: func(ids isoIDs) isoRequest { return isoRequest{method: "GET", path: "/v1/sessions/" + ids.Parked} }},
	{route: "GET /v1/sessions/{id}", name: "task", req: func(ids isoIDs) isoRequest { return isoRequest{method: "GET", path: "/v1/sessions/" + ids.Task} }},
	{route: "GET /v1/sessions/{id}/transcript", name: "completed", req: func(ids isoIDs) isoRequest {
		return isoRequest{method: "GET", path: "/v1/sessions/" + ids.Session + "/transcript"}
	}},
	{route: "GET /v1/sessions/{id}/transcript", name: "live", req: func(ids isoIDs) isoRequest {
		return isoRequest{method: "GET", path: "/v1/sessions/" + ids.Live + "/transcript"}
	}},
	{route: "GET /v1/sessions/{id}/events", name: "live", req: func(ids isoIDs) isoRequest {
		return isoRequest{method: "GET", path: "/v1/sessions/" + ids.Live + "/events"}
	}},
	{route: "GET /v1/sessions/{id}/events", name: "live after its run's cursor", req: func(ids isoIDs) isoRequest {
		return isoRequest{method: "GET", path: "/v1/sessions/" + ids.Live + "/events", header: []string{"Last-Event-ID", ids.Run + ":1"}}
	}},
	{route: "POST /v1/sessions/{id}/cancel", name: "live", req: func(ids isoIDs) isoRequest {
		return isoRequest{method: "POST", path: "/v1/sessions/" + ids.Live + "/cancel", body: `{"reason":"beta was here"}`}
	}},
	{route: "POST /v1/sessions/{id}/cancel", name: "parked", req: func(ids isoIDs) isoRequest {
		return isoRequest{method: "POST", path: "/v1/sessions/" + ids.Parked + "/cancel"}
	}},
	{route: "POST /v1/sessions/{id}/events/{key}", name: "completed", req: func(ids isoIDs) isoRequest {
		return isoRequest{method: "POST", path: "/v1/sessions/" + ids.Session + "/events/order-1", body: `beta's payment`}
	}},
	{route: "POST /v1/sessions/{id}/events/{key}", name: "parked", req: func(ids isoIDs) isoRequest {
		return isoRequest{method: "POST", path: "/v1/sessions/" + ids.Parked + "/events/order-1", body: `beta's payment`}
	}},
	{route: "POST /v1/sessions/{id}/replay", name: "completed", req: func(ids isoIDs) isoRequest {
		return isoRequest{method: "POST", path: "/v1/sessions/" + ids.Session + "/replay"}
	}},
	{route: "POST /v1/sessions/{id}/replay", name: "parked, one call", req: func(ids isoIDs) isoRequest {
		return isoRequest{method: "POST", path: "/v1/sessions/" + ids.Parked + "/replay", body: `{"call_id":"call_1"}`}
	}},
	{route: "POST /v1/eval", name: "sessions", req: func(ids isoIDs) isoRequest {
		return isoRequest{method: "POST", path: "/v1/eval", body: `{"sessions":["` + ids.Session + `","` + ids.Parked + `"]}`}
	}},
	{route: "POST /v1/sessions/{id}/fork", name: "completed", req: func(ids isoIDs) isoRequest {
		return isoRequest{method: "POST", path: "/v1/sessions/" + ids.Session + "/fork?wait=true", body: `{"at":"` + ids.Run + `","session_id":"fork-of-done"}`}
	}},
	{route: "POST /v1/sessions/{id}/fork", name: "live", req: func(ids isoIDs) isoRequest {
		return isoRequest{method: "POST", path: "/v1/sessions/" + ids.Live + "/fork", body: `{"at":"` + ids.Run + `"}`}
	}},
	{route: "POST /v1/sessions/{id}/resume", name: "completed", req: func(ids isoIDs) isoRequest {
		return isoRequest{method: "POST", path: "/v1/sessions/" + ids.Session + "/resume"}
	}},
	{route: "POST /v1/sessions/{id}/resume", name: "live", req: func(ids isoIDs) isoRequest {
		return isoRequest{method: "POST", path: "/v1/sessions/" + ids.Live + "/resume?wait=true", body: `{"action":"fail"}`}
	}},
	{route: "GET /v1/tasks/{id}", name: "task", req: func(ids isoIDs) isoRequest { return isoRequest{method: "GET", path: "/v1/tasks/" + ids.Task} }},
	{route: "GET /v1/approvals", name: "list", list: true, req: get("/v1/approvals")},
	{route: "POST /v1/approvals/{id}", name: "approve", req: func(ids isoIDs) isoRequest {
		return isoRequest{method: "POST", path: "/v1/approvals/" + ids.Approval, body: `{"approve":true,"by":"beta"}`}
	}},
	{route: "POST /v1/approvals/{id}", name: "approve with the token", req: func(ids isoIDs) isoRequest {
		return isoRequest{method: "POST", path: "/v1/approvals/" + ids.Approval, body: `{"approve":true,"token":"` + ids.Token + `"}`}
	}},
	{route: "GET /v1/plugins", name: "list", list: true, req: get("/v1/plugins")},
	{route: "GET /v1/usage", name: "list", list: true, req: get("/v1/usage?days=90")},
	{route: "GET /v1/blobs/{digest}", name: "attachment", req: func(ids isoIDs) isoRequest { return isoRequest{method: "GET", path: "/v1/blobs/" + ids.Blob} }},
	{route: "GET /v1/blobs/{digest}", name: "attachment of a session", req: func(ids isoIDs) isoRequest {
		return isoRequest{method: "GET", path: "/v1/blobs/" + ids.Blob + "?session=" + ids.Session}
	}},
	{route: "GET /v1/feed", name: "stream", stream: true, req: get("/v1/feed")},
	{route: "GET /v1/plugins/{name}", name: "plugin", req: func(ids isoIDs) isoRequest { return isoRequest{method: "GET", path: "/v1/plugins/" + ids.Plugin} }},
	{route: "POST /v1/plugins/{name}/versions/{hash}", name: "approve a version", req: func(ids isoIDs) isoRequest {
		return isoRequest{method: "POST", path: "/v1/plugins/" + ids.Plugin + "/versions/" + ids.Hash, body: `{"approve":true}`}
	}},
	{route: "POST /v1/plugins/{name}/release", name: "plugin", req: func(ids isoIDs) isoRequest {
		return isoRequest{method: "POST", path: "/v1/plugins/" + ids.Plugin + "/release"}
	}},
	{route: "POST /v1/plugins/{name}/rollback", name: "plugin", req: func(ids isoIDs) isoRequest {
		return isoRequest{method: "POST", path: "/v1/plugins/" + ids.Plugin + "/rollback"}
	}},
	{route: "PUT /v1/plugins/{name}/canary", name: "plugin", req: func(ids isoIDs) isoRequest {
		return isoRequest{method: "PUT", path: "/v1/plugins/" + ids.Plugin + "/canary", body: "\x00asm"}
	}},
	{route: "POST /v1/plugins/{name}/canary/promote", name: "plugin", req: func(ids isoIDs) isoRequest {
		return isoRequest{method: "POST", path: "/v1/plugins/" + ids.Plugin + "/canary/promote"}
	}},
	{route: "DELETE /v1/plugins/{name}/canary", name: "plugin", req: func(ids isoIDs) isoRequest {
		return isoRequest{method: "DELETE", path: "/v1/plugins/" + ids.Plugin + "/canary"}
	}},
	{route: "GET /v1/mcp", name: "list", list: true, req: get("/v1/mcp")},
	{route: "POST /v1/mcp/{server}/tools/{tool}/approve", name: "approve", req: func(ids isoIDs) isoRequest {
		return isoRequest{method: "POST", path: "/v1/mcp/" + ids.Plugin + "/tools/read_doc/approve", body: `{"digest":"` + ids.Hash + `"}`}
	}},
	{route: "GET /v1/audit", name: "list", list: true, req: get("/v1/audit")},
	{route: "GET /v1/audit", name: "a plugin's", list: true, req: func(ids isoIDs) isoRequest { return isoRequest{method: "GET", path: "/v1/audit?plugin=" + ids.Plugin} }},
	{route: "DELETE /v1/plugins/{name}", name: "plugin", req: func(ids isoIDs) isoRequest {
		return isoRequest{method: "DELETE", path: "/v1/plugins/" + ids.Plugin}
	}},
	{route: "POST /v1/ui/chat", name: "decide the parked run's approval", req: func(ids isoIDs) isoRequest {
		return isoRequest{method: "POST", path: "/v1/ui/chat", body: `{"id":"` + ids.Parked + `","messages":[{"id":"m1","role":"assistant","parts":[` +
			`{"type":"tool-publish_post","toolCallId":"call_1","state":"approval-responded","approval":{"id":"` + ids.Approval + `","approved":true}}]}]}`}
	}},
	{route: "GET /v1/ui/chat/{id}/stream", name: "live", req: func(ids isoIDs) isoRequest {
		return isoRequest{method: "GET", path: "/v1/ui/chat/" + ids.Live + "/stream"}
	}},
	{route: "GET /a2a/{agent}/.well-known/agent-card.json", name: "card", req: get("/a2a/default/.well-known/agent-card.json")},
	{route: "POST /a2a/{agent}", name: "tasks/get", req: func(ids isoIDs) isoRequest {
		return isoRequest{method: "POST", path: "/a2a/default", body: `{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"id":"` + ids.A2A + `"}}`}
	}},
	{route: "POST /a2a/{agent}", name: "tasks/cancel live", req: func(ids isoIDs) isoRequest {
		return isoRequest{method: "POST", path: "/a2a/default", body: `{"jsonrpc":"2.0","id":1,"method":"tasks/cancel","params":{"id":"` + ids.Run + `"}}`}
	}},
	{route: "POST /a2a/{agent}", name: "tasks/resubscribe", req: func(ids isoIDs) isoRequest {
		return isoRequest{method: "POST", path: "/a2a/default", body: `{"jsonrpc":"2.0","id":1,"method":"tasks/resubscribe","params":{"id":"` + ids.A2A + `"}}`}
	}},
	{route: "POST /a2a/{agent}", name: "a message on the task", req: func(ids isoIDs) isoRequest {
		return isoRequest{method: "POST", path: "/a2a/default", body: `{"jsonrpc":"2.0","id":1,"method":"message/send","params":{"message":` +
			`{"kind":"message","messageId":"m-beta","role":"user","taskId":"` + ids.A2A + `","parts":[{"kind":"text","text":"beta writes"}]}}}`}
	}},
	{route: "POST /a2a/{agent}", name: "a decision on the parked run", req: func(ids isoIDs) isoRequest {
		return isoRequest{method: "POST", path: "/a2a/default", body: `{"jsonrpc":"2.0","id":1,"method":"message/stream","params":{"message":` +
			`{"kind":"message","messageId":"m-beta-decides","role":"user","taskId":"` + ids.A2A + `","parts":[{"kind":"data","data":{"approval_id":"` + ids.Approval + `","approve":true}}]}}}`}
	}},
	{route: "GET /v1/a2a/tasks", name: "list", list: true, req: get("/v1/a2a/tasks")},
	{route: "GET /v1/webhooks", name: "list", list: true, req: get("/v1/webhooks")},
	{route: "GET /v1/webhooks/deliveries", name: "list", list: true, req: get("/v1/webhooks/deliveries")},
	{route: "GET /v1/webhooks/deliveries/{id}", name: "a run's end", req: func(ids isoIDs) isoRequest {
		return isoRequest{method: "GET", path: "/v1/webhooks/deliveries/" + ids.Run}
	}},
	{route: "GET /v1/sessions/{id}/export", name: "completed", req: func(ids isoIDs) isoRequest {
		return isoRequest{method: "GET", path: "/v1/sessions/" + ids.Session + "/export"}
	}},
	{route: "POST /v1/sessions/import", name: "a malformed archive naming the session", req: func(ids isoIDs) isoRequest {
		return isoRequest{method: "POST", path: "/v1/sessions/import?replace=true", body: "sessions/" + ids.Session + ".jsonl"}
	}},
	{route: "PUT /v1/sessions/{id}/retention", name: "completed", req: func(ids isoIDs) isoRequest {
		return isoRequest{method: "PUT", path: "/v1/sessions/" + ids.Session + "/retention", body: `{"keep":true}`}
	}},
	{route: "POST /v1/retention/sweep", name: "the caller's own", req: func(ids isoIDs) isoRequest {
		return isoRequest{method: "POST", path: "/v1/retention/sweep"}
	}},
	{route: "DELETE /v1/sessions/{id}", name: "completed", req: func(ids isoIDs) isoRequest {
		return isoRequest{method: "DELETE", path: "/v1/sessions/" + ids.Session}
	}},
	{route: "DELETE /v1/sessions/{id}", name: "parked, forced", req: func(ids isoIDs) isoRequest {
		return isoRequest{method: "DELETE", path: "/v1/sessions/" + ids.Parked + "?force=true"}
	}},
	{route: "GET /v1/schedules", name: "list", list: true, req: get("/v1/schedules")},
	{route: "DELETE /v1/schedules/{id}", name: "made through the API", req: func(ids isoIDs) isoRequest {
		return isoRequest{method: "DELETE", path: "/v1/schedules/" + ids.Schedule}
	}},
	// The routes that make the caller's own things, last: beta then has
	// sessions and a plugin under acme's names, as it may.
	{route: "POST /v1/sessions/{id}/messages", name: "completed", creates: true, req: func(ids isoIDs) isoRequest {
		return isoRequest{method: "POST", path: "/v1/sessions/" + ids.Session + "/messages", body: `{"text":"beta writes"}`}
	}},
	{route: "POST /v1/sessions/{id}/messages", name: "parked, waiting", creates: true, req: func(ids isoIDs) isoRequest {
		return isoRequest{method: "POST", path: "/v1/sessions/" + ids.Parked + "/messages?wait=true", body: `{"text":"beta writes"}`}
	}},
	{route: "POST /v1/tasks", name: "task", creates: true, req: func(ids isoIDs) isoRequest {
		return isoRequest{method: "POST", path: "/v1/tasks", body: `{"prompt":"submit_deliverable title=beta","schema":{"type":"object","properties":{"title":{"type":"string"}},"required":["title"]}}`}
	}},
	{route: "PUT /v1/plugins/{name}", name: "plugin", creates: true, req: func(ids isoIDs) isoRequest {
		return isoRequest{method: "PUT", path: "/v1/plugins/" + ids.Plugin, body: "<get_account>"}
	}, undo: func(ids isoIDs) isoRequest { return isoRequest{method: "DELETE", path: "/v1/plugins/" + ids.Plugin} }},
	{route: "POST /v1/schedules", name: "under acme's schedule's id", creates: true, req: func(ids isoIDs) isoRequest {
		return isoRequest{method: "POST", path: "/v1/schedules", body: `{"id":"` + ids.Schedule + `","session":"` + ids.Session + `","cron":"0 0 1 1 *","text":"beta's"}`}
	}, undo: func(ids isoIDs) isoRequest {
		return isoRequest{method: "DELETE", path: "/v1/schedules/" + ids.Schedule}
	}},
	{route: "POST /v1/ui/chat", name: "message into the live session", creates: true, req: func(ids isoIDs) isoRequest {
		return isoRequest{method: "POST", path: "/v1/ui/chat", body: `{"id":"` + ids.Live + `","messages":[{"id":"m-beta","role":"user","parts":[{"type":"text","text":"beta writes"}]}]}`}
	}},
	{route: "POST /a2a/{agent}", name: "a message into acme's context", creates: true, req: func(ids isoIDs) isoRequest {
		return isoRequest{method: "POST", path: "/a2a/default", body: `{"jsonrpc":"2.0","id":1,"method":"message/send","params":{"message":` +
			`{"kind":"message","messageId":"m-beta-ctx","role":"user","contextId":"` + ids.Session + `","parts":[{"kind":"text","text":"beta writes"}]},"configuration":{"blocking":true}}}`}
	}},
	{route: "GET /healthz", public: true, req: get("/healthz")},
	{route: "GET /readyz", public: true, req: get("/readyz")},
	{route: "GET /metrics", public: true, req: get("/metrics")},
	{route: "GET /console", public: true, req: get("/console")},
	{route: "GET /console/", public: true, req: get("/console/")},
	{route: "GET /console/", name: "script", public: true, req: get("/console/console.js")},
	{route: "GET /console/config.json", public: true, req: get("/console/config.json")},
}

// TestIsolation runs the isolation suite over a memory store and over a
// real Redis.
func TestIsolation(t *testing.T) {
	t.Run("memory", func(t *testing.T) { testIsolation(t, nil) })
	t.Run("redis", func(t *testing.T) {
		rs := redistest.Start(t, redistest.Options{})
		store, err := redis.Open(context.Background(), rs.URL(), redis.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { store.Close() })
		testIsolation(t, store)
	})
}

// TestIsolationCoversEveryRoute: the suite has a row for every route the
// server registers, and none for a route it does not.
func TestIsolationCoversEveryRoute(t *testing.T) {
	var registered, rows []string
	for _, r := range registeredRoutes(t) {
		registered = append(registered, r.String())
	}
	for _, r := range isolationRows {
		if !slices.Contains(rows, r.route) {
			rows = append(rows, r.route)
		}
	}
	for _, r := range registered {
		if !slices.Contains(rows, r) {
			t.Errorf("route %s has no row in the isolation suite", r)
		}
	}
	for _, r := range rows {
		if !slices.Contains(registered, r) {
			t.Errorf("the isolation suite has a row for %s, which the server does not register", r)
		}
	}
}

func testIsolation(t *testing.T, store storage.Storage) {
	const metricsKey = "mk_operators_only"
	ts := startServer(t, serverSetup{Store: store, Mutate: func(c *server.Config) { c.MetricsKey = metricsKey }})
	// The model thinks forever when asked to stall (its call's context
	// cuts it), and otherwise behaves as hosttest's default agent.
	ts.model.Respond = func(req model.Request) hosttest.Reply {
		for i := len(req.Messages) - 1; i >= 0; i-- {
			if m := req.Messages[i]; m.Role == ledger.RoleUser && strings.Contains(m.Text(), "stall") {
				return hosttest.Reply{Text: "thinking about secret-acme-live ", Stall: time.Hour}
			}
		}
		return hosttest.DefaultReply(req)
	}
	getAccountWasm, publishWasm := getAccount(t), publishPost(t)

	// Tenant acme's data.
	acme := isoIDs{Session: "acme-done", Live: "acme-live", Parked: "acme-parked", Plugin: "publish_post", Schedule: "acme-new-year"}
	if code, body := ts.do(t, ts.acme, "POST", "/v1/schedules", `{"id":"`+acme.Schedule+`","session":"`+acme.Session+`","cron":"0 0 1 1 *","text":"secret-acme-schedule"}`); code != 201 {
		t.Fatalf("acme's schedule: %d %s", code, body)
	}
	if code, body := ts.doBytes(t, ts.acme, "PUT", "/v1/plugins/"+acme.Plugin, publishWasm); code != 201 {
		t.Fatalf("acme uploads its plugin: %d %s", code, body)
	}
	if code, body := ts.do(t, ts.acme, "POST", "/v1/sessions/"+acme.Session+"/messages?wait=true", `{"text":"remember secret-acme-done"}`); code != 200 {
		t.Fatalf("acme's session: %d %s", code, body)
	}
	attachment := bytes.Repeat([]byte("secret-acme-attachment "), 4000) // past the blob threshold
	if code, body := ts.do(t, ts.acme, "POST", "/v1/sessions/"+acme.Session+"/messages?wait=true",
		`{"text":"see","parts":[{"type":"file","mime":"text/plain","data":"`+base64.StdEncoding.EncodeToString(attachment)+`"}]}`); code != 200 {
		t.Fatalf("acme's attachment: %d %s", code, body)
	}
	acme.Blob = storage.BlobDigest(attachment)
	if code, body := ts.do(t, ts.acme, "GET", "/v1/blobs/"+acme.Blob+"?session="+acme.Session, ""); code != 200 || body != string(attachment) {
		t.Fatalf("acme reads its attachment: %d, %d bytes", code, len(body))
	}
	code, body := ts.do(t, ts.acme, "POST", "/v1/sessions/"+acme.Parked+"/messages?wait=true", `{"text":"publish_post title=secret-acme-title body=Hello"}`)
	parked := decodeJSON[struct {
		Status    string
		Approvals []struct {
			ApprovalID string `json:"approval_id"`
			Token      string
		}
	}](t, body)
	if code != 200 || parked.Status != "approval_required" || len(parked.Approvals) != 1 {
		t.Fatalf("acme's parked run: %d %s", code, body)
	}
	acme.Approval, acme.Token = parked.Approvals[0].ApprovalID, parked.Approvals[0].Token
	code, body = ts.do(t, ts.acme, "POST", "/v1/sessions/"+acme.Live+"/messages", `{"text":"stall on secret-acme-live"}`)
	if code != 202 {
		t.Fatalf("acme's live run: %d %s", code, body)
	}
	acme.Run = decodeJSON[struct {
		RunID string `json:"run_id"`
	}](t, body).RunID
	waitFor(t, "acme's live run to stream", func() bool {
		_, body := ts.do(t, ts.acme, "GET", "/v1/sessions/"+acme.Live+"/transcript", "")
		return strings.Contains(body, "secret-acme-live ")
	})
	code, body = ts.do(t, ts.acme, "POST", "/v1/tasks", `{"prompt":"submit_deliverable title=secret-acme-task","schema":{"type":"object","properties":{"title":{"type":"string"}},"required":["title"]}}`)
	if code != 202 {
		t.Fatalf("acme's task: %d %s", code, body)
	}
	acme.Task = decodeJSON[struct {
		TaskID string `json:"task_id"`
	}](t, body).TaskID
	waitFor(t, "acme's task to submit", func() bool {
		_, body := ts.do(t, ts.acme, "GET", "/v1/tasks/"+acme.Task, "")
		return strings.Contains(body, `"status":"submitted"`)
	})
	code, body = ts.do(t, ts.acme, "POST", "/a2a/default", `{"jsonrpc":"2.0","id":1,"method":"message/send","params":{"message":`+
		`{"kind":"message","messageId":"m-acme","role":"user","parts":[{"kind":"text","text":"remember secret-acme-a2a"}]},"configuration":{"blocking":true}}}`)
	acme.A2A = decodeJSON[struct {
		Result struct{ ID string }
	}](t, body).Result.ID
	if code != 200 || acme.A2A == "" {
		t.Fatalf("acme's A2A task: %d %s", code, body)
	}
	// What leaks acme's data: its ids but the plugin's name and the
	// session ids (beta may use the same names for its own), and the
	// text of its sessions.
	_, pluginBody := ts.do(t, ts.acme, "GET", "/v1/plugins/"+acme.Plugin, "")
	acmeHash := decodeJSON[struct{ Hash string }](t, pluginBody).Hash
	acme.Hash = acmeHash
	secrets := []string{"secret-acme", acme.Run, acme.Approval, acme.Token, acme.Task, acmeHash, acme.A2A}

	// Beta's own session, which its listing must show.
	if code, body := ts.do(t, ts.beta, "POST", "/v1/sessions/beta-own/messages?wait=true", `{"text":"hello from beta"}`); code != 200 {
		t.Fatalf("beta's session: %d %s", code, body)
	}

	before := acmeView(t, ts, acme)

	client := &http.Client{Timeout: 20 * time.Second}
	send := func(t *testing.T, key string, r isoRequest) (int, http.Header, string) {
		t.Helper()
		body := r.body
		if body == "<get_account>" {
			body = string(getAccountWasm)
		}
		req, err := http.NewRequest(r.method, ts.URL+r.path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		for i := 0; i+1 < len(r.header); i += 2 {
			req.Header.Set(r.header[i], r.header[i+1])
		}
		res, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, res.Header, string(b)
	}
	// leaks reports acme's secrets in body, but for those the request
	// itself named (an error may say which id it did not find).
	leaks := func(t *testing.T, what string, r isoRequest, body string) {
		t.Helper()
		asked := r.path + " " + r.body + " " + strings.Join(r.header, " ")
		for _, s := range secrets {
			if s != "" && !strings.Contains(asked, s) && strings.Contains(body, s) {
				t.Errorf("%s shows acme's %q: %s", what, s, body)
			}
		}
	}

	// Beta with acme's ids, against ids nobody has.
	for _, row := range isolationRows {
		if row.stream {
			continue
		}
		t.Run("beta/"+row.route+"/"+row.name, func(t *testing.T) {
			switch {
			case row.public:
				code, _, body := send(t, ts.beta, row.req(acme))
				anonCode, _, anonBody := send(t, "", row.req(acme))
				if code != anonCode || (code == 200) != (row.route != "GET /metrics") {
					t.Errorf("a public route with beta's key: %d, without a key: %d %s", code, anonCode, anonBody)
				}
				leaks(t, "a public route", row.req(acme), body)
				if row.route == "GET /metrics" {
					if code, _, _ := send(t, metricsKey, row.req(acme)); code != 200 {
						t.Errorf("/metrics with its key: %d", code)
					}
				}
			case row.list:
				code, _, body := send(t, ts.beta, row.req(acme))
				if code != 200 {
					t.Fatalf("%d %s", code, body)
				}
				leaks(t, "beta's listing", row.req(acme), body)
				for _, id := range []string{acme.Session, acme.Live, acme.Parked, `"` + acme.Plugin + `"`, acme.Schedule} {
					if strings.Contains(body, id) {
						t.Errorf("beta's listing names acme's %s: %s", id, body)
					}
				}
				if row.route == "GET /v1/sessions" && row.name == "list" && !strings.Contains(body, "beta-own") {
					t.Errorf("beta's listing misses its own session: %s", body)
				}
			default:
				code, header, body := send(t, ts.beta, row.req(acme))
				if row.undo != nil {
					if code, _, body := send(t, ts.beta, row.undo(acme)); code >= 300 {
						t.Fatalf("undo: %d %s", code, body)
					}
				}
				missCode, missHeader, missBody := send(t, ts.beta, row.req(missingIDs))
				leaks(t, "beta's answer", row.req(acme), body)
				if code != missCode {
					t.Fatalf("beta with acme's ids: %d %s; with missing ids: %d %s", code, body, missCode, missBody)
				}
				if ct, mct := header.Get("Content-Type"), missHeader.Get("Content-Type"); ct != mct {
					t.Errorf("content types %q and %q", ct, mct)
				}
				if row.creates {
					if code >= 300 {
						t.Errorf("beta cannot make its own: %d %s", code, body)
					}
					return
				}
				if a, m := acme.mask(body), missingIDs.mask(missBody); a != m {
					t.Errorf("beta with acme's ids answers\n%s\nwith missing ids\n%s", a, m)
				}
			}
		})
	}

	// No valid key: the same 401 on every route, whatever the ids.
	kv := ts.kv(t)
	revoked, rec, err := server.CreateKey(context.Background(), kv, "beta", server.KeyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if code, body := ts.do(t, revoked, "GET", "/v1/sessions", ""); code != 200 {
		t.Fatalf("a stored key before it is revoked: %d %s", code, body)
	}
	if _, err := server.RevokeKey(context.Background(), kv, rec.ID); err != nil {
		t.Fatal(err)
	}
	unserved, _, err := server.CreateKey(context.Background(), kv, "gamma", server.KeyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var want string
	for _, row := range isolationRows {
		if row.public {
			continue
		}
		for _, c := range []struct{ name, key string }{
			{"no key", ""}, {"a wrong key", "ak_wrong"}, {"a revoked key", revoked},
			{"a key of a tenant the server does not serve", unserved}, {"acme's key hash", server.HashKey(ts.acme)},
		} {
			t.Run("unauthorized/"+row.route+"/"+row.name+"/"+c.name, func(t *testing.T) {
				code, header, body := send(t, c.key, row.req(acme))
				if code != 401 || header.Get("WWW-Authenticate") == "" {
					t.Fatalf("%d %s, want 401 with WWW-Authenticate", code, body)
				}
				if want == "" {
					want = body
				}
				if body != want {
					t.Errorf("401 body %s differs from %s", body, want)
				}
			})
		}
	}

	// Acme's data is as it was, and still acme's: its live run runs, and
	// acme (only) can cancel it.
	if after := acmeView(t, ts, acme); after != before {
		t.Errorf("acme's data changed:\nbefore %s\nafter  %s", before, after)
	}
	if code, body := ts.do(t, ts.acme, "POST", "/v1/sessions/"+acme.Live+"/cancel", ""); code != 200 || !strings.Contains(body, `"cancelled":true`) {
		t.Errorf("acme cancels its live run: %d %s", code, body)
	}
	ts.waitState(t, ts.acme, acme.Live, "cancelled")
}

// acmeView is everything acme reads of its data, as one string.
func acmeView(t *testing.T, ts *testServer, ids isoIDs) string {
	t.Helper()
	var b strings.Builder
	for _, path := range []string{"/v1/sessions", "/v1/approvals", "/v1/plugins", "/v1/plugins/" + ids.Plugin, "/v1/tasks/" + ids.Task, "/v1/a2a/tasks", "/v1/schedules"} {
		code, body := ts.do(t, ts.acme, "GET", path, "")
		fmt.Fprintf(&b, "%s %d %s\n", path, code, body)
	}
	for _, id := range []string{ids.Session, ids.Live, ids.Parked, ids.Task} {
		for _, path := range []string{"/v1/sessions/" + id, "/v1/sessions/" + id + "/transcript"} {
			code, body := ts.do(t, ts.acme, "GET", path, "")
			fmt.Fprintf(&b, "%s %d %s\n", path, code, body)
		}
	}
	return b.String()
}
