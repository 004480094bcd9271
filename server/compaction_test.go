package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/agentichost/agentic/host/hosttest"
	"github.com/agentichost/agentic/host/provider"
	"github.com/agentichost/agentic/internal/fakemodel"
	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/server"
)

// TestAgentCompactionLimit: an agent's compaction_limit compacts the
// sessions it runs at its own limit, while the tenant's other agent, with
// the same turns, keeps the tenant's.
func TestAgentCompactionLimit(t *testing.T) {
	fm, err := fakemodel.Start(fakemodel.Options{Models: map[string]int{"fake/small": 2000},
		Respond: func(req fakemodel.Request) fakemodel.Reply {
			if strings.HasPrefix(req.Messages[0].Text, "[compaction]") {
				return fakemodel.Reply{Text: "NOTE: the user sent filler."}
			}
			return fakemodel.Reply{Text: "ok"}
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fm.Close() })
	m, err := provider.New(provider.Config{BaseURL: fm.URL(), APIKey: "test"})
	if err != nil {
		t.Fatal(err)
	}
	ts := startServer(t, serverSetup{
		Mutate: withTenant("acme", func(tc *server.TenantConfig) {
			tc.Models = []string{"fake/small"}
			tc.Agents = map[string]server.AgentConfig{"default": {}, "tight": {CompactionLimit: 0.3}}
		}),
		Options: func(o *server.Options) { o.Model = m }, // a model that knows its context window
	})
	filler := strings.Repeat("lorem ipsum dolor sit amet ", 30)
	for _, agent := range []string{"default", "tight"} {
		for i := range 4 {
			body, _ := json.Marshal(map[string]string{"text": fmt.Sprintf("Message %d. %s", i, filler), "agent": agent})
			if code, out := ts.do(t, ts.acme, "POST", "/v1/sessions/"+agent+"/messages?wait=true", string(body)); code != 200 {
				t.Fatalf("%s, message %d: %d %s", agent, i, code, out)
			}
		}
	}
	compactions := func(session string) int {
		events, err := ts.store.Load(context.Background(), "acme:"+session)
		if err != nil {
			t.Fatal(err)
		}
		return hosttest.CountKind(events, ledger.KindCompaction)
	}
	if n := compactions("tight"); n == 0 {
		t.Error("the agent with compaction_limit 0.3 never compacted its session")
	}
	if n := compactions("default"); n != 0 {
		t.Errorf("the tenant's default agent (0.8) compacted %d times with the same turns", n)
	}
}
