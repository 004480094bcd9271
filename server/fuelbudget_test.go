package server_test

import (
	"strings"
	"testing"

	"github.com/agentichost/agentic/server"
)

// TestPluginFuelBudget: a tenant's daily plugin budget through serve: the
// call that crosses it runs, the next plugin call is refused with an error
// the model reads (the tool did not run, no fuel counted), the usage shows
// the day's fuel; with plugin_fuel_refuses_runs, a new run is refused
// (402) too.
func TestPluginFuelBudget(t *testing.T) {
	for _, refuse := range []bool{false, true} {
		name := "calls"
		if refuse {
			name = "runs"
		}
		t.Run(name, func(t *testing.T) {
			ts := startServer(t, serverSetup{Mutate: withTenant("acme", func(tc *server.TenantConfig) {
				tc.PluginFuelPerDay = 1
				tc.PluginFuelRefusesRuns = refuse
			})})
			if code, body := ts.doBytes(t, ts.acme, "PUT", "/v1/plugins/accounts", getAccount(t)); code != 201 {
				t.Fatalf("upload: %d %s", code, body)
			}
			type transcript struct {
				Items []struct {
					ToolCalls []struct {
						Name, Status, Output string
						Fuel                 int64
					} `json:"tool_calls"`
				}
			}
			call := func(session string) (status, output string, fuel int64) {
				t.Helper()
				_, body := ts.do(t, ts.acme, "GET", "/v1/sessions/"+session+"/transcript", "")
				for _, it := range decodeJSON[transcript](t, body).Items {
					for _, c := range it.ToolCalls {
						return c.Status, c.Output, c.Fuel
					}
				}
				t.Fatalf("%s: no tool call in %s", session, body)
				return
			}
			if code, body := ts.do(t, ts.acme, "POST", "/v1/sessions/s1/messages?wait=true", `{"text":"get_account account_id=42"}`); code != 200 {
				t.Fatalf("s1: %d %s", code, body)
			}
			status, _, used := call("s1")
			if status != "done" || used <= 1 {
				t.Fatalf("the call that crosses the budget: %s with %d fuel, want done with more than 1", status, used)
			}
			code, body := ts.do(t, ts.acme, "POST", "/v1/sessions/s2/messages?wait=true", `{"text":"get_account account_id=42"}`)
			if refuse {
				if code != 402 || !strings.Contains(body, "plugin_budget_exceeded") {
					t.Fatalf("a run past the plugin budget: %d %s, want 402 plugin_budget_exceeded", code, body)
				}
				return
			}
			if code != 200 {
				t.Fatalf("s2: %d %s", code, body)
			}
			status, output, fuel := call("s2")
			if status != "error" || fuel != 0 || !strings.Contains(output, "plugin_budget_exceeded") || !strings.Contains(output, "the tool did not run") {
				t.Errorf("the call past the budget: %s, %d fuel, %q", status, fuel, output)
			}
			_, body = ts.do(t, ts.acme, "GET", "/v1/usage", "")
			if u := decodeJSON[struct{ Total struct{ Fuel int64 } }](t, body); u.Total.Fuel != used {
				t.Errorf("the usage counts %d fuel, want %d", u.Total.Fuel, used)
			}
		})
	}
}

// TestSandboxFuel: a tenant's sandbox fuel bounds each plugin call, its
// describe too: a Go plugin, whose runtime starts on its first call, does
// not load within 1,000 fuel, and says so; with the default it loads.
func TestSandboxFuel(t *testing.T) {
	ts := startServer(t, serverSetup{Mutate: withTenant("acme", func(tc *server.TenantConfig) { tc.Sandbox.Fuel = 1000 })})
	code, body := ts.doBytes(t, ts.acme, "PUT", "/v1/plugins/accounts", getAccount(t))
	if code != 422 || !strings.Contains(body, "ran out of fuel") || !strings.Contains(body, "describe") {
		t.Fatalf("a module whose describe needs more than the sandbox's fuel: %d %s, want 422 saying it ran out of fuel", code, body)
	}
	if code, body := ts.doBytes(t, ts.beta, "PUT", "/v1/plugins/accounts", getAccount(t)); code != 201 {
		t.Fatalf("the same module under the default fuel: %d %s", code, body)
	}
}
