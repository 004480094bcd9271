package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/agentichost/agentic/host/provider"
	"github.com/agentichost/agentic/internal/fakemodel"
	"github.com/agentichost/agentic/server"
	"github.com/agentichost/agentic/storage/memory"
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
	const key = "ak_test_acme"
	store := memory.New()
	srv, err := server.New(server.Options{Storage: store, Model: m, Config: server.Config{PluginsDir: t.TempDir(),
		Tenants: map[string]server.TenantConfig{"acme": {Keys: []server.KeyConfig{{Hash: server.HashKey(key)}}, Models: []string{"fake/small"},
			Agents: map[string]server.AgentConfig{"default": {}, "tight": {CompactionLimit: 0.3}}}}}})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(func() {
		hs.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		srv.Close(ctx)
	})
	ts := &testServer{Server: hs, srv: srv, store: store, acme: key}
	filler := strings.Repeat("lorem ipsum dolor sit amet ", 30)
	for _, agent := range []string{"default", "tight"} {
		for i := range 4 {
			body, _ := json.Marshal(map[string]string{"text": fmt.Sprintf("Message %d. %s", i, filler), "agent": agent})
			if code, out := ts.do(t, key, "POST", "/v1/sessions/"+agent+"/messages?wait=true", string(body)); code != 200 {
				t.Fatalf("%s, message %d: %d %s", agent, i, code, out)
			}
		}
	}
	compactions := func(session string) int {
		events, err := store.Load(context.Background(), "acme:"+session)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, e := range events {
			if e.Compaction != nil {
				n++
			}
		}
		return n
	}
	if n := compactions("tight"); n == 0 {
		t.Error("the agent with compaction_limit 0.3 never compacted its session")
	}
	if n := compactions("default"); n != 0 {
		t.Errorf("the tenant's default agent (0.8) compacted %d times with the same turns", n)
	}
}
