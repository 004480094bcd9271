package server_test

import (
	"math"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/agentichost/agentic/host/hosttest"
	"github.com/agentichost/agentic/plugins/plugintest"
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
			// Prometheus: the tool's fuel by tool, tenant and module.
			if line := metricLine(ts, t, "agentic_tool_fuel_total{"); !strings.Contains(line, `agentic_tenant="acme"`) ||
				!strings.Contains(line, `gen_ai_tool_name="get_account"`) || !strings.Contains(line, `agentic_tool_source="sha256:`) ||
				metricValueOf(line) != float64(used) {
				t.Errorf("the tool's fuel in /metrics: %q, want %d by tool, tenant and module", line, used)
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

// TestPluginFuelBudgetCountsPolicies: a plugin policy's fuel counts in the
// tenant's plugin budget and shows on the call it decided on: with a
// budget of 1, the policy's decision on the first call crosses it, so the
// tool itself is refused; on the next call the policy is refused too,
// which denies the call, saying why. The usage counts the policy's fuel.
func TestPluginFuelBudgetCountsPolicies(t *testing.T) {
	ts := startServer(t, serverSetup{Mutate: withTenant("acme", func(tc *server.TenantConfig) {
		tc.PluginFuelPerDay = 1
		tc.Agents = map[string]server.AgentConfig{"default": {Model: hosttest.DefaultModel, Policy: "side_effects"}}
	})})
	kit, _ := filepath.Abs("../pdk/c")
	policy := plugintest.CPlugin(t, "../examples/plugins/side_effects", []string{"side_effects.c", kit + "/agentic.c"}, []string{kit}, nil)
	for name, wasm := range map[string][]byte{"accounts": getAccount(t), "side_effects": policy} {
		if code, body := ts.doBytes(t, ts.acme, "PUT", "/v1/plugins/"+name, wasm); code != 201 {
			t.Fatalf("upload %s: %d %s", name, code, body)
		}
	}
	type call struct {
		Status, Output string
		Fuel           int64
		PolicyFuel     int64 `json:"policy_fuel"`
	}
	callOf := func(session string) call {
		t.Helper()
		if code, body := ts.do(t, ts.acme, "POST", "/v1/sessions/"+session+"/messages?wait=true", `{"text":"get_account account_id=42"}`); code != 200 {
			t.Fatalf("%s: %d %s", session, code, body)
		}
		_, body := ts.do(t, ts.acme, "GET", "/v1/sessions/"+session+"/transcript", "")
		for _, it := range decodeJSON[struct {
			Items []struct {
				ToolCalls []call `json:"tool_calls"`
			}
		}](t, body).Items {
			for _, c := range it.ToolCalls {
				return c
			}
		}
		t.Fatalf("%s: no tool call in %s", session, body)
		return call{}
	}
	first := callOf("s1")
	if first.Status != "error" || first.PolicyFuel <= 1 || first.Fuel != 0 || !strings.Contains(first.Output, "plugin_budget_exceeded") ||
		!strings.Contains(first.Output, "the tool did not run") {
		t.Fatalf("the first call: %+v; want the policy's fuel, over the budget, and the tool refused", first)
	}
	second := callOf("s2")
	if second.Status != "error" || second.PolicyFuel != 0 || !strings.Contains(second.Output, "denied by policy side_effects") ||
		!strings.Contains(second.Output, "plugin_budget_exceeded") {
		t.Errorf("the call after: %+v; want the policy refused, and the call denied saying why", second)
	}
	_, body := ts.do(t, ts.acme, "GET", "/v1/usage", "")
	if u := decodeJSON[struct{ Total struct{ Fuel int64 } }](t, body); u.Total.Fuel != first.PolicyFuel {
		t.Errorf("the usage counts %d fuel, want the policy's %d", u.Total.Fuel, first.PolicyFuel)
	}
	// Prometheus: the policy's fuel by tenant and module.
	if line := metricLine(ts, t, "agentic_policy_fuel_total{"); !strings.Contains(line, `agentic_tenant="acme"`) || !strings.Contains(line, `agentic_policy="side_effects"`) ||
		!strings.Contains(line, `agentic_tool_source="sha256:`) || metricValueOf(line) != float64(first.PolicyFuel) {
		t.Errorf("the policy's fuel in /metrics: %q, want %d by tenant, policy and module", line, first.PolicyFuel)
	}
}

// metricValueOf reads a metric line's value (Prometheus may write it as
// 1.206832e+06); NaN when it has none.
func metricValueOf(line string) float64 {
	f, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
	if err != nil || line == "" {
		return math.NaN()
	}
	return f
}

// metricLine returns the last line of the server's /metrics that starts
// with prefix, "" when none does.
func metricLine(ts *testServer, t *testing.T, prefix string) string {
	t.Helper()
	_, body := ts.do(t, "", "GET", "/metrics", "")
	var line string
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, prefix) {
			line = l
		}
	}
	return line
}
