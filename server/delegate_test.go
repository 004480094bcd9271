package server_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/agentichost/agentic/host/hosttest"
	"github.com/agentichost/agentic/server"
	"github.com/agentichost/agentic/storage/memory"
)

// TestDelegateConfig: delegate_to names other agents of the tenant, once
// each, and forms no cycle; every problem is told.
func TestDelegateConfig(t *testing.T) {
	m := hosttest.DefaultModel
	for _, c := range []struct {
		name   string
		agents map[string]server.AgentConfig
		want   []string // "" for none
	}{
		{"ok", map[string]server.AgentConfig{"lead": {Model: m, DelegateTo: []string{"researcher", "writer"}}, "researcher": {Model: m, DelegateTo: []string{"writer"}}, "writer": {Model: m}}, nil},
		{"unknown", map[string]server.AgentConfig{"lead": {Model: m, DelegateTo: []string{"nobody"}}}, []string{"agents.lead: delegate_to: nobody is not among the tenant's agents"}},
		{"self", map[string]server.AgentConfig{"lead": {Model: m, DelegateTo: []string{"lead"}}}, []string{"agents.lead: delegate_to: an agent cannot delegate to itself"}},
		{"twice", map[string]server.AgentConfig{"lead": {Model: m, DelegateTo: []string{"r", "r"}}, "r": {Model: m}}, []string{"agents.lead: delegate_to: r is named twice"}},
		{"cycle", map[string]server.AgentConfig{"a": {Model: m, DelegateTo: []string{"b"}}, "b": {Model: m, DelegateTo: []string{"c"}}, "c": {Model: m, DelegateTo: []string{"a"}}},
			[]string{"delegate_to forms a cycle: a → b → c → a"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv, err := server.New(server.Options{Config: server.Config{PluginsDir: t.TempDir(), Tenants: map[string]server.TenantConfig{
				"acme": {Keys: []server.KeyConfig{{Hash: server.HashKey("k")}}, Agents: c.agents}}},
				Storage: memory.New(), Model: hosttest.NewModel()})
			if err == nil {
				srv.Close(t.Context())
			}
			if len(c.want) == 0 {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%v\ndoes not say %q", err, w)
				}
			}
		})
	}
}

// TestServeDelegate: an agent with delegate_to calls the other agent as a
// tool; the run answers with the child's answer, the parent's transcript
// links the child session, and the child's links back to the parent.
func TestServeDelegate(t *testing.T) {
	ts := newTestServer(t, func(c *server.Config) {
		acme := c.Tenants["acme"]
		acme.Agents = map[string]server.AgentConfig{
			"default":    {Model: hosttest.DefaultModel, DelegateTo: []string{"researcher"}},
			"researcher": {Model: hosttest.DefaultModel, Description: "Finds things out."},
		}
		c.Tenants["acme"] = acme
	})
	code, body := ts.do(t, ts.acme, "POST", "/v1/sessions/boss/messages?wait=true", `{"text":"ask the researcher task=\"find the answer\""}`)
	if code != 200 || !strings.Contains(body, `"status":"completed"`) || !strings.Contains(body, "The researcher tool returned: You said: find the answer") {
		t.Fatalf("wait: %d %s", code, body)
	}
	code, body = ts.do(t, ts.acme, "GET", "/v1/sessions/boss/transcript", "")
	var tr struct {
		Items []struct {
			ToolCalls []struct {
				ID, Name     string
				Source       string `json:"source"`
				ChildSession string `json:"child_session"`
			} `json:"tool_calls"`
		} `json:"items"`
	}
	if err := json.Unmarshal([]byte(body), &tr); code != 200 || err != nil {
		t.Fatalf("transcript: %d %v %s", code, err, body)
	}
	child := ""
	for _, it := range tr.Items {
		for _, c := range it.ToolCalls {
			if c.Name == "researcher" {
				child = c.ChildSession
				if c.Source != "agent:researcher/"+child {
					t.Errorf("source %q", c.Source)
				}
			}
		}
	}
	if child == "" {
		t.Fatalf("the parent's transcript links no child: %s", body)
	}
	code, body = ts.do(t, ts.acme, "GET", "/v1/sessions/"+child+"/transcript", "")
	if code != 200 || !strings.Contains(body, `"parent":{"session_id":"boss"`) || !strings.Contains(body, "You said: find the answer") {
		t.Fatalf("child transcript: %d %s", code, body)
	}
	if code, body := ts.do(t, ts.beta, "GET", "/v1/sessions/"+child+"/transcript", ""); code != 404 {
		t.Errorf("another tenant sees the child: %d %s", code, body)
	}
}
