package server_test

import (
	"strings"
	"testing"

	"github.com/agentichost/agentic/host/hosttest"
	"github.com/agentichost/agentic/server"
)

// parkedOn is a parked run's result, and the request it waits on.
type parkedOn struct {
	Status    string
	Approvals []struct {
		ApprovalID string `json:"approval_id"`
		Kind       string
		CallID     string `json:"call_id"`
		Reason     string
		Summary    string
	}
}

// TestBudgetAsk: with budget_ask, a run that crosses the tenant's daily
// budget parks before its next pass on a budget_exceeded request (in the
// inbox, no tool call) instead of failing. Approved, it spends raise_usd
// more; once that is spent it asks again; approved again, it completes. A
// new run past the budget is still refused (402). Denied, the run ends
// failed, saying who stopped it.
func TestBudgetAsk(t *testing.T) {
	lookup := func(id string) hosttest.Reply {
		return hosttest.Reply{ToolCalls: []hosttest.ToolCall{{Name: "get_account", Arguments: `{"account_id":"` + id + `"}`}}}
	}
	start := func(t *testing.T) *testServer {
		ts := startServer(t, serverSetup{Mutate: withTenant("acme", func(tc *server.TenantConfig) {
			tc.BudgetUSDPerDay = 1
			tc.BudgetAsk = &server.BudgetAskConfig{RaiseUSD: 0.5}
		})})
		if code, body := ts.doBytes(t, ts.acme, "PUT", "/v1/plugins/accounts", getAccount(t)); code != 201 {
			t.Fatalf("%d %s", code, body)
		}
		return ts
	}
	decide := func(t *testing.T, ts *testServer, id, body string) {
		t.Helper()
		if code, resp := ts.do(t, ts.acme, "POST", "/v1/approvals/"+id, body); code != 200 {
			t.Fatalf("deciding %s: %d %s", id, code, resp)
		}
	}
	// parked waits for the inbox to hold one request, the session's
	// budget_exceeded, and returns its id.
	parked := func(t *testing.T, ts *testServer, session string) string {
		t.Helper()
		var id string
		waitFor(t, "the run to park", func() bool {
			_, body := ts.do(t, ts.acme, "GET", "/v1/approvals", "")
			list := decodeJSON[struct {
				Approvals []struct {
					ApprovalID string `json:"approval_id"`
					SessionID  string `json:"session_id"`
					CallID     string `json:"call_id"`
					Kind       string
					Reason     string
				}
			}](t, body).Approvals
			if len(list) != 1 {
				return false
			}
			a := list[0]
			if a.Kind != "budget_exceeded" || a.SessionID != session || a.CallID != "" || !strings.Contains(a.Reason, "budget_exceeded: tenant acme spent") {
				t.Fatalf("the inbox: %s", body)
			}
			id = a.ApprovalID
			return true
		})
		return id
	}

	t.Run("approved", func(t *testing.T) {
		ts := start(t)
		ts.model.Enqueue(costing(lookup("1"), 1.2), costing(lookup("2"), 0.6), costing(hosttest.Reply{Text: "all done"}, 0.1))
		code, body := ts.do(t, ts.acme, "POST", "/v1/sessions/s/messages?wait=true", `{"text":"look up accounts"}`)
		res := decodeJSON[parkedOn](t, body)
		if code != 200 || res.Status != "approval_required" || len(res.Approvals) != 1 || res.Approvals[0].Kind != "budget_exceeded" ||
			!strings.Contains(res.Approvals[0].Summary, "spend $0.50 more") {
			t.Fatalf("the run crossing the budget: %d %s, want it parked on a budget_exceeded request", code, body)
		}
		if n := ts.model.RequestCount(); n != 1 {
			t.Fatalf("the model was called %d times before the decision, want once", n)
		}
		first := parked(t, ts, "s")
		if code, body := ts.do(t, ts.acme, "POST", "/v1/sessions/other/messages", `{"text":"more"}`); code != 402 {
			t.Errorf("a new run past the budget: %d %s, want 402", code, body)
		}
		decide(t, ts, first, `{"approve":true,"by":"ops"}`)
		// The second pass runs on the grant ($0.60 of its $0.50), so the
		// third asks again.
		second := parked(t, ts, "s")
		if second == first {
			t.Fatal("the spent grant did not ask again")
		}
		if n := ts.model.RequestCount(); n != 2 {
			t.Fatalf("the model was called %d times, want twice", n)
		}
		decide(t, ts, second, `{"approve":true,"by":"ops"}`)
		ts.waitState(t, ts.acme, "s", "completed")
		_, body = ts.do(t, ts.acme, "GET", "/v1/sessions/s/transcript", "")
		if !strings.Contains(body, "all done") {
			t.Errorf("the transcript after the approvals: %s", body)
		}
		_, body = ts.do(t, ts.acme, "GET", "/v1/usage", "")
		if u := decodeJSON[struct {
			Budget struct {
				SpentToday float64 `json:"spent_today"`
			}
		}](t, body); u.Budget.SpentToday < 1.89 || u.Budget.SpentToday > 1.91 {
			t.Errorf("the day's spend %v, want 1.90: what ran on grants counts", u.Budget.SpentToday)
		}
	})

	t.Run("default raise", func(t *testing.T) {
		// Without raise_usd, an approval raises the run by a tenth of the
		// budget.
		ts := startServer(t, serverSetup{Mutate: withTenant("acme", func(tc *server.TenantConfig) {
			tc.BudgetUSDPerDay = 1
			tc.BudgetAsk = &server.BudgetAskConfig{}
		})})
		ts.model.Enqueue(costing(hosttest.Reply{ToolCalls: []hosttest.ToolCall{{Name: "nope", Arguments: `{}`}}}, 1.2))
		_, body := ts.do(t, ts.acme, "POST", "/v1/sessions/s/messages?wait=true", `{"text":"go"}`)
		if res := decodeJSON[parkedOn](t, body); len(res.Approvals) != 1 || !strings.Contains(res.Approvals[0].Summary, "spend $0.10 more") {
			t.Errorf("the request %s, want a raise of $0.10", body)
		}
	})

	t.Run("denied", func(t *testing.T) {
		ts := start(t)
		ts.model.Enqueue(costing(lookup("1"), 1.2), hosttest.Reply{Text: "never said"})
		ts.do(t, ts.acme, "POST", "/v1/sessions/s/messages?wait=true", `{"text":"look up accounts"}`)
		decide(t, ts, parked(t, ts, "s"), `{"approve":false,"by":"ops","reason":"enough for today"}`)
		ts.waitState(t, ts.acme, "s", "failed")
		_, body := ts.do(t, ts.acme, "GET", "/v1/sessions/s", "")
		if !strings.Contains(body, "a person stopped the run (ops): enough for today") || strings.Contains(body, "never said") {
			t.Errorf("the session after the denial: %s", body)
		}
		if n := ts.model.RequestCount(); n != 1 {
			t.Errorf("the model was called %d times, want once", n)
		}
	})
}

// TestPluginBudgetAsk: with budget_ask, a plugin call past the tenant's
// plugin budget is refused (the model reads why) and the run parks before
// its next pass on a plugin_budget_exceeded request; approved, its plugin
// calls run on the grant, and it completes.
func TestPluginBudgetAsk(t *testing.T) {
	ts := startServer(t, serverSetup{Mutate: withTenant("acme", func(tc *server.TenantConfig) {
		tc.PluginFuelPerDay = 1
		tc.BudgetAsk = &server.BudgetAskConfig{RaiseFuel: 1 << 40}
	})})
	if code, body := ts.doBytes(t, ts.acme, "PUT", "/v1/plugins/accounts", getAccount(t)); code != 201 {
		t.Fatalf("%d %s", code, body)
	}
	lookup := func(id string) hosttest.Reply {
		return hosttest.Reply{ToolCalls: []hosttest.ToolCall{{Name: "get_account", Arguments: `{"account_id":"` + id + `"}`}}}
	}
	ts.model.Enqueue(lookup("1"), lookup("2"), lookup("3"), hosttest.Reply{Text: "all done"})
	code, body := ts.do(t, ts.acme, "POST", "/v1/sessions/s/messages?wait=true", `{"text":"look up accounts"}`)
	res := decodeJSON[parkedOn](t, body)
	if code != 200 || res.Status != "approval_required" || len(res.Approvals) != 1 || res.Approvals[0].Kind != "plugin_budget_exceeded" ||
		!strings.Contains(res.Approvals[0].Reason, "plugin_budget_exceeded: tenant acme used") {
		t.Fatalf("the run past the plugin budget: %d %s, want it parked on a plugin_budget_exceeded request", code, body)
	}
	if n := ts.model.RequestCount(); n != 2 {
		t.Fatalf("the model was called %d times before the decision, want twice", n)
	}
	if code, body := ts.do(t, ts.acme, "POST", "/v1/approvals/"+res.Approvals[0].ApprovalID, `{"approve":true}`); code != 200 {
		t.Fatalf("approving: %d %s", code, body)
	}
	ts.waitState(t, ts.acme, "s", "completed")
	_, body = ts.do(t, ts.acme, "GET", "/v1/sessions/s/transcript", "")
	tr := decodeJSON[struct {
		Items []struct {
			ToolCalls []struct {
				Status, Output string
				Fuel           int64
			} `json:"tool_calls"`
		}
	}](t, body)
	var calls []string
	for _, it := range tr.Items {
		for _, c := range it.ToolCalls {
			calls = append(calls, c.Status)
			if c.Status == "error" && !strings.Contains(c.Output, "plugin_budget_exceeded") {
				t.Errorf("a refused call says %q", c.Output)
			}
		}
	}
	if strings.Join(calls, " ") != "done error done" || !strings.Contains(body, "all done") {
		t.Errorf("the calls %v (want done, refused, done on the grant); transcript %s", calls, body)
	}
}
