package cli_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/agentichost/agentic/host/hosttest"
	"github.com/agentichost/agentic/server"
	"github.com/agentichost/agentic/storage/memory"
)

// exampleConfig is the configuration README's quick start serves.
const exampleConfig = "../../examples/serve/agentic.yaml"

// TestServeExampleConfigLoads: the example configuration loads strictly,
// builds a server, and serves a message sent with a key made as the
// quick start makes it — so that the example stays valid.
func TestServeExampleConfigLoads(t *testing.T) {
	cfg, err := server.LoadConfig(exampleConfig)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Tenants["acme"].BudgetUSDPerDay == 0 || cfg.Tenants["acme"].RateLimit.ConcurrentRuns == 0 || cfg.ShutdownGrace == 0 {
		t.Errorf("the example lost its budget, limits or shutdown grace: %+v", cfg)
	}
	cfg, err = server.ApplyOverrides(cfg, nil, []string{"plugins_dir=" + t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	store := memory.New()
	srv, err := server.New(server.Options{Config: cfg, Storage: store, Model: hosttest.NewModel()})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		srv.Close(ctx)
	}()
	key, _, err := server.CreateKey(context.Background(), store, "acme", server.KeyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	defer ts.Close()
	req, _ := http.NewRequest("POST", ts.URL+"/v1/sessions/s1/messages?wait=true", strings.NewReader(`{"text":"hello"}`))
	req.Header.Set("Authorization", "Bearer "+key)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusOK || !strings.Contains(string(body), `"status":"completed"`) || !strings.Contains(string(body), "You said: hello") {
		t.Fatalf("a message to the example's tenant: %d %s", res.StatusCode, body)
	}
}
