package server_test

import (
	"net/url"
	"testing"

	"github.com/agentichost/agentic/host/hosttest"
	"github.com/agentichost/agentic/internal/fakemodel"
	"github.com/agentichost/agentic/server"
	"github.com/agentichost/agentic/storage/memory"
)

// TestTenantFailureClosesMCP: a tenant that fails to build after its MCP
// servers connected (here: its host refuses an approval secret too short) closes their
// sessions instead of leaving them open for the life of the process.
func TestTenantFailureClosesMCP(t *testing.T) {
	srv, docs := mcpDocs(t, "tok")
	t.Setenv("DOCS_TOKEN", "tok")
	// A session left open would hold its stream, and the server's Close,
	// for ever: cut the connections first (cleanups run last first).
	t.Cleanup(docs.CloseClientConnections)
	u, _ := url.Parse(docs.URL)
	tc := server.TenantConfig{Keys: []server.KeyConfig{{Hash: server.HashKey("ak_x")}}, Models: []string{fakemodel.DefaultModel},
		MCPServers: []server.MCPServerConfig{{Name: "docs", URL: docs.URL, Credential: &server.SecretConfig{Scheme: "bearer", ValueEnv: "DOCS_TOKEN"}}}}
	tc.Sandbox.AllowedHosts = []string{u.Host}
	tc.Sandbox.AllowPrivateNetwork = true
	_, err := server.New(server.Options{Config: server.Config{PluginsDir: t.TempDir(), Tenants: map[string]server.TenantConfig{"acme": tc}}, Storage: memory.New(), Model: hosttest.NewModel(), ApprovalSecret: []byte("short")})
	t.Logf("New: %v", err)
	if err == nil {
		t.Fatal("a tenant with a schedule in no timezone was built")
	}
	n := 0
	for range srv.Sessions() {
		n++
	}
	if n != 0 {
		t.Errorf("%d MCP sessions left open by a tenant that failed to build", n)
	}
}
