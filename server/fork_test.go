package server_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/agentichost/agentic/host/hosttest"
	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/server"
)

// TestForkRoute: POST /v1/sessions/{id}/fork makes a fork at a response
// whose plugin call completed, which goes on with another model of the
// tenant's without calling the plugin again (the fork's ledger holds the
// one copied result); at a user message with other text; the session view
// and the transcript show the lineage; bad requests get clear 4xx. On a
// memory store and on Redis.
func TestForkRoute(t *testing.T) {
	for name, open := range memoryAndRedis() {
		t.Run(name, func(t *testing.T) {
			ts := startServer(t, serverSetup{Store: open(t), Mutate: withTenant("acme", func(tc *server.TenantConfig) {
				tc.Models = append(tc.Models, "test/other")
			})})
			if code, body := ts.doBytes(t, ts.acme, "PUT", "/v1/plugins/accounts", getAccount(t)); code != 201 {
				t.Fatalf("upload: %d %s", code, body)
			}
			if code, body := ts.do(t, ts.acme, "POST", "/v1/sessions/src/messages?wait=true", `{"text":"get_account account_id=42"}`); code != 200 {
				t.Fatalf("source: %d %s", code, body)
			}
			type transcript struct {
				ForkedFrom *ledger.Fork `json:"forked_from"`
				Items      []struct {
					ID, Text, Model string
					ToolCalls       []struct{ Output string } `json:"tool_calls"`
				}
			}
			_, body := ts.do(t, ts.acme, "GET", "/v1/sessions/src/transcript", "")
			src := decodeJSON[transcript](t, body)
			if len(src.Items) != 3 || len(src.Items[1].ToolCalls) != 1 {
				t.Fatalf("source: %s", body)
			}
			step := src.Items[1]

			code, body := ts.do(t, ts.acme, "POST", "/v1/sessions/src/fork", `{"at":"`+step.ID+`","session_id":"f1","model":"test/other"}`)
			accepted := decodeJSON[struct {
				SessionID  string `json:"session_id"`
				RunID      string `json:"run_id"`
				ForkedFrom struct {
					SessionID string `json:"session_id"`
					At        string
				} `json:"forked_from"`
			}](t, body)
			if code != 202 || accepted.SessionID != "f1" || accepted.RunID == "" || accepted.ForkedFrom.SessionID != "src" || accepted.ForkedFrom.At != step.ID {
				t.Fatalf("fork at the step: %d %s", code, body)
			}
			ts.waitState(t, ts.acme, "f1", "completed")
			_, body = ts.do(t, ts.acme, "GET", "/v1/sessions/f1/transcript", "")
			f1 := decodeJSON[transcript](t, body)
			if f1.ForkedFrom == nil || f1.ForkedFrom.Source != "src" || f1.ForkedFrom.Model != "test/other" || len(f1.Items) != 3 ||
				f1.Items[1].ID != step.ID || f1.Items[1].ToolCalls[0].Output != step.ToolCalls[0].Output || f1.Items[2].Model != "test/other" {
				t.Fatalf("fork transcript: %s", body)
			}
			events, err := ts.store.Load(context.Background(), "acme:f1")
			if err != nil {
				t.Fatal(err)
			}
			if n := hosttest.CountKind(events, ledger.KindToolResult); n != 1 {
				t.Fatalf("the fork holds %d tool results: the plugin ran again", n)
			}
			_, body = ts.do(t, ts.acme, "GET", "/v1/sessions/f1", "")
			if !strings.Contains(body, `"forked_from":{"source":"src"`) {
				t.Fatalf("the session view lacks the lineage: %s", body)
			}

			code, body = ts.do(t, ts.acme, "POST", "/v1/sessions/src/fork?wait=true", `{"at":"`+src.Items[0].ID+`","text":"hello again"}`)
			res := decodeJSON[struct {
				SessionID string `json:"session_id"`
				Status    string
				Text      string
			}](t, body)
			if code != 200 || res.Status != "completed" || !strings.HasPrefix(res.SessionID, "fork_") || !strings.Contains(res.Text, "hello again") {
				t.Fatalf("fork at the message: %d %s", code, body)
			}

			_, body = ts.do(t, ts.acme, "GET", "/v1/sessions/src", "")
			if v := decodeJSON[struct{ Forks []string }](t, body); len(v.Forks) != 2 || !slices.Contains(v.Forks, "f1") || !slices.Contains(v.Forks, res.SessionID) {
				t.Fatalf("the source's view lists its forks as %v: %s", v.Forks, body)
			}
			_, body = ts.do(t, ts.beta, "GET", "/v1/sessions/src", "")
			if strings.Contains(body, "f1") {
				t.Fatalf("another tenant sees acme's forks: %s", body)
			}
			for _, c := range []struct {
				name, path, body string
				code             int
				want             string
			}{
				{"no point", "/v1/sessions/src/fork", `{}`, 400, "fork point is required"},
				{"unknown point", "/v1/sessions/src/fork", `{"at":"resp_nope"}`, 404, "no such fork point"},
				{"unknown source", "/v1/sessions/nope/fork", `{"at":"` + step.ID + `"}`, 404, "no session"},
				{"taken", "/v1/sessions/src/fork", `{"at":"` + step.ID + `","session_id":"f1"}`, 409, "exists already"},
				{"model not allowed", "/v1/sessions/src/fork", `{"at":"` + step.ID + `","model":"x/y"}`, 400, "not among"},
				{"unknown agent", "/v1/sessions/src/fork", `{"at":"` + step.ID + `","agent":"nope"}`, 400, "no agent"},
				{"text at a step", "/v1/sessions/src/fork", `{"at":"` + step.ID + `","text":"x"}`, 400, "replacement text"},
			} {
				if code, body := ts.do(t, ts.acme, "POST", c.path, c.body); code != c.code || !strings.Contains(body, c.want) {
					t.Errorf("%s: %d %s, want %d and %q", c.name, code, body, c.code, c.want)
				}
			}
		})
	}
}

// TestForkAdmitted: a fork starts a run, and is admitted like any new
// one: 429 while the tenant's concurrent runs are all in flight, 402 past
// its budget; nothing is forked when refused.
func TestForkAdmitted(t *testing.T) {
	ts := startServer(t, serverSetup{Mutate: withTenant("acme", func(tc *server.TenantConfig) {
		tc.RateLimit = server.RateLimitConfig{ConcurrentRuns: 1}
		tc.BudgetUSDPerDay = 0.5
	})})
	if code, body := ts.do(t, ts.acme, "POST", "/v1/sessions/src/messages?wait=true", `{"text":"hello"}`); code != 200 {
		t.Fatalf("source: %d %s", code, body)
	}
	_, body := ts.do(t, ts.acme, "GET", "/v1/sessions/src/transcript", "")
	first := decodeJSON[struct{ Items []struct{ ID string } }](t, body).Items[0].ID
	fork := `{"at":"` + first + `","text":"hello again","session_id":"f"}`

	stallModel(ts.model)
	if code, body := ts.do(t, ts.acme, "POST", "/v1/sessions/busy/messages", `{"text":"stall"}`); code != 202 {
		t.Fatalf("the stalled run: %d %s", code, body)
	}
	if code, body := ts.do(t, ts.acme, "POST", "/v1/sessions/src/fork", fork); code != 429 || !strings.Contains(body, "concurrent_runs") {
		t.Errorf("a fork while the tenant's one place is taken: %d %s, want 429", code, body)
	}
	if code, body := ts.do(t, ts.acme, "POST", "/v1/sessions/busy/cancel", ""); code/100 != 2 {
		t.Fatalf("cancel: %d %s", code, body)
	}
	ts.waitState(t, ts.acme, "busy", "cancelled")

	ts.model.Respond = nil
	ts.model.Enqueue(costing(hosttest.Reply{Text: "dear"}, 1))
	if code, body := ts.do(t, ts.acme, "POST", "/v1/sessions/spend/messages?wait=true", `{"text":"spend"}`); code != 200 {
		t.Fatalf("spending the budget: %d %s", code, body)
	}
	if code, body := ts.do(t, ts.acme, "POST", "/v1/sessions/src/fork", fork); code != 402 || !strings.Contains(body, "budget_exceeded") {
		t.Errorf("a fork past the budget: %d %s, want 402", code, body)
	}
	if code, _ := ts.do(t, ts.acme, "GET", "/v1/sessions/f", ""); code != 404 {
		t.Errorf("the refused forks made session f: %d", code)
	}
}
